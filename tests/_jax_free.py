"""Which tests cannot depend on JAX's version: measured, listed in ``tests/jax_free.txt``, checked.

A test that never traces, lowers or compiles with JAX, never asks JAX for its devices, starts no
process, and uses no fixture or module that did, runs the same code on every JAX: what it checks
(a parser over stored text, a renderer over stored values, a cost model, the layers) is JAX-free.
The newest JAX's run (``make test-newest``) leaves those out: every other test runs there, a new
one included, until a measurement lists it.

``pytest --jax-free=MODE``:

- ``record``: before every test JAX's caches and the repository's ``functools`` caches are
  emptied, so a test that reuses what an earlier test traced, compiled or cached traces again
  here; each test's signals (below) and outcome go to ``--jax-free-records DIR``, one file per
  process. ``python tests/_jax_free.py DIR`` prints the list: the tests that passed with no
  signal. ``make jax-free`` does both on ``.venv``.
- ``check`` (``make test``): the listed tests run first in each worker, each after the same
  emptying, and a listed test that gives a signal fails, naming it: the list cannot keep a test
  that has started to use JAX.
- ``skip`` (``make test-newest``): the listed tests are left out.

The signals: JAX's own monitoring events of a trace, a lowering, a compile or its cache; a call of
``xla_bridge.backends`` (``jax.devices()`` and every array reach it once JAX's caches are empty);
a process started (the ``subprocess.Popen``, ``os.posix_spawn``, ``os.fork`` audit events: a test
that starts one is not listed, whatever the process does; but shardscope's compile-abort sentinel,
which the first capture of descriptor 2 in a worker starts and which runs no JAX); a fixture whose set-up gave a signal
(set up for an earlier test, it is reused silently); a test module whose import gave one, or that
holds a module whose import did, or a JAX array.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import types
from pathlib import Path
from typing import Iterator, TextIO

import pytest

LIST = Path(__file__).resolve().parent / "jax_free.txt"
ROOT = LIST.parent.parent
MODES = ("record", "check", "skip")
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.system"})
_SENTINEL = "compile_abort_sentinel.py"
"""The program of shardscope's compile-abort sentinel (``shardscope.engine.compile_abort``): a
process the first capture of descriptor 2 starts, whatever the test, which runs no JAX (it
imports the standard library alone)."""


def starts_a_process(event: str, args: tuple) -> bool:
    """Whether an audit event starts a process a test's result could depend on JAX through: every
    start but the compile-abort sentinel's."""
    if event not in _PROCESS_EVENTS:
        return False
    argv = [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else (arg,))]
    return not any(isinstance(a, (str, bytes, os.PathLike)) and _SENTINEL in os.fsdecode(a) for a in argv)


def listed(path: Path = LIST) -> frozenset[str]:
    """The node ids in ``tests/jax_free.txt`` (comments and blank lines left out)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return frozenset(line for line in lines if line and not line.startswith("#"))


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--jax-free MODE`` (the conftest imports this hook and the next)."""
    parser.addoption("--jax-free", choices=MODES, help=(
        "the tests listed in tests/jax_free.txt, measured not to use JAX: skip them (the newest JAX's "
        "run), check that each still uses none (the reference run), or record what every test does "
        "with JAX (tests/_jax_free.py)"))
    parser.addoption("--jax-free-records", type=Path, help="where --jax-free=record writes its records")
    parser.addoption("--jax-free-list", type=Path, default=LIST, help="the list (default tests/jax_free.txt)")


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("--jax-free")
    if mode:
        records, path = config.getoption("--jax-free-records"), config.getoption("--jax-free-list")
        config.pluginmanager.register(JaxFree(mode, records, listed(path)), "jax-free")


class Signals:
    """What this process has done with JAX, and the processes it started, counted since it began."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        import jax.monitoring
        from jax._src import xla_bridge

        jax.monitoring.register_event_listener(self._jax_event)
        jax.monitoring.register_event_duration_secs_listener(self._jax_duration)
        backends = xla_bridge.backends

        @functools.wraps(backends)
        def counted_backends():  # jax.devices() and every array's device reach it once caches are empty
            self._add("jax backends")
            return backends()

        xla_bridge.backends = counted_backends
        sys.addaudithook(self._audit)

    def _add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _jax_event(self, event: str, **_: object) -> None:
        if event.startswith(("/jax/core/compile/", "/jax/compilation_cache/")):
            self._add(event)

    def _jax_duration(self, event: str, duration_secs: float, **_: object) -> None:
        self._jax_event(event)

    def _audit(self, event: str, args: tuple) -> None:
        if starts_a_process(event, args):
            self._add(f"process started ({event})")

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """The signals given since ``before`` (a copy of :attr:`counts`)."""
        return {k: v - before.get(k, 0) for k, v in self.counts.items() if v != before.get(k, 0)}


def _repository_caches() -> Iterator[functools._lru_cache_wrapper]:
    """The ``functools`` caches of the repository's imported modules (the package's, the tests')."""
    root = str(ROOT)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if not path.startswith(root) or "/.venv" in path:
            continue
        for value in list(vars(module).values()):
            owned = isinstance(value, type) and value.__module__ == name
            for candidate in (vars(value).values() if owned else (value,)):
                candidate = getattr(candidate, "__func__", candidate)
                if isinstance(candidate, functools._lru_cache_wrapper):
                    yield candidate


_found: tuple[int, list] = (0, [])
"""``(modules, caches)`` at the last look, ``modules`` a hash of the imported modules: the look (some
10 ms in a worker holding a few thousand modules) is taken again only once one was imported or
replaced."""


def empty_caches() -> None:
    """JAX's caches and the repository's: what an earlier test traced or computed is done again."""
    global _found
    import jax

    jax.clear_caches()
    modules = hash(tuple(map(id, sys.modules.values())))
    if _found[0] != modules:
        _found = (modules, list(_repository_caches()))
    for cache in _found[1]:
        cache.cache_clear()


class JaxFree:
    """The pytest plugin of one ``--jax-free`` mode."""

    def __init__(self, mode: str, records: Path | None, listed: frozenset[str]) -> None:
        if mode == "record" and records is None:
            raise pytest.UsageError("--jax-free=record needs --jax-free-records DIR")
        self.mode = mode
        self.listed = listed
        self.signals = Signals() if mode in ("record", "check") else None
        self.records = records
        self.fixture_signals: dict[tuple[str, str], dict[str, int]] = {}
        self.module_signals: dict[str, dict[str, int]] = {}
        self.tainted_imports: set[str] = set()
        self.before: dict[str, int] = {}
        self.outcomes: dict[str, str] = {}
        self.out: TextIO | None = None

    # -- which tests run, in which order
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if self.mode == "skip":
            left_out = [item for item in items if item.nodeid in self.listed]
            if left_out:
                config.hook.pytest_deselected(items=left_out)
                items[:] = [item for item in items if item.nodeid not in self.listed]
        elif self.mode == "check":  # each worker takes a run of the list first: JAX's caches are still empty
            items.sort(key=lambda item: item.nodeid not in self.listed)

    # -- what a module's import and a fixture's set-up did
    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        if self.signals is None or not isinstance(collector, pytest.Module):
            yield
            return
        before, modules = dict(self.signals.counts), set(sys.modules)
        yield
        given = self.signals.since(before)
        if given:
            self.tainted_imports.update(set(sys.modules) - modules)
            self.module_signals[collector.nodeid] = given

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        if self.signals is None:
            yield
            return
        before = dict(self.signals.counts)
        yield
        given = self.signals.since(before)
        if given:
            self.fixture_signals[(fixturedef.baseid, fixturedef.argname)] = given

    # -- each test, watched
    def _watched(self, item: pytest.Item) -> bool:
        return self.mode == "record" or (self.mode == "check" and item.nodeid in self.listed)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.outcomes[nodeid] = "passed"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        if self.signals is not None and self._watched(item):
            empty_caches()
            self.before = dict(self.signals.counts)
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.outcome != "passed" or (report.when == "call" and hasattr(report, "wasxfail")):
            self.outcomes[item.nodeid] = report.outcome
        if report.when != "teardown" or self.signals is None or not self._watched(item):
            return
        given = self.given(item)
        if self.mode == "record":
            self._record(item, given)
        elif given:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} is listed in tests/jax_free.txt (the tests the newest JAX's run leaves "
                f"out) but it used JAX here: {', '.join(f'{k} x{v}' for k, v in sorted(given.items()))}. "
                "Take it out of the list (`make jax-free` measures the suite again and rewrites it).")

    def given(self, item: pytest.Item) -> dict[str, int]:
        """Every signal of ``item``: its own since its set-up began, its fixtures', its module's."""
        assert self.signals is not None
        given = self.signals.since(self.before)
        info = getattr(item, "_fixtureinfo", None)
        for name, definitions in (info.name2fixturedefs.items() if info is not None else ()):
            for definition in definitions:
                for what, count in self.fixture_signals.get((definition.baseid, definition.argname), {}).items():
                    given[f"fixture {name}: {what}"] = count
        module = item.getparent(pytest.Module)
        if module is not None:
            for what, count in self.module_signals.get(module.nodeid, {}).items():
                given[f"import of its module: {what}"] = count
            held = self._held_from_tainted_imports(module)
            if held:
                given[f"its module holds {held}"] = 1
        return given

    def _held_from_tainted_imports(self, module: pytest.Module) -> str | None:
        import jax

        for name, value in vars(module.obj).items():
            if isinstance(value, jax.Array):
                return f"a JAX array ({name})"
            source = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if source in self.tainted_imports:
                return f"{name} from {source}, whose import used JAX"
        return None

    def _record(self, item: pytest.Item, given: dict[str, int]) -> None:
        if self.out is None:
            assert self.records is not None
            self.records.mkdir(parents=True, exist_ok=True)
            self.out = (self.records / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.jsonl").open("a")
        self.out.write(json.dumps({"test": item.nodeid, "outcome": self.outcomes.get(item.nodeid), "signals": given}) + "\n")
        self.out.flush()


def jax_free_tests(records: Path) -> list[str]:
    """The tests a ``--jax-free=record`` run saw pass with no signal, sorted."""
    free = set()
    for path in sorted(records.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["outcome"] == "passed" and not record["signals"]:
                free.add(record["test"])
    return sorted(free)


HEADER = """\
# The tests that cannot depend on JAX's version: `make test-newest` leaves them out.
# Measured, not chosen: `make jax-free` runs the suite on .venv with every test watched and rewrites
# this file (tests/_jax_free.py says what is watched); `make test` fails a listed test that uses JAX.
"""

if __name__ == "__main__":  # python tests/_jax_free.py RECORDS_DIR > tests/jax_free.txt
    sys.stdout.write(HEADER + "".join(f"{test}\n" for test in jax_free_tests(Path(sys.argv[1]))))
