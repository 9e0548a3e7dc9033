"""A step estimate: the compiled module's work against a chip's peaks, a roofline per instruction.

Each instruction the module runs (loops counted: :mod:`shardscope.engine.hlo.work`) takes the
longer of its work at the chip's rates (each kind of its flops at its unit's: matmuls at their
operand type's and precision's peak, vector work and scatters at the rates measured on v5e:
:meth:`Chip.rate <shardscope.hardware.chips.Chip.rate>`) and its bytes at the bandwidth the
chip reaches (a gather from main memory reads row by row: its reads take each row's access
time instead); the step is their sum, plus the chip's overhead per call and per loop iteration
(measured on a real v5e: about 0.59 ms per call and 0.16 us per iteration,
:mod:`shardscope.hardware.chips`), 0.27 us per kernel outside loops, and the host's work for each
array the call takes and returns. Two figures per call: waited on (:attr:`StepEstimate.seconds`)
and dispatched back to back (:attr:`StepEstimate.dispatched_seconds`). A module holding
instructions no rule covers (a sort, a top-k, a loop of unknown trip count) gets a lower bound
that names them. A module holding instructions of a kind the chip's corpus measured outside the
band (:mod:`shardscope.engine.hlo.band`: a grouped or strided convolution, a cumsum) names them
with the ratios measured (:attr:`StepEstimate.outside_band`). It is an estimate, and says what it leaves out (:data:`LEAVES_OUT`) and how it
compared with a real chip (:mod:`shardscope.hardware.checked`).

Collectives are the interconnect's: :attr:`StepEstimate.collectives_s` is None until a model
of the target's interconnect fills it (:meth:`StepEstimate.with_collectives`); then the
latency-hiding scheduler's overlap of communication with compute bounds the step: at least the
longer of the two (all of it hidden), at most their sum (none of it), less what overlaps by
construction (:func:`overlapped_times`, the one place the step meets the interconnect:
:func:`joined_step`):

- XLA's collective matmul (the SPMD partitioner's windowed einsum, a loop whose body is named
  ``windowed_dot_general_body...``) splits a matmul and the all-gather or reduce-scatter beside it
  into steps, each step's collective-permutes independent of its matmul chunk, so the loop takes
  the longer of its permutes and its own work, never their sum (:data:`COLLECTIVE_MATMUL`);
- XLA:TPU's async collective fusion steps a collective in the fusions of the work it overlaps
  (:data:`~shardscope.engine.hlo.sites.STEPPED`): the collective takes the longer of its own
  time and those fusions' work, never their sum (:data:`ASYNC_COLLECTIVE_FUSION`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from shardscope.hardware.checked import MeasuredKind, unchecked_words
from shardscope.hardware.chips import MEMORY_UNITS, Chip
from shardscope.collective_kinds import COLLECTIVE_PERMUTE
from shardscope.engine.hlo.band import KINDS
from shardscope.engine.hlo.flops import FlopCount
from shardscope.engine.hlo.work import ModuleWork

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective

LEAVES_OUT = (
    "collectives (the interconnect's time; not in this figure)",
    "overlap of communication with compute (bounded: max and sum)",
    "caches and on-chip memory (every fusion reads and writes HBM)",
    "the compiler's layouts and padding (logical sizes)",
    "a matrix unit's tiles filled in part (a 64-feature convolution on a 128-wide unit)",
)
"""What every step estimate leaves out, in words."""

WINDOWED_BODY = "windowed_dot_general_body"
"""What the SPMD partitioner names a collective matmul loop's body (``windowed_dot_general_body_ag``,
``_rs``; XLA:TPU adds suffixes such as ``.1.clone.sunk``)."""

COLLECTIVE_MATMUL = (
    "XLA:TPU turns an all-gather or reduce-scatter over the tensor axis beside a matmul into a loop of "
    "collective-permutes (the SPMD partitioner's windowed einsum): in Llama-shaped 128B over fsdp=16 x tensor=16 "
    "on v5e, the MLP's down projection is 4 trips of 2 steps, each a dot of bf16[16,2048,3584] by the weight's "
    "2 x 512 output columns (2 x 16 x 2048 x 3584 x 1024 = 2.4e11 flops, 1.22 ms at 197 Tflop/s) beside one "
    "collective-permute each way of the bf16[16,2048,512] partial sums (32 MiB, 0.75 ms at 45 GB/s per link), "
    "which the dot does not read: the permutes of a step overlap its dot by construction")
"""Why a collective matmul loop's collectives overlap its own work (read in the compiled module)."""

ASYNC_COLLECTIVE_FUSION = (
    "XLA:TPU's async collective fusion (MaxText's 'continuation fusion') runs each step of a collective inside a "
    "fusion of other work: in Llama-shaped 128B over fsdp=16 x tensor=16 on v5e, the all-gather of a layer's "
    "activations over tensor (bf16[16,2048,512] into bf16[16,2048,8192], 32 MiB gathered) is started before the "
    "attention's 4-trip loop and stepped by two of its fusions each trip (the scores' max and the context's dot), "
    "each fusion returning the collective's buffers beside its own results: the steps' transfers run while those "
    "fusions compute, so the collective overlaps their work by construction, as much of it as they take")
"""Why a collective stepped by async collective fusions overlaps their work (read in the compiled module)."""

TOP_INSTRUCTIONS = 20
"""How many of the costliest instructions an estimate keeps for its breakdown."""


@dataclass(frozen=True)
class InstructionTime:
    """One instruction's part of the step: its roofline per call and which bound it hits."""

    name: str
    opcode: str
    op_name: str
    runs: int
    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        """The roofline: the longer of compute and memory time."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """``compute`` or ``memory``: which of the two it waits on."""
        return "compute" if self.compute_s >= self.memory_s else "memory"


@dataclass(frozen=True)
class StepEstimate:
    """An estimate of one step's time on one chip (per device: every device runs its shard).

    ``compute_s`` is every flop at the chip's peak, ``memory_s`` every byte at its bandwidth,
    ``roofline_s`` the sum over instructions of the longer of the two, ``overhead_s`` the chip's
    per-call and per-iteration overheads (``loop_iterations`` iterations). ``collectives_s`` is
    the interconnect's time for the module's collectives, None until a model gives it.
    ``instructions`` are the costliest instructions (:data:`TOP_INSTRUCTIONS`); ``unknown_loops``
    loops whose trip count is unknown (counted once: then the figure is a lower bound).
    """

    chip: str
    flops: float
    bytes: float
    compute_s: float
    memory_s: float
    roofline_s: float
    overhead_s: float
    loop_iterations: int
    instructions: tuple[InstructionTime, ...]
    unknown_loops: tuple[str, ...] = ()
    collectives_s: float | None = None
    leaves_out: tuple[str, ...] = LEAVES_OUT
    checked: str = ""
    dispatch_s: float = 0.0
    """The chip's cost of a call dispatched back to back (the host launches the next call while
    the chip runs this one): the floor of :attr:`dispatched_seconds`."""
    unmodelled: tuple[tuple[str, int], ...] = ()
    """What the model has no rule for, with how many instructions of each: the estimate is then
    a lower bound (:attr:`lower_bound`)."""
    iteration_s: float = 0.0
    """The loops' per-iteration overheads, part of ``overhead_s``."""
    outside_band: tuple[tuple[MeasuredKind, int], ...] = ()
    """The module's instructions of the kinds the chip's corpus measured outside the band, each
    kind with the ratios measured and how many instructions of it the module holds: the estimate
    may be that far off (empty on a chip without a corpus)."""
    kernels_s: float = 0.0
    """The chip's fixed cost of the call's kernel launches outside loops (:attr:`Chip.kernel_s
    <shardscope.hardware.chips.Chip.kernel_s>` each), part of ``overhead_s`` and of both figures."""
    windowed: tuple[tuple[str, float], ...] = ()
    """Each collective matmul loop's body (:data:`WINDOWED_BODY`) with the rooflines of the
    instructions it runs, seconds per call: the work its collectives overlap by construction."""
    stepping: tuple[tuple[str, float], ...] = ()
    """Each of XLA:TPU's async collective fusions that steps a collective beside its own compute
    (by instruction name), with its roofline, seconds per call: the work that collective overlaps
    by construction (:data:`ASYNC_COLLECTIVE_FUSION`)."""
    launch_gap_s: float = 0.0
    """Between two calls dispatched back to back, the chip's idle time (:attr:`Chip.launch_gap_s
    <shardscope.hardware.chips.Chip.launch_gap_s>`): part of :attr:`dispatched_seconds`."""
    overlapped_s: float = 0.0
    """Of :attr:`collectives_s`, what overlaps by construction: in each collective matmul loop,
    the shorter of its collectives and its own work; of a collective stepped by async collective
    fusions, the shorter of it and their work (:func:`overlapped_times`); the step's upper end
    leaves it out."""

    @property
    def seconds(self) -> float:
        """The compute and memory estimate: the rooflines plus the overheads (collectives not included)."""
        return self.roofline_s + self.overhead_s

    @property
    def dispatched_seconds(self) -> float:
        """One call among calls dispatched back to back, as a training loop runs them: the
        rooflines and loop overheads plus a launch gap, at least the host's dispatch time
        (collectives not included)."""
        return max(self.roofline_s + self.kernels_s + self.iteration_s + self.launch_gap_s, self.dispatch_s)

    @property
    def exposed_collectives_s(self) -> float:
        """The collectives' time that may be exposed: all of it but what overlaps by construction."""
        return max((self.collectives_s or 0.0) - self.overlapped_s, 0.0)

    @property
    def dispatched_upper_s(self) -> float:
        """Back to back, at most: the dispatched call plus its collectives, nothing hidden that
        does not overlap by construction (:attr:`overlapped_s`)."""
        return self.dispatched_seconds + self.exposed_collectives_s

    @property
    def lower_bound(self) -> bool:
        """True when the module holds instructions the model cannot time (:attr:`unmodelled`):
        the figures are then at least the time, not the time."""
        return bool(self.unmodelled)

    def unmodelled_words(self) -> str:
        """``1 sort, 2 top-k`` (empty when the model covers every instruction)."""
        return ", ".join(f"{count} {what}" for what, count in self.unmodelled)

    def outside_band_words(self) -> str:
        """``may be off: 1 grouped convolution (feature_group_count > 1), measured at 1.12-1.47x
        the estimate on v5e across 1 corpus program, 1 of them out of band`` (empty when none)."""
        if not self.outside_band:
            return ""
        return "may be off: " + "; ".join(_kind_words(kind, count, self.chip) for kind, count in self.outside_band)

    @property
    def lower_s(self) -> float:
        """At least: collectives fully hidden behind compute (the longer of the two)."""
        return max(self.seconds, self.collectives_s or 0.0)

    @property
    def upper_s(self) -> float:
        """At most: nothing hidden (the sum) but what overlaps by construction."""
        return self.seconds + self.exposed_collectives_s

    def with_collectives(self, seconds: float, overlapped_s: float = 0.0) -> "StepEstimate":
        """This estimate with the interconnect's time for the collectives (the bounds widen), of
        which ``overlapped_s`` overlaps by construction (:func:`overlapped_times`)."""
        out = tuple(item for item in self.leaves_out if not item.startswith("collectives"))
        return replace(self, collectives_s=seconds, leaves_out=out, overlapped_s=min(overlapped_s, seconds))

    def line(self) -> str:
        """``step estimate ~6.2 ms per call waited on, ~5.6 ms back to back, on v5e (compute 5.6 ms,
        memory 0.4 ms, overheads 0.59 ms; collectives not included; checked on a v5e chip: ...)``:
        "at least" and the instructions not modelled when it is a lower bound."""
        parts = f"compute {seconds_words(self.compute_s)}, memory {seconds_words(self.memory_s)}"
        if self.overhead_s:
            parts += f", overheads {seconds_words(self.overhead_s)}"
        if self.collectives_s is None:
            tail = "; collectives not included"
            waited, back = f"~{seconds_words(self.seconds)}", f"~{seconds_words(self.dispatched_seconds)}"
        else:
            tail = f"; collectives {seconds_words(self.collectives_s)}, overlapped or not"
            if self.overlapped_s:
                tail += f" ({seconds_words(self.overlapped_s)} of it overlapped by construction with the compute beside it)"
            waited = range_words(self.lower_s, self.upper_s)
            back = range_words(max(self.dispatched_seconds, self.collectives_s), self.dispatched_upper_s)
        bound = f"; a lower bound: {self.unmodelled_words()} not modelled" if self.lower_bound else ""
        bound += f"; {self.outside_band_words()}" if self.outside_band else ""
        checked = f"; {self.checked}" if self.checked else f"; {unchecked_words(self.chip)}"
        at_least = "at least " if self.lower_bound else ""
        return (f"step estimate {at_least}{waited} per call waited on, {back} back to back, on {self.chip} "
                f"({parts}{tail}{bound}{checked})")

    def to_json(self) -> dict[str, object]:
        """The estimate's numbers (seconds per call), its breakdown and what it leaves out."""
        return {
            "chip": self.chip, "seconds": self.seconds, "lower_s": self.lower_s, "upper_s": self.upper_s,
            "compute_s": self.compute_s, "memory_s": self.memory_s, "roofline_s": self.roofline_s,
            "overhead_s": self.overhead_s, "collectives_s": self.collectives_s,
            "overlapped_s": self.overlapped_s, "flops": self.flops,
            "bytes": self.bytes, "loop_iterations": self.loop_iterations, "unknown_loops": list(self.unknown_loops),
            "leaves_out": list(self.leaves_out), "checked": self.checked or None,
            "dispatched_s": self.dispatched_seconds, "dispatched_upper_s": self.dispatched_upper_s,
            "lower_bound": self.lower_bound,
            "unmodelled": [{"instruction": what, "count": count} for what, count in self.unmodelled],
            "outside_band": [{"kind": kind.kind, "count": count, "measured": [kind.low, kind.high],
                              "programs": kind.programs, "out_of_band": kind.out_of_band}
                             for kind, count in self.outside_band],
            "instructions": [
                {"name": i.name, "opcode": i.opcode, "op_name": i.op_name, "runs": i.runs, "flops": i.flops,
                 "bytes": i.bytes, "compute_s": i.compute_s, "memory_s": i.memory_s, "bound": i.bound}
                for i in self.instructions],
        }


def instruction_times(work: ModuleWork, chip: Chip) -> list[InstructionTime]:
    """Each instruction of ``work`` timed on ``chip`` (its loops' runs included), in the module's
    order: what :func:`estimate_step` sums. ``chip`` must know its memory bandwidth."""
    if not chip.memory_bandwidth_Bps:
        raise ValueError(f"{chip.name}'s memory bandwidth is unknown: its instructions cannot be timed")
    bandwidth = chip.memory_bandwidth_Bps * chip.bandwidth_efficiency
    times = []
    for item in work.instructions:
        compute = item.runs * sum(_compute_seconds(c, chip) for c in item.counts if c.unit not in MEMORY_UNITS)
        accesses = item.runs * sum(_compute_seconds(c, chip) for c in item.counts if c.unit in MEMORY_UNITS)
        streamed = max(item.total_bytes - item.runs * item.accessed_bytes, 0.0)
        times.append(InstructionTime(item.name, item.opcode, item.op_name, item.runs, item.total_flops,
                                     item.total_bytes, compute, streamed / bandwidth + accesses))
    return times


def estimate_step(work: ModuleWork, chip: Chip) -> StepEstimate | None:
    """The roofline estimate of ``work`` on ``chip`` (None when the chip's bandwidth is unknown)."""
    if not chip.memory_bandwidth_Bps:
        return None
    times = instruction_times(work, chip)
    windowed: dict[str, float] = {}
    stepping: list[tuple[str, float]] = []
    for item, time in zip(work.instructions, times):
        if WINDOWED_BODY in item.computation:
            windowed[item.computation] = windowed.get(item.computation, 0.0) + time.seconds
        if item.steps_collective:
            stepping.append((item.name, time.seconds))
    iterations = work.loop_iterations * chip.iteration_overhead_s
    kernels = work.kernels * chip.kernel_s
    buffers = chip.argument_s * work.arguments + chip.result_s * work.results
    overhead = chip.call_overhead_s + buffers + kernels + iterations
    dispatch = chip.dispatch_s + chip.dispatch_argument_s * work.arguments + chip.dispatch_result_s * work.results
    times.sort(key=lambda t: t.seconds, reverse=True)
    return StepEstimate(
        chip=chip.name, flops=work.flops, bytes=work.bytes,
        compute_s=sum(t.compute_s for t in times), memory_s=sum(t.memory_s for t in times),
        roofline_s=sum(t.seconds for t in times), overhead_s=overhead, loop_iterations=work.loop_iterations,
        instructions=tuple(times[:TOP_INSTRUCTIONS]), unknown_loops=work.unknown_loops, checked=chip.checked,
        dispatch_s=dispatch, unmodelled=work.unmodelled, iteration_s=iterations, kernels_s=kernels,
        launch_gap_s=chip.launch_gap_s,
        outside_band=_outside_band(work, chip), windowed=tuple(windowed.items()), stepping=tuple(stepping),
    )


Lines = Callable[["CompiledCollective"], "frozenset[tuple[int, tuple[int, ...]]] | None"]
"""What a target's interconnect says of a compiled collective's links: the torus lines its groups
use (:meth:`~shardscope.engine.hlo.interconnect_times.TargetInterconnect.lines`; None: not known)."""


def joined_step(step: StepEstimate | None, timed: "Sequence[tuple[CompiledCollective, float | None]] | None",
                lines: Lines | None = None
                ) -> "tuple[StepEstimate | None, list[tuple[CompiledCollective, float | None, float]]]":
    """Where a step estimate meets the target's interconnect (``check --target`` and ``layouts``
    both call it): each compiled collective with its seconds per call as the module runs them and
    what of them overlaps by construction (:func:`overlapped_times`, ``lines`` the links each
    uses), and ``step`` with their sum joined (:meth:`StepEstimate.with_collectives`) when every
    one is known. ``timed`` is each collective's seconds per call on the interconnect (None:
    unknown), or None without a model of the target's interconnect (``step`` as it is, nothing
    joined)."""
    if timed is None:
        return step, []
    joined = overlapped_times(step, timed, lines)
    if step is None or any(seconds is None for _, seconds, _ in joined):
        return step, joined
    return step.with_collectives(sum((s or 0.0 for _, s, _ in joined), 0.0), sum((o for _, _, o in joined), 0.0)), joined


def overlapped_times(step: StepEstimate | None, timed: "Iterable[tuple[CompiledCollective, float | None]]",
                     lines: Lines | None = None) -> "list[tuple[CompiledCollective, float | None, float]]":
    """Each compiled collective with its seconds per call on the interconnect (``timed``: None,
    unknown) as the compiled module runs it, and the part of them that overlaps by construction
    (none without a step estimate, which knows the work beside it):

    - in a collective matmul loop (:data:`COLLECTIVE_MATMUL`), its collective-permutes of one
      pattern (the same source-target pairs) share links, those of another (the other way round
      the ring) use links of their own, so the loop's collectives take the longest pattern's time
      (each permute's seconds scaled to its share of that) plus its other collectives', and of
      that, as much as the loop's own work (:attr:`StepEstimate.windowed`) overlaps;
    - a collective stepped by XLA:TPU's async collective fusions (:data:`ASYNC_COLLECTIVE_FUSION`)
      overlaps as much of itself as those fusions' work (:attr:`StepEstimate.stepping`); where its
      steps run in a collective matmul loop, it joins that loop's collectives and their work;
    - the collectives of one place that use no link in common (``lines``: an all-gather over the
      other torus axis stepped beside a loop's permutes) run at once: the place takes the longest
      of its sets of collectives that share links, each collective's seconds scaled to its share
      of that. Without ``lines`` (or where one collective's are unknown) every collective of a
      place shares links with every other.

    Collectives elsewhere are as timed, none of them overlapped."""
    timed = list(timed)
    windowed = dict(step.windowed) if step is not None else {}
    stepping = dict(step.stepping) if step is not None else {}
    places: dict[str | tuple[tuple[str, str], ...], list[tuple[CompiledCollective, float]]] = {}
    for c, seconds in timed:
        place = _overlap_place(c)
        if place is not None and seconds is not None:
            places.setdefault(place, []).append((c, seconds))
    scales: dict[str, float] = {}
    shares: dict[str | tuple[tuple[str, str], ...], float] = {}
    for place, members in places.items():
        work = windowed.get(place, 0.0) if isinstance(place, str) else sum(stepping.get(name, 0.0) for name, _ in place)
        times = [_link_set_time(group, scales) for group in _sharing_links(members, lines)]
        together, apart = max(times, default=0.0), sum(times)
        if together > 0:
            for c, _ in members:
                scales[c.name] *= together / apart  # sets on links of their own run at once
            shares[place] = min(1.0, work / together)
    out: list[tuple[CompiledCollective, float | None, float]] = []
    for c, seconds in timed:
        place = _overlap_place(c)
        if seconds is None or place not in shares:
            out.append((c, seconds, 0.0))
            continue
        seconds *= scales[c.name]
        out.append((c, seconds, seconds * shares[place]))
    return out


def _link_set_time(members: "list[tuple[CompiledCollective, float]]", scales: dict[str, float]) -> float:
    """The time of collectives that share links: the longest pattern of one-way permutes (the two
    ways round a ring use links of their own) plus the others; each one's scale into ``scales``
    (a one-way permute's: its share of the longest pattern's time)."""
    patterns: dict[object, float] = {}
    others = 0.0
    for c, seconds in members:
        if _one_way(c):
            pattern = frozenset(c.groups or ())
            patterns[pattern] = patterns.get(pattern, 0.0) + seconds
        else:
            others += seconds
    ways = sum(patterns.values())
    at_once = max(patterns.values(), default=0.0) / ways if ways else 1.0
    for c, _ in members:
        scales[c.name] = at_once if _one_way(c) else 1.0
    return max(patterns.values(), default=0.0) + others


def _sharing_links(members: "list[tuple[CompiledCollective, float]]", lines: Lines | None
                   ) -> "list[list[tuple[CompiledCollective, float]]]":
    """``members`` in sets that share links: two collectives whose ``lines`` meet are in one set
    (and so is every collective whose lines are unknown, with all the others)."""
    if lines is None or len(members) < 2:
        return [members]
    found = [lines(c) for c, _ in members]
    if any(used is None for used in found):
        return [members]
    sets: list[tuple[set[tuple[int, tuple[int, ...]]], list[tuple[CompiledCollective, float]]]] = []
    for member, used in zip(members, found):
        assert used is not None
        meeting = [s for s in sets if not s[0].isdisjoint(used)]  # the sets stay disjoint: these join it
        sets = [s for s in sets if s[0].isdisjoint(used)]
        sets.append((set(used).union(*(links for links, _ in meeting)),
                     [m for _, grouped in meeting for m in grouped] + [member]))
    return [grouped for _, grouped in sets]


def _one_way(c: "CompiledCollective") -> bool:
    """A collective-permute of a collective matmul loop: one pattern of its ways round the ring."""
    return c.kind == COLLECTIVE_PERMUTE and bool(c.groups) and not c.steps


def _overlap_place(c: "CompiledCollective") -> "str | tuple[tuple[str, str], ...] | None":
    """Where ``c``'s time overlaps work by construction: the collective matmul loop's body it runs
    in, or its steps run in; its own steps (the async collective fusions that step it); None."""
    body = c.loops[-1].body if c.loops else ""
    if WINDOWED_BODY in body:
        return body
    inner = next((where for _, where in c.steps if WINDOWED_BODY in where), None)
    if inner is not None:
        return inner
    return c.steps or None


def _outside_band(work: ModuleWork, chip: Chip) -> tuple[tuple[MeasuredKind, int], ...]:
    """The module's kinds the chip's corpus measured outside the band, with how many of each."""
    measured = {kind.kind: kind for kind in chip.outside_band}
    return tuple((measured[kind], count) for kind, count in work.outside_band if kind in measured)


def _kind_words(kind: MeasuredKind, count: int, chip: str) -> str:
    """``2 prefix-sum reduce-windows over outer dimensions (a cumsum), measured at 0.98-4.45x the
    estimate on v5e across 6 corpus programs, 5 of them out of band``."""
    one, many = KINDS.get(kind.kind, (kind.kind, kind.kind))
    programs = f"{kind.programs} corpus program" if kind.programs == 1 else f"{kind.programs} corpus programs"
    return (f"{count} {one if count == 1 else many}, measured at {kind.low:.2f}-{kind.high:.2f}x the estimate "
            f"on {chip} across {programs}, {kind.out_of_band} of them out of band")


def _compute_seconds(count: FlopCount, chip: Chip) -> float:
    """One run's operations of one kind at the chip's rate for them (0 where the chip has no
    rate: a gather's accesses are timed only on a chip whose rates were measured or scaled)."""
    rate = chip.rate(count.dtype, count.unit, count.precision)
    return count.flops / rate if rate else 0.0


def range_words(lower_s: float, upper_s: float) -> str:
    """``591 us to 599 us``, or ``~21.6 ms`` when both bounds print alike (not ``21.6 ms to 21.6 ms``)."""
    lower, upper = seconds_words(lower_s), seconds_words(upper_s)
    return f"~{lower}" if lower == upper else f"{lower} to {upper}"


def seconds_words(seconds: float, digits: int = 3) -> str:
    """``5.58 ms``, ``12.3 us``, ``1.20 s``, ``540 ns``: ``digits`` significant digits in the
    largest unit the time reaches (every time shardscope prints is written by this)."""
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= scale:
            return f"{_significant(seconds / scale, digits)} {unit}"
    if 0 < seconds < 1e-9:
        return "<1 ns"
    return f"{_significant(seconds / 1e-9, digits)} ns"


def _significant(value: float, digits: int) -> str:
    """``value`` to ``digits`` significant digits, never in exponent form: 220 ms with 2 digits
    is ``220``, not ``2.2e+02`` (a layouts sweep's progress wrote that)."""
    text = f"{value:.{digits}g}"
    return f"{float(text):.0f}" if "e" in text else text
