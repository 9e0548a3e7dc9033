"""Sums a compiler carries in a wider type than the program wrote.

XLA's ``AllReducePromotion`` pass (``xla/service/all_reduce_promotion.cc``) rewrites an
all-reduce or reduce-scatter of a narrow type into one of a wider type: it converts each
operand up, reduces in the wider type, converts the result back, and names the cloned
reduction computation after the old one with ``_promoted`` appended. Which types each backend
promotes is a list in its compiler: XLA:CPU promotes ``bf16`` to ``f32``
(``xla/service/cpu/cpu_compiler.cc``), XLA:GPU ``s16``/``u16`` to ``s32``/``u32``
(``xla/service/gpu/gpu_compiler.cc``; its ``bf16`` sums stay ``bf16``). So a ``bf16``
``psum`` moves twice its bytes on the CPU and its own bytes on a GPU: the compiled bytes are
what this module runs, the written bytes what another fabric's compiler moves.

An instruction's operand is a promoted one when the reduction was promoted (the ``_promoted``
combiner) and the operand is a convert from the narrow type, seen through the layout-only
steps XLA fuses after it (a bitcast, copy, reshape, transpose): a combiner may merge a
promoted sum with one the program wrote in the wide type (a bf16 gradient beside an f32
loss), whose operand is no such convert.
"""

from __future__ import annotations

from shardscope.engine.hlo.module import HloModule, Instruction

PROMOTED_SUFFIX = "_promoted"
"""What ``AllReducePromotion`` appends to the name of the reduction computation it clones."""

PROMOTED_TYPES: dict[str, tuple[str, ...]] = {
    "f32": ("bf16",),  # XLA:CPU: {BF16, F32}
    "s32": ("s16",),  # XLA:GPU: {S16, S32}
    "u32": ("u16",),  # XLA:GPU: {U16, U32}
}
"""Each wide type a backend promotes to, with the narrow types it promotes from."""

_LAYOUT_ONLY = frozenset({"bitcast", "copy", "reshape", "transpose"})
"""Steps that move a converted value's elements without changing their type or number."""

_MAX_STEPS = 64
"""How many instructions a look through one operand's producers may take (a fusion is a few)."""


def is_promoted(inst: Instruction) -> bool:
    """True when ``inst`` (an all-reduce or reduce-scatter) reduces with a computation that
    ``AllReducePromotion`` cloned for a wider type."""
    to_apply = (inst.attribute("to_apply") or "").lstrip("%")
    return to_apply.endswith(PROMOTED_SUFFIX)


def promoted_from(module: HloModule, inst: Instruction, operand: str) -> str:
    """The narrow type the compiler promoted ``inst``'s operand ``operand`` from (``bf16``), or
    ``""`` when it carries the operand in the program's own type."""
    if not is_promoted(inst):
        return ""
    found = module.instruction(operand)
    if found is None or len(found.shape.arrays) != 1:
        return ""
    wide = found.shape.arrays[0].dtype
    narrow = PROMOTED_TYPES.get(wide, ())
    source = _converted_from(module, found)
    return source if source in narrow else ""


def _converted_from(module: HloModule, inst: Instruction) -> str:
    """The element type ``inst``'s value was converted from, through layout-only steps and into
    fusions (a fused computation's parameter is the fusion's operand); ``""`` if it was not."""
    callers: list[Instruction] = []  # the fusions entered, innermost last
    current: Instruction | None = inst
    for _ in range(_MAX_STEPS):
        if current is None:
            return ""
        if current.opcode == "convert":
            operand = module.instruction(current.operands[0]) if current.operands else None
            return operand.shape.arrays[0].dtype if operand is not None and len(operand.shape.arrays) == 1 else ""
        if current.opcode == "fusion":
            called = next((module.computations.get(name) for role, name in current.called_computations
                           if role == "calls"), None)
            if called is None or called.root is None:
                return ""
            callers.append(current)
            current = called.root
        elif current.opcode == "parameter" and callers:
            caller, number = callers.pop(), current.parameter_number
            current = (module.instruction(caller.operands[number])
                       if number is not None and number < len(caller.operands) else None)
        elif current.opcode in _LAYOUT_ONLY and current.operands:
            current = module.instruction(current.operands[0])
        else:
            return ""
    return ""
