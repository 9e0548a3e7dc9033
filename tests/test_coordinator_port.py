"""--processes P when another process takes the coordinator's port between the pick and process 0's
bind: process 0 says so precisely (jax.distributed.initialize's "Failed to start RPC server") and
the workers start again on another port; any other failure of process 0 is not retried.

The spawner runs in this process (its workers are real ``python -m shardscope`` processes with
real JAX); the port picker is wrapped so that a socket here binds and listens on the port it
picked, the moment it picked it.
"""

from __future__ import annotations

import json
import socket

import pytest

from _support import DEMOS, write_demo
from shardscope.distributed import processes
from shardscope.distributed.processes import WorkerFailed, run_workers

LINEAR = DEMOS / "linear.py"

pytestmark = pytest.mark.slow


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


def test_a_port_taken_before_process_0_binds_it_is_picked_again(picks, capfd):
    status = run_workers(["report", str(LINEAR), "--devices", "4", "-r", "1", "--json"], 2, 300)
    assert status == 0
    assert len(picks) == 2 and picks[0] != picks[1]  # the taken port, then one that worked
    data = json.loads(capfd.readouterr().out)  # process 0's report, on our stdout
    assert (data["processes"], data["collectives_transport"], data["devices"]) == (2, "gloo", 4)
    # x @ W over 4 devices, 2 chunks per device: naive all-reduces once per chunk, deferred once
    assert data["variants"]["naive"]["executed_collectives"] == 2
    assert data["variants"]["deferred"]["executed_collectives"] == 1


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
