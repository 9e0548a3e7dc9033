"""The layouts of one step ranked on a target: fits or not, then the estimated step time.

Each compiled candidate (:mod:`shardscope.pipeline.layout_compile`) has the compiler's own bytes
per device against what the chip lets a program use, and a compute and memory estimate on the
chip; here its collectives are timed on the target's interconnect, each over its own replica
groups placed on the machine (:mod:`shardscope.engine.hlo.interconnect_times`), and the step is
the range between the two things the model cannot see: every collective hidden behind compute
(the longer of the two) and none hidden (their sum), for a step dispatched back to back as a
training loop runs them.

The order: candidates that fit first (then those whose fit is unknown: a chip without figures),
by the upper end of that range (nothing hidden: the order that holds whatever the scheduler
overlaps) per token or example when the layouts function says how many a step processes (an
option such as the batch changes it), then those that do not fit, were cut before compiling, or
failed. The pick is the
first that fits, with one sentence of why; a candidate that would be faster but does not fit is
named. A target without a step estimate (the CPU, a chip without figures) is ranked by the bytes
its collectives move per step (per token or example, when the function says how many a step
processes), and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from shardscope.engine.hlo.interconnect_times import TargetInterconnect
from shardscope.engine.hlo.roofline import StepEstimate, joined_step, range_words, seconds_words
from shardscope.hardware.checked import unchecked_words
from shardscope.hardware.fit import size_words
from shardscope.pipeline.layout_compile import COMPILED, CUT, FAILED, REFUSED, CompiledCandidate

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective

ORDER = {"fits": 0, "unknown": 1, "does not fit": 2, REFUSED: 2, CUT: 3, FAILED: 4}
"""How each outcome ranks: what fits first, what failed last."""


@dataclass(frozen=True)
class CollectiveGroup:
    """The collectives of one kind over the same mesh axes, in loops or not: how many
    instructions, their runs and bytes per step and their time on the interconnect (None:
    unknown: no model, or a run count a loop does not fix)."""

    kind: str
    axes: tuple[str, ...]
    in_loop: bool
    instructions: int
    runs: int | None
    bytes: int | None
    seconds: float | None
    overlapped_s: float = 0.0
    """Of :attr:`seconds`, what overlaps by construction in collective matmul loops
    (:func:`~shardscope.engine.hlo.roofline.overlapped_times`)."""

    @property
    def exposed_s(self) -> float | None:
        """Its time that may be exposed: all of it but what overlaps by construction."""
        return None if self.seconds is None else max(self.seconds - self.overlapped_s, 0.0)

    @property
    def words(self) -> str:
        """``all-gathers over fsdp in loops``."""
        over = f" over {' x '.join(self.axes)}" if self.axes else ""
        return f"{self.kind}s{over}{' in loops' if self.in_loop else ''}"

    def to_json(self) -> dict[str, object]:
        """The group's numbers."""
        return {"kind": self.kind, "axes": list(self.axes), "in_loop": self.in_loop,
                "instructions": self.instructions, "runs_per_step": self.runs, "bytes_per_step": self.bytes,
                "seconds_per_step": self.seconds, "overlapped_seconds_per_step": self.overlapped_s}


@dataclass(frozen=True)
class RankedLayout:
    """One candidate with its step estimate (collectives joined) and its collectives by group."""

    compiled: CompiledCandidate
    estimate: StepEstimate | None
    groups: tuple[CollectiveGroup, ...] = ()
    timed: tuple[tuple["CompiledCollective", float | None], ...] = ()
    """Each compiled collective with its time per step on the target's interconnect (None:
    unknown), costliest first."""

    @property
    def label(self) -> str:
        """The candidate's name: ``fsdp=16 x tensor=16, per_device_batch=1``."""
        return self.compiled.candidate.label

    @property
    def outcome(self) -> str:
        """``fits``, ``does not fit``, ``unknown`` (a compiled step whose fit is not known),
        ``refused``, ``cut`` or ``failed``."""
        status = self.compiled.status
        if status != COMPILED:
            return status
        fits = None if self.compiled.fit is None else self.compiled.fit.fits
        return "unknown" if fits is None else "fits" if fits else "does not fit"

    @property
    def low_s(self) -> float | None:
        """The step back to back with every collective hidden behind compute (None: no estimate)."""
        e = self.estimate
        return None if e is None else max(e.dispatched_seconds, e.collectives_s or 0.0)

    @property
    def high_s(self) -> float | None:
        """The step back to back with no collective hidden."""
        return None if self.estimate is None else self.estimate.dispatched_upper_s

    @property
    def collectives_s(self) -> float | None:
        """The interconnect's time for every collective of the step."""
        return None if self.estimate is None else self.estimate.collectives_s

    @property
    def communicated_bytes(self) -> int | None:
        """Bytes the step's collectives move per device per step (None: a count unknown)."""
        counts = [g.bytes for g in self.groups]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    @property
    def free_bytes(self) -> int | None:
        """What is left of the chip's memory per device (None: unknown)."""
        fit = self.compiled.fit
        if fit is None or fit.needed_bytes is None or fit.capacity_bytes is None:
            return None
        return fit.capacity_bytes - fit.needed_bytes

    def per_chip(self) -> tuple[float, float] | None:
        """Units (tokens, examples) per second per chip, at the slowest and the fastest step."""
        per_step, low, high = self.compiled.per_step, self.low_s, self.high_s
        if per_step is None or not low or not high:
            return None
        devices = self.compiled.candidate.devices
        return per_step / devices / high, per_step / devices / low

    def utilization(self) -> tuple[float, float, str] | None:
        """The flops utilization the step implies at its slowest and fastest, and which: ``model``
        (the model's flops per unit, as the layouts function gives them) or ``compiled`` (the
        compiled module's own flops, rematerialization included)."""
        e, low, high = self.estimate, self.low_s, self.high_s
        machine = self.compiled.machine
        peak = None if machine is None or machine.chip is None else machine.chip.flops_per_s("bf16")
        if e is None or not low or not high or not peak:
            return None
        model, per_step = self.compiled.model_flops, self.compiled.per_step
        if model is not None and per_step is not None:
            flops, kind = model * per_step / self.compiled.candidate.devices, "model"
        else:
            flops, kind = e.flops, "compiled"
        return flops / high / peak, flops / low / peak, kind

    def share(self, group: CollectiveGroup) -> float | None:
        """``group``'s time that may be exposed as a share of the step with nothing hidden (but what
        overlaps by construction)."""
        high, exposed = self.high_s, group.exposed_s
        return None if exposed is None or not high else exposed / high

    @property
    def cost_s(self) -> float | None:
        """What the order compares: the step's upper end per unit processed when the layouts
        function says how many a step processes (options such as the batch change it), else per
        step."""
        high, per_step = self.high_s, self.compiled.per_step
        if high is None:
            return None
        return high / per_step if per_step else high

    @property
    def sort_key(self) -> tuple[int, float]:
        """Fits first, then the upper end of the step's range per unit (or the bytes communicated)."""
        order = ORDER[self.outcome]
        cost = self.cost_s
        if cost is not None:
            return order, cost
        moved, per_step = self.communicated_bytes, self.compiled.per_step
        if moved is None:
            return order, math.inf
        return order, moved / per_step if per_step else float(moved)


@dataclass(frozen=True)
class SweepCost:
    """What the sweep took: its wall time, the candidates' own compile time (wall and CPU, summed
    over every worker) and the workers that compiled them."""

    wall_s: float
    compile_s: float
    compile_cpu_s: float
    workers: int

    def to_json(self) -> dict[str, object]:
        """The numbers."""
        return {"wall_s": self.wall_s, "compile_s": self.compile_s, "compile_cpu_s": self.compile_cpu_s,
                "workers": self.workers}


@dataclass(frozen=True)
class LayoutRanking:
    """Every candidate of one layouts function on one target, ranked, with the pick and why.

    ``total`` is how many candidates the sweep had (more than ``rows`` when it was interrupted);
    ``notes`` what the estimate cannot see or has not been checked against."""

    function: str
    target: str
    unit: str
    rows: tuple[RankedLayout, ...]
    total: int
    cost: SweepCost | None = None
    notes: tuple[str, ...] = ()
    interrupted: bool = False
    estimated: bool = True

    @property
    def pick(self) -> RankedLayout | None:
        """The first candidate that fits (or whose fit is unknown), if one compiled."""
        first = self.rows[0] if self.rows else None
        return first if first is not None and first.outcome in ("fits", "unknown") else None

    def why(self) -> str:
        """The pick and one sentence of why (:func:`why_words`)."""
        return why_words(self)

    def counts(self) -> dict[str, int]:
        """How many candidates ended each way."""
        found: dict[str, int] = {}
        for row in self.rows:
            found[row.outcome] = found.get(row.outcome, 0) + 1
        return found


def ranked(compiled: Iterable[CompiledCandidate], function: str, target: str, total: int,
           cost: SweepCost | None = None, interrupted: bool = False) -> LayoutRanking:
    """The candidates ranked on ``target`` (see the module docstring)."""
    rows = sorted((ranked_layout(c) for c in compiled), key=lambda row: row.sort_key)
    unit = next((row.compiled.unit for row in rows), "tokens")
    estimated = any(row.estimate is not None for row in rows)
    return LayoutRanking(function, target, unit, tuple(rows), total, cost, _notes(rows, target, estimated),
                         interrupted, estimated)


def interconnect_of(compiled: CompiledCandidate) -> TargetInterconnect | None:
    """The candidate's target's interconnect with its devices placed (None without a model)."""
    machine = compiled.machine
    fabric = None if machine is None else machine.fabric
    if fabric is None or not compiled.device_coords:
        return None
    return TargetInterconnect("", fabric, compiled.device_coords, compiled.machine_shape)


def collective_seconds(compiled: CompiledCandidate, c: "CompiledCollective",
                       interconnect: TargetInterconnect | None = None) -> float | None:
    """``c``'s time per step on the candidate's interconnect: its runs times one run (None: unknown)."""
    interconnect = interconnect or interconnect_of(compiled)
    timed = None if interconnect is None else interconnect.time(c)
    return None if timed is None or c.executions is None else c.executions * timed.seconds


def ranked_layout(compiled: CompiledCandidate) -> RankedLayout:
    """One candidate with its collectives timed on its target's interconnect (those of a
    collective matmul loop as the loop runs them, and what of them overlaps by construction:
    :func:`~shardscope.engine.hlo.roofline.overlapped_times`)."""
    plan = compiled.plan
    if plan is None:
        return RankedLayout(compiled, compiled.step)
    interconnect = interconnect_of(compiled)
    timed = [(c, collective_seconds(compiled, c, interconnect)) for c in plan.collectives]
    estimate, joined = joined_step(compiled.step, None if interconnect is None else timed,
                                   None if interconnect is None else interconnect.lines)
    joined = joined or [(c, s, 0.0) for c, s in timed]
    grouped: dict[tuple[str, tuple[str, ...], bool], list[tuple[int | None, int, float | None, float]]] = {}
    for c, seconds, overlapped in joined:
        grouped.setdefault((c.kind, tuple(c.axes or ()), c.in_loop), []).append(
            (c.executions, c.bytes_per_execution, seconds, overlapped))
    groups = tuple(sorted((_group(key, members) for key, members in grouped.items()),
                          key=lambda g: (-(g.exposed_s or 0.0), -(g.bytes or 0))))
    return RankedLayout(compiled, estimate, groups,
                        tuple(sorted(((c, s) for c, s, _ in joined), key=lambda pair: -(pair[1] or 0.0))))


def _group(key: tuple[str, tuple[str, ...], bool],
           members: list[tuple[int | None, int, float | None, float]]) -> CollectiveGroup:
    kind, axes, in_loop = key
    runs = [r for r, _, _, _ in members]
    known = None not in runs
    seconds = [s for _, _, s, _ in members]
    return CollectiveGroup(
        kind, axes, in_loop, len(members),
        sum(r for r in runs if r is not None) if known else None,
        sum((r or 0) * size for r, size, _, _ in members) if known else None,
        sum(s for s in seconds if s is not None) if None not in seconds else None,
        sum(o for _, _, _, o in members))


def _notes(rows: Sequence[RankedLayout], target: str, estimated: bool) -> tuple[str, ...]:
    """What the ranking cannot see or has not checked, once each."""
    notes = []
    if not estimated and any(row.compiled.plan is not None for row in rows):
        unit = next((row.compiled.unit for row in rows if row.compiled.per_step), None)
        notes.append(f"no step estimate on {target} (shardscope has no figures for its chip): ranked by the bytes "
                     f"each step's collectives move per device{'' if unit is None else ' per ' + singular(unit)}")
    estimates = [row.estimate for row in rows if row.estimate is not None]
    if estimates:
        notes.append("step times run from every collective hidden behind compute to none hidden (the scheduler "
                     "decides); the order is by the second, which holds whatever it overlaps")
        checked = estimates[0].checked
        notes.append(checked if checked else f"the estimate is {unchecked_words(estimates[0].chip)}: no chip "
                     "corpus was measured there")
        if any(e.collectives_s is None for e in estimates):
            notes.append(f"collectives not timed on {target}: shardscope has no model of its interconnect")
    for words, labels in _said_of_rows(rows, lambda e: e.outside_band_words() if e.outside_band else "").items():
        notes.append(f"{labels}: the estimate {words}")
    for words, labels in _said_of_rows(rows, lambda e: e.unmodelled_words() if e.lower_bound else "").items():
        notes.append(f"{labels}: a lower bound: {words} not modelled")
    return tuple(notes)


def singular(unit: str) -> str:
    """``token`` for ``tokens``, ``example`` for ``examples``."""
    return unit.removesuffix("s")


def _said_of_rows(rows: Sequence[RankedLayout], said: "Callable[[StepEstimate], str]") -> dict[str, str]:
    """What ``said`` says of each row's estimate (nothing: not said), each saying once with the
    candidates it is said of: ``every candidate`` when it is said of each one with an estimate,
    ``every candidate but fsdp=8, per_device_batch=1`` when of most, else each one
    (``fsdp=256, per_device_batch=4; fsdp=16 x tensor=16, ...``)."""
    estimated = [row.label for row in rows if row.estimate is not None]
    found: dict[str, list[str]] = {}
    for row in rows:
        words = said(row.estimate) if row.estimate is not None else ""
        if words:
            found.setdefault(words, []).append(row.label)
    return {words: _candidates_words(labels, estimated) for words, labels in found.items()}


def _candidates_words(labels: list[str], estimated: list[str]) -> str:
    """``labels`` of the ``estimated`` candidates in the fewest words: every one, every one but a
    few, or each."""
    if len(estimated) > 1 and len(labels) == len(estimated):
        return f"every candidate ({len(estimated)})"
    others = [label for label in estimated if label not in labels]
    if len(labels) > len(others) > 0:
        return f"every candidate but {'; '.join(others)}"
    return "; ".join(labels)


def why_words(ranking: LayoutRanking) -> str:
    """``pick: fsdp=256, per_device_batch=4: fits with 3.1 GiB free, 2.41 s to 2.52 s per step; the
    next, fsdp=16 x tensor=16, takes 1.38x as long: 38% of its step is all-gathers over tensor in
    loops`` (or why nothing was picked)."""
    pick = ranking.pick
    if pick is None:
        return _no_pick_words(ranking)
    head = f"pick: {pick.label}: " + _pick_facts(pick, ranking)
    fitting = [row for row in ranking.rows if row.outcome in ("fits", "unknown") and row is not pick]
    faster = [row for row in ranking.rows if row.outcome == "does not fit"
              and row.cost_s is not None and pick.cost_s is not None and row.cost_s < pick.cost_s]
    parts = [head]
    if fitting:
        parts.append(_runner_up_words(pick, fitting[0], ranking))
    if faster:
        parts.append(f"{faster[0].label} would be faster but does not fit ({_fit_words(faster[0])})")
    return "; ".join(parts) + "."


def _pick_facts(pick: RankedLayout, ranking: LayoutRanking) -> str:
    free = pick.free_bytes
    fits = "fits" if free is None else f"fits with {size_words(free)} free per device"
    if pick.outcome == "unknown":
        fits = "its fit is unknown on this chip"
    if pick.low_s is not None and pick.high_s is not None:
        return f"the fastest that {'fits' if pick.outcome == 'fits' else 'compiled'} ({fits}), " \
               f"{range_words(pick.low_s, pick.high_s)} per step"
    moved = pick.communicated_bytes
    return f"{fits}, the fewest bytes communicated ({'?' if moved is None else size_words(moved)} per step per device)"


def _runner_up_words(pick: RankedLayout, other: RankedLayout, ranking: LayoutRanking) -> str:
    """How the next candidate compares: how much longer it takes and where its time goes."""
    if pick.cost_s and other.cost_s and pick.high_s and other.low_s is not None:
        per = f" per {singular(ranking.unit)}" if pick.compiled.per_step and other.compiled.per_step else ""
        text = f"the next, {other.label}, takes {other.cost_s / pick.cost_s:.2f}x as long{per}"
        scale = (other.compiled.per_step or 1.0) / (pick.compiled.per_step or 1.0) if per else 1.0
        if pick.high_s * scale > other.low_s:
            text += " (their ranges overlap: which is faster depends on how much communication the compiler hides)"
        return text + _difference_words(pick, other)
    a, b = pick.communicated_bytes, other.communicated_bytes
    if a is not None and b is not None:
        return f"the next, {other.label}, moves {size_words(b)} per step per device against {size_words(a)}"
    return f"the next is {other.label}"


def _difference_words(pick: RankedLayout, other: RankedLayout) -> str:
    """``: 38% of its step is all-gathers over tensor in loops`` (its costliest group beyond the
    pick's), or its compute and memory when they make the difference."""
    ours = {(g.kind, g.axes, g.in_loop): g.exposed_s or 0.0 for g in pick.groups}
    extra = max(other.groups, key=lambda g: (g.exposed_s or 0.0) - ours.get((g.kind, g.axes, g.in_loop), 0.0),
                default=None)
    compute = (other.estimate.dispatched_seconds if other.estimate else 0.0) - \
              (pick.estimate.dispatched_seconds if pick.estimate else 0.0)
    beyond = 0.0 if extra is None else (extra.exposed_s or 0.0) - ours.get((extra.kind, extra.axes, extra.in_loop), 0.0)
    if extra is not None and beyond >= compute and beyond > 0:
        share = other.share(extra)
        return f": {share:.0%} of its step is {extra.words}" if share is not None else f": {extra.words}"
    if compute > 0 and other.estimate is not None:
        return f": its compute and memory take {seconds_words(other.estimate.dispatched_seconds)}"
    return ""


def _fit_words(row: RankedLayout) -> str:
    fit = row.compiled.fit
    return row.compiled.reason if fit is None else fit.line()


def _no_pick_words(ranking: LayoutRanking) -> str:
    """Why nothing is picked: nothing compiled, or nothing fits (the smallest need named)."""
    misfits = [row for row in ranking.rows if row.compiled.fit is not None and row.compiled.fit.needed_bytes]
    if misfits:
        smallest = min(misfits, key=lambda row: row.compiled.fit.needed_bytes or 0)  # type: ignore[union-attr]
        fit = smallest.compiled.fit
        assert fit is not None and fit.needed_bytes is not None
        return (f"no pick: nothing fits on {ranking.target}; the smallest need is {size_words(fit.needed_bytes)} per "
                f"device ({smallest.label})" + (f", of {size_words(fit.capacity_bytes)}" if fit.capacity_bytes else "")
                + ".")
    if not ranking.rows:
        return "no pick: no candidate was compiled."
    return f"no pick: no candidate compiled on {ranking.target} ({ranking.rows[0].label}: {ranking.rows[0].compiled.reason})."
