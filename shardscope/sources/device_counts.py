"""A file that wants more (or other) CPU devices than shardscope started before importing it.

shardscope starts JAX's CPU devices before it imports a file (a model built at import must land
on them), so a file that builds a 16-device mesh at import, when 8 were started, fails inside
numpy or JAX with words about arrays ("cannot reshape array of size 8 into shape (16,)"). Here
such a failure becomes one message that says how many the file wants and the option that
starts them; so does a file that sets ``jax_num_cpu_devices`` itself.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from shardscope.errors import DemoFileError
from shardscope.sources.source_files import demo_frames

_DEVICE_COUNT_REFUSED = "jax_num_cpu_devices config should be updated before backends are initialized"
"""How JAX refuses ``jax.config.update("jax_num_cpu_devices", N)`` once its CPU backend started."""

_DEVICE_COUNT_SET = re.compile(r"jax_num_cpu_devices['\"]\s*,\s*(?P<count>\d+)")

_TOO_FEW = (
    # jax.make_mesh, mesh_utils.create_device_mesh
    re.compile(r"Number of devices (?P<have>\d+) must (?:be >=|equal) the product of mesh_shape \((?P<shape>[\d,\s]*)\)"),
    # np.array(jax.devices()).reshape(16) / .reshape(4, 4)
    re.compile(r"cannot reshape array of size (?P<have>\d+) into shape \((?P<shape>[\d,\s]*)\)"),
)
"""What numpy and JAX say when a file lays a mesh of more devices than there are over them."""

_INDEXED = re.compile(r"devices\(\)\s*\[\s*(?P<index>\d+)\s*\]")
"""``jax.devices()[15]`` on the file's line: it wants 16 devices."""


def option_hint(count: int | str) -> str:
    """The options that start ``count`` CPU devices, in each command's words."""
    return f"--max-devices {count} (the app) or --devices {count} (check, report)"


def device_count_error(exc: BaseException, path: Path) -> DemoFileError | None:
    """One message for a file that failed to import for want of devices (None for other errors)."""
    return _count_set(exc, path) or _too_few(exc, path)


def _count_set(exc: BaseException, path: Path) -> DemoFileError | None:
    """The file sets ``jax_num_cpu_devices`` at import: JAX refuses it once its devices started."""
    if not (isinstance(exc, RuntimeError) and _DEVICE_COUNT_REFUSED in str(exc)):
        return None
    frames = demo_frames(exc, path)
    line = frames[-1] if frames else None
    found = _DEVICE_COUNT_SET.search(line.line or "") if line is not None else None
    count = found["count"] if found else "N"
    where = f"{path.name} line {line.lineno}" if line is not None else path.name
    return DemoFileError(
        f"{where} sets jax_num_cpu_devices, but shardscope starts JAX's CPU devices before it imports "
        "the file, and JAX cannot change their count after that.",
        f"give the count to shardscope instead: --devices {count} (check, report) or --max-devices {count} "
        "(the app)", line=(str(path), line.lineno) if line is not None and line.lineno else None)


def _too_few(exc: BaseException, path: Path) -> DemoFileError | None:
    """The file lays a mesh over more CPU devices than were started (numpy's or JAX's error on
    the started count), or indexes past them (``jax.devices()[15]`` of 8)."""
    started = _started_devices()
    frames = demo_frames(exc, path)
    line = frames[-1] if frames else None
    wanted = None
    if isinstance(exc, ValueError):
        for pattern in _TOO_FEW:
            found = pattern.search(str(exc))
            if found and int(found["have"]) == started:
                sizes = [int(size) for size in found["shape"].replace(" ", "").split(",") if size]
                wanted = math.prod(sizes) if sizes else None
                break
    elif isinstance(exc, IndexError) and line is not None:
        indexed = _INDEXED.search(line.line or "")
        wanted = int(indexed["index"]) + 1 if indexed else None
    if started is None or wanted is None or wanted <= started:
        return None
    where = f"{path.name} line {line.lineno}" if line is not None else path.name
    return DemoFileError(
        f"{where} lays out {wanted} devices, but shardscope started {started} CPU devices before importing "
        f"it ({type(exc).__name__}: {exc}).",
        f"start {wanted}: {option_hint(wanted)}",
        line=(str(path), line.lineno) if line is not None and line.lineno else None)


def _started_devices() -> int | None:
    """How many devices JAX started, when it has (the file's import ran after shardscope started
    them); None when JAX is not loaded: this module never imports it."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        return len(jax.devices())
    except Exception:  # a backend that failed to start: no count to speak of
        return None
