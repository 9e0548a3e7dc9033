"""Whether a loss a loop accumulates is a mean over the batch's rows or a sum, read from the
compiled module: what the ``shard_map`` fix divides its one sum after the loop by.

Inside a ``shard_map`` each device computes the loss over its own rows. A ``jnp.mean`` divides
the sum of the rows by their count, which in the jit program is the whole batch's: the compiled
module scales the summed value by a constant ``1/N`` (or divides it by ``N``), before or after
the partitioner's sum over the devices, with ``N`` the count of every element the mean covers,
a multiple of the devices the batch is split over. Per device that count is ``N/devices``, so the
sum over the devices is ``devices`` times the batch's mean: divided by them. A ``jnp.sum`` is
scaled by nothing: the sum over the devices is the batch's, and dividing it would be wrong.

The walk looks at the few steps between the reduction and the loop's carry: forward from the
collective's result (moves, adds, converts, one scaling) and back from its operand (the same
steps, down to a ``reduce``). :data:`MEAN` when a scaling by a constant whose reciprocal is a
whole multiple of the devices is met, :data:`SUM` when no scaling is, :data:`UNKNOWN` for any
other factor (``0.5 * sum``: the fix cannot tell what the program means by it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from shardscope.engine.hlo.flow import FORWARDING, Flow

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective
    from shardscope.engine.hlo.sites import CollectiveSite
    from shardscope.engine.hlo.text import Instruction

MEAN, SUM, UNKNOWN = "mean", "sum", "unknown"

_ON_THE_WAY = FORWARDING | {"convert", "bitcast", "copy", "reshape", "add", "get-tuple-element", "tuple", "fusion"}
_DEPTH = 24


def loss_scaling(flow: Flow, site: "CollectiveSite", element: int, devices: int) -> str:
    """:data:`MEAN`, :data:`SUM` or :data:`UNKNOWN` for the value ``element`` the collective at
    ``site`` carries, summed over ``devices``.

    Only a value of one element is read, as a loss is: a larger one (the gradient of a mean loss,
    named after the output it flows to) carries the mean's ``1/N`` on its cotangent, inside the
    backward pass's fusions, where no walk from the sum meets it; it is :data:`UNKNOWN`, never
    :data:`SUM`, so its fix is never told not to divide."""
    if not _one_element(flow, site, element):
        return UNKNOWN
    factors = _forward(flow, site, element) + _backward(flow, site, element)
    if not factors:
        return SUM
    if None in factors or len(factors) > 1:
        return UNKNOWN
    count = factors[0]
    return MEAN if count is not None and devices > 1 and count % devices == 0 else UNKNOWN


def loss_scalings(collectives: "Iterable[CompiledCollective]") -> tuple[tuple[str, str], ...]:
    """Each loss the collectives sum and its scaling (:attr:`CompiledOperand.scaling`);
    :data:`UNKNOWN` where two sums of it disagree."""
    found: dict[str, str] = {}
    for c in collectives:
        for op in c.operands:
            if op.value and op.computed and op.scaling:
                found[op.value] = op.scaling if found.get(op.value, op.scaling) == op.scaling else UNKNOWN
    return tuple(found.items())


def _forward(flow: Flow, site: "CollectiveSite", element: int) -> list[int | None]:
    """The scalings met from the collective's result to the loop's carry (None: not ``1/N``)."""
    result = site.result
    starts = [result] if len(site.carried) == 1 else [
        user for user, _ in flow.uses(result) if user.opcode == "get-tuple-element" and user.tuple_index == element]
    found: list[int | None] = []
    stack = [(inst, 0) for inst in starts]
    seen: set[str] = set()
    while stack:
        inst, depth = stack.pop()
        if inst.name in seen or depth > _DEPTH:
            continue
        seen.add(inst.name)
        for user, position in flow.uses(inst):
            if user.opcode in ("multiply", "divide"):
                factor = _factor(flow, user, position)
                if factor is not None or user.opcode == "divide" or _other_is_constant(flow, user, position):
                    found.append(factor)
                    stack.append((user, depth + 1))
                    continue
                return found  # a product with another value: no scaling to read
            if user.opcode in _ON_THE_WAY:
                stack.append((user, depth + 1))
    return found


def _backward(flow: Flow, site: "CollectiveSite", element: int) -> list[int | None]:
    """The scalings met from the collective's operand back to the reduction it sums."""
    operands = site.carried
    if element >= len(operands):
        return []
    inst = flow.module.instruction(operands[element])
    found: list[int | None] = []
    for _ in range(_DEPTH):
        if inst is None:
            break
        inst = flow.resolve(inst)
        if inst.opcode in ("multiply", "divide"):
            for position in (0, 1):
                factor = _factor(flow, inst, position)
                if factor is not None or _other_is_constant(flow, inst, position):
                    found.append(factor)
                    inst = flow.producer(inst, position)
                    break
            else:
                break
            continue
        if inst.opcode in FORWARDING | {"convert", "bitcast", "copy", "reshape"} and inst.operands:
            inst = flow.producer(inst, 0)
            continue
        break
    return found


def _one_element(flow: Flow, site: "CollectiveSite", element: int) -> bool:
    """Whether the value ``element`` the collective sums is one element (a scalar, or ``[1]``)."""
    if element >= len(site.carried):
        return False
    inst = flow.module.instruction(site.carried[element])
    arrays = inst.shape.arrays if inst is not None else ()
    return len(arrays) == 1 and arrays[0].elements == 1


def _other_is_constant(flow: Flow, user: "Instruction", position: int) -> bool:
    other = flow.producer(user, 1 - position) if position in (0, 1) else None
    return other is not None and flow.is_constant(other)


def _factor(flow: Flow, user: "Instruction", position: int) -> int | None:
    """``N`` when ``user`` multiplies its operand ``position`` by ``1/N`` or divides it by ``N``
    (a constant, ``N`` a whole number above 1), else None."""
    if position not in (0, 1) or (user.opcode == "divide" and position != 0):
        return None
    value = _constant(flow, flow.producer(user, 1 - position))
    if value is None or value == 0:
        return None
    count = value if user.opcode == "divide" else 1 / value
    whole = round(count)
    return whole if whole > 1 and abs(count - whole) <= 1e-6 * whole else None


def _constant(flow: Flow, inst: "Instruction | None", depth: int = 0) -> float | None:
    """The scalar value of a constant (through broadcasts and moves), None when it is none."""
    if inst is None or depth > 8:
        return None
    inst = flow.resolve(inst)
    if inst.opcode == "constant":
        text = inst.literal.strip().strip("{}").strip()
        try:
            return float(text)
        except ValueError:
            return None
    if inst.opcode in ("broadcast", "convert") or inst.opcode in FORWARDING:
        return _constant(flow, flow.producer(inst, 0), depth + 1)
    return None
