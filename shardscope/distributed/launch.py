"""How a command's JAX starts: in this process, as ``--processes P`` local workers joined by
``jax.distributed`` (process 0 prints), or as one process of a cluster (``--distributed``).

The spawner runs the same command line again in each worker, without the options only it reads.
"""

from __future__ import annotations

import argparse

from shardscope.plans.settings import MAX_DEVICES, Settings, check_device_count

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
    from shardscope.pipeline.devices import request_devices

    check_process_options(args)  # the device count is checked once the demo's own mesh is known
    devices = settings.mesh.devices
    worker = getattr(args, "worker", None)
    if worker is not None:
        from shardscope.distributed.workers import WorkerRole, join_as_worker

        check_device_count(devices)
        role = WorkerRole.parse(worker)
        join_as_worker(role, devices // role.processes)
    elif getattr(args, "distributed", False):
        from shardscope.distributed.workers import join_cluster

        check_device_count(devices)
        join_cluster()
    elif devices > MAX_DEVICES:
        request_devices(DEFAULT_MAX_DEVICES)  # refused once the file says what its batch is
    elif spawns_workers(args):
        request_devices(devices)  # what a worker's jax.devices() lists, all processes together
    else:
        # Start with enough devices that a count which does not divide N can be told what would.
        request_devices(max(devices, DEFAULT_MAX_DEVICES))


def check_process_options(args: argparse.Namespace, settings: Settings | None = None,
                          batch: int | None = None) -> None:
    """Refuse ``--processes P`` with ``--distributed``, or (given the settings) with a device count
    that P does not divide (the counts suggested also split ``batch``, a demo's N, when known)."""
    from shardscope.errors import SettingsError

    if not spawns_workers(args):
        return
    if getattr(args, "distributed", False):
        raise SettingsError("--processes and --distributed do not go together.",
                            "--processes P spawns local workers; --distributed joins a cluster's launcher")
    if settings is not None:
        check_process_split(settings.mesh.devices, args.processes, batch)


def spawns_workers(args: argparse.Namespace) -> bool:
    """True in the process that starts ``--processes P`` workers (it runs no analysis itself)."""
    return getattr(args, "processes", 1) > 1 and getattr(args, "worker", None) is None


def spawn_workers(args: argparse.Namespace, settings: Settings, parser: argparse.ArgumentParser,
                  batch: int | None = None) -> int:
    """``--processes P``: the same command in P joined local workers; process 0 prints.

    ``batch`` (a demo's N, when known) narrows the device counts a refusal suggests to the ones
    that also split the batch.
    """
    from shardscope.errors import print_error
    from shardscope.distributed.processes import WorkerFailed, run_workers

    check_process_options(args, settings, batch)
    try:
        return run_workers(worker_argv(args, parser), args.processes, args.timeout)
    except WorkerFailed as exc:
        if args.debug:
            raise
        print_error(exc)
        return exc.exit_code


def check_process_split(devices: int, processes: int, batch: int | None = None) -> None:
    """Raise :class:`SettingsError` unless ``devices`` splits evenly over ``processes`` workers.

    The device counts a refusal suggests are multiples of ``processes`` within the cap of
    simulated devices (and divisors of ``batch`` when given); when none is, it says so and
    suggests process counts that split ``devices`` instead.
    """
    from shardscope.errors import SettingsError
    from shardscope.plans.settings import MAX_DEVICES

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
