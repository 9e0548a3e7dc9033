"""What shardscope gives libtpu's start (``targets/tpu.py``): its variables on a machine without TPU
chips and on a TPU host, and its start's own log lines kept off the terminal where its logging is
shardscope's. Whether the machine has chips and whether JAX may still start its TPU backend are
read from the machine and from JAX; here they are set, to reach each case on any machine."""

from __future__ import annotations

import os

import pytest

from shardscope.targets import tpu as tpu_target

_OFF_A_HOST = {"TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "ALLOW_MULTIPLE_LIBTPU_LOAD",
               "TPU_MIN_LOG_LEVEL", "TPU_STDERR_LOG_LEVEL"}
_LOGGING = {"TPU_MIN_LOG_LEVEL", "TPU_STDERR_LOG_LEVEL"}
_LOCK = {"ALLOW_MULTIPLE_LIBTPU_LOAD"}


@pytest.fixture
def machine(monkeypatch):
    """Set what the start reads of the machine and of JAX: ``machine(chips, on_tpu, ruled_out, users)``."""
    def set_up(chips: bool, on_tpu: bool = False, ruled_out: bool = True, users: bool = False) -> None:
        monkeypatch.setattr(tpu_target, "_tpu_chips_attached", lambda: chips)
        monkeypatch.setattr(tpu_target, "_runs_on_tpu", lambda: on_tpu)
        monkeypatch.setattr(tpu_target, "_tpu_backend_ruled_out", lambda: ruled_out)
        for name in (*tpu_target.USER_LOGGING, *_OFF_A_HOST, "LIBTPU_INIT_ARGS"):
            monkeypatch.delenv(name, raising=False)
        if users:
            monkeypatch.setenv("TPU_VMODULE", "spmd_partitioner=1")
    return set_up


@pytest.mark.parametrize("case, expected", [
    ({"chips": False}, _OFF_A_HOST),
    ({"chips": False, "users": True}, _OFF_A_HOST - _LOGGING),
    # a TPU host: the host's variables describe the slice; shardscope's libtpu alone logs its way
    ({"chips": True}, _LOCK | _LOGGING),
    ({"chips": True, "users": True}, _LOCK),
    ({"chips": True, "ruled_out": False}, _LOCK),  # JAX may still start its TPU backend on this libtpu
    ({"chips": True, "on_tpu": True}, set()),  # JAX's libtpu drives the chips: nothing of shardscope's
], ids=["no-chips", "no-chips-users-logging", "host-cpu-run", "host-cpu-run-users-logging",
        "host-platforms-open", "host-runs-on-tpu"])
def test_what_libtpus_start_is_given(machine, case, expected):
    machine(**case)
    assert set(tpu_target._start_variables()) == expected


@pytest.mark.parametrize("chips", [False, True])
def test_the_start_sets_its_variables_only_while_libtpu_starts(machine, monkeypatch, chips):
    machine(chips=chips)
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_users_own_flag=true")
    monkeypatch.setattr(tpu_target, "_logging_ours", tpu_target._logging_ours)  # what the start records, put back
    with tpu_target._compile_only_start():
        inside = {name: os.environ.get(name) for name in (*_OFF_A_HOST, "LIBTPU_INIT_ARGS")}
    after = {name: os.environ.get(name) for name in (*_OFF_A_HOST, "LIBTPU_INIT_ARGS")}
    assert inside["LIBTPU_INIT_ARGS"] == "--xla_users_own_flag=true --logtostderr"
    assert (inside["TPU_MIN_LOG_LEVEL"], inside["TPU_STDERR_LOG_LEVEL"], inside["ALLOW_MULTIPLE_LIBTPU_LOAD"]) == ("1", "1", "1")
    assert (inside["TPU_ACCELERATOR_TYPE"] is None) is chips  # a host's own type describes its slice
    assert after == {**{name: None for name in _OFF_A_HOST}, "LIBTPU_INIT_ARGS": "--xla_users_own_flag=true"}


# lines libtpu 0.0.42 wrote as it started on a v5e VM with its warnings on descriptor 2 (a source
# file's name may hold a hyphen), and an error and a fatal line of the shape it writes
_START_LINES = (b"W1207 12:03:24.731250    1632 topology.cc:756] Cannot read CPU core 0\n",
                b"W1207 12:14:56.077180   11593 page-size.cc:27] Huge page sysfs directory not found at "
                b"/sys/kernel/mm/hugepages/hugepages-2048kB, huge pages may not work.\n",
                b"I1207 12:03:10.825041    1328 flags_util.cc:133] an INFO line\n")
_ERRORS = (b"E1207 12:03:20.519284    1443 tpu_client.cc:81] TPU initialization failed\n",
           b"F1207 12:03:20.519290    1443 topology.cc:90] Check failed: chips > 0\n")


@pytest.mark.parametrize("ours", [True, False])
def test_libtpus_start_is_kept_off_the_terminal_where_its_logging_is_ours(capfd, ours):
    with tpu_target._quiet_start(ours):
        for line in (*_START_LINES, *_ERRORS):
            os.write(2, line)
        os.write(2, b"any other byte passes\n")
    err = capfd.readouterr().err
    for line in _START_LINES:
        assert (line.decode() in err) is not ours
    for line in _ERRORS:  # an error comes with an exception, a fatal line with none: both reach the user
        assert line.decode() in err
    assert "any other byte passes" in err


def test_a_start_does_not_read_another_starts_variables_as_the_users(machine):
    """While one start holds its variables in the environment, another thread's decision (made
    before it waits for the start's lock) still sees libtpu's logging as shardscope's."""
    machine(chips=False)
    with tpu_target._compile_only_start():
        assert os.environ["TPU_MIN_LOG_LEVEL"] == "1"  # this start's, not the user's
        assert tpu_target._logs_ours(tpu_target._start_variables())


def test_two_starts_and_a_capture_taken_first_do_not_wait_on_each_other(machine):
    """load_target takes descriptor 2's capture, then the start's lock: a start takes them in that
    order too, so a thread inside a capture and another starting libtpu both finish."""
    import threading
    import time

    from shardscope.native_stderr import stderr_into

    machine(chips=False)
    inside = threading.Event()

    def captured_then_started() -> None:
        read, write = os.pipe()
        with stderr_into(write):
            inside.set()
            time.sleep(0.3)  # the other thread reaches its start meanwhile
            with tpu_target._compile_only_start():
                pass
        os.close(read), os.close(write)

    def started() -> None:
        inside.wait(5)
        with tpu_target._compile_only_start():
            pass

    threads = [threading.Thread(target=f, daemon=True) for f in (captured_then_started, started)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)


def test_the_tpu_backend_is_ruled_out_once_jax_started_without_it():
    import jax

    jax.devices()  # this test process's JAX runs on simulated CPU devices
    assert tpu_target._tpu_backend_ruled_out()
