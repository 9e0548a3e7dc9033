"""Whether a compiled collective inside a while loop has to run there, judged on the compiled module.

The verdicts of the jaxpr view (:mod:`shardscope.engine.jaxpr.verdicts`), decided on the
partitioned module's own dataflow, value by value (a combined collective carries several):

- ``deferrable``: a sum (an all-reduce or reduce-scatter whose combiner adds) whose values only
  accumulate into loop carries, through linear steps with coefficients the same on every device
  (:mod:`~shardscope.engine.hlo.accumulation`): moves, slices, adds of other accumulated values,
  a ``select`` or conditional on a predicate the same on every device (a mask replicated over
  the devices, T5X's ``lax.cond(i == 0, m, prev + m)``), a scaling by a factor the same on every
  device, a dynamic-update-slice. Seen through fusions and nested loops (an inner loop whose
  carry accumulates it, started from zeros or from the outer carry). One run after the loop
  must move fewer bytes than the runs in it (a sum written into its own slot of a stacked
  output saves nothing: see ``stackable``). A reduce-scatter (or the TPU's all-reduce scattered
  by its fusion) deferred sums the whole accumulator after the loop: its bytes, not the
  shard's, are what one run then moves. Two sums added into the same accumulator (XLA:GPU's
  copy of a loop's last iteration beside the loop's own) leave it together, and so do the two
  sums of the partitioner's scatter-add into a replicated accumulator (the accumulator and one
  sum kept on one device of the group by a ``select`` on the partition id, every device's rows
  scattered in, the buffer summed over the group: see :mod:`~shardscope.engine.hlo.accumulation`).
- ``stackable``: each iteration writes the collective's result into its own slot of a stacked
  carry (:mod:`~shardscope.engine.hlo.slots`): one collective of the slots after the loop gives
  the same result, whatever its combiner.
- ``loop_invariant``: no operand depends on what the loop changes (its changing carry
  elements, seen through inner loops that pass them on): it can run before the loop.
- ``needed``: anything else (a wrong "deferrable" is worse than a missed one): a value the next
  iteration reads (SGD's weights updated with the summed gradient), one a ``maximum`` takes.

The instruction's verdict is its values' (:func:`shardscope.engine.hlo.fixes.verdict_of`): the
same for all, ``splittable`` when some values could leave and the others are needed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shardscope.engine.counts import known_product
from shardscope.engine.hlo.accumulation import AccumulationWalk, Accumulated, NotAccumulated, Value
from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.linear_steps import LinearSteps
from shardscope.engine.hlo.loop_facts import LoopFacts
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.replication import Replication
from shardscope.engine.hlo.sites import CollectiveSite, SiteFinder
from shardscope.engine.hlo.slots import SlotFinder
from shardscope.engine.hlo.text import Computation, HloModule, Instruction
from shardscope.engine.jaxpr.verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, STACKABLE
from shardscope.collective_kinds import ALL_REDUCE, REDUCE_SCATTER, SUM_KINDS

_STACKING_COMBINERS = frozenset({"add", "maximum", "minimum", "multiply"})
"""Combiners whose collective of a stacked buffer after the loop gives every slot what the
collective of that slot's value gave in the loop (each slot combines its own values only)."""
_NUMERIC = frozenset({"bf16", "f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "c64", "c128"})
_PLACING = FORWARDING | {"slice", "dynamic-slice", "pad", "broadcast", "negate", "reverse"}
"""Steps that place one value among zeros or cut it (the way to a partner's value, walked back)."""
_BRANCH_ROLES = frozenset({"branch", "true_computation", "false_computation"})
_PARTNER_ROUNDS = 8
"""How many times a walk is made again with the other sums it met added into the same accumulator
(each round takes in every one it met)."""


@dataclass(frozen=True)
class Reader:
    """What reads a needed sum in its loop other than to accumulate it: the JAX primitive
    (``integer_pow``; the instruction's opcode where XLA kept none), whether it is the backward
    pass's, and the user's line that wrote it (``tp3.py:11 (loss)``; empty where the module kept none)."""

    operation: str
    backward: bool = False
    source: str = ""


@dataclass(frozen=True)
class OperandVerdict:
    """The verdict on one value a collective carries (a combined collective carries several).

    ``loops``: the while loops (outermost first) it can leave; ``bytes_after`` the per-device
    bytes one run after them moves (the accumulator; a loop-invariant one's whole result), ``stacked`` when it is written into its
    own slot of a stacked output; ``carry_read`` when a needed sum is added into a carry that
    the loop also reads (the next iteration uses the sum: not an accumulator); ``read_by`` what
    else reads a needed sum in the loop (the first use the walk found that is no linear step).
    ``saving_unknown``: deferrable under an unknown trip count with an accumulator larger than
    one run (``bytes_per_run``). ``slots``: a loop-invariant collective hoisted out of a loop
    around another that changes its operand keeps that many results (None: unknown).
    ``partners``: other collectives summed into the same accumulator, which leave the loop with
    it (the copy of a loop's last iteration a GPU compiler peels off). ``masked``: the value
    reaches the accumulator kept on one device of each group and summed over the group again
    (the partitioner's scatter-add into a replicated accumulator).
    """

    kind: str
    loops: tuple[str, ...] = ()
    bytes_after: int | None = None
    stacked: bool = False
    carry_read: bool = False
    saving_unknown: bool = False
    bytes_per_run: int | None = None
    slots: int | None = 1
    partners: tuple[str, ...] = ()
    read_by: Reader | None = None
    masked: bool = False


@dataclass(frozen=True)
class _Level:
    """One loop's walk: what accumulates there, and the other sums that accumulate with it."""

    found: Accumulated | NotAccumulated
    partners: tuple[CollectiveSite, ...] = ()
    partner_bytes: tuple[tuple[str, int], ...] = ()  # a combined partner's: the bytes of the operand met


class CompiledClassifier:
    """Verdicts for the collectives of one module (per-loop facts cached)."""

    def __init__(self, module: HloModule, flow: Flow | None = None, counts: LoopCounts | None = None,
                 finder: SiteFinder | None = None, replicated_parameters: frozenset[int] = frozenset()) -> None:
        self.module = module
        self.flow = flow or Flow(module)
        self.counts = counts or LoopCounts(module, self.flow)
        self.facts = LoopFacts(module, self.flow, self.counts)
        self.slots = SlotFinder(self.flow, self.facts, self.counts)
        self.finder = finder or SiteFinder(module, self.flow)
        self.replicated_parameters = replicated_parameters  # entry parameters the same on every device
        self._steps: dict[str, LinearSteps] = {}

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
        return self.deferral_verdicts(site)

    def deferral_verdicts(self, site: CollectiveSite) -> tuple[OperandVerdict, ...]:
        """One verdict per operand on whether it could leave its loops after them (deferred or
        stacked), whether or not it could also run before them (loop-invariant)."""
        inst = site.instruction
        count = max(1, len(site.carried))
        combiner = self.combiner(inst) if site.kind in SUM_KINDS else None
        if combiner is None or not site.loops:
            return (OperandVerdict(NEEDED),) * count
        if len(inst.operands) > 1 and site.kind not in (ALL_REDUCE, REDUCE_SCATTER):
            return (OperandVerdict(NEEDED),) * count  # a combined sum's values are the tuple's elements
        if site.parts:  # the GPU's flat form: each value is judged from the slice that holds its sum
            return tuple(self._deferral(site, None, k, combiner) for k in range(len(site.parts)))
        return tuple(self._deferral(site, k if len(inst.operands) > 1 else None, None, combiner) for k in range(count))

    def trip_count(self, loop: Instruction) -> int | None:
        """The loop's trip count (written by XLA or derived)."""
        return self.counts.trip_count(loop.name)

    def combiner(self, inst: Instruction) -> str | None:
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

    def _runs_in(self, inst: Instruction, body: Computation) -> bool:
        """True when ``inst`` sits in ``body`` or in a computation a call or fusion there runs
        inline, or in a branch of a conditional there (the walk leaves a branch by its result)."""
        computation = inst.computation
        for _ in range(16):
            if computation == body.name:
                return True
            caller = self.flow.inlined_by.get(computation) or self._branching(computation)
            if caller is None:
                return False
            computation = caller.computation
        return False

    def _branching(self, computation: str) -> Instruction | None:
        """The conditional ``computation`` is the one caller of, as a branch (None otherwise)."""
        callers = self.module.callers.get(computation, ())
        if len(callers) != 1:
            return None
        caller, role = callers[0]
        return caller if caller.opcode == "conditional" and role in _BRANCH_ROLES else None

    def _steps_for(self, inst: Instruction) -> LinearSteps:
        """The linear steps for a collective over ``inst``'s groups (what is the same on every device depends on them)."""
        groups = inst.attribute("replica_groups") or "{}"
        if groups not in self._steps:
            known = self.replicated_parameters
            self._steps[groups] = LinearSteps(
                self.flow, self.facts, Replication(self.module, self.flow, groups, replicated_parameters=known),
                Replication(self.module, self.flow, groups, sums_shared=False, replicated_parameters=known))
        return self._steps[groups]

    def _deferral(self, site: CollectiveSite, index: int | None, part: int | None, combiner: str) -> OperandVerdict:
        """Follow one value the collective makes outwards, loop by loop, and keep the outermost
        loop whose carry accumulates it with bytes saved. ``part`` is one value of the GPU's flat
        form (a concatenation summed at once): followed from the slice that takes its sum back.
        A value the innermost loop writes into its own slot of a stacked buffer, and no loop
        accumulates with a saving, is ``stackable`` (any of :data:`_STACKING_COMBINERS`); only a
        sum accumulates."""
        value, element, value_bytes = self._followed(site, index, part)
        steps = self._steps_for(site.instruction)
        seeds: list[Value] = [(value, element)]
        inits: list[tuple[Instruction, int]] = []
        threaded: dict[str, frozenset[int]] = {}
        runs: int | None = 1
        slots: int | None = 1  # how many of the value a stacked accumulator holds
        best = stack = None
        stacked = scattered = carry_read = masked = False
        read_by: Reader | None = None
        partners: tuple[CollectiveSite, ...] = ()
        partner_bytes: dict[str, int] = {}
        for depth, loop in enumerate(reversed(site.loops)):
            body = self.facts.called(loop, "body")
            if body is None or any(not self._runs_in(s, body) for s, _ in seeds):
                break
            if depth == 0 and combiner in _STACKING_COMBINERS:
                slot = self.slots.slot(value, element, loop, body, combiner, steps, value_bytes)
                if slot is not None:
                    stack = OperandVerdict(STACKABLE, (loop.name,), slot.buffer_bytes, True, bytes_per_run=value_bytes)
            if combiner != "add":
                break
            level = self._level(site, loop, body, seeds, inits, threaded, steps)
            if isinstance(level.found, Accumulated) and level.found.masked \
                    and (site.kind != ALL_REDUCE or (part is None and self._scatters(site, index))):
                level = _Level(NotAccumulated())  # a device's own shard, kept on one device, is not the sum
            if isinstance(level.found, NotAccumulated):
                carry_read = carry_read or (level.found.carry_read and best is None)
                if best is None and level.found.read_by is not None:
                    read_by = self._reader(level.found.read_by)
                break
            found = level.found
            partners = tuple(dict.fromkeys(partners + level.partners))
            partner_bytes.update(level.partner_bytes)
            stacked = stacked or found.stacked
            masked = masked or found.masked
            scattered = scattered or found.scattered or (part is None and self._scatters(site, index))
            trip = self.trip_count(loop)
            runs = None if runs is None or trip is None else runs * trip
            stacked_bytes = None if slots is None else value_bytes * slots
            buffer_bytes = self._accumulator_bytes(site, index, part, body, found.carries, scattered, stacked_bytes)
            if found.stacked:
                slots = None if slots is None or trip is None else slots * trip
            left = tuple(w.name for w in site.loops[len(site.loops) - depth - 1:])
            if runs is None:  # an unknown trip count: it saves when the accumulator is no larger than one run
                saves = buffer_bytes <= value_bytes
            else:
                moved = self._moved(value_bytes, runs, partners, left, partner_bytes)
                saves = moved is not None and buffer_bytes < moved
            if saves or runs is None:  # an unknown trip count: valid, the saving unknown
                best = OperandVerdict(DEFERRABLE, left, buffer_bytes, stacked, saving_unknown=not saves,
                                      bytes_per_run=value_bytes, partners=tuple(p.instruction.name for p in partners),
                                      masked=masked)
            # outwards: the loop's results at those indices, if it starts them from zeros or from the outer carry
            init = self.flow.producer(loop, 0)
            if init is None or init.opcode != "tuple":
                break
            seeds = [(loop, k) for k in found.carries]
            inits = [(init, k) for k in found.carries]
            threaded = {loop.name: frozenset(found.carries)}
        if best is not None:
            return best
        if stack is not None:
            return stack
        return OperandVerdict(NEEDED, stacked=stacked, carry_read=carry_read, read_by=read_by)

    def _followed(self, site: CollectiveSite, index: int | None, part: int | None) -> tuple[Instruction, int | None, int]:
        """Where :meth:`_deferral` starts: the value the collective makes (``part``: the slice of the
        GPU's flat form that takes its sum back), its tuple element, and the bytes of one run's operand."""
        carried = site.parts[part] if part is not None else site.instruction.operands[index or 0]
        operand = self.module.instruction(carried)
        value_bytes = operand.shape.nbytes if operand is not None else 0
        if part is not None:
            return self.module.instruction(site.part_results[part]) or site.result, None, value_bytes
        return site.result, index, value_bytes

    def _accumulator_bytes(self, site: CollectiveSite, index: int | None, part: int | None, body: Computation,
                           carries: Iterable[int], scattered: bool, stacked_bytes: int | None) -> int:
        """The bytes per device of the accumulator a deferred sum needs: the loop's carries at
        ``carries``; deferred, a scattered sum accumulates the whole unscattered value on each device
        (the carries times the scatter's factor, or ``stacked_bytes``, the values a stacked
        accumulator holds, where the factor is not known)."""
        root = body.root
        carried_bytes = sum(root.shape.element(k).nbytes for k in carries) if root is not None and root.shape.is_tuple else 0
        factor = self._scatter_factor(site, index) if part is None else None
        if factor is not None:
            return carried_bytes * factor
        if scattered and stacked_bytes is not None:
            return stacked_bytes
        return carried_bytes

    def _reader(self, inst: Instruction) -> Reader:
        """``inst`` as the reason of a needed sum names it: its JAX primitive, pass and line."""
        head = inst.metadata.op_name.split(";", 1)[0]
        source = self.module.source(inst, users=True)
        return Reader(head.rsplit("/", 1)[-1] if head else inst.opcode, "transpose(" in head,
                      source.text() if source is not None else "")

    def _level(self, site: CollectiveSite, loop: Instruction, body: Computation, seeds: list[Value],
               inits: list[tuple[Instruction, int]], threaded: dict[str, frozenset[int]], steps: LinearSteps) -> _Level:
        """The walk of one loop's body from ``seeds``; another sum of the same kind added into
        the same accumulator is taken in and the walk made again (both leave the loop, or neither)."""
        partners: list[CollectiveSite] = []
        partner_bytes: dict[str, int] = {}
        extra: list[Value] = []
        extra_inits: list[tuple[Instruction, int]] = []
        threads = dict(threaded)
        for _ in range(_PARTNER_ROUNDS):
            walk = AccumulationWalk(self.flow, steps, self.facts, loop, body, site.instruction, threads,
                                    lambda inst: self._partner(site, loop, body, inst, steps))
            found = walk.run(seeds + extra, inits + extra_inits)
            if not isinstance(found, NotAccumulated) or not found.partners:
                return _Level(found, tuple(partners), tuple(partner_bytes.items()))
            for met in found.partners:
                taken = self._taken_partner(site, loop, body, met, steps)
                if taken is None or (taken[1], None) in extra:
                    return _Level(NotAccumulated(added_term=True))
                partner, value, inner = taken
                if partner is not site and partner not in partners:
                    partners.append(partner)
                    element = self._combined_operand_bytes(partner, value)
                    if element is not None:
                        partner_bytes[partner.instruction.name] = element
                extra.append((value, None))
                if inner is not None:
                    inner_loop, carries = inner
                    threads[inner_loop.name] = threads.get(inner_loop.name, frozenset()) | carries
                    start = self.flow.producer(inner_loop, 0)
                    extra_inits += [(start, k) for k in carries] if start is not None else []
        return _Level(NotAccumulated(added_term=True))

    def _partner(self, site: CollectiveSite, loop: Instruction, body: Computation, inst: Instruction,
                 steps: LinearSteps) -> Instruction | None:
        taken = self._taken_partner(site, loop, body, inst, steps)
        return taken[1] if taken is not None else None

    def _taken_partner(self, site: CollectiveSite, loop: Instruction, body: Computation, inst: Instruction,
                       steps: LinearSteps) -> tuple[CollectiveSite, Instruction, tuple[Instruction, frozenset[int]] | None] | None:
        """``(the other collective, its value here, (the inner loop that accumulates it, which
        carries))`` for the first value ``inst`` is made of (by moves, slices, padding and adds)
        that is another value of the same instruction, or of another sum of the same kind and
        groups as ``site``'s, in this loop's body or accumulated by a loop directly inside it."""
        for source in self._sources(inst):
            own = self.flow.producer(source, 0) if source.opcode == "get-tuple-element" else None
            if source is site.result or own is site.result or source.name in site.part_results:
                return site, source, None  # another value of the same (combined) instruction
            for other in self.finder.sites():
                if other is site or not self._alike(site, other, combined=True):
                    continue
                taken = self._fused_as(source)
                if taken.computation == body.name and self._combined_operand_bytes(other, taken):
                    return other, taken, None  # one value of another combined (or flat) sum, a fold's: see accumulation
                if len(other.instruction.operands) != 1 or other.parts:
                    continue
                if source is other.result and other.result.computation == body.name:
                    return other, source, None
                inner = self._other_value(site, body, other, source, steps)
                if inner is not None:
                    return other, source, inner
        return None

    def _other_value(self, site: CollectiveSite, body: Computation, other: CollectiveSite, source: Instruction,
                     steps: LinearSteps) -> tuple[Instruction, frozenset[int]] | None:
        """The loop directly inside ``body`` and the carries it accumulates ``other``'s values in,
        when ``source`` is one of that loop's results there."""
        inner = other.loops[-1] if other.loops else None
        if inner is None or source.opcode != "get-tuple-element" or self.flow.producer(source, 0) is not inner \
                or inner.computation != body.name or tuple(other.loops[:-1]) != tuple(site.loops[:len(other.loops) - 1]):
            return None
        inner_body = self.facts.called(inner, "body")
        if inner_body is None or other.result.computation != inner_body.name:
            return None
        walk = AccumulationWalk(self.flow, steps, self.facts, inner, inner_body, other.instruction)
        found = walk.run([(other.result, None)])
        if isinstance(found, Accumulated) and source.tuple_index in found.carries:
            return inner, frozenset(found.carries)
        return None

    def _sources(self, inst: Instruction) -> list[Instruction]:
        """The values ``inst`` is made of by moves, slices, padding and adds, nearest first."""
        found: list[Instruction] = []
        queue, seen = [inst], set[str]()
        while queue and len(seen) < 256:
            current = self.flow.resolve(queue.pop(0))
            if current.name in seen:
                continue
            seen.add(current.name)
            found.append(current)
            if current.opcode in _PLACING:
                queue += [p for p in (self.flow.producer(current, 0),) if p is not None]
            elif current.opcode in ("add", "subtract"):
                queue += [p for p in (self.flow.producer(current, k) for k in (0, 1)) if p is not None]
        return found

    def _alike(self, site: CollectiveSite, other: CollectiveSite, combined: bool = False) -> bool:
        """Two sums whose values one collective after the loop can sum together: the same kind
        of sum, combiner and groups (as sets of devices, however each prints them), each
        carrying one value (``combined``: or ``other`` several, one of which is met)."""
        a, b = site.instruction, other.instruction
        return other.kind in SUM_KINDS and site.kind in SUM_KINDS and (len(b.operands) == 1 or combined) \
            and (not other.parts or combined) and self.combiner(b) == self.combiner(a) == "add" \
            and (b.attribute("replica_groups") == a.attribute("replica_groups")
                 or self._steps_for(a).replication.same_groups(b.attribute("replica_groups"))) \
            and b.attribute("use_global_device_ids") == a.attribute("use_global_device_ids")

    def _fused_as(self, inst: Instruction) -> Instruction:
        """The fusion whose fused computation ``inst`` is the root of (the GPU's ``wrapped_slice``
        that takes a flat sum's part back), else ``inst``."""
        fusion = self.flow.inlined_by.get(inst.computation)
        root = self.module.computations[inst.computation].root
        return fusion if fusion is not None and root is inst and fusion.opcode == "fusion" else inst

    def _combined_operand_bytes(self, other: CollectiveSite, value: Instruction) -> int | None:
        """The bytes of the operand of ``other``, a combined sum, whose sum ``value`` (a
        get-tuple-element of its result; of the GPU's flat form, the slice that takes a part's
        sum back) takes out; None for any other value."""
        inst = other.instruction
        if value.name in other.part_results:
            part = self.module.instruction(other.parts[other.part_results.index(value.name)])
            return part.shape.nbytes if part is not None else None
        if len(inst.operands) < 2 or value.opcode != "get-tuple-element" or self.flow.producer(value, 0) is not other.result:
            return None
        index = value.tuple_index
        operand = self.module.instruction(inst.operands[index]) if index is not None and index < len(inst.operands) else None
        return operand.shape.nbytes if operand is not None else None

    def _moved(self, value_bytes: int, runs: int | None, partners: tuple[CollectiveSite, ...],
               left: tuple[str, ...], partner_bytes: dict[str, int] | None = None) -> int | None:
        """The bytes the runs inside the loops ``left`` move for this value and its partners (a
        combined partner's: the operand met, ``partner_bytes``) (None when a trip count is unknown)."""
        if runs is None:
            return None
        total = runs * value_bytes
        for partner in partners:
            inside = known_product(self.trip_count(w) for w in partner.loops if w.name in left)
            operand = self.module.instruction(partner.instruction.operands[0])
            if inside is None or operand is None:
                return None
            total += inside * (partner_bytes or {}).get(partner.instruction.name, operand.shape.nbytes)
        return total

    def _scatter_factor(self, site: CollectiveSite, index: int | None) -> int | None:
        """How many times larger the unscattered sum is than the shard a reduce-scatter (or the
        TPU's scattering all-reduce fusion) gives each device; None when it does not scatter."""
        if not self._scatters(site, index):
            return None
        operand = self.module.instruction(site.instruction.operands[index or 0])
        result = site.result.shape.element(index) if index is not None and site.result.shape.is_tuple else site.result.shape
        if operand is None or not result.nbytes or operand.shape.nbytes % result.nbytes:
            return None
        return operand.shape.nbytes // result.nbytes

    def _scatters(self, site: CollectiveSite, index: int | None) -> bool:
        """True when the sum's result where it runs is smaller than its operand: a
        reduce-scatter, or an all-reduce whose fusion keeps the device's shard (TPU)."""
        operand = self.module.instruction(site.instruction.operands[index or 0])
        result = site.result.shape.element(index) if index is not None and site.result.shape.is_tuple else site.result.shape
        return operand is not None and result.nbytes < operand.shape.nbytes


def runs_after(loops: tuple[Instruction, ...], left: tuple[str, ...], counts: LoopCounts) -> int | None:
    """Runs per call once the collective leaves the loops named ``left``."""
    return known_product(counts.trip_count(w.name) for w in loops if w.name not in left)
