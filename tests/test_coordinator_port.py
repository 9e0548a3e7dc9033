"""--processes P when another process takes the coordinator's port between the pick and process 0's
bind: process 0 says so precisely (jax.distributed.initialize's "Failed to start RPC server"), or
gRPC's log line names the address when process 0 crashes right after, and the workers start again
on another port; any other failure of process 0 is not retried.

The spawner runs in this process (its workers are real ``python -m shardscope`` processes with
real JAX); the port picker is wrapped so that a socket here binds and listens on the port it
picked, the moment it picked it.
"""

from __future__ import annotations

import json
import socket

import pytest

from _support import DEMOS, write_demo
from shardscope.cli import processes
from shardscope.cli.processes import WorkerFailed, port_taken, run_workers

LINEAR = DEMOS / "linear.py"


@pytest.fixture
def picks(monkeypatch):
    """The ports the spawner picks, in order; the first is taken (bound and listened on) at once."""
    picked: list[int] = []
    thieves: list[socket.socket] = []
    pick = processes.free_port

    def pick_then_take() -> int:
        port = pick()
        picked.append(port)
        if len(picked) == 1:
            thief = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            thief.bind(("127.0.0.1", port))
            thief.listen()
            thieves.append(thief)
        return port

    monkeypatch.setattr(processes, "free_port", pick_then_take)
    yield picked
    for thief in thieves:
        thief.close()


@pytest.mark.slow  # starts worker processes
def test_a_port_taken_before_process_0_binds_it_is_picked_again(picks, capfd):
    status = run_workers(["report", str(LINEAR), "--devices", "4", "-r", "1", "--json"], 2, 300)
    assert status == 0
    assert len(picks) == 2 and picks[0] != picks[1]  # the taken port, then one that worked
    data = json.loads(capfd.readouterr().out)  # process 0's report, on our stdout
    assert (data["processes"], data["collectives_transport"], data["devices"]) == (2, "gloo", 4)
    # x @ W over 4 devices, 2 chunks per device: naive all-reduces once per chunk, deferred once
    assert data["variants"]["naive"]["executed_collectives"] == 2
    assert data["variants"]["deferred"]["executed_collectives"] == 1


@pytest.mark.slow  # starts worker processes
def test_any_other_failure_of_process_0_is_not_retried(picks, tmp_path):
    broken = write_demo(tmp_path, "broken.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((4, 4), jnp.float32),
                         x=jax.ShapeDtypeStruct((16, 4), jnp.float32))
        def broken(W, x):
            return x @ W[:3]
        """)
    picks.append(0)  # nothing is taken this time: the first real pick is the run's port
    with pytest.raises(WorkerFailed) as failed:
        run_workers(["report", str(broken), "--devices", "4", "-r", "1"], 2, 300)
    assert failed.value.exit_status == 2 and failed.value.message.startswith("process ")
    assert len(picks) == 2  # the placeholder and the one port the run used



# process 0's last line when it died of SIGSEGV after the failed bind, verbatim (jax 0.10.2, then 0.12)
GRPC_LINE_010 = ("E1201 16:15:25.526088   19132 add_port.cc:83] Failed to add port to server: No address added out "
                 "of total 1 resolved for '127.0.0.1:58847'")
GRPC_LINE_012 = ("E1201 16:15:48.789489   19581 add_port.cc:83] Failed to add port to server: No address added out "
                 "of total 1 resolved for '127.0.0.1:58847' (Error in bind for address '[::ffff:127.0.0.1]:58847': "
                 "Address already in use)")


@pytest.mark.parametrize(("code", "stderr", "coordinator", "taken"), [
    (-11, [GRPC_LINE_010], "127.0.0.1:58847", True),  # crashed after gRPC said so
    (-11, [GRPC_LINE_012], "127.0.0.1:58847", True),
    (75, ["shardscope: error: the coordinator could not listen on 127.0.0.1:5"], "127.0.0.1:5", True),
    (-11, [GRPC_LINE_010], "127.0.0.1:5884", False),  # another address (a prefix of this one)
    (-11, ["Fatal Python error: Segmentation fault"], "127.0.0.1:58847", False),
    (1, ["shardscope: error: the model does not trace"], "127.0.0.1:58847", False),
])
def test_a_taken_port_is_told_from_other_failures(code, stderr, coordinator, taken):
    assert port_taken(code, stderr, coordinator) is taken
