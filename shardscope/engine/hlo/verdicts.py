"""Whether a compiled collective inside a while loop has to run there.

The same three verdicts as the jaxpr view (:mod:`shardscope.engine.jaxpr.verdicts`), decided on the
partitioned module, per value the collective carries (a combined one carries several):

- ``deferrable``: a sum (an all-reduce or reduce-scatter whose combiner adds two numbers, real
  or complex) whose result only reaches a loop-carried accumulator, through the steps XLA's own
  ``WhileLoopAllReduceCodeMotion`` accepts: ``convert``, ``bitcast``, ``reshape``,
  ``transpose``, ``copy``, ``slice``, ``select(p, value, 0)`` with a predicate the same on every
  device; and a scaling by a number the same on every device (``value * c``, ``value / c``,
  ``-value``: a mean's ``1/N``, which XLA's pass does not take but is as linear); then an ``add`` with the carry element at the same tuple index (one
  ``dynamic-slice``/``dynamic-update-slice`` pair around it allowed, at offsets the same on
  every device), the buffer read nowhere else in the loop nor in its condition. Seen through
  fusions and through nested loops (an inner loop that stacks each iteration's sum into a
  zero-initialised buffer, or that accumulates into the outer loop's carry threaded through
  it). And one run after the loop must move fewer bytes than the runs in it: a sum written
  into its own slot of a stacked output (each layer's gradient in a scan over layers) is
  ``needed``, since deferring it saves nothing. A reduce-scatter (or the TPU's all-reduce
  scattered by its fusion) deferred sums the whole accumulator after the loop: its bytes, not
  the shard's, are what one run then moves.
- ``loop_invariant``: no operand depends on what the loop changes (its changing carry
  elements): it can run before the loop.
- ``needed``: anything else (a wrong "deferrable" is worse than a missed one).

Which values a loop changes and which are the same on every device is :mod:`loop_facts`'.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.engine.counts import known_product
from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.linear_steps import ON_THE_WAY, LinearSteps
from shardscope.engine.hlo.loop_facts import LoopFacts
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.sites import CollectiveSite
from shardscope.engine.hlo.text import Computation, HloModule, Instruction
from shardscope.engine.jaxpr.verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, STACKABLE
from shardscope.collective_kinds import ALL_REDUCE, REDUCE_SCATTER, SUM_KINDS

_STACKING_COMBINERS = frozenset({"add", "maximum", "minimum", "multiply"})
"""Combiners whose collective of a stacked buffer after the loop gives every slot what the
collective of that slot's value gave in the loop (each slot combines its own values only)."""
_NUMERIC = frozenset({"bf16", "f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "c64", "c128"})


@dataclass(frozen=True)
class OperandVerdict:
    """The verdict on one value a collective carries (a combined collective carries several).

    ``loops``: the while loops (outermost first) it can leave; ``bytes_after`` the per-device
    bytes one run after them moves (the accumulator; a loop-invariant one's whole result), ``stacked`` when it is written into its
    own slot of a stacked output; ``carry_read`` when a needed sum is added into a carry that
    the loop also reads (the next iteration uses the sum: not an accumulator).
    ``saving_unknown``: deferrable under an unknown trip count with an accumulator larger than
    one run (``bytes_per_run``). ``slots``: a loop-invariant collective hoisted out of a loop
    around another that changes its operand keeps that many results (None: unknown).
    """

    kind: str
    loops: tuple[str, ...] = ()
    bytes_after: int | None = None
    stacked: bool = False
    carry_read: bool = False
    saving_unknown: bool = False
    bytes_per_run: int | None = None
    slots: int | None = 1


@dataclass(frozen=True)
class _CarryRead:
    """Why a value reaching a carry is not accumulated there: the carry element it is added
    into is read elsewhere in the loop (or by its condition)."""

    index: int


@dataclass(frozen=True)
class _Level:
    """How a value reaches one loop's carry: the tuple index, and ``add`` (accumulates),
    ``dus`` (written into a slot) or ``thread`` (the carry goes through an inner loop that
    accumulates into it); ``scattered`` when only a shard of the sum (a dynamic-slice at an
    offset the loop does not change, a device's own) reaches it."""

    index: int
    kind: str
    scattered: bool = False
    also: tuple[int, ...] = ()

    @property
    def indices(self) -> tuple[int, ...]:
        """Every carry element the value accumulates into (slices of one sum, each its own)."""
        return (self.index, *self.also)


class CompiledClassifier:
    """Verdicts for the collectives of one module (per-loop facts cached)."""

    def __init__(self, module: HloModule, flow: Flow | None = None, counts: LoopCounts | None = None) -> None:
        self.module = module
        self.flow = flow or Flow(module)
        self.counts = counts or LoopCounts(module, self.flow)
        self.facts = LoopFacts(module, self.flow, self.counts)
        self.steps = LinearSteps(self.flow, self.facts)

    def operand_verdicts(self, site: CollectiveSite) -> tuple[OperandVerdict, ...]:
        """One verdict per operand of the collective at ``site``."""
        inst, loops = site.instruction, site.loops
        count = max(1, len(site.carried))
        if not loops:
            return (OperandVerdict(NEEDED),) * count
        invariant = self._invariant_loops(site)
        if invariant:
            outermost = site.loops.index(invariant[-1])
            kept = [w for w in site.loops[outermost:] if w not in invariant]
            slots = known_product(self.trip_count(w) for w in kept)  # the results of the loops inside, kept
            return (OperandVerdict(LOOP_INVARIANT, tuple(w.name for w in reversed(invariant)), site.result.shape.nbytes,
                                   stacked=bool(kept), slots=slots),) * count
        combiner = self._combiner(inst) if site.kind in SUM_KINDS else None
        if combiner is None:
            return (OperandVerdict(NEEDED),) * count
        if len(inst.operands) > 1 and site.kind not in (ALL_REDUCE, REDUCE_SCATTER):
            return (OperandVerdict(NEEDED),) * count  # a combined sum's values are the tuple's elements
        if site.parts:  # the GPU's flat form: each value is judged from the slice that holds its sum
            return tuple(self._deferral(site, None, k, combiner) for k in range(len(site.parts)))
        return tuple(self._deferral(site, k if len(inst.operands) > 1 else None, None, combiner) for k in range(count))

    def trip_count(self, loop: Instruction) -> int | None:
        """The loop's trip count (written by XLA or derived)."""
        return self.counts.trip_count(loop.name)

    # ------------------------------------------------------------------ loop invariance

    def _invariant_loops(self, site: CollectiveSite) -> tuple[Instruction, ...]:
        """The loops, innermost first, whose changing values no operand of the collective reads.

        An outer loop counts even when an inner one changes the operand (a layer scan inside a
        micro-batch loop gathers each layer in turn, the same layers in every micro-batch):
        leaving it runs the inner loop's collectives once, and keeps all their results."""
        found = []
        for loop in reversed(site.loops):
            if site.anchor.computation == getattr(self.facts.called(loop, "condition"), "name", None):
                break  # the loop's test reads the carry on every iteration
            varying = self.facts.varying(loop.name)
            if not (site.anchor.name in varying or any(op in varying for op in site.anchor.operands)):
                found.append(loop)
            elif found:
                break  # changing in a loop outside one it can leave: it leaves only those inside
        return tuple(found)

    # ------------------------------------------------------------------ deferral

    def _combiner(self, inst: Instruction) -> str | None:
        """``add`` (a sum), ``maximum``, ``minimum`` or ``multiply``: the opcode that combines the
        reduction's two parameters, when every element type is a number; else None."""
        combiner = self.module.computations.get((inst.attribute("to_apply") or "").lstrip("%"))
        root = combiner.root if combiner is not None else None
        if combiner is None or root is None or root.opcode not in _STACKING_COMBINERS \
                or sorted(root.operands) != sorted(p.name for p in combiner.parameters):
            return None
        operands = [self.module.instruction(o) for o in inst.operands]
        numeric = all(o is not None and all(a.dtype in _NUMERIC for a in o.shape.arrays) for o in operands)
        return root.opcode if numeric else None

    def _deferral(self, site: CollectiveSite, index: int | None, part: int | None = None,
                  combiner: str = "add") -> OperandVerdict:
        """Follow one value the sum makes outwards, loop by loop, and keep the outermost loop
        whose carry accumulates it with bytes saved. ``part`` is one value of the GPU's flat
        form (a concatenation summed at once): followed from the slice that takes its sum back.
        A value the innermost loop writes into its own slot of a stacked buffer, and no loop
        accumulates, is ``stackable`` (any of :data:`_STACKING_COMBINERS`); only a sum accumulates."""
        carried = site.parts[part] if part is not None else site.instruction.operands[index or 0]
        operand = self.module.instruction(carried)
        value_bytes = operand.shape.nbytes if operand is not None else 0
        value, value_index = site.result, index
        if part is not None:
            value = self.module.instruction(site.part_results[part]) or site.result
        runs: int | None = 1
        slots: int | None = 1  # how many of the value a stacked accumulator holds
        best: OperandVerdict | None = None
        stack: OperandVerdict | None = None
        stacked = scattered = carry_read = False
        inner: str | None = None  # what the inner loop did with it: add or dus
        init: str | None = None  # the inner loop's initial value there: zero or threaded
        for depth, loop in enumerate(reversed(site.loops)):
            body = self.facts.called(loop, "body")
            if body is None or value.computation != body.name:
                break
            level = self._level(value, value_index, loop, body, init, site.result)
            if isinstance(level, _CarryRead):
                carry_read = carry_read or best is None
                break
            if level is None:
                break
            kind = inner if level.kind == "thread" else level.kind
            stacked = stacked or kind == "dus"
            scattered = scattered or level.scattered or (part is None and self._scatters(site, index))
            trip = self.trip_count(loop)
            runs = None if runs is None or trip is None else runs * trip
            # deferred, a scattered sum accumulates the whole unscattered value on each device
            tupled = body.root is not None and body.root.shape.is_tuple
            carried_bytes = sum(body.root.shape.element(k).nbytes for k in level.indices) if body.root is not None and tupled else 0
            if scattered:  # the unscattered value, in as many slots as the loops inside stacked
                buffer_bytes = carried_bytes if slots is None else value_bytes * slots
            else:
                buffer_bytes = carried_bytes
            if level.kind == "dus":
                slots = None if slots is None or trip is None else slots * trip
            left = tuple(w.name for w in site.loops[len(site.loops) - depth - 1 :])
            if kind == "add" and combiner == "add":
                saves = _saves(buffer_bytes, value_bytes, runs)
                if saves or runs is None:  # an unknown trip count: valid, the saving unknown
                    best = OperandVerdict(DEFERRABLE, left, buffer_bytes, stacked, saving_unknown=not saves,
                                          bytes_per_run=value_bytes)
            elif kind == "dus" and depth == 0 and not scattered and self._stacks_from(loop, level, combiner):
                stack = OperandVerdict(STACKABLE, left, buffer_bytes, True, bytes_per_run=value_bytes)
            if level.also:
                break  # several accumulators of one sum: each leaves this loop with it
            # outwards: the loop's result at that index, if its initial value adds nothing to the sum
            init = self._initial_value(loop, level)
            if init is None or combiner != "add":
                break
            value, value_index, inner = loop, level.index, kind
        if best is not None:
            return best
        if stack is not None:
            return stack
        return OperandVerdict(NEEDED, stacked=stacked, carry_read=carry_read)

    def _stacks_from(self, loop: Instruction, level: _Level, combiner: str) -> bool:
        """The stacked buffer starts as the combiner leaves it: the slots no iteration writes
        combine, after the loop, to what they were (zeros for a sum or a product, a value the
        same on every device for a maximum or minimum)."""
        element = self._initial_element(loop, level.index)
        if element is None:
            return False
        if combiner in ("add", "multiply"):
            return self.flow.is_zero(element)
        return self.flow.is_constant(element)

    def _scatters(self, site: CollectiveSite, index: int | None) -> bool:
        """True when the sum's result where it runs is smaller than its operand: a
        reduce-scatter, or an all-reduce whose fusion keeps the device's shard (TPU)."""
        operand = self.module.instruction(site.instruction.operands[index or 0])
        result = site.result.shape.element(index) if index is not None and site.result.shape.is_tuple else site.result.shape
        return operand is not None and result.nbytes < operand.shape.nbytes

    def _level(self, start: Instruction, index: int | None, loop: Instruction, body: Computation, init: str | None,
               collective: Instruction) -> _Level | _CarryRead | None:
        """How the value reaches ``body``'s carry, or None when some use is not linear
        (:class:`_CarryRead` when it is added into a carry element the loop also reads).

        ``init`` says how the inner loop whose result the value is started: from ``zero`` (its
        result is a sum of the collective's results: it may be added or stacked) or
        ``threaded`` from this body's carry (its result may only go back to that carry).
        """
        found: set[tuple[int, str]] = set()
        allowed: set[str] = set()
        stack: list[tuple[Instruction, int | None]] = [(start, index)]
        seen: set[tuple[str, int | None]] = set()
        scattered = False
        while stack:
            inst, idx = stack.pop()
            if (inst.name, idx) in seen:
                continue
            seen.add((inst.name, idx))
            for user, position in self.flow.uses(inst):
                if user.opcode == "dynamic-slice" and position == 0 and idx is None and self.facts.offsets_fixed(user, loop):
                    scattered = True
                    stack.append((user, None))
                    continue
                step = self._step(user, position, idx, body, init, collective, allowed)
                if step is False:
                    return None
                if isinstance(step, tuple):
                    found.add(step)
                elif step:
                    stack.append((user, None))
        level = self._accumulator(found, body, init, start, index, allowed)
        return level if not isinstance(level, _Level) else _Level(level.index, level.kind, scattered, level.also)

    def _step(self, user: Instruction, position: int, idx: int | None, body: Computation, init: str | None,
              collective: Instruction, allowed: set[str]) -> bool | tuple[int, str] | None:
        """One use of the value on its way to the carry: ``True`` to follow it, a ``(carry
        index, kind)`` where it is accumulated, None for a use that takes another element of a
        combined result, ``False`` where the way is not linear."""
        op = user.opcode
        if op == "get-tuple-element":
            return (True if idx is None or user.tuple_index == idx else None)
        if idx is not None:
            return False  # a combined result used whole
        if op in ON_THE_WAY or self.steps.zero_padded(user, position):
            return True
        if op == "dynamic-slice" and position == 0 and self.facts.indices_replicated(user, 1, body):
            return True  # a slice at offsets the same on every device (the loop's index)
        if op == "select" and self.steps.selects_zero(user, position, body):
            return True
        if self.steps.scales(user, position, body, collective):
            return True
        if op == "add" and self.steps.of_collective(self.flow.producer(user, 1 - position), collective):
            return True  # the sum of two of its own results: still linear in it
        if op == "add" or (op == "dynamic-update-slice" and position == 1):
            buffer = self.flow.producer(user, 1 - position if op == "add" else 0)
            origin = self._carry_origin(buffer, body, allowed)
            target = self._to_root(user, body, allowed)
            if origin is None or origin != target or (op == "dynamic-update-slice" and not self.facts.indices_replicated(user, 2, body)):
                return False
            allowed.add(user.name)
            return (origin, "add" if op == "add" else "dus")
        if op == "tuple" and user is body.root and init == "threaded":
            return (position, "thread")
        return False

    def _accumulator(self, found: set[tuple[int, str]], body: Computation, init: str | None, start: Instruction,
                     index: int | None, allowed: set[str]) -> _Level | _CarryRead | None:
        """The one carry element every path accumulates into, if the loop reads it nowhere else
        (:class:`_CarryRead` if it does)."""
        if len(found) > 1 and init is None and all(kind == "add" for _, kind in found):
            carries = sorted(carry for carry, _ in found)  # slices of one sum, each into its own accumulator
            if not all(self._buffer_only_accumulated(body, carry, allowed) for carry in carries):
                return _CarryRead(carries[0])
            return _Level(carries[0], "add", also=tuple(carries[1:]))
        if len(found) != 1:
            return None
        (carry, kind), = found
        if (kind == "thread") != (init == "threaded"):
            return None
        if kind == "thread" and not self._threaded(body, carry, start, index):
            return None
        if not self._buffer_only_accumulated(body, carry, allowed):
            return _CarryRead(carry)
        return _Level(carry, kind)

    def _carry_origin(self, inst: Instruction | None, body: Computation, allowed: set[str]) -> int | None:
        """The carry index ``inst`` reads (through forwarding, one dynamic-slice at offsets the
        same on every device, and selects of it with zero), else None."""
        slices = 0
        while inst is not None:
            inst = self.flow.resolve(inst)
            if inst.opcode in FORWARDING or (inst.opcode == "dynamic-slice" and slices == 0
                                             and self.facts.indices_replicated(inst, 1, body)):
                slices += inst.opcode == "dynamic-slice"
                allowed.add(inst.name)
                inst = self.flow.producer(inst, 0)
                continue
            if inst.opcode == "select":
                kept = next((k for k in (1, 2) if self.steps.selects_zero(inst, k, body)), None)
                if kept is None:
                    return None
                allowed.add(inst.name)
                inst = self.flow.producer(inst, kept)
                continue
            param = body.parameters[0] if body.parameters else None
            if inst.opcode == "get-tuple-element" and param is not None and inst.operands == (param.name,):
                allowed.add(inst.name)
                return inst.tuple_index
            return None
        return None

    def _to_root(self, inst: Instruction, body: Computation, allowed: set[str]) -> int | None:
        """The root tuple position ``inst``'s result reaches through forwarding (and one
        dynamic-update-slice of it), else None; every use must lead there."""
        targets: set[int] = set()
        stack = [inst]
        updates = 0
        while stack:
            current = stack.pop()
            for user, position in self.flow.uses(current):
                if user.opcode in ON_THE_WAY:
                    allowed.add(user.name)
                    stack.append(user)
                elif user.opcode == "dynamic-update-slice" and position == 1 and updates == 0:
                    updates += 1
                    allowed.add(user.name)
                    stack.append(user)
                elif user.opcode == "tuple" and user is body.root:
                    targets.add(position)
                else:
                    return None
        return targets.pop() if len(targets) == 1 else None

    def _buffer_only_accumulated(self, body: Computation, carry: int, allowed: set[str]) -> bool:
        """The carry element is an accumulator: read only on the accumulation's own path (and by
        nothing in the loop's condition); the body reads its parameter only element by element.

        The path itself is walked too, not trusted: the copy or slice of the carry that the
        add takes may feed other work of the iteration (a tensor-parallel layer multiplies the
        activation it adds the all-reduced partial sum to), and then the next iteration reads
        the sum: deferring it would change the result."""
        param = body.parameters[0] if body.parameters else None
        if param is None:
            return False
        users = body.users.get(param.name, ())
        if any(u.opcode != "get-tuple-element" for u, _ in users):
            return False
        stack = [u for u, _ in users if u.tuple_index == carry]
        seen: set[str] = set()
        while stack:
            inst = stack.pop()
            if inst.name in seen:
                continue
            seen.add(inst.name)
            for user, position in self.flow.uses(inst):
                if user is body.root:
                    continue
                if user.name in allowed or user.opcode in FORWARDING or (user.opcode == "select" and self.steps.selects_zero(user, position, body)):
                    stack.append(user)
                elif user.opcode == "tuple" and any(w.opcode == "while" for w, _ in self.flow.uses(user)):
                    continue  # threaded into an inner loop: checked by that loop's own level
                else:
                    return False
        return not self.facts.condition_reads(body, carry)

    def _threaded(self, body: Computation, carry: int, inner_loop: Instruction, index: int | None) -> bool:
        """The inner loop starts its element ``index`` from this body's carry element ``carry``."""
        if index is None:
            return False
        return self._carry_origin(self._initial_element(inner_loop, index), body, set()) == carry

    def _initial_value(self, loop: Instruction, level: _Level) -> str | None:
        """How ``loop`` starts its carry element ``level.index``: ``zero``, ``threaded`` (from
        a carry element of the loop around it, checked there), or None (a value that would be
        summed over devices too if the sum moved out)."""
        element = self._initial_element(loop, level.index)
        if element is None:
            return None
        if self.flow.is_zero(element):
            return "zero"
        return "threaded" if self.flow.resolve(element).opcode == "get-tuple-element" else None

    def _initial_element(self, loop: Instruction, index: int) -> Instruction | None:
        """The instruction ``loop`` starts its carry element ``index`` from (an element of the
        tuple it is called with), None when the loop is not called with a tuple that has it."""
        init = self.module.instruction(loop.operands[0]) if loop.operands else None
        if init is None or init.opcode != "tuple" or index >= len(init.operands):
            return None
        return self.module.instruction(init.operands[index])

def _saves(buffer_bytes: int, value_bytes: int, runs: int | None) -> bool:
    """One run on the accumulator after the loop moves fewer bytes than the runs inside it
    (an unknown trip count saves when the accumulator is no larger than one run's value)."""
    if runs is None:
        return buffer_bytes <= value_bytes
    return buffer_bytes < runs * value_bytes


def runs_after(loops: tuple[Instruction, ...], left: tuple[str, ...], counts: LoopCounts) -> int | None:
    """Runs per call once the collective leaves the loops named ``left``."""
    return known_product(counts.trip_count(w.name) for w in loops if w.name not in left)


