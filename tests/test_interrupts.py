"""Ctrl+C and SIGTERM on report/diff (issue 8): real subprocesses, real signals, nothing written."""

from __future__ import annotations

import signal
import subprocess
import textwrap
import time

import pytest

from _support import DEMOS, PYTHON, ROOT, write_demo

SLOW_TRACE = """
import sys
import time


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
def slow(W, x):
    print("tracing now", file=sys.stderr, flush=True)
    time.sleep(120)  # a model that takes long to trace: the interrupt must not wait for it
    return x @ W
"""


def start(args, cwd):
    return subprocess.Popen([PYTHON, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(process, needle, timeout=180):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if needle in line:
            return
    process.kill()
    pytest.fail(f"never saw {needle!r}: {''.join(seen)}")


@pytest.mark.slow  # real signals to a real process
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_diff_exits_at_once_and_writes_nothing(tmp_path, signum, status):
    demo = write_demo(tmp_path, "slow.py", SLOW_TRACE)
    process = start(["-m", "shardscope", "diff", str(demo), "-o", "out.diff"], tmp_path)
    wait_for_line(process, "tracing now")
    sent = time.monotonic()
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    latency = time.monotonic() - sent
    assert process.returncode == status, err
    assert "interrupted" in err and "Traceback" not in err and "Exception ignored" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.py"]  # no out.diff, no .out.diff.*.tmp
    assert latency < 10, latency  # a bound against hanging, not a speed target (typically ~0.1 s)


WRITE_SLOWLY = """
import os, sys, time
from shardscope.cli import main

real_fsync = os.fsync


def slow_fsync(fd):  # hold the window in which the temporary file exists
    print("temporary file written", file=sys.stderr, flush=True)
    time.sleep(120)
    real_fsync(fd)


os.fsync = slow_fsync
sys.exit(main(["diff", {demo!r}, "-o", "out.diff"]))
"""


@pytest.mark.slow  # real signals to a real process
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_the_temporary_file_exists_removes_it(tmp_path, signum, status):
    script = textwrap.dedent(WRITE_SLOWLY).format(demo=str(DEMOS / "linear.py"))
    process = start(["-c", script], tmp_path)
    wait_for_line(process, "temporary file written")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the window is open
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    assert process.returncode == status, err
    assert list(tmp_path.iterdir()) == [], err


@pytest.mark.slow  # real signals to a real process
def test_report_interrupted_while_timing_exits_130(tmp_path):
    process = start(["-m", "shardscope", "report", str(DEMOS / "linear.py"), "-r", "100000"], ROOT)
    time.sleep(0.5)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:  # somewhere in JAX: import, trace, compile, run
        time.sleep(2)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            continue
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert out == "" and "Traceback" not in err
