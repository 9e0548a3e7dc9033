"""Test set-up: real JAX on 8 simulated CPU devices, fixed before any array exists, and one
compilation cache for the test run."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest

import _xla_flags

_xla_flags.unoptimized_machine_code()  # before any JAX backend starts: the workers' and their commands'

import _jax_free
import _newest_selection
import _rewritten_bytecode

from shardscope.app.base.textual_adapter import release_removed_widgets
from shardscope.distributed.compile_cache import JAX_DIR_ENV, start_compilation_cache
from shardscope.targets.host import ensure_devices


def run_directory() -> Path:
    """A directory of this test run's own, shared by its xdist workers (the children of the run's
    first process) and the commands they start."""
    first = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
    return Path(tempfile.gettempdir()) / f"shardscope-tests-{first}"


# The commands' compilation cache, as a command starts it, in a directory of this run's (a run
# starts from an empty cache: nothing the user's cache or an earlier run holds is read). This
# process, the commands run in it, and those started as processes (which inherit the environment)
# read back what another test compiled: the same program on the same devices compiles once.
os.environ[JAX_DIR_ENV] = str(run_directory() / "jax-cache")
start_compilation_cache()

def pytest_addoption(parser: pytest.Parser) -> None:
    """--jax-free (tests/_jax_free.py) and --newest-selection (tests/_newest_selection.py)."""
    _jax_free.pytest_addoption(parser)
    _newest_selection.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    _jax_free.pytest_configure(config)
    _newest_selection.configure(config)
    _rewritten_bytecode.write_for_workers(config, Path(__file__).resolve().parent)


MAX_DEVICES = 8
ensure_devices(MAX_DEVICES)


_GROWTH_BEFORE_A_FULL_PASS = 3
"""How much the worker's heap may grow (Python's allocated memory blocks at a test's start, against
the count after the last full pass) before the garbage earlier tests left is collected. At 1.5 the
app tests made 65 such passes at 0.65 s each; at 3, 15 (a worker then peaked at 1.0 GB).

The heap is measured with ``sys.getallocatedblocks()``, which sums per-arena counts, rather than
with ``gc.get_freeze_count()``, which walks the whole list of frozen objects at every test (21 ms
for 2 million fresh objects here; a worker's heap is larger and scattered)."""
_heap_after_full_pass = 0


@pytest.fixture(autouse=True)
def collector_walks_each_tests_own_objects():
    """What earlier tests left alive is frozen out of the collector while a test runs, and handed
    back to it after.

    A worker holds what hundreds of tests left alive (JAX's and Textual's caches, imported demo
    modules): 300,000 objects and more. Python's automatic full passes walked all of them again
    and again (0.3-1 s each: the workers' full passes took 180 s of a 0.10.2 run, 97 s since).
    Frozen, a pass walks what the test made. The garbage earlier tests left (an app's widgets
    are cycles) is frozen with the rest, so it is collected between tests once the heap has
    grown :data:`_GROWTH_BEFORE_A_FULL_PASS`-fold since the last full pass. Textual would keep
    every gone widget's lines reachable (``textual_adapter.release_removed_widgets``): they are
    let go after each test. A test's app sees the process as its own would be: its
    collector (``shardscope.app.base.gc_policy``) collects only what the app itself froze.
    """
    global _heap_after_full_pass
    gc.freeze()
    if sys.getallocatedblocks() > _GROWTH_BEFORE_A_FULL_PASS * _heap_after_full_pass:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _heap_after_full_pass = sys.getallocatedblocks()
    yield
    release_removed_widgets()  # the test's apps are gone: Textual's lru_cache would keep their lines
    gc.unfreeze()


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + sys) of this process, and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


_processes_started = 0
"""Processes this worker has started (``subprocess.Popen``, ``os.posix_spawn``, ``os.system``),
counted by an audit hook: nothing is replaced, every process still starts as it would."""


def _count_processes(event: str, _args: tuple) -> None:
    global _processes_started
    if event in ("subprocess.Popen", "os.posix_spawn", "os.system"):
        _processes_started += 1


sys.addaudithook(_count_processes)


_compiles = [0, 0.0]
"""XLA compiles this worker has run (JAX's compiles less those its persistent cache served) and the
wall seconds of all of them, cache reads included, from JAX's own monitoring events: where a test's
time goes besides tracing and lowering. Counted only: nothing JAX does changes."""


def _count_compile(event: str, seconds: float, **_: object) -> None:
    if event == "/jax/core/compile/backend_compile_duration":  # jax._src.dispatch.BACKEND_COMPILE_EVENT
        _compiles[0] += 1
        _compiles[1] += seconds


def _count_cache_hit(event: str, **_: object) -> None:
    if event == "/jax/compilation_cache/cache_hits":  # the compile above was a read of the cache
        _compiles[0] -= 1


sys.modules["jax"].monitoring.register_event_duration_secs_listener(_count_compile)  # ensure_devices started it
sys.modules["jax"].monitoring.register_event_listener(_count_cache_hit)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_AT_SETUP] = (*_cpu_seconds(), _processes_started, *_compiles)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each test's CPU seconds (its set-up, fixtures included, to its teardown, and the processes
    it started and waited for) as the property ``cpu_s`` of its JUnit record (``--junitxml``):
    where the suite's time goes, read on a loaded machine too, where a test's wall time says
    mostly how busy the machine was. ``children_cpu_s`` is the part its processes took and
    ``processes`` how many it started (``subprocess.Popen`` and the like; a ``python`` among them
    pays JAX's start-up again). ``compiles`` is how many XLA compiles it ran in this process (a
    program the persistent cache served is not one) and ``compile_s`` the wall seconds of its
    compiles and cache reads. Nothing asserts on them."""
    if call.when == "teardown" and _CPU_AT_SETUP in item.stash:
        own_then, children_then, started_then, compiles_then, compile_s_then = item.stash[_CPU_AT_SETUP]
        own, children = _cpu_seconds()
        item.user_properties += [("cpu_s", f"{own + children - own_then - children_then:.3f}"),
                                 ("children_cpu_s", f"{children - children_then:.3f}"),
                                 ("processes", str(_processes_started - started_then)),
                                 ("compiles", str(_compiles[0] - compiles_then)),
                                 ("compile_s", f"{_compiles[1] - compile_s_then:.3f}")]
    yield


_CPU_AT_SETUP = pytest.StashKey[tuple[float, float, int, int, float]]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's first process removes the run's directory once every worker is done."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(run_directory(), ignore_errors=True)

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"


_analyses: dict[tuple, object] = {}
"""The analyses made for ``analysis_of``, by ``(demo, function, devices, chunk_size, repeats)``."""


def _analysis(demo: str, function: str | None, devices: int, chunk_size: int | None, repeats: int):
    """The analysis of these settings, made once per process.

    A chunk size left to the default and the same size given are one analysis: each is kept
    under the size it resolved to, and under ``None`` too when that is the default (the analysis's
    settings are equal either way: ``Settings.chunk_size`` is the resolved size). linear.py and
    rnn.py on 2 devices were each analysed twice a worker, as ``analysis_of("rnn.py")`` and
    ``analysis_of("rnn.py", devices=2, chunk_size=16)``."""
    from shardscope.config.settings import Settings, default_chunk_size
    from shardscope.pipeline.run import analyze

    key = (demo, function, devices, chunk_size, repeats)
    if key not in _analyses:
        settings = Settings(path=DEMOS / demo, function=function, devices=devices, chunk_size=chunk_size,
                            repeats=repeats)
        analysis = analyze(settings)
        shapes = analysis.shapes  # None for a program file's programs: no chunks
        _analyses[key] = analysis
        if shapes is not None:
            _analyses.setdefault((demo, function, devices, shapes.chunk_size, repeats), analysis)
        if shapes is not None and shapes.chunk_size == default_chunk_size(shapes.per_device_batch):
            _analyses.setdefault((demo, function, devices, None, repeats), analysis)
    return _analyses[key]


@pytest.fixture(scope="session")
def analysis_of():
    """``analysis_of("linear.py", devices=2, chunk_size=16)``: an analysis, cached per session."""

    def get(demo: str, function: str | None = None, devices: int = 2, chunk_size: int | None = None, repeats: int = 3):
        return _analysis(demo, function, devices, chunk_size, repeats)

    return get


@pytest.fixture
def shardscope_cli(capfd) -> Callable[..., subprocess.CompletedProcess]:
    """``shardscope_cli("report", FILE, ..., cwd=None)``: ``shardscope.cli.main`` in this process,
    with its exit status, stdout and stderr as ``run_cli`` gives them (read at the file
    descriptors, so output that bypasses ``sys.stdout`` is seen too).

    For what a test checks in the command's output and status. JAX here has already started with
    this process's 8 devices: a test that needs another device count, a real signal, the
    interpreter's own exit or a fresh import uses ``run_cli`` (a new process).
    """
    from shardscope.cli import main

    def run(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
        argv = [str(a) for a in args]
        capfd.readouterr()  # what came before is not this command's
        with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
            try:
                status = main(argv)
            except SystemExit as exc:  # argparse: a usage error, --help, --version
                status = 0 if exc.code is None else exc.code
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["shardscope", *argv], status, out, err)

    return run
