"""--processes P: real cross-process collectives over gloo, and no worker or port left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from _support import DEMOS, PYTHON, ROOT, plan_outputs, write_demo
from shardscope.cli.processes import free_port

LINEAR = DEMOS / "linear.py"
HELPER = Path(__file__).parent / "helpers" / "distributed_gradients.py"

pytestmark = pytest.mark.slow  # every test starts shardscope processes that import JAX


def workers_of(parent_pid: int) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of every live shardscope worker spawned by ``parent_pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "--worker" in cmdline and cmdline.rstrip().endswith(f",{parent_pid}") and state != "Z":
            found.append((int(entry.name), cmdline))
    return found


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "shardscope", *map(str, args)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_processes_give_the_in_process_gradients():
    port = free_port()
    workers = [
        subprocess.Popen([PYTHON, str(HELPER), f"127.0.0.1:{port}", "2", str(i), "4", str(LINEAR)],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for i in range(2)
    ]
    try:
        out = [w.communicate(timeout=240)[0] for w in workers]
    finally:
        for w in workers:
            w.kill()
    assert [w.returncode for w in workers] == [0, 0]
    data = json.loads(out[0])
    assert (data["process_count"], data["devices"]) == (2, 4)
    _, expected = plan_outputs("linear.py", devices=4)
    for name in ("naive", "deferred", "reference"):
        # linear's gradient is one array (W's); the JSON holds it as nested lists
        np.testing.assert_allclose(np.asarray(data["outputs"][name]), expected[name], rtol=1e-5, atol=1e-5,
                                   err_msg=name)


def test_report_over_two_processes_matches_in_process_counts(shardscope_cli):
    spawned = start_cli("report", LINEAR, "--devices", "4", "--processes", "2", "-r", "2", "--json")
    stdout, stderr = spawned.communicate(timeout=300)
    assert spawned.returncode == 0, stderr
    assert "Traceback" not in stderr
    over_gloo = json.loads(stdout)  # exactly one JSON value: gloo's notices stay off stdout
    in_process = json.loads(shardscope_cli("report", LINEAR, "--devices", "4", "-r", "2", "--json").stdout)
    assert (over_gloo["processes"], over_gloo["collectives_transport"]) == (2, "gloo")
    assert (in_process["processes"], in_process["collectives_transport"]) == (1, "in-process")
    for name in ("naive", "deferred"):
        a, b = over_gloo["variants"][name], in_process["variants"][name]
        for key in ("collectives", "collectives_in_loops", "executed_collectives", "bytes_per_call"):
            assert a[key] == b[key], (name, key)
        assert (a["hlo"]["collectives"], a["hlo"]["collectives_in_loops"]) == (
            b["hlo"]["collectives"], b["hlo"]["collectives_in_loops"])
        assert a["max_abs_err"] < 1e-5
    assert over_gloo["variants"]["naive"]["executed_collectives"] == 2
    assert workers_of(spawned.pid) == []


def test_sigint_ends_every_worker_and_frees_the_port():
    spawned = start_cli("report", LINEAR, "--devices", "4", "--processes", "2", "-r", "200")
    deadline = time.monotonic() + 120
    while len(workers_of(spawned.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = workers_of(spawned.pid)
    assert len(workers) == 2
    port = int(workers[0][1].split("--worker 127.0.0.1:")[1].split(",")[0])
    time.sleep(3)  # let them reach the coordinator and start working
    spawned.send_signal(signal.SIGINT)
    _, stderr = spawned.communicate(timeout=10)
    assert spawned.returncode == 130
    assert "Traceback" not in stderr
    assert workers_of(spawned.pid) == []
    # the kernel closes a dead process's connections on its own time (FIN_WAIT, LAST_ACK): wait for it,
    # then blame only what a run would trip on, a listener or a socket some shardscope process still holds
    deadline = time.monotonic() + 10
    while not port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not port_is_free(port):
        held = sockets_on(port)
        ours = shardscope_socket_inodes()
        assert not [s for s in held if s[1] == "LISTEN" or s[2] in ours], held


TCP_STATES = {"01": "ESTABLISHED", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN"}


def sockets_on(port: int) -> list[tuple[str, str, str]]:
    """``(local address, state, inode)`` of every TCP socket whose local port is ``port``."""
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.append((fields[1], TCP_STATES.get(fields[3], fields[3]), fields[9]))
    return found


def shardscope_socket_inodes() -> set[str]:
    """Socket inodes held by any live process running shardscope (a worker, a sentinel, a stray child)."""
    inodes: set[str] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            with contextlib.suppress(OSError):
                if b"shardscope" in (entry / "cmdline").read_bytes():
                    inodes |= socket_inodes(int(entry.name))
    return inodes


def listening_sockets() -> dict[str, tuple[str, int]]:
    """``{socket inode: (address, port)}`` of every listening TCP socket, from /proc/net/tcp{,6}."""
    found = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            # the kernel prints each 32-bit word of the address in host (little-endian) order
            words = [bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, len(address), 8)]
            packed = b"".join(words)
            family = socket.AF_INET if table == "tcp" else socket.AF_INET6
            found[fields[9]] = (socket.inet_ntop(family, packed), int(port, 16))
    return found


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
    return inodes


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1",) or address.startswith("::ffff:127.")


def test_workers_listen_on_the_loopback_address_only():
    """The coordinator (process 0) and gloo's sockets: read while the run is in progress."""
    spawned = start_cli("report", LINEAR, "--devices", "4", "--processes", "2", "-r", "300")
    try:
        deadline = time.monotonic() + 120
        while len(workers_of(spawned.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = workers_of(spawned.pid)
        port = int(workers[0][1].split("--worker 127.0.0.1:")[1].split(",")[0])
        coordinator = []
        while not coordinator and time.monotonic() < deadline:
            coordinator = [address for address, p in listening_sockets().values() if p == port]
            time.sleep(0.1)
        # 127.0.0.1 (or ::ffff:127.0.0.1 in tcp6), not [::] or 0.0.0.0: every interface
        assert coordinator and all(is_loopback(address) for address in coordinator), coordinator
        time.sleep(2)  # the workers have joined: gloo's own sockets are open too
        inodes = set().union(*(socket_inodes(pid) for pid, _ in workers_of(spawned.pid)))
        opened = [sock for inode, sock in listening_sockets().items() if inode in inodes]
        assert opened and all(is_loopback(address) for address, _ in opened), opened
    finally:
        spawned.send_signal(signal.SIGINT)
        spawned.communicate(timeout=30)
    assert workers_of(spawned.pid) == []


def test_sigterm_ends_every_worker():
    spawned = start_cli("report", LINEAR, "--devices", "4", "--processes", "2", "-r", "200")
    deadline = time.monotonic() + 120
    while len(workers_of(spawned.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    spawned.send_signal(signal.SIGTERM)
    spawned.communicate(timeout=10)
    assert spawned.returncode != 0
    assert workers_of(spawned.pid) == []


def test_a_model_error_names_the_process_and_leaves_nothing(tmp_path):
    path = write_demo(tmp_path, "broken.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((4, 4), jnp.float32),
                         x=jax.ShapeDtypeStruct((16, 4), jnp.float32))
        def broken(W, x):
            return x @ W[:3]
        """)
    spawned = start_cli("report", path, "--devices", "4", "--processes", "2", "-r", "1")
    _, stderr = spawned.communicate(timeout=300)
    assert spawned.returncode == 2, stderr
    assert "shardscope: error: process " in stderr and " of 2: " in stderr
    assert "hint:" in stderr and "Traceback" not in stderr
    assert workers_of(spawned.pid) == []


def test_timeout_ends_every_worker():
    spawned = start_cli("report", LINEAR, "--devices", "4", "--processes", "2", "--timeout", "1")
    _, stderr = spawned.communicate(timeout=60)
    assert spawned.returncode == 2
    assert "did not finish within 1 s" in stderr and "--timeout" in stderr
    assert workers_of(spawned.pid) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--devices", "2", "--processes", "4"), "does not split over --processes 4"),
        (("--processes", "2", "--distributed"), "do not go together"),
    ],
)
def test_process_options_that_do_not_fit(args, needle, shardscope_cli):
    result = shardscope_cli("report", LINEAR, *args)  # refused before any worker or cluster starts
    assert result.returncode == 2
    assert needle in result.stderr and "hint:" in result.stderr


def test_distributed_outside_a_cluster_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR"))}
    result = subprocess.run([PYTHON, "-m", "shardscope", "report", str(LINEAR), "--distributed"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--distributed could not join a cluster" in result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.stderr


def test_distributed_joins_a_simulated_slurm_step():
    """Two tasks of a SLURM step on this machine: JAX's auto-detection finds them, process 0 prints."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR"))}
    tasks = [
        subprocess.Popen(
            [PYTHON, "-m", "shardscope", "report", str(LINEAR), "--distributed", "--devices", "4", "-r", "2", "--json"],
            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**base, "SLURM_JOB_ID": "1", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2",
                 "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i), "JAX_COORDINATOR_PORT": str(port),
                 "JAX_NUM_CPU_DEVICES": "2"},
        )
        for i in range(2)
    ]
    try:
        outputs = [task.communicate(timeout=300) for task in tasks]
    finally:
        for task in tasks:
            task.kill()
    assert [task.returncode for task in tasks] == [0, 0], outputs[0][1][-2000:]
    leader = json.loads(outputs[0][0])
    assert (leader["processes"], leader["collectives_transport"], leader["devices"]) == (2, "gloo", 4)
    assert leader["variants"]["naive"]["executed_collectives"] == 2
    assert outputs[1][0] == ""  # only process 0 prints
