"""Which values of a compiled module are the same on every device of a collective's groups.

A sum over devices commutes with a sum over a loop's iterations only when everything else the
accumulation reads is the same on every device: the predicate of a ``select`` or a
conditional, the offsets of a slice, a scaling factor. XLA's ``HloReplicationAnalysis`` says
which values are; this is the same analysis over the module's text:

- constants and ``iota`` are, and an entry parameter whose ``sharding`` is ``{replicated}`` (a
  replicated jit argument, a ``shard_map`` argument with ``P()``), or that the caller knows is
  (jax 0.12 prints no sharding on the CPU module's parameters: the compiled program's input
  shardings say it); a parameter with any other sharding, or none, is not (XLA's own test
  modules carry none: their parameters are not);
- a device's id, random numbers, host transfers and unknown custom calls are not, nor what an
  all-to-all, a collective-permute or a reduce-scatter gives (each device gets its own part);
- an all-reduce's or all-gather's result is, within its groups: for the collective asking,
  when each of its groups lies inside one of them;
- anything else is when all its operands are; a loop's carry element is when it starts so and
  the body keeps it so (a fixed point, as XLA computes it), a loop's result when its condition
  is too (every device then runs as many iterations); a conditional's result element when its
  predicate is and every branch gives one.

Values are judged per tuple element (a tuple's elements may differ: the induction variable is
shared by all devices, the batch is not).
"""

from __future__ import annotations

from typing import Callable, Union

from shardscope.engine.hlo import replica_groups
from shardscope.engine.hlo.flow import Flow
from shardscope.engine.hlo.text import Computation, HloModule, Instruction
from shardscope.collective_kinds import ALL_GATHER, ALL_REDUCE, NAMES

Replicated = Union[bool, tuple["Replicated", ...]]
"""Whether a value is the same on every device: a bool for an array, one entry per element for a tuple."""

_SHARED_KINDS = (ALL_REDUCE, ALL_GATHER)
"""The collectives whose result every device of a group shares (a sum, a gathered array)."""

_DEVICE_DEPENDENT = frozenset({
    "partition-id", "replica-id", "rng", "rng-get-and-update-state", "rng-bit-generator", "infeed", "recv", "recv-done",
    "send", "send-done", "outfeed", "custom-call", "async-start", "async-update", "async-done", "parameter",
}) | {f"{name}{phase}" for name in NAMES if name not in _SHARED_KINDS for phase in ("", "-start", "-done")}
"""Opcodes whose result may differ between devices whatever their operands (a parameter is
judged by where it comes from): among the collectives, those that give each device its own part
(an all-to-all, a permute, a reduce-scatter) or that :mod:`shardscope.collective_kinds` knows
and this analysis does not judge (a collective-broadcast)."""

_SHARED_WITHIN_GROUPS = frozenset(f"{name}{phase}" for name in _SHARED_KINDS for phase in ("", "-start"))
_DONE = {f"{name}-done": f"{name}-start" for name in _SHARED_KINDS}
_BRANCH_ROLES = frozenset({"branch", "true_computation", "false_computation"})


class Replication:
    """The replication analysis of one module, for collectives over ``groups`` (a replica-groups text).

    ``sums_shared=False`` counts no collective's result as shared: a factor taken from another
    sum in the loop would pin that sum there (each is linear given the other, not both at once).
    ``replicated_parameters``: the entry parameters (by number) known to be the same on every
    device, whatever the text says."""

    def __init__(self, module: HloModule, flow: Flow, groups: str | None, sums_shared: bool = True,
                 replicated_parameters: frozenset[int] = frozenset()) -> None:
        self.module = module
        self.flow = flow
        self.replicated_parameters = replicated_parameters
        self.devices = module.num_partitions * module.replica_count
        self.groups = _decoded(groups, self.devices) if sums_shared else None
        if self.groups:  # a module written without its device count (XLA's tests set it apart)
            self.devices = max(self.devices, 1 + max(d for group in self.groups for d in group))
        self._in_context: dict[str, dict[str, Replicated]] = {}  # computation: each instruction's, as called
        self._forwarded: dict[tuple[str, tuple[Replicated, ...]], dict[str, Replicated]] = {}
        self._carries: dict[tuple[str, Replicated], Replicated] = {}  # (loop, its start): the fixed point
        self._orders: dict[str, list[Instruction]] = {}

    def replicated(self, inst: Instruction | None, element: int | None = None) -> bool:
        """True when ``inst`` (its tuple element ``element``) is the same on every device (of
        each group: an offset the partitioner looks up per device in a table of constants may
        be the same within every group)."""
        if inst is None:
            return False
        found = self._computed(self.module.computations[inst.computation]).get(inst.name, False)
        if element is not None:
            found = found[element] if isinstance(found, tuple) and element < len(found) else False
        return _all(found) or (element is None and self._same_in_groups(inst))

    def _same_in_groups(self, inst: Instruction) -> bool:
        """True when ``inst`` is a scalar integer computed from constants and the device's id
        whose value is the same on every device of each of the asking collective's groups."""
        if self.groups is None or inst.shape.is_tuple or any(a.elements != 1 for a in inst.shape.arrays):
            return False
        values = self._device_values(inst, 0)
        return values is not None and all(len({values[d] for d in group if d < len(values)}) == 1 for group in self.groups)

    def same_groups(self, text: str | None) -> bool:
        """True when the replica groups ``text`` are the asking collective's groups (as sets of
        devices, in whichever form each is printed)."""
        other = _decoded(text, self.devices) if text is not None else None
        return self.groups is not None and other is not None \
            and {frozenset(g) for g in other} == {frozenset(g) for g in self.groups}

    def one_device_keeps(self, predicate: Instruction | None, keep_when: bool) -> bool:
        """True when ``predicate`` (a scalar, or a broadcast of one) equals ``keep_when`` on
        exactly one device of each of the asking collective's groups: a ``select`` on it against
        zeros keeps its value on that one device (the partitioner's mask on the partition id
        before it scatters into a replicated buffer and sums the buffer over the group)."""
        if self.groups is None or predicate is None:
            return False
        replicas, partitions = self.module.replica_count, self.module.num_partitions
        if replicas > 1 and partitions > 1:
            return False  # a device's place in the groups is neither id alone
        # the id that numbers the devices; the other is 0 (a module that prints neither count,
        # as XLA's tests write them, numbers its devices by whichever id it reads)
        ids = {"partition-id": replicas == 1, "replica-id": partitions == 1}
        values = self._device_values(predicate, 0, scalars_only=False, ids=ids)
        if values is None or len(values) < self.devices:
            return False
        return all(sum(bool(values[d]) == keep_when for d in group) == 1 for group in self.groups)

    def _device_values(self, inst: Instruction | None, depth: int, scalars_only: bool = True,
                       ids: dict[str, bool] | None = None) -> tuple[int, ...] | None:
        """Each device's value of a scalar integer (or predicate) made of constants, the device's
        id, integer arithmetic, comparisons and a lookup in a constant table (the partitioner's
        shard offsets); with ``scalars_only`` False, of a broadcast of such a scalar too (every
        element the scalar's value). ``ids`` says which of ``partition-id`` and ``replica-id``
        numbers the devices (the other is 0 everywhere); without it, either does."""
        if inst is None or depth > 16 or not self.devices:
            return None
        inst = self.flow.resolve(inst)
        op = inst.opcode
        if op in ("partition-id", "replica-id"):
            return tuple(range(self.devices)) if ids is None or ids[op] else (0,) * self.devices
        if op == "constant":
            value = _integer(inst.literal)
            return None if value is None else (value,) * self.devices
        if op == "broadcast" and not scalars_only:
            operand = self.flow.producer(inst, 0)
            if operand is None or operand.shape.is_tuple or any(a.elements != 1 for a in operand.shape.arrays):
                return None
            return self._device_values(operand, depth + 1, scalars_only, ids)
        if op == "convert" and _is_predicate(inst):  # any nonzero number converts to true
            values = self._device_values(self.flow.producer(inst, 0), depth + 1, scalars_only, ids)
            return None if values is None else tuple(int(v != 0) for v in values)
        if op in ("convert", "bitcast", "reshape", "copy", "copy-start", "copy-done"):
            return self._device_values(self.flow.producer(inst, 0), depth + 1, scalars_only, ids)
        if op == "get-tuple-element":  # a table the loop carries unchanged (XLA hoisted the constant)
            return self._device_values(self._loop_start(inst), depth + 1, scalars_only, ids)
        if op == "compare" and len(inst.operands) == 2:
            test = _COMPARISONS.get(inst.attribute("direction") or "")
            a, b = (self._device_values(self.flow.producer(inst, k), depth + 1, scalars_only, ids) for k in (0, 1))
            if test is None or a is None or b is None:
                return None
            return tuple(int(test(x, y)) for x, y in zip(a, b))
        if op == "not" and _is_predicate(inst):
            values = self._device_values(self.flow.producer(inst, 0), depth + 1, scalars_only, ids)
            return None if values is None else tuple(1 - v for v in values)
        if op == "dynamic-slice":
            table = self._table(self.flow.producer(inst, 0)) or inst
            index = self._device_values(self.flow.producer(inst, 1), depth + 1, ids=ids)
            entries = [_integer(t) for t in table.literal.strip().strip("{}").split(",")] if table.opcode == "constant" else []
            if index is None or not entries or any(e is None for e in entries):
                return None
            return tuple(entries[min(max(i, 0), len(entries) - 1)] for i in index)  # type: ignore[misc]
        combine = _ARITHMETIC.get(op)
        if combine is None or len(inst.operands) != 2:
            return None
        if op in ("and", "or", "xor") and not _is_predicate(inst):
            return None  # bitwise on integers: not the logic below
        a, b = (self._device_values(self.flow.producer(inst, k), depth + 1, scalars_only, ids) for k in (0, 1))
        if a is None or b is None or (op in ("divide", "remainder") and 0 in b):
            return None
        return tuple(combine(x, y) for x, y in zip(a, b))

    def _table(self, inst: Instruction | None) -> Instruction | None:
        """The constant behind ``inst`` through copies and a loop that carries it unchanged."""
        for _ in range(16):
            if inst is None:
                return None
            inst = self.flow.resolve(inst)
            if inst.opcode in ("copy", "copy-start", "copy-done", "bitcast"):
                inst = self.flow.producer(inst, 0)
            elif inst.opcode == "get-tuple-element":
                inst = self._loop_start(inst)
            else:
                return inst
        return None

    def _loop_start(self, inst: Instruction) -> Instruction | None:
        """What a while loop starts carry element ``inst`` (a get-tuple-element of its body's
        parameter) from, when every iteration passes that element on unchanged; else None."""
        body = self.module.computations[inst.computation]
        param = body.parameters[0] if body.parameters else None
        callers = self.module.callers.get(body.name, ())
        if param is None or inst.operands != (param.name,) or len(callers) != 1 or callers[0][0].opcode != "while" \
                or callers[0][1] != "body" or body.root is None or body.root.opcode != "tuple":
            return None
        index = inst.tuple_index
        if index is None or index >= len(body.root.operands):
            return None
        passed = self.module.instruction(body.root.operands[index])
        if passed is None or passed.opcode != "get-tuple-element" or passed.operands != (param.name,) \
                or passed.tuple_index != index:
            return None
        start = self.flow.producer(callers[0][0], 0)
        return self.flow.producer(start, index) if start is not None and start.opcode == "tuple" else None

    # ------------------------------------------------------------------ per computation

    def _computed(self, computation: Computation) -> dict[str, Replicated]:
        """Every instruction's replication in ``computation`` as its one caller calls it."""
        found = self._in_context.get(computation.name)
        if found is None:
            self._in_context[computation.name] = {}  # a call graph has no cycle: a guard only
            found = self._forward(computation, self._parameters_of(computation))
            self._in_context[computation.name] = found
        return found

    def _parameters_of(self, computation: Computation) -> tuple[Replicated, ...] | None:
        """Each parameter's replication as the callers give it (None for the entry: by sharding);
        nothing is replicated in a computation called from several places."""
        if computation.name == self.module.entry_name:
            return None
        callers = self.module.callers.get(computation.name, ())
        if len(callers) != 1:
            return tuple(False for _ in computation.parameters)
        (caller, role), = callers
        outer = self._computed(self.module.computations[caller.computation])
        operands = tuple(outer.get(o, False) for o in caller.operands)
        if caller.opcode == "while":
            return (self._carry(caller, operands[0] if operands else False),)
        if caller.opcode == "conditional":
            branches = [c for r, c in caller.called_computations if r in _BRANCH_ROLES]
            position = branches.index(computation.name) + 1 if computation.name in branches else len(operands)
            return (operands[position] if position < len(operands) else False,)
        return operands

    def _forward(self, computation: Computation, parameters: tuple[Replicated, ...] | None) -> dict[str, Replicated]:
        """Each instruction of ``computation`` given its parameters' replication, operands first."""
        key = (computation.name, parameters if parameters is not None else ())
        known = self._forwarded.get(key)
        if known is not None:
            return known
        found: dict[str, Replicated] = {}
        for inst in self._ordered(computation):
            found[inst.name] = self._of(inst, found, parameters)
        self._forwarded[key] = found
        return found

    def _ordered(self, computation: Computation) -> list[Instruction]:
        """The computation's instructions, each after its operands (text written by hand may
        print an operand after its user), without recursion."""
        if computation.name in self._orders:
            return self._orders[computation.name]
        own = {inst.name: inst for inst in computation.instructions}
        order: list[Instruction] = []
        done: set[str] = set()
        for first in computation.instructions:
            stack = [(first, False)]
            while stack:
                inst, expanded = stack.pop()
                if inst.name in done:
                    continue
                if expanded:
                    done.add(inst.name)
                    order.append(inst)
                    continue
                stack.append((inst, True))
                stack += [(own[o], False) for o in inst.operands if o in own and o not in done]
        self._orders[computation.name] = order
        return order

    def _carry(self, loop: Instruction, start: Replicated) -> Replicated:
        """The loop's carry: replicated where it starts so and the body keeps it so (a fixed point)."""
        key = (loop.name, start)
        if key in self._carries:
            return self._carries[key]
        body = self._called(loop, "body")
        if body is None or body.root is None:
            return False
        carry = start
        self._carries[key] = _none(start)  # a loop inside itself cannot be: a guard only
        for _ in range(64):
            kept = _meet(carry, self._forward(body, (carry,)).get(body.root.name, False))
            if kept == carry:
                break
            carry = kept
        self._carries[key] = carry
        return carry

    def _called(self, inst: Instruction, role: str) -> Computation | None:
        return next((self.module.computations.get(c) for r, c in inst.called_computations if r == role), None)

    # ------------------------------------------------------------------ one instruction

    def _of(self, inst: Instruction, found: dict[str, Replicated], parameters: tuple[Replicated, ...] | None) -> Replicated:
        op = inst.opcode
        operands = [found.get(o, False) for o in inst.operands]
        if op == "parameter":
            if parameters is None:  # the entry's: by the argument's sharding
                return (inst.attribute("sharding") or "").strip() == "{replicated}" \
                    or inst.parameter_number in self.replicated_parameters
            number = inst.parameter_number or 0
            return parameters[number] if number < len(parameters) else False
        if op == "get-tuple-element":
            source = operands[0] if operands else False
            index = inst.tuple_index
            return source[index] if isinstance(source, tuple) and index is not None and index < len(source) else _all(source)
        if op == "tuple":
            return tuple(operands)
        if op in _DONE:
            start = self.module.instruction(inst.operands[0]) if inst.operands else None
            return start is not None and self._shared(start)
        if op in _SHARED_WITHIN_GROUPS:
            return self._shared(inst)
        if op == "while":
            return self._loop_result(inst, operands[0] if operands else False)
        if op == "conditional":
            return self._conditional(inst, operands)
        if op in ("fusion", "call"):
            callee = next((self.module.computations.get(c) for r, c in inst.called_computations
                           if r in ("calls", "to_apply")), None)
            if callee is not None and callee.root is not None:
                return self._forward(callee, tuple(operands)).get(callee.root.name, False)
        if op in _DEVICE_DEPENDENT:
            return False
        if op in ("constant", "iota"):
            return True
        return all(_all(o) for o in operands)

    def _loop_result(self, loop: Instruction, start: Replicated) -> Replicated:
        carry = self._carry(loop, start)
        condition = self._called(loop, "condition")
        if condition is None or condition.root is None:
            return False
        tested = self._forward(condition, (carry,)).get(condition.root.name, False)
        return carry if _all(tested) else _none(carry)

    def _conditional(self, inst: Instruction, operands: list[Replicated]) -> Replicated:
        if not operands or not _all(operands[0]):
            return False
        branches = [self.module.computations.get(c) for r, c in inst.called_computations if r in _BRANCH_ROLES]
        results = [self._forward(b, (operands[k + 1] if k + 1 < len(operands) else False,)).get(b.root.name, False)
                   for k, b in enumerate(branches) if b is not None and b.root is not None]
        if not results or len(results) != len(branches):
            return False
        met = results[0]
        for result in results[1:]:
            met = _meet(met, result)
        return met

    def _shared(self, collective: Instruction) -> bool:
        """True when each of the asking collective's groups lies inside one of ``collective``'s."""
        if self.groups is None:
            return False
        own = _decoded(collective.attribute("replica_groups"), self.devices)
        if own is None:
            return False
        sets = [set(g) for g in own]
        return all(any(set(group) <= s for s in sets) for group in self.groups)


_ARITHMETIC: dict[str, Callable[[int, int], int]] = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
               "divide": lambda a, b: int(a / b), "remainder": lambda a, b: a - b * int(a / b),
               "maximum": max, "minimum": min,
               "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b}
"""Integer arithmetic as XLA computes it (division truncates toward zero); ``and``, ``or`` and
``xor`` of predicates (0 or 1)."""
_COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b, "LE": lambda a, b: a <= b,
    "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}
"""An integer ``compare`` by its ``direction``."""


def _is_predicate(inst: Instruction) -> bool:
    return not inst.shape.is_tuple and bool(inst.shape.arrays) and all(a.dtype == "pred" for a in inst.shape.arrays)


def _integer(literal: str) -> int | None:
    text = literal.strip().strip("{}").strip()
    try:
        return int(text)
    except ValueError:
        return None


def _decoded(text: str | None, devices: int) -> tuple[tuple[int, ...], ...] | None:
    try:
        groups = replica_groups.decode(text if text is not None else "{}", devices)
    except replica_groups.ReplicaGroupsError:
        return None
    return tuple(groups) if groups else None


def _all(value: Replicated) -> bool:
    return all(_all(v) for v in value) if isinstance(value, tuple) else bool(value)


def _none(value: Replicated) -> Replicated:
    return tuple(_none(v) for v in value) if isinstance(value, tuple) else False


def _meet(a: Replicated, b: Replicated) -> Replicated:
    """Replicated where both are (element by element)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(_meet(x, y) for x, y in zip(a, b))
    return _all(a) and _all(b)
