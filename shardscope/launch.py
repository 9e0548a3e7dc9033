"""How a command's JAX starts: in this process, as ``--processes P`` local workers joined by
``jax.distributed`` (process 0 prints), or as one process of a cluster (``--distributed``).

The spawner runs the same command line again in each worker, without the options only it reads.
"""

from __future__ import annotations

import argparse

from shardscope.settings import MAX_DEVICES, Settings, check_device_count

DEFAULT_MAX_DEVICES = 8
"""CPU devices an in-process run starts JAX with (more when the mesh needs more)."""
DEFAULT_TIMEOUT_S = 900
SPAWNER_ONLY_OPTIONS = ("processes", "timeout", "worker")
"""Options the spawner handles itself and does not pass on to its workers."""


def start_jax(args: argparse.Namespace, settings: Settings) -> None:
    """Set the CPU device count (joining the other processes first, if any) before the file is imported.

    A file that builds arrays when imported (every flax or equinox model, ``jnp`` example inputs)
    starts JAX's backend with the count set here. In-process, and in the parent of
    ``--processes`` (which imports the file only to check it), the backend is not started here,
    and a count over the cap is not asked for (thousands of CPU devices hang JAX): the caller
    refuses it after the import, with the counts that divide the batch, before anything was
    allocated.
    """
    from shardscope.devices import request_devices

    check_process_options(args)  # the device count is checked once the demo's own mesh is known
    devices = settings.mesh.devices
    worker = getattr(args, "worker", None)
    if worker is not None:
        from shardscope.distributed import WorkerRole, join_as_worker

        check_device_count(devices)
        role = WorkerRole.parse(worker)
        join_as_worker(role, devices // role.processes)
    elif getattr(args, "distributed", False):
        from shardscope.distributed import join_cluster

        check_device_count(devices)
        join_cluster()
    elif devices > MAX_DEVICES:
        request_devices(DEFAULT_MAX_DEVICES)  # refused once the file says what its batch is
    elif spawns_workers(args):
        request_devices(devices)  # what a worker's jax.devices() lists, all processes together
    else:
        # Start with enough devices that a count which does not divide N can be told what would.
        request_devices(max(devices, DEFAULT_MAX_DEVICES))


def check_process_options(args: argparse.Namespace, settings: Settings | None = None) -> None:
    """Refuse ``--processes P`` with ``--distributed``, or (given the settings) with a device count
    that P does not divide."""
    from shardscope.errors import SettingsError

    if not spawns_workers(args):
        return
    if getattr(args, "distributed", False):
        raise SettingsError("--processes and --distributed do not go together.",
                            "--processes P spawns local workers; --distributed joins a cluster's launcher")
    if settings is not None and settings.mesh.devices % args.processes:
        raise SettingsError(
            f"--devices {settings.mesh.devices} does not split over --processes {args.processes}.",
            f"use a device count that is a multiple of {args.processes}, e.g. --devices {2 * args.processes}",
        )


def spawns_workers(args: argparse.Namespace) -> bool:
    """True in the process that starts ``--processes P`` workers (it runs no analysis itself)."""
    return getattr(args, "processes", 1) > 1 and getattr(args, "worker", None) is None


def spawn_workers(args: argparse.Namespace, settings: Settings, parser: argparse.ArgumentParser) -> int:
    """``--processes P``: the same command in P joined local workers; process 0 prints."""
    from shardscope.errors import print_error
    from shardscope.processes import WorkerFailed, run_workers

    check_process_options(args, settings)
    try:
        return run_workers(worker_argv(args, parser), args.processes, args.timeout)
    except WorkerFailed as exc:
        if args.debug:
            raise
        print_error(exc)
        return exc.exit_code


def worker_argv(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The command line of ``args`` again, without the options only the spawner reads."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    argv = [args.command]
    for action in sub.choices[args.command]._actions:
        value = getattr(args, action.dest, None)
        if action.dest in ("help", *SPAWNER_ONLY_OPTIONS) or value is None or value is False:
            continue
        if not action.option_strings:
            argv.append(str(value))
        elif action.nargs == 0:
            argv.append(action.option_strings[-1])
        elif value != action.default:
            text = ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
            argv += [action.option_strings[-1], text]
    return argv
