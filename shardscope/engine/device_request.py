"""A program over one device whose source asks for more: a notebook or a test suite that forgot
``jax_num_cpu_devices``.

``Mesh(np.array(jax.devices()[:8]), ...)`` in a process whose JAX started with one CPU device
is a mesh of one device: nothing is sharded, no collective runs, and an inspection of it would
read as a pass. The source of the program's file (or notebook cell: ``linecache`` holds both)
says how many devices it asks for; the note says so, and how to start them.
"""

from __future__ import annotations

import linecache
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced

_DEVICE_SLICE = re.compile(r"(?:\w+\.)*devices\(\)\s*\[\s*:\s*(\d+)\s*\]")
_MAKE_MESH = re.compile(r"make_mesh\(\s*\(([\d,\s]+)\)")
_NOTEBOOK_CELL = re.compile(r"ipykernel_\d+[/\\]|^<ipython-input-")
"""A notebook cell's file name (ipykernel's ``/tmp/ipykernel_123/472758286.py``, IPython's
``<ipython-input-3-...>``): named as the cell, not a file the user never wrote."""


@dataclass(frozen=True)
class DeviceRequest:
    """The line of the program's source that asks for ``count`` devices, where the program spans
    ``spans`` (fewer) of the ``started`` devices JAX started with."""

    count: int
    spans: int
    started: int
    file: str
    line: int
    text: str

    def note(self) -> str:
        """What the inspection says first: the mesh it got, what the source asked for, how to start them."""
        where = "its cell" if _NOTEBOOK_CELL.search(self.file) else self.file.rsplit("/", 1)[-1]
        started = f"{self.started} CPU device" + ("s" if self.started != 1 else "")
        return (f"The program's mesh spans {self.spans} device{'s' if self.spans != 1 else ''} while {where} line "
                f"{self.line} asks for {self.count} ({self.text}): JAX started with {started}, so the program is "
                f"not sharded as written and this check proves nothing. Start {self.count}: restart the kernel (or the "
                f"script), then jax.config.update('jax_num_cpu_devices', {self.count}) right after import jax, "
                "before any array (a test suite: in conftest.py).")


def device_request(traced: "Traced", compiled: "Compiled") -> DeviceRequest | None:
    """The source line asking for more devices than the compiled program spans, when JAX started
    with fewer than it asks for (None otherwise: a program that takes fewer on purpose)."""
    import jax  # loaded by now: the program was traced

    spans = _devices_spanned(compiled)
    started = jax.device_count()
    file = _source_file(traced)
    if spans is None or file is None or spans < started:  # fewer than started: the program chose them
        return None
    asked = [(count, number, text) for count, number, text in _asked(file) if count > spans and count > started]
    if not asked:
        return None
    count, number, text = max(asked)
    return DeviceRequest(count, spans, started, file, number, text)


def _devices_spanned(compiled: "Compiled") -> int | None:
    """How many devices the compiled program's inputs and outputs are laid over."""
    import jax

    try:
        shardings = jax.tree.leaves((compiled.input_shardings, compiled.output_shardings))
    except Exception:  # a compiled object without shardings: nothing to tell
        return None
    sizes = [len(s.device_set) for s in shardings if hasattr(s, "device_set")]
    return max(sizes) if sizes else None


def _source_file(traced: "Traced") -> str | None:
    """The file (or notebook cell) that defines the traced function (``step at /work/train.py:12``)."""
    debug = getattr(traced.jaxpr.jaxpr, "debug_info", None)
    where = getattr(debug, "func_src_info", None) or ""
    _, at, location = where.rpartition(" at ")
    return location.rsplit(":", 1)[0] if at and ":" in location else None


def _asked(file: str) -> list[tuple[int, int, str]]:
    """``(count, line, text)`` of each ``jax.devices()[:N]`` and ``make_mesh((a, b), ...)`` in ``file``."""
    found = []
    for number, line in enumerate(linecache.getlines(file), 1):
        text = line.split("#", 1)[0]  # a comment asks for nothing
        for match in _DEVICE_SLICE.finditer(text):
            found.append((int(match.group(1)), number, match.group(0)))
        for match in _MAKE_MESH.finditer(text):
            sizes = [int(s) for s in match.group(1).replace(" ", "").split(",") if s]
            if sizes:
                found.append((math.prod(sizes), number, match.group(0) + "...)"))
    return found


__all__ = ["DeviceRequest", "device_request"]
