"""The value a compiled collective carries, in the user's words (``params['W']``, ``W``).

The names come from the jaxpr view (:mod:`shardscope.engine.hlo.equation_names`), which names the
values of the program as written, a gradient after the argument it is the gradient of. A
compiled collective is paired with the jaxpr equation it comes from: the collective equation
itself for one the program wrote (pairing by :mod:`shardscope.engine.hlo.pairing`), and for one the
partitioner made, the equation whose value it carries: the instruction that produces its
operand names it by its ``op_name`` (the JAX name stack and primitive) and its source line.

When there is no jaxpr (a module's text alone) or no equation pairs, the module itself
names the value: the one program output its result reaches (a sum), or the one program input
its operand comes from (anything else), each falling back on the other direction.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.sites import CollectiveSite
from shardscope.engine.hlo.text import HloModule, Instruction, SourceLocation
from shardscope.engine.pytree_paths import gradient_label, is_gradient_label, told_apart_by_outputs
from shardscope.engine.written_values import assigned_name, gradient_operand, written_operation

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective

_STEPS_LIMIT = 20000
_OPAQUE = frozenset({"constant", "iota", "partition-id", "replica-id"})


class EquationNamer(Protocol):
    """The jaxpr view's names (:class:`shardscope.engine.hlo.equation_names.EquationNames` is one)."""

    def collective_value(self, equation_id: str) -> str:
        """The value a jaxpr collective carries (``""`` when it has no name)."""
        ...

    def values_of(self, op_name: str, source: SourceLocation | None, dims: tuple[int, ...] | None,
                  frames: "tuple[tuple[str, int, int], ...]" = ()) -> frozenset[str]:
        """The values of the equations an HLO instruction with this ``op_name`` and source line
        may come from (``dims``: its per-device dimensions, None for a tuple, to tell equations
        of one line apart, whole or sharded; ``frames``: its whole stack, ``(file, line, column)``
        innermost first, to tell apart two calls on one line)."""
        ...

    def argument_dims(self, name: str) -> tuple[int, ...] | None:
        """The jaxpr type's dimensions of the program input ``name`` (``params['W']``; None when no
        input is so named)."""
        ...


@dataclass(frozen=True)
class OperandName:
    """The name of a value a collective carries, and whether the step computes it on its way to
    an output (a loss, a metric: ``computed``), where no argument or gradient of one names it."""

    value: str
    computed: bool = False


class CollectiveNamer:
    """Names the values of one module's collectives."""

    def __init__(self, module: HloModule, flow: Flow, input_names: Sequence[str] = (), output_names: Sequence[str] = (),
                 equations: EquationNamer | None = None) -> None:
        self.module = module
        self.flow = flow
        self.inputs = list(input_names)
        self.outputs = list(output_names)
        self.equations = equations
        self._tuple_readers: dict[str, dict[tuple[str, int], list[tuple[Instruction, int]]]] = {}
        self._steps: dict[tuple[str, int | None], tuple[tuple[str, ...], tuple[tuple[Instruction, int | None], ...]]] = {}

    def operand_value(self, site: CollectiveSite, operand: int, reduction: bool) -> "OperandName":
        """The name of the value the collective's operand ``operand`` carries: the jaxpr view's
        name of the equation that made it (``grad(params['W'])``), else the program output or
        input the module leads it to, else the user's line that made it (``train.py:37 (loss)``).
        A value the step computes on its way to an output (a loss summed, divided, returned) is
        the variable the program assigns it to, where one does (``loss``), else that output."""
        producer = self._producer(site, operand) if self.equations is not None else None
        names: frozenset[str] | set[str] = self._equation_values(producer) if producer is not None else frozenset()
        if len(names) > 1:  # one line made several values: the outputs the sum reaches tell which
            names = told_apart_by_outputs(names, self._forward(site, operand))
        if not reduction and producer is not None and not any(is_gradient_label(n) for n in names):
            # a value the partitioner moves (an all-to-all after a reshape) is the one its line
            # writes (xs = x.reshape(...)), not an output it reaches
            written = self._written_value(producer)
            if written:
                return OperandName(written)
        if reduction and producer is not None and set(names) <= set(self.outputs):
            # no equation names it, or only by the output it reaches (the update of a parameter)
            names = self._summed_gradient(site, operand, producer) or names
        name = next(iter(names)) if len(names) == 1 else self._module_value(site, operand, reduction)
        if name in self.outputs:
            # a value the step computes on its way to an output: the variable the program assigns
            # it to (a loss), or the value whose gradient it is (an activation's, in the backward pass)
            written = self._assigned_value(producer) or self._written_gradient(producer) if producer is not None else ""
            return OperandName(written or name, computed=True)
        return OperandName(name or self._source_line(producer or site.instruction))

    def _summed_gradient(self, site: CollectiveSite, operand: int, producer: Instruction) -> set[str]:
        """``{grad(params['ln'])}`` for a backward-pass value no equation names (XLA:TPU's ``add_any``
        of a norm scale's two uses) that reaches the outputs of one argument alone (its update, its
        optimizer moments) and holds a shard of that argument's shape; else empty. An activation's
        gradient (the first layer's, which reaches the embedding's outputs alone) has its own shape."""
        assert self.equations is not None
        if "transpose(" not in producer.metadata.op_name.split(";", 1)[0] or len(producer.shape.arrays) != 1:
            return set()
        # the arguments whose outputs it reaches (an optimizer's moments end with the same path)
        # that the step computed it from
        arguments = told_apart_by_outputs(frozenset(n for n in self.inputs if n), self._forward(site, operand))
        arguments &= self._backward(site, operand) if len(arguments) > 1 else arguments
        if len(arguments) != 1:
            return set()
        (argument,) = arguments
        whole = self.equations.argument_dims(argument)
        part = tuple(d for d in producer.shape.arrays[0].dims if d != 1)
        if whole is None or not _shard_of(tuple(d for d in whole if d != 1), part):
            return set()
        return {gradient_label(argument)}

    def _written_gradient(self, inst: Instruction) -> str:
        """``grad(x @ W)``: the gradient the backward-pass instruction ``inst`` computes, of the
        operand its line writes for the operation it transposes (:func:`gradient_operand`), as
        the transpose of a ppermute is ``grad(y)``; ``""`` for a forward-pass instruction (a
        step JAX adds for the backward pass, a tanh's ``1 - y**2``, is no value the line names)."""
        head = inst.metadata.op_name.split(";", 1)[0]
        source = self.module.source(inst, users=True)
        if "transpose(" not in head or source is None:
            return ""
        operand = gradient_operand(source.file, source.line, source.column, head.rsplit("/", 1)[-1])
        return gradient_label(operand) if operand else ""

    def _assigned_value(self, inst: Instruction) -> str:
        """The variable the program assigns the forward-pass value ``inst`` makes
        (:func:`assigned_name`: ``loss`` of ``loss, g = jax.value_and_grad(loss_fn)(...)`` for the
        mean ``loss_fn`` returns); ``""`` for a gradient, which its argument names."""
        head = inst.metadata.op_name.split(";", 1)[0]
        if "transpose(" in head or not inst.metadata.stack_frame_id:
            return ""
        frames = [(f.file, f.line, f.column, f.function) for f in self.module.stack_frames.stack(inst.metadata.stack_frame_id)]
        return assigned_name(frames, head.rsplit("/", 1)[-1])

    def _written_value(self, inst: Instruction) -> str:
        """The name the user's line that made ``inst`` gives its value, where that line writes the
        operation (:func:`written_operation`)."""
        source = self.module.source(inst, users=True)
        if source is None:
            return ""
        primitive = inst.metadata.op_name.split(";", 1)[0].rsplit("/", 1)[-1]
        return written_operation(source.file, source.line, source.column, primitive)

    def _equation_values(self, producer: Instruction) -> frozenset[str]:
        """The jaxpr view's names of the equations ``producer`` may come from (several when one
        line made several values)."""
        assert self.equations is not None
        shape = producer.shape
        dims = shape.arrays[0].dims if len(shape.arrays) == 1 else None
        frames = tuple((s.file, s.line, s.column) for s in self.module.stack_frames.stack(producer.metadata.stack_frame_id)) \
            if producer.metadata.stack_frame_id else ()
        return self.equations.values_of(producer.metadata.op_name, self.module.source(producer), dims, frames)

    def _source_line(self, inst: Instruction) -> str:
        """The user's line that made ``inst`` (``train.py:37 (loss)``), as the jaxpr view names a
        collective no program value names; ``""`` when the module kept no source."""
        source = self.module.source(inst, users=True)
        return source.text() if source is not None else ""

    def paired_value(self, c: "CompiledCollective") -> str:
        """The jaxpr view's name of the collective a program-written one pairs with."""
        return self.equation_value(c.equations)

    def equation_value(self, equation_ids: Sequence[str]) -> str:
        """The one name the jaxpr view gives the collectives ``equation_ids`` (``""`` for none or several)."""
        if self.equations is None or not equation_ids:
            return ""
        names = {self.equations.collective_value(e) for e in equation_ids} - {""}
        return names.pop() if len(names) == 1 else ""

    def _producer(self, site: CollectiveSite, operand: int) -> Instruction | None:
        """The instruction that computes the operand, past moves (bitcasts, copies, transposes),
        into fusions, and for the sum of a loop's result (an all-reduce the TPU moved out of the
        loop) into the loop, past the accumulation (``acc + value``, the TPU's ``select(i == 0,
        0, acc) + value``) or the write into a stacked result's slot (``dynamic-update-slice``:
        a layer scan's per-layer gradient): it holds the metadata of the JAX equation that made
        the value."""
        names = site.carried
        inst = self.module.instruction(names[operand]) if operand < len(names) else None
        named: Instruction | None = None  # the last instruction on the way that says which equation made it
        for _ in range(64):
            if inst is None:
                return None
            if inst.metadata.op_name:
                named = inst
            inst = self.flow.resolve(inst)
            if inst.opcode in FORWARDING:
                inst = self.flow.producer(inst, 0)
            elif inst.opcode == "get-tuple-element":
                inst = self._element_source(inst)
            elif inst.opcode == "add" and self._accumulated(inst) is not None:
                inst = self._accumulated(inst)
            elif inst.opcode == "dynamic-update-slice":  # a stacked result (a scan's per-layer gradient): its slot's value
                inst = self.flow.producer(inst, 1)
            elif inst.opcode == "select" and self._kept(inst) is not None:  # a masked value: jnp.where(valid, g, 0)
                inst = self._kept(inst)
            elif inst.opcode in ("parameter", *_OPAQUE):
                return None
            else:  # a dot XLA rewrote keeps no metadata: the fusion wrapping it still has the equation's
                return inst if inst.metadata.op_name else named
        return None

    def _element_source(self, gte: Instruction) -> Instruction | None:
        """What computes a tuple element: a loop's result element is its body's root operand
        (None for a value the loop carries in from outside this iteration)."""
        source = self.flow.producer(gte, 0)
        if source is None or source.opcode == "parameter":
            return None
        if source.opcode == "while" and gte.tuple_index is not None:
            body = next((c for role, c in source.called_computations if role == "body"), "")
            root = self.module.computations[body].root if body in self.module.computations else None
            if root is not None and root.opcode == "tuple" and gte.tuple_index < len(root.operands):
                return self.module.instruction(root.operands[gte.tuple_index])
            return None
        if source.opcode == "tuple" and gte.tuple_index is not None and gte.tuple_index < len(source.operands):
            return self.module.instruction(source.operands[gte.tuple_index])
        return source

    def _kept(self, select: Instruction) -> Instruction | None:
        """The value ``select(p, value, 0)`` (or ``select(p, 0, value)``) keeps, else None."""
        sides = [self.flow.producer(select, k) for k in (1, 2)]
        zeros = [side is not None and self.flow.is_zero(side) for side in sides]
        return sides[1 - zeros.index(True)] if zeros.count(True) == 1 else None

    def _accumulated(self, add: Instruction) -> Instruction | None:
        """The value an accumulation adds: the operand of ``add`` that is not the loop's carry
        (read through moves and a select with zero); None when neither operand is the carry."""
        sides = [self.flow.producer(add, k) for k in (0, 1)]
        carried = [k for k, side in enumerate(sides) if side is not None and self._reads_carry(side)]
        return sides[1 - carried[0]] if len(carried) == 1 else None

    def _reads_carry(self, inst: Instruction | None) -> bool:
        for _ in range(16):
            if inst is None:
                return False
            inst = self.flow.resolve(inst)
            if inst.opcode in FORWARDING:
                inst = self.flow.producer(inst, 0)
            elif inst.opcode == "select" and any(self.flow.is_zero(z) for z in
                                                 (self.flow.producer(inst, k) for k in (1, 2)) if z is not None):
                inst = next(p for p in (self.flow.producer(inst, k) for k in (1, 2)) if p is not None and not self.flow.is_zero(p))
            else:
                source = self.flow.producer(inst, 0) if inst.opcode == "get-tuple-element" else None
                return source is not None and source.opcode == "parameter" and source.computation != self.module.entry_name
        return False

    # ------------------------------------------------------------------ from the module alone

    def _module_value(self, site: CollectiveSite, operand: int, reduction: bool) -> str:
        """The one output the operand's result reaches (a sum), or the one input it comes from
        (anything else); each falls back on the other direction; empty when neither is one."""
        order = (self._forward, self._backward) if reduction else (self._backward, self._forward)
        for direction in order:
            names = direction(site, operand)
            if len(names) == 1:
                return names.pop()
        return ""

    @functools.cached_property
    def _callers(self) -> dict[str, tuple[Instruction, str]]:
        found: dict[str, tuple[Instruction, str]] = {}
        for name, calls in self.module.callers.items():
            for inst, role in calls:
                if inst.opcode in ("while", "call", "conditional", "async-start", "fusion"):
                    found.setdefault(name, (inst, role))
        return found

    def _elements_read(self, computation: str) -> dict[tuple[str, int], list[tuple[Instruction, int]]]:
        """The ``get-tuple-element`` users of each tuple-shaped instruction of ``computation``, by
        the element they read: a combined collective's hundreds of results are followed one
        element at a time (made once per computation)."""
        found = self._tuple_readers.get(computation)
        if found is None:
            found = self._tuple_readers[computation] = {}
            for name, users in self.module.computations[computation].users.items():
                for user, position in users:
                    if user.opcode == "get-tuple-element" and user.tuple_index is not None:
                        found.setdefault((name, user.tuple_index), []).append((user, position))
        return found

    def _users(self, current: Instruction, idx: int | None) -> "Sequence[tuple[Instruction, int]]":
        """The users of ``current`` that element ``idx`` of its result reaches (all for ``None``)."""
        users = self.module.computations[current.computation].users.get(current.name, ())
        if idx is None or len(users) < 16 or not current.shape.is_tuple:
            return users
        by_element = self._elements_read(current.computation)
        return [u for u in users if u[0].opcode != "get-tuple-element"] + by_element.get((current.name, idx), [])

    def _forward(self, site: CollectiveSite, operand: int) -> set[str]:
        result = site.result
        start_index = operand if result.shape.is_tuple and len(site.instruction.operands) > 1 else None
        if site.part_results and operand < len(site.part_results):  # the GPU's flat form: the slice holds it
            result = self.module.instruction(site.part_results[operand]) or result
        reached: set[str] = set()
        seen: set[tuple[str, int | None]] = set()
        stack: list[tuple[Instruction, int | None]] = [(result, start_index)]
        steps = 0
        while stack and steps < _STEPS_LIMIT:
            steps += 1
            current, idx = stack.pop()
            if (current.name, idx) in seen:
                continue
            seen.add((current.name, idx))
            outputs, after = self._step(current, idx)
            reached.update(outputs)
            stack += after
        return reached

    def _step(self, current: Instruction, idx: int | None
              ) -> tuple[tuple[str, ...], tuple[tuple[Instruction, int | None], ...]]:
        """One step forward from element ``idx`` of ``current``'s result: the program outputs it
        reaches there, and where it goes next, in :meth:`_forward`'s order. The same for every
        collective whose value passes it, so made once per module (a step's hundreds of
        collectives follow their values through the same optimizer update)."""
        key = (current.name, idx)
        found = self._steps.get(key)
        if found is None:
            reached: set[str] = set()
            after: list[tuple[Instruction, int | None]] = []
            computation = self.module.computations[current.computation]
            if current is computation.root:
                self._leave(computation.name, idx, reached, after)
            for user, position in self._users(current, idx):
                after += self._into(user, position, idx)
            found = self._steps[key] = (tuple(reached), tuple(after))
        return found

    def _into(self, user: Instruction, position: int, idx: int | None) -> list[tuple[Instruction, int | None]]:
        """Where a value (tuple element ``idx``) goes when ``user`` reads it at ``position``:
        a loop's body parameter, a call's parameter ``position``, a conditional's branch
        ``position - 1`` (operand 0 picks the branch), else the user's own result."""
        if user.opcode == "get-tuple-element":
            return [(user, None)] if idx is None or user.tuple_index == idx else []
        if user.opcode == "tuple":
            return [(user, position)]
        called = [self.module.computations.get(c) for role, c in user.called_computations if role != "condition"]
        targets = [c for c in called if c is not None and c.parameters]
        if user.opcode == "while":
            return [(c.parameters[0], idx) for c in targets[:1]]
        if user.opcode == "call":
            return [(c.parameters[position], idx) for c in targets[:1] if position < len(c.parameters)]
        if user.opcode == "conditional":
            return [(targets[position - 1].parameters[0], idx)] if 0 < position <= len(targets) else []
        return [(user, None)]

    def _leave(self, computation: str, idx: int | None, reached: set[str], stack: list) -> None:
        """A computation's root was reached: the program's output, or its caller's result."""
        if computation == self.module.entry_name:
            entry = self.module.entry
            root = entry.root if entry is not None else None
            if root is not None and root.shape.is_tuple:
                if idx is not None and idx < len(self.outputs) and self.outputs[idx]:
                    reached.add(self.outputs[idx])
                elif idx is None:
                    reached.update(n for n in self.outputs if n)
            elif self.outputs and self.outputs[0]:
                reached.add(self.outputs[0])
            return
        caller = self._callers.get(computation)
        if caller is None or caller[1] == "condition":
            return
        inst = caller[0]
        stack.append((inst, idx if inst.opcode in ("while", "call") else None))
        if inst.opcode == "while" and caller[1] == "body" and idx is not None:
            # the next iteration starts from it: what a later iteration makes of it is reached too
            # (an activation's gradient a layer loop carries reaches every earlier layer's gradient)
            body = self.module.computations[computation]
            stack.extend((param, idx) for param in body.parameters[:1])

    def _backward(self, site: CollectiveSite, operand: int) -> set[str]:
        found: set[str] = set()
        seen: set[str] = set()
        names = site.carried
        start = self.module.instruction(names[operand]) if operand < len(names) else None
        stack: list[Instruction | None] = [start] if start is not None else []
        steps = 0
        while stack and steps < _STEPS_LIMIT:
            steps += 1
            current = stack.pop()
            if current is None or current.name in seen:
                continue
            seen.add(current.name)
            if current.opcode == "parameter":
                stack += self._parameter_sources(current, found)
            elif current.opcode == "get-tuple-element" and self._carried(current) is not None:
                stack.append(self._carried(current))
            elif current.opcode not in _OPAQUE:
                stack += [self.module.instruction(o) for o in current.operands]
        return found

    def _carried(self, gte: Instruction) -> Instruction | None:
        """Where an element of a called computation's tuple parameter comes from: for a loop
        body's carry, the element of the while's initial tuple (its first iteration); for a
        conditional's branch, the element of the operand tuple the conditional passes that
        branch (a ``lax.cond``'s operands). None for any other get-tuple-element."""
        param = self.module.instruction(gte.operands[0]) if gte.operands else None
        caller = self._callers.get(gte.computation)
        if param is None or param.opcode != "parameter" or caller is None:
            return None
        call = caller[0]
        if call.opcode == "while":
            passed = call.operands[0] if call.operands else None
        elif call.opcode == "conditional":
            passed = self._branch_operand(call, gte.computation)
        else:
            return None
        init = self.module.instruction(passed) if passed else None
        index = gte.tuple_index
        if init is None or init.opcode != "tuple" or index is None or index >= len(init.operands):
            return None
        return self.module.instruction(init.operands[index])

    @staticmethod
    def _branch_operand(conditional: Instruction, branch: str) -> str | None:
        """The operand a conditional passes its branch ``branch``: the one after the predicate in
        the branch's place (the same computation in two places takes them only when they agree)."""
        branches = [c for role, c in conditional.called_computations if role != "condition"]
        passed = {conditional.operands[k + 1] for k, c in enumerate(branches) if c == branch and k + 1 < len(conditional.operands)}
        return passed.pop() if len(passed) == 1 else None

    def _parameter_sources(self, param: Instruction, found: set[str]) -> list[Instruction | None]:
        """An entry parameter adds its name to ``found``; another one leads to its caller's operand
        (a conditional's: the operand it passes that branch)."""
        name = self._parameter_name(param)
        if name is not None:
            if name:
                found.add(name)
            return []
        caller = self._callers.get(param.computation)
        if caller is None:
            return []
        inst = caller[0]
        number = param.parameter_number or 0
        if inst.opcode in ("call", "fusion", "async-start") and number < len(inst.operands):
            return [self.module.instruction(inst.operands[number])]
        if inst.opcode == "while" and inst.operands:
            return [self.module.instruction(inst.operands[0])]
        if inst.opcode == "conditional":
            passed = self._branch_operand(inst, param.computation)
            return [self.module.instruction(passed)] if passed else []
        return []

    def _parameter_name(self, param: Instruction) -> str | None:
        """An entry parameter's pytree path (``""`` when unnamed); None for other parameters."""
        if param.computation != self.module.entry_name:
            return None
        number = param.parameter_number or 0
        return param.metadata.op_name or (self.inputs[number] if number < len(self.inputs) else "")


def _shard_of(whole: tuple[int, ...], part: tuple[int, ...]) -> bool:
    """One device's piece of ``whole``: as many dimensions, each dividing the whole's in order."""
    return len(whole) == len(part) and all(p > 0 and w % p == 0 for w, p in zip(whole, part))
