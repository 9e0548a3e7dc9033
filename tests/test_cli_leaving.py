"""The ``shardscope`` process ends without JAX's teardown of its CPU devices (issue 51: at 1,024
devices XLA's CPU client joins ~1,280 threads at exit), and with everything else an exit does:
the report whole on stdout, the command's status, the other exit handlers run."""

from __future__ import annotations

import json
import subprocess
import textwrap

from _support import PYTHON, ROOT, run_main

PROGRAM = """
import atexit
import pathlib
import threading
import time

import jax
import jax.numpy as jnp

import shardscope

atexit.register(lambda: pathlib.Path({marker!r}).write_text("ran"))  # a handler of the user's own


def write_later():
    time.sleep(1.0)  # still writing when the command is done
    pathlib.Path({marker!r} + ".thread").write_text("written")


threading.Thread(target=write_later, daemon=False).start()  # the import runs in a daemon thread: waited for only so


@shardscope.program(args=(jax.ShapeDtypeStruct((8, 4), jnp.float32),))
def double(x):
    return x * 2
"""

# an exit handler registered before JAX's import runs after JAX's own (atexit runs them last
# in, first out): it writes which backends JAX still holds then. JAX's ``clean_up`` clears them.
LAUNCHER = """
import atexit, pathlib, sys

def after_jax():
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    pathlib.Path({backends!r}).write_text(",".join(sorted(getattr(xla_bridge, "_backends", {{}}))))

atexit.register(after_jax)
sys.argv = ["shardscope", *{argv!r}]
{last}
"""


def _leave_through(tmp_path, last, *argv):
    """Run ``last`` (a line of Python) in a fresh process as ``shardscope ARGV``; what it wrote,
    and the backends JAX held once every exit handler had run."""
    backends = tmp_path / "backends"
    code = textwrap.dedent(LAUNCHER.format(backends=str(backends), argv=[str(a) for a in argv], last=last))
    done = subprocess.run([PYTHON, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return done, backends.read_text()


def _check_of_the_program(tmp_path):
    """``check``'s arguments for :data:`PROGRAM` written in ``tmp_path`` (its marker beside it)."""
    path = tmp_path / "double.py"
    path.write_text(textwrap.dedent(PROGRAM.format(marker=str(tmp_path / "marker"))))
    return ("check", path, "--devices", "8", "--json")


def test_the_command_line_leaves_without_tearing_the_cpu_devices_down(tmp_path):
    argv = _check_of_the_program(tmp_path)
    done, backends = _leave_through(tmp_path, "import runpy; runpy.run_module('shardscope', run_name='__main__')", *argv)
    assert done.returncode == 0, done.stderr
    assert backends == "cpu"  # JAX's teardown did not run
    assert (tmp_path / "marker").read_text() == "ran"  # the user's own exit handler did
    assert (tmp_path / "marker.thread").read_text() == "written"  # and the user's own thread was waited for
    report = json.loads(done.stdout)  # written whole before the process left
    # the same report as main(argv) gives in a process that goes on (timings aside)
    alone = run_main(*argv)
    assert alone.returncode == 0
    assert _without_timings(report) == _without_timings(json.loads(alone.stdout))


def test_main_given_its_arguments_returns_and_the_process_exits_as_usual(tmp_path):
    argv = _check_of_the_program(tmp_path)
    done, backends = _leave_through(tmp_path, "from shardscope.cli import main; sys.exit(main(sys.argv[1:]))", *argv)
    assert done.returncode == 0, done.stderr
    assert backends == ""  # JAX's own teardown ran
    assert json.loads(done.stdout)


def test_the_status_is_the_commands(tmp_path):
    done, _ = _leave_through(tmp_path, "import runpy; runpy.run_module('shardscope', run_name='__main__')",
                             "check", tmp_path / "missing.py")
    assert done.returncode == 2
    assert done.stdout == "" and "missing.py" in done.stderr


def _without_timings(value):
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not k.endswith(("_s", "seconds"))}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value
