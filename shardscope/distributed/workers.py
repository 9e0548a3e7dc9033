"""Join JAX's distributed runtime, as a spawned local worker or under a cluster's launcher.

On the CPU, collectives between processes go over gloo (TCP). Both settings must be made
before ``jax.distributed.initialize`` and before any array exists: the device count and the
collectives implementation are fixed when the CPU backend starts.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

from shardscope.errors import SettingsError, ShardscopeError

INITIALIZATION_TIMEOUT_S = 60
"""How long a worker waits for the others to reach the coordinator."""

COORDINATOR_PORT_TAKEN = 75
"""Exit status of process 0 when the coordinator's port was taken before it could bind it
(sysexits' EX_TEMPFAIL): the spawner starts the workers again on another port."""

COORDINATOR_BIND_FAILURE = "Failed to start RPC server"
"""What ``jax.distributed.initialize`` says (a ``jax.errors.JaxRuntimeError``, ``UNKNOWN: Failed
to start RPC server``) when process 0 cannot listen on the coordinator's address: XLA's
``DistributedRuntimeService::Get`` returns it when gRPC could not add the listening port. Seen on
jax 0.10.2 and 0.12 with the port bound, or listened on, by another process."""


class CoordinatorPortTaken(ShardscopeError):
    """Process 0 could not listen on the coordinator's port: another process took it first."""

    exit_status = COORDINATOR_PORT_TAKEN


@dataclass(frozen=True)
class WorkerRole:
    """Which worker this process is: ``--worker ADDRESS,PROCESSES,ID,PARENT_PID`` (internal)."""

    coordinator: str
    processes: int
    process_id: int
    parent_pid: int

    @classmethod
    def parse(cls, text: str) -> "WorkerRole":
        """Parse the internal ``--worker`` value the spawner writes."""
        address, processes, process_id, parent = text.rsplit(",", 3)
        return cls(address, int(processes), int(process_id), int(parent))

    def text(self) -> str:
        """The ``--worker`` value of this role."""
        return f"{self.coordinator},{self.processes},{self.process_id},{self.parent_pid}"


def keep_stdout_for_report() -> None:
    """Send file descriptor 1 to stderr and keep Python's ``sys.stdout`` for the report.

    gloo's C++ code prints connection notices on stdout; the report (one JSON object with
    ``--json``) must stay alone there.
    """
    sys.stdout.flush()
    report_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(report_fd, "w", buffering=1)


def join_as_worker(role: WorkerRole, local_devices: int, platforms: str = "cpu") -> None:
    """Start JAX as one of ``role.processes`` local workers, each with ``local_devices`` CPU devices.

    The backend is ``platforms``' (the CPU's unless the user chose others: with libtpu installed
    JAX would try a TPU first, on a TPU VM open the chip, and libtpu's start-up warnings would
    fill the worker's stderr).
    """
    import jax

    _exit_with_parent(role.parent_pid)
    keep_stdout_for_report()
    jax.config.update("jax_platforms", platforms)  # set, not left: a TPU VM's own 'tpu,cpu' is no choice of the user's
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", local_devices)
    try:
        jax.distributed.initialize(
            coordinator_address=role.coordinator,
            # JAX binds the coordinator on every interface ([::]:PORT) whatever the address says:
            # local workers keep it on the loopback address they connect to
            coordinator_bind_address=role.coordinator,
            num_processes=role.processes,
            process_id=role.process_id,
            initialization_timeout=INITIALIZATION_TIMEOUT_S,
        )
    except jax.errors.JaxRuntimeError as exc:
        if role.process_id == 0 and COORDINATOR_BIND_FAILURE in str(exc):
            raise CoordinatorPortTaken(
                f"the coordinator could not listen on {role.coordinator}: another process took the port",
                "run the command again: the port is picked anew each time",
            ) from exc
        raise
    jax.devices()  # start the backend now: the device count is final from here on


def join_cluster() -> None:
    """``--distributed``: ``jax.distributed.initialize()`` with the launcher's auto-detection.

    JAX reads SLURM, Open MPI, Kubernetes and Cloud TPU environments, or
    ``JAX_COORDINATOR_ADDRESS`` with explicit process counts. CPU collectives use gloo.
    """
    import jax

    keep_stdout_for_report()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(initialization_timeout=INITIALIZATION_TIMEOUT_S)
    except (ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SettingsError(
            f"--distributed could not join a cluster: {first}",
            "run under a launcher JAX detects (srun, mpirun, a TPU VM, Kubernetes), or use --processes P "
            "on one machine",
        ) from exc
    jax.devices()


def is_leader() -> bool:
    """True in the process that prints (process 0), and when not distributed at all."""
    import jax

    return jax.process_index() == 0


def collectives_transport() -> str:
    """``in-process`` on one process; ``gloo`` between CPU processes; else the backend's runtime."""
    import jax

    if jax.process_count() == 1:
        return "in-process"
    if jax.default_backend() == "cpu":
        return str(jax.config.jax_cpu_collectives_implementation or "gloo")  # type: ignore[attr-defined]  # jax.config's options are dynamic attributes
    return jax.default_backend()


def _exit_with_parent(parent_pid: int) -> None:
    """End this worker when the process that spawned it is gone (killed without cleaning up)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="shardscope-parent-watch", daemon=True).start()
