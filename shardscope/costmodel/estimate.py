"""The step estimate of a compiled module's text, for a chip named by the user.

:func:`estimate_module` is what ``shardscope.estimate_module`` calls: it reads an XLA module
(``compiled.as_text()``, an XLA dump, a stored module), checks it as any text from outside
(:func:`~shardscope.engine.hlo.well_formed.read_module`), counts each instruction's work with its
loops (:mod:`shardscope.engine.hlo.work`) and prices it on the chip
(:mod:`shardscope.engine.hlo.roofline`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from shardscope.hardware.catalogue import chip_named as catalogued
from shardscope.hardware.catalogue import chip_names
from shardscope.hardware.chips import Chip
from shardscope.hardware.gpu_nodes import DESCRIPTIONS as GPU_DESCRIPTIONS
from shardscope.hardware.gpu_nodes import described_chip
from shardscope.engine.hlo.roofline import StepEstimate, estimate_step
from shardscope.engine.hlo.well_formed import read_module, value_kind
from shardscope.engine.hlo.work import module_work
from shardscope.errors import ArgumentTypeError, ChipError, TargetError

GPU_FILE = "gpu:"
"""How a chip given by the user's own GPU description file is written: ``gpu:path/to/gpu.txtpb``."""
MAX_DESCRIPTION_BYTES = 1 << 20
"""The largest GPU description file read (shardscope's own are about 1 KB)."""


def chip_named(name: str) -> Chip:
    """The chip called ``name``: one of :func:`chip_names` (``v5e``, ``v5p``, ``h100``; a TPU's
    ``device_kind`` such as ``TPU v5 lite`` too), or a GPU the user describes in a file of their own,
    given as ``gpu:path/to/gpu.txtpb``. A name is never read as a path: ``"/any/path"`` and
    ``"../gpu_descriptions/h100"`` are names shardscope does not know. A
    :class:`~shardscope.errors.ChipError` (a ``ValueError``) names the known ones; a value that is
    not a string is an :class:`~shardscope.errors.ArgumentTypeError` (a ``TypeError``)."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"the chip is {value_kind(name)}, not a chip's name (a str).",
                                f"pass one of {', '.join(chip_names())}, or a Chip")
    if name.strip().lower().startswith(GPU_FILE):
        path = Path(name.strip()[len(GPU_FILE):])
        return described_chip(path.stem, _description(path))
    chip = catalogued(name)
    if chip is not None:
        return chip
    raise ChipError(f"no chip called {name[:80]!r}: known chips are {', '.join(chip_names())}",
                    f"or describe a GPU in a file of your own (a GpuTargetConfigProto in text form, like "
                    f"{GPU_DESCRIPTIONS.name}/h100.txtpb) and pass chip='{GPU_FILE}path/to/gpu.txtpb'")


def _description(path: Path) -> str:
    """The text of a user's GPU description file: a regular file of at most :data:`MAX_DESCRIPTION_BYTES`."""
    hint = f"give the path of a GpuTargetConfigProto in text form, like {GPU_DESCRIPTIONS.name}/h100.txtpb"
    try:
        found = os.stat(path)
    except OSError as exc:
        raise ChipError(f"cannot read the GPU description {str(path)[:200]!r}: {exc.strerror or exc}.", hint) from None
    if not stat.S_ISREG(found.st_mode) or found.st_size > MAX_DESCRIPTION_BYTES:
        raise ChipError(f"the GPU description {str(path)[:200]!r} is not a text file of at most "
                        f"{MAX_DESCRIPTION_BYTES // 1024} KB.", hint)
    try:
        with open(path, "rb") as file:
            return file.read(MAX_DESCRIPTION_BYTES + 1)[:MAX_DESCRIPTION_BYTES].decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChipError(f"cannot read the GPU description {str(path)[:200]!r}: {exc}.", hint) from None


def estimate_module(hlo_text: str, chip: str | Chip) -> StepEstimate:
    """The estimate of one call of the compiled module ``hlo_text`` on ``chip`` (a :class:`Chip`, or
    a name :func:`chip_named` knows). A text that is not a module XLA would print is an
    :class:`~shardscope.errors.HloTextError` (a ``ValueError``) naming its line."""
    found = chip if isinstance(chip, Chip) else chip_named(chip)
    module = read_module(hlo_text, "hlo_text")
    estimate = estimate_step(module_work(module), found)
    if estimate is None:
        raise TargetError(f"{found.name} has no memory bandwidth figure: shardscope cannot estimate a step on it")
    return estimate
