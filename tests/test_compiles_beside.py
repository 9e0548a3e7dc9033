"""``check --target`` compiles for the CPU beside the slice (issue 51): one redirect of descriptor 2
over both compiles, and each compile's partitioner lines still reach its own plan.

XLA's log lines name the thread that wrote them (glog's prefix: ``W1207 08:20:30.632653   13101
spmd_partitioner.cc:656] ...``). The CPU's compile writes from a thread its backend started
(jaxlib 0.10.2) or from the thread that asked (0.12); libtpu, when a user lowers its levels, from
the thread that asked and from threads of its own. The expected attribution below is known by construction: each line is written
by a thread the test chose, or, for real compiles, each compiler's own rematerialization is
counted once in the section of the output that shows that compiler's plan.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from shardscope.engine.compile_log import capturing_stderr, compiling_beside, threads_now
from shardscope.native_stderr import stderr_caught
from _support import PYTHON, ROOT
from test_partitioner_warnings import CLASH as PARTITIONER_CLASH

pytestmark = pytest.mark.skipif(threads_now() is None, reason="the system lists no threads (/proc/self/task)")


def _log_line(message: str, file: str = "spmd_partitioner.cc") -> bytes:
    """A warning line as glog writes it, from the calling thread."""
    return f"W1207 08:20:30.632653 {threading.get_native_id():>7} {file}:656] {message}\n".encode()


class _Writer(threading.Thread):
    """A thread that writes the lines it is handed to descriptor 2 (a compiler's own thread)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.lines: list[tuple[str, threading.Event]] = []
        self.ready, self.handed = threading.Event(), threading.Condition()

    def run(self) -> None:
        self.ready.set()
        while True:
            with self.handed:
                while not self.lines:
                    self.handed.wait()
                message, done = self.lines.pop(0)
            if not message:  # the end: the writer says so before it returns
                done.set()
                return
            os.write(2, _log_line(message))
            done.set()

    def write(self, message: str) -> None:
        done = threading.Event()
        with self.handed:
            self.lines.append((message, done))
            self.handed.notify()
        done.wait(10)


def test_each_sides_compile_gets_the_lines_its_own_threads_wrote_while_both_run():
    """The host's side: its backend's thread (jaxlib 0.10.2's compile thread) and the thread that
    compiles; the target's: every other thread (the thread that asked, a compiler's helper). Both
    windows are open at once and their lines interleave; lines of no kept kind reach the terminal."""
    backend, helper = _Writer(), _Writer()
    backend.start()
    helper.start()
    backend.ready.wait(10)
    assert backend.native_id is not None
    both_open, target_wrote, host_wrote = threading.Barrier(2), threading.Event(), threading.Event()
    got: dict[str, list[str]] = {}
    with stderr_caught() as terminal:
        with compiling_beside(frozenset({backend.native_id})) as shared:

            def host_side() -> None:
                with shared.joined(host=True), capturing_stderr() as messages:
                    both_open.wait(10)
                    backend.write("[SPMD] host 1, from the backend's thread")
                    target_wrote.wait(10)
                    os.write(2, _log_line("[SPMD] host 2, from the compiling thread"))
                    os.write(2, b"a line of the host's that is no log line\n")
                    host_wrote.set()
                got["host"] = messages

            worker = threading.Thread(target=host_side)
            worker.start()
            with shared.joined(host=False), capturing_stderr() as messages:
                both_open.wait(10)
                os.write(2, _log_line("[SPMD] target 1, from the thread that asked"))
                helper.write("[SPMD] target 2, from the compiler's own thread")
                target_wrote.set()
                host_wrote.wait(10)
                os.write(2, _log_line("Module contains sdy shardings", file="sdy_import.cc"))
                os.write(2, _log_line("not the partitioner's", file="llo_module.h"))
            worker.join(10)
            got["target"] = messages
        backend.write("")
        helper.write("")
    assert got["host"] == ["[SPMD] host 1, from the backend's thread", "[SPMD] host 2, from the compiling thread"]
    assert got["target"] == ["[SPMD] target 1, from the thread that asked",
                             "[SPMD] target 2, from the compiler's own thread", "Module contains sdy shardings"]
    shown = "".join(terminal)
    assert "a line of the host's that is no log line\n" in shown and "llo_module.h:656] not the partitioner's" in shown
    assert "[SPMD]" not in shown and "sdy" not in shown


def test_a_compile_gets_only_what_its_side_wrote_after_it_started():
    """Lines its side wrote before a compile's window opened (an earlier compile's) are not its."""
    with stderr_caught():
        with compiling_beside(frozenset()) as shared, shared.joined(host=True):
            with capturing_stderr() as first:
                os.write(2, _log_line("[SPMD] the first compile's"))
            with capturing_stderr() as second:
                os.write(2, _log_line("[SPMD] the second compile's"))
    assert (first, second) == (["[SPMD] the first compile's"], ["[SPMD] the second compile's"])


CLASH = "\n".join(line for line in PARTITIONER_CLASH.splitlines() if "the user's own line" not in line) + "\n"
"""Two layouts XLA cannot go between cheaply, added (``tests/test_partitioner_warnings.py``'s, without its own
stderr line): both compilers rematerialize ``a`` whole and say so."""


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
def test_both_compilers_rematerialization_lines_reach_their_own_plans(tmp_path):
    """Both compilers fall back to gathering ``a`` whole and say so in the same words; libtpu
    writes its warnings to descriptor 2 (from threads of its own) when the user's
    ``TPU_MIN_LOG_LEVEL=0`` and ``TPU_STDERR_LOG_LEVEL=1`` ask it to (shardscope starts it at
    level 3 otherwise: it writes none). Each plan shows one rematerialization of ``a``, the target's plan fails the
    check on it, and libtpu's own warnings stay on its plan."""
    program = tmp_path / "clash.py"
    program.write_text(CLASH)
    env = {**os.environ, "TPU_MIN_LOG_LEVEL": "0", "TPU_STDERR_LOG_LEVEL": "1", "SHARDSCOPE_NO_CACHE": "1",
           "TPU_LOG_DIR": str(tmp_path)}  # its INFO log files go with the test's folder, not into /tmp
    done = subprocess.run([PYTHON, "-m", "shardscope", "check", str(program), "--target", "tpu:v5e:2x4"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 1, done.stderr  # the slice's rematerialization fails the check
    on_target, _, on_cpu = done.stdout.partition("\non the CPU: ")
    assert on_target.startswith("on tpu:v5e:2x4:") and on_cpu
    remat = "involuntary full rematerialization of a"
    assert (" ".join(on_target.split()).count(remat), " ".join(on_cpu.split()).count(remat)) == (1, 1)
    assert "Module contains sdy" not in on_cpu  # libtpu's (jaxlib 0.10.2's libtpu writes it)
    assert "Involuntary full rematerialization" not in done.stderr  # kept from the terminal


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
def test_the_cpus_compile_beside_the_slices_gives_the_plans_it_gives_before_it(tmp_path):
    """In this process (its CPU backend started by the test session, which saw its threads): the
    same program compiled beside the slice and before it, ``before_targets`` running in the
    CPU's own thread the first time (beside the slice's compile), in this one the second. The
    CPU's plan has its one rematerialization of ``a`` both ways, and each plan its same messages."""
    import jax

    from shardscope.pipeline.one_program import Compiling, compile_program, trace_program, user_program
    from shardscope.sources.loading import import_file, marked_functions
    from shardscope.targets.plans import load_targets, parse_targets

    assert jax.default_backend() == "cpu"
    program_file = tmp_path / "clash.py"
    program_file.write_text(CLASH)
    (clash,) = marked_functions(import_file(program_file)[0], program_file)[0].values()
    slice_ = load_targets(parse_targets(["tpu:v5e:2x4"]))
    plans: dict[bool, tuple[list[str], list[str]]] = {}
    ran_in: dict[bool, threading.Thread] = {}
    for beside in (True, False):
        program = user_program(clash.fn, clash.spec.args, clash.spec.kwargs, clash.name)

        def record(beside: bool = beside) -> None:
            ran_in.setdefault(beside, threading.current_thread())

        inspection = compile_program(trace_program(program), Compiling(slice_, beside=beside, before_targets=record)).inspection
        (on_slice,) = inspection.targets
        assert inspection.compiled is not None
        plans[beside] = ([w.message for w in inspection.compiled.partitioner],
                         [w.message for w in on_slice.compiled.partitioner])
    assert ran_in[False] is threading.current_thread() and ran_in[True] is not threading.current_thread()
    cpu, _ = plans[True]
    assert len(cpu) == 1 and cpu[0].startswith("[SPMD] Involuntary full rematerialization")
    assert plans[True] == plans[False]


SLOW = textwrap.dedent('''\
    from pathlib import Path

    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import shardscope

    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    w = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=NamedSharding(mesh, P("x", "y")))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32, sharding=NamedSharding(mesh, P("x", None)))


    @shardscope.program(args=(w, x))
    @jax.jit
    def deep(w, x):
        Path(__file__).with_suffix(".traced").touch()
        for i in range(400):
            x = jnp.tanh(x @ w + i)
        return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
    ''')


@pytest.mark.slow  # real signals to a real process
@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_while_both_compile_ends_the_check_at_once(tmp_path, signum, status):
    """Ctrl+C or SIGTERM half a second after the trace (400 layers: both compiles take seconds):
    the process ends, its message reaches the terminal (descriptor 2 is the pipe's meanwhile),
    nothing is printed on stdout."""
    program = tmp_path / "slow.py"
    program.write_text(SLOW)
    process = subprocess.Popen([PYTHON, "-m", "shardscope", "check", str(program), "--target", "tpu:v5e:2x4",
                                "--no-cache"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not program.with_suffix(".traced").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read() if process.stderr else ""
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=10)
    assert process.returncode == status
    assert stderr.strip().splitlines()[-1] == f"shardscope: interrupted ({signal.Signals(signum).name}); nothing was written"
    assert stdout == ""


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
def test_a_cpu_compile_that_fails_beside_the_slices_leaves_the_targets_after_it_uncompiled(tmp_path, monkeypatch):
    """The CPU's error is the user's, and once the CPU's side has failed no further target is
    compiled: with two targets, only the one compiling when it failed. (The CPU's compile is made
    to fail by an XLA option its compiler does not know; the targets compile the same module.)"""
    import shardscope.pipeline.one_program as one_program
    import shardscope.targets.plans as plans
    from shardscope.pipeline.one_program import Compiling, compile_program, trace_program, user_program
    from shardscope.sources.loading import import_file, marked_functions
    from shardscope.targets.plans import load_targets, parse_targets

    program_file = tmp_path / "clash.py"
    program_file.write_text(CLASH)
    (clash,) = marked_functions(import_file(program_file)[0], program_file)[0].values()
    targets = load_targets(parse_targets(["tpu:v5e:2x4", "tpu:v5p:2x2x2"]))
    compiled_for: list[str] = []
    compile_one = plans.compile_for_target
    compile_cpu = one_program.compile_traced
    first_target_begun = threading.Event()

    def cpu_after_the_first_target(trace, options=None):  # noqa: ANN001, ANN202 - compile_traced's own
        first_target_begun.wait(60)  # the CPU fails while a target compiles, whichever thread is quicker
        return compile_cpu(trace, options)

    def counted(traced, devices, name):  # noqa: ANN001, ANN202 - compile_for_target's own
        compiled_for.append(devices.target.text())
        first_target_begun.set()
        deadline = time.monotonic() + 60  # the first target's compile ends after the CPU's side failed
        while any(t.name == "shardscope-cpu-compile" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.05)
        return compile_one(traced, devices, name)

    monkeypatch.setattr(plans, "compile_for_target", counted)
    monkeypatch.setattr(one_program, "compile_traced", cpu_after_the_first_target)
    program = user_program(clash.fn, clash.spec.args, clash.spec.kwargs, clash.name)
    with pytest.raises(Exception, match="xla_shardscope_no_such_option"):
        compile_program(trace_program(program), Compiling(targets, beside=True,
                                                          cpu_options={"xla_shardscope_no_such_option": 1}))
    assert compiled_for == ["tpu:v5e:2x4"]
