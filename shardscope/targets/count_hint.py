"""What to change when a program spans another number of devices than its target has.

The program's device count comes from its file (a mesh over ``jax.devices()[:8]``, a
``jax.make_mesh((4, 2), ...)``) or from the CPU devices shardscope started (``--devices``): the
hint names the one that fixes it, the file's line when the file chose the count, and calls the
target's devices what they are (a TPU's chips, GPUs).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jax

    from shardscope.targets.base import Target, TargetDevices

_DEVICE_SLICE = re.compile(r"(?:\w+\.)*devices\(\)\s*\[\s*:\s*(\d+)\s*\]")
_MAKE_MESH = re.compile(r"make_mesh\(\s*\(([\d,\s]+)\)")


def device_count_hint(traced: "jax.stages.Traced", program_devices: int, devices: "TargetDevices") -> str:
    """The hint of a program over ``program_devices`` devices compiled for ``devices``' target."""
    target, count = devices.target, devices.count
    options = [] if program_devices == 1 else [f"pick a topology with {program_devices} {_noun(target, program_devices)}"]
    return ", or ".join(options + trace_over_more(traced, program_devices, count))


def trace_over_more(traced: "jax.stages.Traced", program_devices: int, count: int) -> list[str]:
    """The ways to trace a program over ``program_devices`` devices over ``count`` instead: the
    file's line that takes its count, or its mesh built over more, or more CPU devices started
    (the hint of a target's other device count, and of a program over one device alone)."""
    import jax  # loaded by now: the program was traced

    options = []
    started = jax.device_count()
    if started >= count:  # the file can take the target's count of the devices there are
        found = _count_in_file(traced, program_devices)
        if found is not None:
            path, line, text = found
            options.append(f"take {count} devices where {path.name} line {line} takes {program_devices} ({text})")
        else:
            options.append(f"build the program's mesh over {count} devices in the file (jax.devices()[:{count}])")
    if program_devices == started:  # the file takes every device started: start the target's count
        options.append(start_devices_words(count))
    return options


def start_devices_words(count: int) -> str:
    """How to start ``count`` CPU devices, in each place a program is checked from."""
    return (f"start {count} CPU devices to trace it over (shardscope check --devices {count}; the app: "
            f"--max-devices {count}; a script: jax.config.update('jax_num_cpu_devices', {count}) before JAX starts; "
            "a notebook: restart the kernel, then that line right after import jax, before any array)")


def _noun(target: "Target", count: int) -> str:
    """``chips``/``GPUs``, or ``chip``/``GPU`` for one."""
    return target.device_noun if count != 1 else target.device_noun.removesuffix("s")


def _count_in_file(traced: "jax.stages.Traced", program_devices: int) -> tuple[Path, int, str] | None:
    """The line of the program's file that takes its device count: ``jax.devices()[:8]``, or a
    ``make_mesh`` whose shape multiplies to it (None when no one line says it)."""
    path = _program_file(traced)
    if path is None:
        return None
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found: list[tuple[int, str]] = []
    for number, text in enumerate(lines, 1):
        for match in _DEVICE_SLICE.finditer(text):
            if int(match.group(1)) == program_devices:
                found.append((number, match.group(0)))
        for match in _MAKE_MESH.finditer(text):
            sizes = [int(s) for s in match.group(1).replace(" ", "").split(",") if s]
            if sizes and math.prod(sizes) == program_devices:
                found.append((number, match.group(0) + "...)"))
    if len(found) != 1:
        return None
    return path, *found[0]


def _program_file(traced: "jax.stages.Traced") -> Path | None:
    """The file that defines the traced function (``step at /work/train.py:12``)."""
    debug = getattr(traced.jaxpr.jaxpr, "debug_info", None)
    where = getattr(debug, "func_src_info", None) or ""
    _, at, location = where.rpartition(" at ")
    file = location.rsplit(":", 1)[0] if at else ""
    return Path(file) if file and not file.startswith("<") and Path(file).is_file() else None


__all__ = ["device_count_hint", "start_devices_words", "trace_over_more"]
