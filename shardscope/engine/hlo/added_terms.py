"""Whether a sum in a loop is added into its accumulator together with something else.

``acc + grad + wd * W`` (weight decay added every micro-batch): the sum reaches a carry of the
loop's body through adds and moves only, and one of those adds brings in a term that is neither
the carry nor another value of the same (combined) collective. Deferred, that term would be
summed over the devices after the loop and count once per device: the sum is needed, and this
is the reason, not "its result is read inside the loop". The verdict itself is
:mod:`shardscope.engine.hlo.verdicts`'; this only says why a sum is needed.
"""

from __future__ import annotations

from shardscope.engine.hlo.sites import CollectiveSite
from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.text import Instruction

_STEPS = 256


def adds_another_term(flow: Flow, site: CollectiveSite) -> bool:
    """True when some value of the collective at ``site`` reaches a carry of its innermost
    loop's body only through moves and adds, one of which adds a term other than that carry
    and the collective's own values (see the module)."""
    if not site.loops:
        return False
    body = next((c for role, c in site.loops[-1].called_computations if role == "body"), "")
    computation = flow.module.computations.get(body)
    if computation is None or computation.root is None or computation.root.opcode != "tuple":
        return False
    elements = len(site.result.shape.arrays) if site.result.shape.is_tuple else 0
    starts = list(range(elements)) if elements else [None]
    return any(_added_with_another_term(flow, site, computation.root, k) for k in starts)


def _added_with_another_term(flow: Flow, site: CollectiveSite, root: Instruction, element: int | None) -> bool:
    stack: list[tuple[Instruction, int | None]] = [(site.result, element)]
    others: list[Instruction] = []
    reached: set[int] = set()
    for _ in range(_STEPS):
        if not stack:
            break
        inst, index = stack.pop()
        for user, position in flow.uses(inst):
            if user.opcode == "get-tuple-element":
                if index is None or user.tuple_index == index:
                    stack.append((user, None))
            elif user is root:
                reached.add(position)
            elif user.opcode in FORWARDING and index is None:
                stack.append((user, None))
            elif user.opcode == "add" and index is None:
                other = flow.producer(user, 1 - position)
                if other is not None:
                    others.append(other)
                stack.append((user, None))
            else:
                return False  # read for anything but an add on the way to a carry
    if len(reached) != 1:
        return False
    (slot,) = reached
    terms = [o for o in others if not _from(flow, o, site)]
    carried = [o for o in terms if _carry(flow, o, root.computation, slot)]
    return bool(carried) and len(terms) > len(carried)


def _moved(flow: Flow, inst: Instruction) -> Instruction:
    """``inst`` past moves (bitcasts, copies, converts)."""
    for _ in range(16):
        if inst.opcode not in FORWARDING:
            break
        source = flow.producer(inst, 0)
        if source is None:
            break
        inst = source
    return inst


def _carry(flow: Flow, inst: Instruction, body: str, slot: int) -> bool:
    """True for the body's carry element ``slot`` (moved or not)."""
    inst = _moved(flow, inst)
    if inst.opcode != "get-tuple-element" or inst.tuple_index != slot:
        return False
    source = flow.producer(inst, 0)
    return source is not None and source.opcode == "parameter" and source.computation == body


def _from(flow: Flow, inst: Instruction, site: CollectiveSite) -> bool:
    """True for a value of the collective itself (another element of a combined sum)."""
    inst = _moved(flow, inst)
    if inst.opcode == "get-tuple-element":
        inst = flow.producer(inst, 0) or inst
    return inst.name in (site.instruction.name, site.anchor.name, site.result.name)
