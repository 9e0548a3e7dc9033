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
loss), whose operand is no such convert. Where the simplifier folded that convert into the
instruction that made the value (a dot computed in f32), every use of the sum converting it
back to the narrow type says the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardscope.engine.hlo.module import HloModule, Instruction

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective

PROMOTED_SUFFIX = "_promoted"
"""What ``AllReducePromotion`` appends to the name of the reduction computation it clones."""


@dataclass(frozen=True)
class Promotion:
    """One pair of a compiler's ``ar_promoted_types``: it sums ``narrow`` values in ``wide``."""

    narrow: str
    wide: str
    compiler: str


PROMOTIONS = (
    Promotion("bf16", "f32", "XLA:CPU"),  # cpu_compiler.cc: {{BF16, F32}}
    Promotion("s16", "s32", "XLA:GPU"),  # gpu_compiler.cc: {{U16, U32}, {S16, S32}}
    Promotion("u16", "u32", "XLA:GPU"),
)
"""Every promotion XLA's compilers list, each by the compiler whose list has it."""

PROMOTED_TYPES: dict[str, tuple[str, ...]] = {
    wide: tuple(p.narrow for p in PROMOTIONS if p.wide == wide) for wide in dict.fromkeys(p.wide for p in PROMOTIONS)}
"""Each wide type a compiler promotes to, with the narrow types it promotes from."""

_LAYOUT_ONLY = frozenset({"bitcast", "copy", "reshape", "transpose"})
"""Steps that move a converted value's elements without changing their type or number."""

_MAX_STEPS = 64
"""How many instructions a look through one operand's producers may take (a fusion is a few)."""


def is_promoted(inst: Instruction) -> bool:
    """True when ``inst`` (an all-reduce or reduce-scatter) reduces with a computation that
    ``AllReducePromotion`` cloned for a wider type."""
    to_apply = (inst.attribute("to_apply") or "").lstrip("%")
    return to_apply.endswith(PROMOTED_SUFFIX)


def promoted_from(module: HloModule, inst: Instruction, position: int) -> str:
    """The narrow type the compiler promoted ``inst``'s operand at ``position`` from (``bf16``),
    or ``""`` when it carries that operand in the program's own type: the operand is a convert
    from the narrow type, or every use of its sum converts it back to one (the simplifier may
    fold the convert before the sum into the dot that made the value)."""
    if not is_promoted(inst) or position >= len(inst.operands):
        return ""
    found = module.instruction(inst.operands[position])
    if found is None or len(found.shape.arrays) != 1:
        return ""
    narrow = PROMOTED_TYPES.get(found.shape.arrays[0].dtype, ())
    source = _converted_from(module, found)
    if source in narrow:
        return source
    back = _converted_to(module, inst, position if len(inst.operands) > 1 else None)
    return back if back in narrow else ""


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


def _converted_to(module: HloModule, inst: Instruction, index: int | None) -> str:
    """The one element type every use of ``inst``'s result (its element ``index`` of a tuple)
    converts it to, through layout-only steps and into fusions; ``""`` when a use reads it
    otherwise or there is none."""
    found: set[str] = set()
    pending = [(inst, index)]
    for _ in range(_MAX_STEPS):
        if not pending:
            return found.pop() if len(found) == 1 else ""
        value, element = pending.pop()
        computation = module.computations.get(value.computation)
        users = computation.users.get(value.name, ()) if computation is not None else ()
        if not users:
            return ""
        for user, position in users:
            if element is not None:  # a tuple: its element is the one get-tuple-element reads
                if user.opcode != "get-tuple-element":
                    return ""
                if user.tuple_index == element:
                    pending.append((user, None))
            elif user.opcode == "convert" and len(user.shape.arrays) == 1:
                found.add(user.shape.arrays[0].dtype)
            elif user.opcode in _LAYOUT_ONLY:
                pending.append((user, None))
            elif user.opcode == "fusion":
                called = next((module.computations.get(name) for role, name in user.called_computations
                               if role == "calls"), None)
                parameter = next((p for p in called.parameters if p.parameter_number == position), None) \
                    if called is not None else None
                if parameter is None:
                    return ""
                pending.append((parameter, None))
            else:
                return ""
    return ""


def compiler_of(narrow: str, wide: str) -> str:
    """The compiler whose list promotes ``narrow`` sums to ``wide`` (``XLA:CPU``), else ``XLA``."""
    return next((p.compiler for p in PROMOTIONS if (p.narrow, p.wide) == (narrow, wide)), "XLA")


def promotion_text(c: "CompiledCollective") -> str:
    """What the compiler did to ``c``'s types and what that costs, in words (``""`` when it kept
    them): a promoted sum moves more bytes here than the program's type holds."""
    promotion = c.promotion
    if promotion is None:
        return ""
    narrow, wide = promotion
    promoted = sum(1 for op in c.operands if op.promoted_from)
    which = "it" if promoted == len(c.operands) else f"{promoted} of its {len(c.operands)} values"
    return (f"{compiler_of(narrow, wide)} sums {narrow} in {wide}: it promoted {which} from the program's {narrow}, "
            f"so a run moves {c.bytes_per_execution:,} B here, {c.written_bytes_per_execution:,} B as written "
            f"(what a compiler that keeps {narrow} moves)")
