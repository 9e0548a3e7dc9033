"""``--profile-dir`` given what it should not read (issue 53, items 14 and 17): special files are
refused by their type before anything opens them, a bucket out of reach is one message within
the deadline, and an interrupt prints its message and removes what the command made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _support import PYTHON, ROOT
from shardscope.measure.profile_files import GS_DEADLINE_S, ProfileError, profile_files
from shardscope.measure.profile_read import read_profile

TPU_RUN = next((Path(__file__).parent / "fixtures" / "profiles" / "tpu_v5e" / "plugins" / "profile").iterdir())


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "plugins" / "profile" / "2026_12_06_10_00_00"
    run.mkdir(parents=True)
    return run


def test_a_fifo_named_like_a_profile_is_refused_without_opening_it(tmp_path):
    os.mkfifo(_run(tmp_path) / "host.xplane.pb")  # opening it to read would block until a writer comes
    with pytest.raises(ProfileError, match="is a FIFO .* nothing was read from it"):
        read_profile(tmp_path)


def test_dev_zero_linked_in_is_refused(tmp_path):
    (_run(tmp_path) / "host.xplane.pb").symlink_to("/dev/zero")  # a read would never end
    with pytest.raises(ProfileError, match="is a character device, not a profile file"):
        read_profile(tmp_path)


@pytest.mark.parametrize("given", ["/dev/null", "file"])
def test_a_device_or_a_file_as_the_folder_is_one_message(given, tmp_path):
    path = Path(given) if given.startswith("/") else tmp_path / "notes.txt"
    if not given.startswith("/"):
        path.write_text("not a profile")
    with pytest.raises(ProfileError) as error:
        read_profile(path)
    assert "a character device, not a folder" in error.value.message or "is not a profile" in error.value.message


def test_a_link_loop_and_deep_folders_do_not_hang(tmp_path):
    run = _run(tmp_path)
    (run / "host.xplane.pb").write_bytes(next(TPU_RUN.glob("*.xplane.pb")).read_bytes())
    (tmp_path / "loop").symlink_to(tmp_path)  # a folder linked into itself: not followed
    found = profile_files(tmp_path)
    assert [f.name for f in found.files] == ["host.xplane.pb"]


def test_garbage_named_like_a_profile_is_one_message(tmp_path):
    (_run(tmp_path) / "host.xplane.pb").write_bytes(os.urandom(4096))
    with pytest.raises(ProfileError, match="not a profile JAX can read"):
        read_profile(tmp_path)


@pytest.mark.parametrize("proxy", [False, True])
def test_gs_without_a_network_is_one_message_within_the_deadline(proxy, tmp_path):
    """gcsfs retries a request for minutes without a network, logging a traceback each time; the
    listing has a deadline and gcsfs's log stays off the terminal. Here no network is reachable
    (its host name does not resolve, or a proxy on a closed port stands in the way), or the bucket
    does not exist: either way one message, well before the subprocess's limit."""
    pytest.importorskip("gcsfs")
    # The deadline shortened to 3 s (the command's is GS_DEADLINE_S, 20 s): what is checked is
    # that it holds and what is printed when it does, not its length, which the suite would wait.
    probe = textwrap.dedent("""
        from shardscope.cli import main
        from shardscope.measure import profile_files
        profile_files.GS_DEADLINE_S = 3.0
        raise SystemExit(main(["check", "--xla-dump", "tests/fixtures/xla_dump/cpu_jax-0.12.0.1",
                               "--profile-dir", "gs://shardscope-no-such-bucket/profiles"]))
    """)
    env = {**os.environ, "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "none.json"), "NO_GCE_CHECK": "true"}
    if proxy:  # the host name is then the proxy's to resolve: the listing's own deadline holds
        env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=GS_DEADLINE_S + 40)
    assert result.returncode == 2, result.stderr
    assert "gs://shardscope-no-such-bucket/profiles" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 4  # the message, its hint, nothing of gcsfs's


def test_an_interrupt_while_stderr_is_redirected_still_reaches_the_terminal():
    """A native call's output is kept off the terminal by pointing descriptor 2 elsewhere (XProf's
    converter, the compile's log): an interrupt that lands meanwhile says so on the real stderr."""
    probe = textwrap.dedent("""
        import os, signal, time
        from shardscope.distributed.interrupts import run_interruptible
        from shardscope.native_stderr import stderr_caught

        def work():
            with stderr_caught():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(10)

        run_interruptible(work)
    """)
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 130 and "interrupted (SIGINT)" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_profiling_removes_the_trace_folder(signum, tmp_path):
    """``--profile`` writes its trace into a temporary folder: Ctrl+C or SIGTERM while it runs
    prints the message and leaves no folder behind."""
    program = tmp_path / "slow.py"
    program.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        import shardscope

        @shardscope.program(args=(jax.ShapeDtypeStruct((512, 512), jnp.float32),))
        @jax.jit
        def step(w):
            return jax.lax.fori_loop(0, 4000, lambda i, w: jnp.tanh(w @ w), w)
    """))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen([PYTHON, "-m", "shardscope", "check", str(program), "--profile"],
                               env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not list(scratch.glob("shardscope-trace-*")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert list(scratch.glob("shardscope-trace-*")), "the profile's folder never appeared"
    time.sleep(1.0)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signum and f"interrupted ({signal.Signals(signum).name})" in stderr
    assert not list(scratch.glob("shardscope-*")), list(scratch.iterdir())


def test_special_files_reach_the_cli_as_one_message(tmp_path, shardscope_cli):
    os.mkfifo(_run(tmp_path) / "host.xplane.pb")
    result = shardscope_cli("check", "--xla-dump", ROOT / "tests" / "fixtures" / "xla_dump" / "cpu_jax-0.12.0.1",
                            "--profile-dir", tmp_path)
    assert result.returncode == 2 and "is a FIFO" in result.stderr and "Traceback" not in result.stderr
    assert "jit_step: 2 compiled collectives" in result.stdout  # the dump's plan, without times


if sys.platform != "linux":  # mkfifo and /dev/zero as the tests use them
    pytestmark = pytest.mark.skip("Linux special files")
