"""What a target's compiler (a TPU slice's) did with each collective of the CPU's compiled plan.

The CPU compiler keeps every all-reduce in its loop; the TPU's moves some out
(``WhileLoopAllReduceCodeMotion``), combines them, may pipeline them (a copy of the first or
last iteration's collective outside the loop) or removes them. The two modules come from one
lowering, so their instructions share metadata: the ``op_name`` (the JAX name stack and
primitive) and the source line, and the values keep their sizes. Pairing reads that:

- a target collective carries a CPU one's value when it has the same kind (a reduce-scatter
  may stand for the CPU's all-reduce) over some of the same mesh axes, an operand of as many elements (the TPU may gather in
  bfloat16 what the CPU gathers in float32), runs only in loops that pair with loops the CPU
  one runs in (a compiler removes loops, never adds one), and names it: the same ``op_name``
  (jax 0.12: a moved all-reduce keeps its own), or the ``op_name`` of a loop the CPU one runs in
  (jax 0.10.2: a moved all-reduce takes the name of the loop it left), or, for the other
  values of a combined instruction, a share of one that already paired;
- loops pair by ``op_name`` and trip count, in program order among equals.

:func:`compare_plans` gives one :class:`TargetPlacement` per CPU collective: which target
collectives carry its values, which CPU loops it left and which it stays in, whether it was
combined, pipelined or removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING, Iterable

from shardscope.engine.counts import Count, known_sum
from shardscope.collective_kinds import SUM_KINDS
from shardscope.engine.pytree_paths import is_gradient_label
from shardscope.verdict_kinds import FLAGGED, SPLITTABLE

if TYPE_CHECKING:  # annotations only: the CLI's renderings import this module before any analysis
    from shardscope.hardware.fit import MemoryFit
    from shardscope.hardware.machines import Machine
    from shardscope.engine.hlo.plan_costs import PlanCosts
    from shardscope.engine.hlo.roofline import StepEstimate
    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.engine.jaxpr.verdicts import Verdict
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledLoop, CompiledPlan

STAYED, LEFT_LOOP, ENTERED_LOOP = "stayed", "left_loop", "entered_loop"
COMBINED, PIPELINED, REMOVED = "combined", "pipelined", "removed"
CHANGES = (STAYED, LEFT_LOOP, ENTERED_LOOP, COMBINED, PIPELINED, REMOVED)
"""What a target did with a CPU collective, by the name ``TargetPlacement.change`` gives it."""



@dataclass(frozen=True)
class TargetPlacement:
    """What the target's module did with one CPU collective.

    ``target`` are the target collectives that carry its values (the main one first);
    ``left`` the CPU loops it no longer runs in and ``stays_in`` those it still runs in
    (outermost first); ``entered`` the target's loops it runs in although the CPU runs it
    outside them (the CPU hoists a loop-invariant all-gather that the TPU keeps in the loop, to
    hold only the shard between iterations); ``combined`` when a target collective carries it
    together with values of other CPU collectives; ``pipelined`` when copies of it run both
    inside and outside a loop (iterations peeled off by the collective pipeliner).
    """

    collective: CompiledCollective
    target: tuple[CompiledCollective, ...]
    left: tuple[CompiledLoop, ...] = ()
    stays_in: tuple[CompiledLoop, ...] = ()
    combined: bool = False
    pipelined: bool = False
    entered: tuple[CompiledLoop, ...] = ()
    values_left: tuple[str, ...] = ()  # a combined one's values the target moved out of loops the others stay in
    staying_values: tuple[str, ...] = ()
    """Its values the target keeps in a loop that its own verdict says they need not run in
    (the target's module judged value by value, by the CPU's rule)."""
    staying_in: tuple[CompiledCollective, ...] = ()  # the target collectives that keep them there
    carriers: tuple[tuple[str, CompiledCollective], ...] = ()  # each value and the target collective that carries it

    def values_in(self, collective: CompiledCollective) -> tuple[str, ...]:
        """Its values the target's ``collective`` carries."""
        return tuple(dict.fromkeys(name for name, t in self.carriers if t is collective))

    @property
    def removed(self) -> bool:
        """True when no target collective carries its values."""
        return not self.target

    @property
    def left_loop(self) -> bool:
        """True when it runs outside at least one loop it runs in on the CPU."""
        return bool(self.left)

    @property
    def change(self) -> str:
        """The main change: ``removed``, ``pipelined``, ``left_loop``, ``entered_loop``,
        ``combined`` or ``stayed``."""
        if self.removed:
            return REMOVED
        if self.pipelined:
            return PIPELINED
        if self.left:
            return LEFT_LOOP
        if self.entered:
            return ENTERED_LOOP
        return COMBINED if self.combined else STAYED

    @property
    def executions(self) -> int | None:
        """Runs per call on the target: every target collective carrying it (None when unknown)."""
        return known_sum(c.executions for c in self.target)

    @property
    def runs(self) -> Count:
        """:attr:`executions` as a :class:`Count` (an upper bound inside a conditional's branch)."""
        return Count(self.executions, any(c.in_conditional for c in self.target))

    @property
    def staying(self) -> bool:
        """True when the target keeps some of its values in a loop they need not run in: a
        finding on the target, whatever the CPU's verdict was."""
        return bool(self.staying_values)

    @property
    def deferred_by_compiler(self) -> bool:
        """True for a CPU finding (deferrable or loop-invariant) that the target no longer runs
        where it need not, or a CPU sum that is splittable whose values the target split out of
        its loops: every value it keeps in a loop is needed there by the target's own verdict."""
        split = self.collective.verdict.kind == SPLITTABLE and bool(self.values_left)
        return (self.collective.verdict.flagged or split) and bool(self.target) and not self.staying

    def describe_staying(self) -> str:
        """``grad(params['W']) stays in while.20 (4 iterations) on the target (all-reduce-start.1,
        deferrable there; all-reduce.12 on the CPU, x4/call)``: what the target keeps in a loop."""
        c = self.collective
        held = "; ".join(f"{t.name}, {t.verdict.kind} there, in {_loops_words(t.loops)}, {t.runs.badge()}"
                         for t in self.staying_in)
        verb = "stays" if len(self.staying_values) == 1 else "stay"
        return (f"{', '.join(self.staying_values)} {verb} in a loop on the target ({held}); "
                f"{c.name} on the CPU, {c.runs.badge()}")

    def describe(self) -> str:
        """``psum_invariant.35 of params['Wh'] (x16/call) leaves while.70 (8 iterations) and stays
        in while.69 (2 iterations): all-reduce.6, x2/call`` in words."""
        c = self.collective
        what = f"{c.name}{f' of {c.value}' if c.value else ''} ({c.runs.badge()})"
        if self.removed:
            return f"{what} is removed: the target's module has no collective carrying its value"
        parts = []
        if self.left:
            parts.append(f"leaves {_loops_words(self.left)}")
        if self.stays_in:
            parts.append(f"{'and ' if self.left else ''}stays in {_loops_words(self.stays_in)}")
        elif self.left:
            parts.append("and runs outside every loop")
        if self.entered:
            parts.append(f"runs in {_loops_words(self.entered)} (outside it on the CPU)")
        if not parts:
            parts.append("stays where it is")
        if self.values_left:
            parts.append(f"but its {', '.join(self.values_left)} leave{'s' if len(self.values_left) == 1 else ''} it")
        if self.combined:
            parts.append("combined with other values")
        if self.pipelined:
            parts.append("pipelined (a copy runs outside the loop too)")
        names = ", ".join(t.name for t in self.target)
        return f"{what} {' '.join(parts[:2])}{''.join(', ' + p for p in parts[2:])}: {names}, {self.runs.badge()}"


@dataclass(frozen=True)
class TargetComparison:
    """Every CPU collective's placement on one target, and what the target added."""

    target: str
    placements: tuple[TargetPlacement, ...]
    added: tuple[CompiledCollective, ...]
    loop_pairs: tuple[tuple[str, str], ...]

    def placement(self, cpu_name: str) -> TargetPlacement | None:
        """The placement of the CPU collective called ``cpu_name``."""
        return next((p for p in self.placements if p.collective.name == cpu_name), None)

    @property
    def staying_findings(self) -> tuple[TargetPlacement, ...]:
        """The CPU collectives some of whose values the target keeps in a loop that its own
        verdict says they need not run in: the fix is worth writing for this target."""
        return tuple(p for p in self.placements if p.staying)

    @property
    def added_findings(self) -> tuple[CompiledCollective, ...]:
        """The target's collectives that carry no CPU collective's value and that its verdict
        flags in a loop."""
        return tuple(t for t in self.added if t.in_loop and t.verdict.flagged)


@dataclass(frozen=True)
class TargetPlan:
    """One program compiled for a target slice beside the CPU: nothing runs there, so no timings.

    ``target`` is the target's text (``tpu:v5e:2x2``) and ``topology`` its name (``v5e:2x2``);
    ``devices`` how many of the slice's devices the program spans; ``compiled`` the target
    module's compiled plan and ``paired`` its collectives joined with the jaxpr's;
    ``comparison`` what the target did with each CPU collective; ``memory`` is
    ``memory_analysis()`` per device (TPU arrays padded to their tiled layouts), ``cost``
    ``cost_analysis()`` (a loop body counted once); ``compile_s`` the lowering and compile;
    ``cpu_memory`` the CPU module's ``memory_analysis()``, to set beside ``memory``;
    ``fit`` whether the step fits in the chip's memory and ``step`` the estimate of its time on
    the chip (None for a chip without published peaks); ``costs`` its costs on the target's
    interconnect. A plan the target's compiler refused for memory has ``fit.refused``, no
    collectives and no placements: the CPU's plan stands beside it. :attr:`rows` is the plan judged
    collective by collective, :attr:`findings` what ``check`` fails on there.
    """

    target: str
    topology: str
    device_kind: str
    devices: int
    compiled: CompiledPlan
    paired: tuple[PairedCollective, ...]
    comparison: "TargetComparison"
    memory: dict[str, int]
    cost: dict[str, float]
    compile_s: float
    cpu_memory: dict[str, int]
    compiler: str = ""  # XLA:TPU, XLA:GPU: whose plan this is
    device_coords: tuple[tuple[int, ...], ...] = ()
    """Where the device at each position of the program's device assignment sits on the machine
    (``device.coords``: a TPU chip's torus coordinates, a GPU's slice, host and index in its
    host); the interconnect model lays replica groups on them."""
    machine_shape: tuple[int, ...] = ()
    """Devices along each coordinate over the whole target (a slice's chips per torus axis), which
    the program may not span all of."""
    fit: "MemoryFit | None" = None
    step: "StepEstimate | None" = None
    machine: "Machine | None" = None
    """What the target is made of (its ``Target``'s record: chip, interconnect model, words); None
    for a machine shardscope has no record of (the CPU)."""
    costs: "PlanCosts | None" = None
    """What its collectives cost on the target's interconnect, the step estimate with them and what
    deferring each finding saves there: computed once where the plan is made
    (:func:`shardscope.engine.hlo.costing.costed`), read by every rendering."""

    @property
    def refused(self) -> bool:
        """True when the target's compiler refused the step for memory (nothing else is known of it there)."""
        return self.fit is not None and self.fit.refused

    @property
    def does_not_fit(self) -> bool:
        """True when the step needs more memory per device than the chip has (a finding)."""
        return self.fit is not None and self.fit.fits is False

    @property
    def compiler_words(self) -> str:
        """``the TPU compiler``, ``the GPU compiler``: whose plan this is, in words."""
        return f"the {self.compiler.removeprefix('XLA:') or 'target'} compiler"

    @property
    def machine_words(self) -> str:
        """``the slice`` (a TPU's) or ``the GPUs``: what the program was compiled for, in words (its
        machine's own; ``the devices`` without a record)."""
        return "the devices" if self.machine is None else self.machine.words

    def placements_of(self, collective: CompiledCollective) -> tuple["TargetPlacement", ...]:
        """The placements of the CPU collectives whose values the target's ``collective`` carries."""
        return tuple(p for p in self.comparison.placements if any(t is collective for t in p.target))

    def left_loop(self, collective: CompiledCollective) -> bool:
        """True when the target's ``collective`` carries a CPU collective out of a loop it runs in on the CPU."""
        return any(p.left_loop for p in self.placements_of(collective))

    @property
    def staying_findings(self) -> tuple["TargetPlacement", ...]:
        """The CPU collectives whose values this target keeps in a loop they need not run in."""
        return self.comparison.staying_findings

    @cached_property
    def rows(self) -> tuple["TargetRow", ...]:
        """Every collective the target runs, in its module's order, then each CPU collective it
        removed: the plan judged row by row (:class:`TargetRow`), as every rendering shows it."""
        paired = {id(p.compiled): p for p in self.paired if p.compiled is not None}
        rows = []
        for t in self.compiled.collectives:
            carried = self.placements_of(t)
            first = tuple(p for p in carried if p.target[0] is t)
            rows.append(TargetRow(t, paired.get(id(t)), carried, first))
        rows += [TargetRow(None, None, (p,), (p,)) for p in self.comparison.placements if p.removed]
        return tuple(rows)

    @property
    def findings(self) -> tuple["TargetRow", ...]:
        """The collectives the target runs in a loop that need not run there, by their verdict
        there (each a row whose verdict is flagged): what ``check`` fails on for this target."""
        return tuple(row for row in self.rows if row.finding)

    @property
    def counted_findings(self) -> tuple["TargetRow", ...]:
        """:attr:`findings` that fail the check: all of them, but with ``check --min-saving`` those
        whose every finding saves less than the threshold there (``costs.below_min_saving``)."""
        below = set(self.costs.below_min_saving) if self.costs is not None else set()
        return tuple(row for row in self.findings
                     if not (row.staying and all(p.collective.name in below for p in row.staying)))

    @property
    def kept(self) -> tuple["TargetRow", ...]:
        """The collectives the target runs in a loop that its verdict says need to run there (or
        that are a trade-off: stackable, splittable)."""
        return tuple(row for row in self.rows if row.collective is not None and row.collective.in_loop
                     and not row.finding)

    @property
    def moved(self) -> tuple["TargetPlacement", ...]:
        """The CPU findings (and the splittable sums whose values the target split out) the target's
        compiler moved out of every loop they need not run in: no run of them is left in such a
        loop, and no collective carrying them is a finding there."""
        findings = {id(row.collective) for row in self.findings}
        return tuple(p for p in self.comparison.placements
                     if p.deferred_by_compiler and not p.removed and not any(id(t) in findings for t in p.target)
                     and not any(loop.name in p.collective.verdict.loop_ids for loop in p.stays_in))

    @property
    def fails_check(self) -> bool:
        """True when the target's compiler runs in a loop a collective that need not run there (by
        the target's own verdict, and with ``check --min-saving`` saving at least that much), its
        partitioner fell back to a full rematerialization, or the step does not fit in the chip's
        memory (or the compiler refused it for memory)."""
        return bool(self.counted_findings or self.compiled.rematerializations or self.does_not_fit)

    @property
    def below_min_saving(self) -> tuple["TargetPlacement", ...]:
        """The findings whose deferral saves less than ``check --min-saving`` here: they pass."""
        below = set(self.costs.below_min_saving) if self.costs is not None else set()
        return tuple(p for p in self.staying_findings if p.collective.name in below)


@dataclass(frozen=True)
class TargetRow:
    """One row of a target's plan as every rendering shows it: a collective the target runs (with
    the CPU collectives whose values it carries), or a CPU collective the target removed
    (``collective`` None). ``paired`` is the target's collective with the jaxpr equations it comes
    from: its verdict is the row's. The CPU's loops and runs are on the row of the target collective
    that carries it first (the one that keeps it in the most loops) and blank on the others: each
    column adds up to its summary."""

    collective: "CompiledCollective | None"
    paired: "PairedCollective | None"
    cpu: tuple[TargetPlacement, ...]  # the CPU collectives whose values it carries
    first: tuple[TargetPlacement, ...]  # those of them it carries first

    @property
    def value(self) -> str:
        """The value as the target's module names it (the CPU's for a removed one)."""
        return self.collective.value if self.collective is not None else self.cpu[0].collective.value

    @property
    def verdict_kind(self) -> str:
        """The row's verdict: its collective's there, as the target's own plan shows it (``-``
        outside every loop and for a removed one)."""
        if self.collective is None or not self.collective.in_loop:
            return "-"
        return self.paired.verdict_kind if self.paired is not None else self.collective.verdict.kind

    @property
    def verdict(self) -> "Verdict | None":
        """The verdict the row is judged by there, with the reason and the fix every rendering
        gives: its collective's own where that flags it (its loops and runs are the target's, not
        the CPU's), else its paired collective's (None for a CPU collective the target removed)."""
        if self.collective is None:
            return None
        if self.collective.verdict.flagged or self.paired is None:
            return self.collective.verdict
        return self.paired.verdict

    @property
    def finding(self) -> bool:
        """True when the target runs it in a loop that need not hold it: its verdict there is
        flagged (the check fails on it, the summary names it, the row is drawn as a finding)."""
        if self.collective is None or not self.collective.in_loop:
            return False
        return self.paired.flagged if self.paired is not None else self.collective.verdict.flagged

    @property
    def staying(self) -> tuple[TargetPlacement, ...]:
        """The CPU findings whose values this row keeps in a loop they need not run in."""
        return tuple(p for p in self.cpu if any(t is self.collective for t in p.staying_in))

    @property
    def entered(self) -> bool:
        """True when the target runs it in a loop although the CPU runs each value it carries
        outside every loop (or no CPU collective carries it)."""
        return self.collective is not None and self.collective.in_loop and all(not p.collective.in_loop
                                                                               for p in self.cpu)


# --------------------------------------------------------------------------- pairing


@dataclass(frozen=True)
class _Value:
    """What pairing compares: one operand of a sum (a combiner may regroup them), or the whole
    of any other collective (the CPU splits an all-to-all into one operand per device, the TPU
    does not)."""

    collective: CompiledCollective
    index: int
    elements: int
    loops: tuple[str, ...]  # CPU loop names (a target's loops mapped onto the CPU's; "?" when unpaired)
    name: str = ""
    stacked: tuple[int, ...] = ()  # its elements stacked over its innermost loops, one loop more each
    dtype: str = ""  # its element type (``f32``): of two values of one size, the loss is not the count

def _stacked(value: _Value, trips: dict[str, int | None]) -> _Value:
    """``value`` with the sizes it has once a compiler moves it out of its innermost loops as
    the whole buffer each iteration wrote a slot of (a scan's stacked gradients summed at once)."""
    sizes, size = [], value.elements
    for name in reversed(value.loops):
        trip = trips.get(name)
        if trip is None:
            break
        size *= trip
        sizes.append(size)
    return _Value(value.collective, value.index, value.elements, value.loops, value.name, tuple(sizes), value.dtype)


def _values(c: CompiledCollective, loops: tuple[str, ...]) -> list[_Value]:
    if c.kind in SUM_KINDS:
        return [_Value(c, k, _elements(op.shape), loops, op.value, dtype=_dtype(op.shape)) for k, op in enumerate(c.operands)]
    return [_Value(c, 0, sum(_elements(op.shape) for op in c.operands), loops, c.value)]


def compare_plans(cpu: CompiledPlan, target: CompiledPlan, name: str = "") -> TargetComparison:
    """What ``target``'s module did with each collective of ``cpu``'s (the same program)."""
    loop_pairs = _pair_loops(cpu.loops, target.loops)
    to_cpu = dict(loop_pairs)
    trips = {loop.name: loop.trip_count for loop in cpu.loops}
    cpu_values = [_stacked(v, trips) for c in cpu.collectives for v in _values(c, tuple(loop.name for loop in c.loops))]
    target_values = [v for t in target.collectives for v in _values(t, tuple(to_cpu.get(w.name, "?") for w in t.loops))]
    matched = _match(cpu, cpu_values, target_values)
    placements = tuple(_placement(c, matched, cpu_values, target_values, target) for c in cpu.collectives)
    used = {id(t) for p in placements for t in p.target}
    added = tuple(t for t in target.collectives if id(t) not in used)
    return TargetComparison(name or target.backend, placements, added, tuple(loop_pairs))


def _pair_loops(cpu: Iterable[CompiledLoop], target: Iterable[CompiledLoop]) -> list[tuple[str, str]]:
    """``(target loop, CPU loop)`` pairs: the same op_name and trip count, in order; then the
    same op_name alone (a trip count one module knows and the other does not)."""
    free = list(cpu)
    pairs = []
    rest = []
    for loop in target:
        twin = next((c for c in free if c.op_name == loop.op_name and c.trip_count == loop.trip_count), None)
        if twin is None:
            rest.append(loop)
            continue
        free.remove(twin)
        pairs.append((loop.name, twin.name))
    for loop in rest:
        twin = next((c for c in free if c.op_name == loop.op_name), None)
        if twin is not None:
            free.remove(twin)
            pairs.append((loop.name, twin.name))
    return pairs


def _match(cpu: CompiledPlan, cpu_values: list[_Value], target_values: list[_Value]) -> dict[int, list[int]]:
    """``{CPU value position: [target value positions]}``: the first is the one that carries
    it, any further one a pipelined copy."""
    loop_names = {loop.name: loop.op_name for loop in cpu.loops}
    matched: dict[int, list[int]] = {}
    taken: set[int] = set()
    for round_ in ("op_name", "combined", "source", "value"):
        for i, value in enumerate(cpu_values):
            if i in matched:
                continue
            hits = [j for j, t in enumerate(target_values) if j not in taken and _fits(value, t)
                    and _names(value, t, loop_names, round_, target_values, matched)]
            # of several, the one nested as it is, then the one of its name, then of its size (not
            # the stacked buffer's), then of its type
            hits.sort(key=lambda j: (not _nested_as(value, target_values[j]), not _named_alike(value, target_values[j]),
                                     target_values[j].elements != value.elements, target_values[j].dtype != value.dtype))
            if hits:
                matched[i] = [hits[0]]
                taken.add(hits[0])
    # terms of one gradient that the target adds up before summing them once (a norm's scale used
    # twice in a layer: the CPU sums each term, XLA:TPU their sum): the sum of the same name
    summed = {target_values[js[0]].name: js[0] for js in matched.values() if is_gradient_label(target_values[js[0]].name)}
    for i, value in enumerate(cpu_values):
        j = summed.get(value.name) if i not in matched else None
        if j is not None and _fits(value, target_values[j]) and _nested_as(value, target_values[j]):
            matched[i] = [j]
    for i, js in matched.items():  # copies of the same value outside (or inside) the loop
        first = target_values[js[0]]
        for j, t in enumerate(target_values):
            if j not in taken and _fits(cpu_values[i], t) and t.collective.op_name == first.collective.op_name \
                    and len(t.loops) != len(first.loops):
                js.append(j)
                taken.add(j)
    return matched


def _fits(value: _Value, t: _Value) -> bool:
    """The same kind of collective and a value of as many elements, or of a sum the target
    moved out of the innermost loops it runs in on the CPU, of the whole stacked buffer (as
    many elements as those loops' slots hold together)."""
    kinds = {value.collective.kind, t.collective.kind}
    if len(kinds) > 1 and not kinds <= SUM_KINDS:
        return False
    if not _same_axes(value.collective, t.collective) or _named_apart(value, t):
        return False
    if value.elements == t.elements:
        return True
    left = len(value.loops) - len(t.loops)
    return t.collective.kind in SUM_KINDS and 0 < left <= len(value.stacked) and value.stacked[left - 1] == t.elements \
        and tuple(t.loops) == value.loops[:len(t.loops)]


def _same_axes(c: CompiledCollective, t: CompiledCollective) -> bool:
    """False when both collectives' replica groups decode to mesh axes and no axis is common to
    both: a sum over ``model`` is never carried by one over ``data``, whatever their sizes and
    names. A target may still do in one collective what the CPU does in several over some of its
    axes (XLA:TPU gathers over ``('y', 'x')`` at once what the CPU gathers over ``x``, then ``y``)."""
    return not c.axes or not t.axes or bool(set(c.axes) & set(t.axes))


def _nested_as(value: _Value, t: _Value) -> bool:
    """The target runs it only in loops the CPU one runs in (a compiler removes loops of the
    program; only the CPU's hoisting of loop-invariant values makes a target's run elsewhere)."""
    remaining = iter(value.loops)
    return all(any(name == loop for loop in remaining) for name in t.loops)


def _names(value: _Value, t: _Value, loop_op_names: dict[str, str], round_: str, target_values: list[_Value],
           matched: dict[int, list[int]]) -> bool:
    """Whether ``t`` names ``value`` in this round: by op_name (its own, or a loop's it runs
    in), as another value of a combined instruction that already paired, by source line, or
    by the value's own name (a program input both gather)."""
    c, tc = value.collective, t.collective
    if round_ == "op_name":
        return bool(tc.op_name) and (tc.op_name == c.op_name or tc.op_name in {loop_op_names[n] for n in value.loops})
    if round_ == "combined":
        partners = {id(target_values[js[0]].collective) for js in matched.values()}
        return id(tc) in partners and _nested_as(value, t)
    if round_ == "source":
        return bool(tc.source) and tc.source == c.source and _nested_as(value, t)
    return bool(value.name) and value.name == t.name


def _placement(c: CompiledCollective, matched: dict[int, list[int]], cpu_values: list[_Value],
               target_values: list[_Value], target: CompiledPlan) -> TargetPlacement:
    """The placement of the CPU collective ``c`` from its values' matches."""
    positions = [i for i, value in enumerate(cpu_values) if value.collective is c]
    hits = [matched[i] for i in positions if i in matched]
    if not hits:
        return TargetPlacement(c, ())
    # the value the target runs in the most loops leads: the collective still runs there for it
    lead = max(range(len(hits)), key=lambda k: len(target_values[hits[k][0]].loops))
    main = target_values[hits[lead][0]]
    # the main one first (the table's loops column reads it): the one that keeps it in the loop
    targets = list(dict.fromkeys([main.collective, *(target_values[j].collective for js in hits for j in js)]))
    stays = set(main.loops)
    values_left = tuple(dict.fromkeys(
        cpu_values[i].name or f"value {k}" for k, i in enumerate(positions)
        if i in matched and len(target_values[matched[i][0]].loops) < len(main.loops)))
    left = tuple(loop for loop in c.loops if loop.name not in stays)
    stays_in = tuple(loop for loop in c.loops if loop.name in stays)
    cpu_loops = {loop.name for loop in c.loops}
    entered = tuple(loop for loop, name in zip(main.collective.loops, main.loops) if name not in cpu_loops)
    others = {id(target_values[j].collective) for i, js in matched.items() if i not in positions for j in js}
    carried_here = sum(1 for js in hits for j in js if target_values[j].collective is main.collective)
    combined = id(main.collective) in others or (main.collective.kind in SUM_KINDS and len(main.collective.operands) > carried_here)
    staying = [(cpu_values[i].name or f"value {k}", target_values[j]) for k, i in enumerate(positions) if i in matched
               for j in matched[i] if _stays_flagged(cpu_values[i], target_values[j])]
    carriers = tuple((cpu_values[i].name or f"value {k}", target_values[matched[i][0]].collective)
                     for k, i in enumerate(positions) if i in matched)
    return TargetPlacement(c, tuple(targets), left, stays_in, combined, any(len(js) > 1 for js in hits), entered,
                           values_left, tuple(dict.fromkeys(name for name, _ in staying)),
                           tuple(dict.fromkeys(t.collective for _, t in staying)), carriers)


def _stays_flagged(value: _Value, t: _Value) -> bool:
    """True when the target value ``t`` carrying the CPU's ``value`` runs in a loop the CPU
    runs it in too, and the target's own verdict flags it there: its instruction's verdict, and
    for a sum (which may combine values the loop needs with values it does not) its own
    operand's. A collective the target moved into a loop the CPU runs it outside of (a
    parameter gathered again each iteration to hold only its shard between them) is the
    compiler's choice, not the program's: no finding."""
    c = t.collective
    if not c.in_loop or not c.verdict.flagged or not set(t.loops) & set(value.loops):
        return False
    return c.kind not in SUM_KINDS or t.index >= len(c.operands) or c.operands[t.index].verdict in FLAGGED


def _named_apart(value: _Value, t: _Value) -> bool:
    """Both values are named as gradients, of different arguments: the two modules come from one
    lowering and are named by one namer, so they are two values, whatever their sizes."""
    return is_gradient_label(value.name) and is_gradient_label(t.name) and value.name != t.name


def _named_alike(value: _Value, t: _Value) -> bool:
    """Both values carry a name and it is the same one."""
    return bool(value.name) and value.name == t.name


def _dtype(shape: str) -> str:
    """The element type of a logical shape text (``f32[4,16]`` -> ``f32``; a tuple's first leaf)."""
    return shape.lstrip("(").split("[", 1)[0]


def _elements(shape: str) -> int:
    """Elements of a logical shape text (``f32[4,16]`` -> 64; a tuple's leaves together)."""
    total = 0
    for part in shape.replace("(", "").replace(")", "").split("]"):
        if "[" not in part:
            continue
        dims = [int(d) for d in part.split("[", 1)[1].split(",") if d.strip().isdigit()]
        total += prod(dims)
    return total


def _loops_words(loops: tuple[CompiledLoop, ...]) -> str:
    words = [f"{loop.name} ({'?' if loop.trip_count is None else loop.trip_count} iterations)" for loop in loops]
    return " and ".join(words)
