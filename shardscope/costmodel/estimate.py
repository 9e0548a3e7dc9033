"""The step estimate of a compiled module's text, for a chip named by the user.

:func:`estimate_module` is what ``shardscope.estimate_module`` calls: it reads an XLA module
(``compiled.as_text()``, an XLA dump, a stored module), counts each instruction's work with its
loops (:mod:`shardscope.engine.hlo.work`) and prices it on the chip
(:mod:`shardscope.engine.hlo.roofline`).
"""

from __future__ import annotations

from pathlib import Path

from shardscope.hardware.chips import TPU_CHIPS, Chip, gpu_chip
from shardscope.engine.hlo.roofline import StepEstimate, estimate_step
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.work import module_work
from shardscope.errors import TargetError

GPU_DESCRIPTIONS = Path(__file__).resolve().parent.parent / "gpu_descriptions"


def chip_names() -> list[str]:
    """The chips :func:`chip_named` knows: the TPU generations, then the GPUs shardscope describes."""
    tpus = list(dict.fromkeys(chip.name for chip in TPU_CHIPS.values()))
    return tpus + sorted(path.stem for path in GPU_DESCRIPTIONS.glob("*.txtpb"))


def chip_named(name: str) -> Chip:
    """The chip called ``name`` (``v5e``, ``v5p``, ``h100``; a TPU's ``device_kind`` such as
    ``TPU v5 lite`` too); a :class:`~shardscope.errors.TargetError` naming the known ones otherwise."""
    wanted = name.strip().lower()
    for kind, chip in TPU_CHIPS.items():
        if wanted in (chip.name, kind.lower()):
            return chip
    description = GPU_DESCRIPTIONS / f"{wanted}.txtpb"
    if wanted and description.is_file():
        return gpu_chip(wanted, description.read_text())
    raise TargetError(f"no chip called {name!r}: known chips are {', '.join(chip_names())}")


def estimate_module(hlo_text: str, chip: str | Chip) -> StepEstimate:
    """The estimate of one call of the compiled module ``hlo_text`` on ``chip``."""
    found = chip if isinstance(chip, Chip) else chip_named(chip)
    module = parse(hlo_text)
    if module.entry is None:
        raise TargetError("the text holds no HLO module with an ENTRY computation (compiled.as_text() gives one)")
    estimate = estimate_step(module_work(module), found)
    if estimate is None:
        raise TargetError(f"{found.name} has no memory bandwidth figure: shardscope cannot estimate a step on it")
    return estimate
