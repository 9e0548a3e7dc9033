"""How a command's JAX starts: in this process, as ``--processes P`` local workers joined by
``jax.distributed`` (process 0 prints), or as one process of a cluster (``--distributed``).

The spawner runs the user's command line again in each worker, without the options only it reads
(:attr:`ProcessOptions.worker_argv`, written by the CLI), with the worker's role added.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.cli.processes import run_workers
from shardscope.distributed.workers import WorkerRole, join_as_worker, join_cluster
from shardscope.errors import SettingsError
from shardscope.targets.host import request_devices
from shardscope.targets.platforms import jax_platforms
from shardscope.config.settings import MAX_DEVICES, Settings, check_device_count

DEFAULT_MAX_DEVICES = 8
"""CPU devices an in-process run starts JAX with (more when the mesh needs more)."""
DEFAULT_TIMEOUT_S = 900


@dataclass(frozen=True)
class ProcessOptions:
    """How a command's JAX starts: ``--processes``, ``--distributed``, ``--timeout``, and, in a
    spawned worker, its role (``--worker``).

    ``worker_argv`` is the command line each spawned worker runs: the user's own, without the
    options only the spawner reads (``--processes``, ``--timeout``).
    """

    processes: int = 1
    distributed: bool = False
    timeout_s: int = DEFAULT_TIMEOUT_S
    worker: WorkerRole | None = None
    worker_argv: tuple[str, ...] = ()

    @property
    def spawns_workers(self) -> bool:
        """True in the process that starts ``--processes P`` workers (it runs no analysis itself)."""
        return self.processes > 1 and self.worker is None


IN_PROCESS = ProcessOptions()
"""JAX in this process alone: the commands without process options (``diff``, ``check``)."""


def start_jax(processes: ProcessOptions, settings: Settings) -> None:
    """Set the CPU device count (joining the other processes first, if any) before the file is imported.

    A file that builds arrays when imported (every flax or equinox model, ``jnp`` example inputs)
    starts JAX's backend with the count set here. In-process, and in the parent of
    ``--processes`` (which imports the file only to check it), the backend is not started here,
    and a count over the cap is not asked for (thousands of CPU devices hang JAX): the caller
    refuses it after the import, with the counts that divide the batch, before anything was
    allocated.
    """
    check_process_options(processes)  # the device count is checked once the demo's own mesh is known
    devices = settings.mesh.devices
    if processes.worker is not None:
        check_device_count(devices)
        join_as_worker(processes.worker, devices // processes.worker.processes, jax_platforms())
    elif processes.distributed:
        check_device_count(devices)
        join_cluster()
    elif devices > MAX_DEVICES:
        request_devices(DEFAULT_MAX_DEVICES)  # refused once the file says what its batch is
    elif processes.spawns_workers:
        request_devices(devices)  # what a worker's jax.devices() lists, all processes together
    else:
        # Start with enough devices that a count which does not divide N can be told what would.
        request_devices(max(devices, DEFAULT_MAX_DEVICES))


def check_process_options(processes: ProcessOptions, settings: Settings | None = None,
                          batch: int | None = None) -> None:
    """Refuse ``--processes P`` with ``--distributed``, or (given the settings) with a device count
    that P does not divide (the counts suggested also split ``batch``, a demo's N, when known)."""
    if not processes.spawns_workers:
        return
    if processes.distributed:
        raise SettingsError("--processes and --distributed do not go together.",
                            "--processes P spawns local workers; --distributed joins a cluster's launcher")
    if settings is not None:
        check_process_split(settings.mesh.devices, processes.processes, batch)


def spawn_workers(processes: ProcessOptions, settings: Settings, batch: int | None = None) -> int:
    """``--processes P``: ``processes.worker_argv`` in P joined local workers; process 0 prints.

    ``batch`` (a demo's N, when known) narrows the device counts a refusal suggests to the ones
    that also split the batch. A worker's failure raises
    :class:`~shardscope.cli.processes.WorkerFailed`, with the status to exit with.
    """
    check_process_options(processes, settings, batch)
    return run_workers(list(processes.worker_argv), processes.processes, processes.timeout_s)


def check_process_split(devices: int, processes: int, batch: int | None = None) -> None:
    """Raise :class:`SettingsError` unless ``devices`` splits evenly over ``processes`` workers.

    The device counts a refusal suggests are multiples of ``processes`` within the cap of
    simulated devices (and divisors of ``batch`` when given); when none is, it says so and
    suggests process counts that split ``devices`` instead.
    """
    if devices % processes == 0:
        return
    fitting = [d for d in range(processes, MAX_DEVICES + 1, processes) if batch is None or batch % d == 0]
    within = f" (at most {MAX_DEVICES} simulated devices" + (f" that split the batch N={batch})" if batch else ")")
    splits = ", ".join(str(p) for p in range(2, devices + 1) if devices % p == 0) or "1"
    if processes > MAX_DEVICES:
        hint = (f"each worker needs a device of its own and shardscope simulates at most {MAX_DEVICES}: "
                f"use --processes {splits} with --devices {devices}")
    elif fitting:
        larger = [d for d in fitting if d >= devices]
        examples = ", ".join(map(str, (larger or fitting[::-1])[:3]))
        hint = f"use a device count that is a multiple of {processes}{within}: --devices {examples}"
    else:
        hint = (f"no device count up to {MAX_DEVICES}{f' that splits the batch N={batch}' if batch else ''} is a "
                f"multiple of {processes}: use --processes {splits} with --devices {devices}")
    raise SettingsError(f"--devices {devices} does not split over --processes {processes}.", hint)
