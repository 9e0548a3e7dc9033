"""pytest's rewritten bytecode of the test modules, written once by the run's first process before
its xdist workers start.

pytest rewrites the ``assert`` statements of every test module and conftest it imports, and keeps
the result in ``__pycache__/NAME.cpython-3XX-pytest-X.Y.Z.pyc``, but only where bytecode may be
written: with ``PYTHONDONTWRITEBYTECODE`` set (as in this project's CI environment), each worker
rewrote every one of the ~250 modules itself at collection, about 10 s of CPU a worker (half of
its collection). On a clean clone the workers all start at once, so even where bytecode is
written none of them finds another's. Written here first, each worker reads them back: pytest
reads a cached pyc even when it may not write one, and checks it against the source's hash
(a stale one is rewritten as before).

The files are what pytest itself writes (its own functions, with this run's configuration), so a
worker's modules are the ones it would have rewritten. A pytest whose private functions moved
leaves the workers to rewrite as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def write_for_workers(config: pytest.Config, root: Path) -> int:
    """Write the rewritten bytecode of every test module and conftest under ``root`` that has none
    matching its source; returns how many were written. Only in an xdist run's first process."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return 0
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return 0
    needed = ("_rewrite_test", "_write_pyc", "_read_pyc", "get_cache_dir", "PYC_TAIL")
    if not all(hasattr(rewrite, name) for name in needed) or config.getoption("assertmode") != "rewrite":
        return 0
    state = config.stash[rewrite.assertstate_key] if rewrite.assertstate_key in config.stash else None
    if state is None:
        return 0
    written = 0
    for source in sorted({*root.rglob("test_*.py"), *root.rglob("conftest.py")}):
        cache = rewrite.get_cache_dir(source)
        pyc = cache / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc) is not None:
            continue
        try:
            cache.mkdir(parents=True, exist_ok=True)  # under PYTHONPYCACHEPREFIX (the Makefile) its parents too
            source_hash, code = rewrite._rewrite_test(source, config)
        except (OSError, SyntaxError):
            continue  # the worker's own import says what is wrong with it
        written += rewrite._write_pyc(state, code, source_hash, pyc)
    return written

