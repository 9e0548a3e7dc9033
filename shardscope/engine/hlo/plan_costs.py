"""What a target plan's collectives cost there, as values: each one's run on the interconnect,
the step estimate with them, and what deferring each finding saves (:class:`PlanCosts`).

They are computed once, where the plan is judged (:func:`shardscope.engine.hlo.costing.cost_plan`,
when the pipeline makes the plan), and every rendering reads them from the plan
(``TargetPlan.costs``): text, JSON, GitHub annotations and the explorer show the same figures.

What deferring a finding saves (:class:`Saving`): a finding a target still runs in a loop is
carried by a target collective inside that loop. Deferred, its values are summed (or gathered)
once per run of the loops it may not leave instead of once per iteration of those it may. The
saving per step (one call of the program) is then:

- when the instruction carries only the finding's values: ``(runs now - runs after) x t(S)``;
- when every value it carries belongs to such a finding (a combined sum of gradients), deferring
  them all takes it out of the loop: each finding's part is ``(runs now - runs after) x t(T) x S/T``;
- when it also carries values that must stay: ``runs now x (t(T) - t(T - S)) - runs after x t(S)``
  (the instruction keeps running with the others, one smaller; the deferred values run after),
  never below zero;

where ``S`` are the finding's bytes per run, ``T`` the instruction's and ``t`` one run's time
on the target (:mod:`shardscope.engine.hlo.interconnect_times`). With a step estimate the saving
is also a share of the step: of its serialized upper bound (compute, memory and communication one
after another, :data:`SHARE_IS`), so a share is never overstated, and a saving the scheduler
would hide behind compute may save nothing: the text and the JSON say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from shardscope.engine.hlo.roofline import seconds_words
from shardscope.errors import SettingsError

if TYPE_CHECKING:
    from shardscope.engine.hlo.interconnect_times import CollectiveTime, TargetInterconnect
    from shardscope.engine.hlo.roofline import StepEstimate


SHARE_IS = ("of the step's serialized upper bound back to back (compute, memory and communication one after "
            "another, one call among calls dispatched as a training loop does); overlap may hide the saving")
"""What a saving's share of the step is taken against, in the words the text and the JSON give."""

SHARE_WORDS = "of the step's upper bound back to back (serialized; overlap may hide it)"
"""The same, short, for the sentence of a finding."""


def time_words(seconds: float) -> str:
    """``2 us``, ``1.25 ms``, ``3.2 s``: four significant digits (a modelled time)."""
    return seconds_words(seconds, digits=4)


@dataclass(frozen=True)
class Saving:
    """What deferring one finding saves on one target, per step (one call of the program).

    ``bytes_per_run`` are the finding's bytes in each run the target keeps in the loop;
    ``runs_per_call`` those runs now and ``runs_after`` after the deferral (None when a trip count
    is unknown); ``seconds_per_run`` one such run on the interconnect and ``seconds_per_step``
    the time saved (None without an interconnect model or a count); ``step_s`` the estimated
    step, when there is one, of which ``share_of_step`` is the saving's part.
    """

    target: str
    collective: str
    kind: str
    values: str
    bytes_per_run: int
    runs_per_call: int | None
    runs_after: int | None
    seconds_per_run: float | None = None
    seconds_per_step: float | None = None
    algorithm: str = ""
    step_s: float | None = None
    parts: tuple[tuple[str, int, int | None], ...] = ()
    """``(target collective, bytes per run, runs per call)`` of each target instruction that
    keeps the finding's values in a loop: with more than one (a combined sum the target split
    over two instructions of different runs), ``bytes_per_run`` is their sum and no single run
    moves it."""
    step_lower_bound: bool = False
    """True when the step estimate is a lower bound (it holds instructions the model cannot
    time): the share is then at most what it says."""

    @property
    def share_of_step(self) -> float | None:
        """The saving as a fraction of the estimated step (None without an estimate)."""
        if self.step_s is None or not self.step_s or self.seconds_per_step is None:
            return None
        return self.seconds_per_step / self.step_s

    def words(self) -> str:
        """``4 B per run, 4 runs per call; deferring it saves ~12 us per step on gpu:h100:8``."""
        if len(self.parts) > 1:  # runs of different sizes: each instruction's own
            text = " and ".join(f"{size:,} B per run, {_runs_words(runs)} per call ({name})"
                                for name, size, runs in self.parts)
        else:
            text = f"{self.bytes_per_run:,} B per run, {_runs_words(self.runs_per_call)} per call"
        if self.seconds_per_step is None:
            return text + f"; shardscope has no interconnect figures for {self.target} to say what deferring it saves"
        text += f"; deferring it saves ~{time_words(self.seconds_per_step)} per step on {self.target}"
        share = self.share_of_step
        if share is None:
            return text
        at_most = "at most " if self.step_lower_bound else ""
        return text + f", {at_most}{share:.0%} {SHARE_WORDS}"

    def to_json(self) -> dict[str, object]:
        """The ``saving`` object of a finding in ``--json``."""
        return {"target": self.target, "collective": self.collective, "kind": self.kind, "values": self.values,
                "bytes_per_run": self.bytes_per_run, "runs_per_call": self.runs_per_call, "runs_after": self.runs_after,
                "seconds_per_run": self.seconds_per_run, "seconds_per_step": self.seconds_per_step,
                "algorithm": self.algorithm or None, "step_s": self.step_s, "share_of_step": self.share_of_step,
                "share_is": SHARE_IS if self.share_of_step is not None else None,
                "parts": [{"collective": name, "bytes_per_run": size, "runs_per_call": runs}
                          for name, size, runs in self.parts], "step_lower_bound": self.step_lower_bound}


def _runs_words(runs: int | None) -> str:
    """``4 runs``, ``1 run``, ``? runs``."""
    return f"{'?' if runs is None else f'{runs:,}'} run{'' if runs == 1 else 's'}"


@dataclass(frozen=True)
class MinSaving:
    """``check --min-saving``: a time per step (``seconds``) or a share of the step (``share``)."""

    text: str
    seconds: float | None = None
    share: float | None = None

    def counts(self, saving: Saving) -> bool:
        """True when ``saving`` reaches the threshold (a saving shardscope cannot cost counts:
        the check never passes a finding it could not size). A share needs a step estimate:
        :class:`SettingsError` without one."""
        if self.seconds is not None:
            return saving.seconds_per_step is None or saving.seconds_per_step >= self.seconds
        if saving.seconds_per_step is None:
            return True
        share = saving.share_of_step
        if share is None:
            raise SettingsError(
                f"--min-saving {self.text} is a share of the step, and shardscope has no step estimate for "
                f"{saving.target}.", "give a time instead, e.g. --min-saving 1ms or --min-saving 50us")
        assert self.share is not None  # one of the two is set
        return share >= self.share

    def amount(self, saving: Saving) -> str:
        """`` (~1.2 ms)`` for a threshold in time, `` (~0.3% of the step)`` for one in shares: what
        ``saving`` saves, in the threshold's own terms (empty when it is not known)."""
        if self.share is not None and saving.share_of_step is not None:
            return f" (~{100 * saving.share_of_step:.2g}% of the step)"
        return "" if saving.seconds_per_step is None else f" (~{time_words(saving.seconds_per_step)})"

    def to_json(self) -> dict[str, object]:
        """The ``min_saving`` object of ``check --json``."""
        return {"text": self.text, "seconds": self.seconds, "share": self.share}


@dataclass(frozen=True)
class PlanCosts:
    """A target plan's costs on its machine, computed once where the plan is judged.

    ``interconnect`` is the target's interconnect with the program's devices placed (None for a
    machine without a model); ``run_times`` one run of each compiled collective there, in the
    module's order (None where it cannot be costed); ``seconds_per_call`` every collective's runs
    per call at those times (None without a model or with an unknown count); ``step`` the step
    estimate with those collectives joined (None without peaks for the chip); ``savings`` what
    deferring each finding the target keeps in a loop saves there, by the CPU collective's name.
    ``min_saving`` is the ``check --min-saving`` the findings were weighed against, and
    ``below_min_saving`` the CPU collectives whose finding saves less (the check does not fail on them).
    """

    interconnect: "TargetInterconnect | None" = None
    run_times: "tuple[CollectiveTime | None, ...]" = ()
    seconds_per_call: float | None = None
    step: "StepEstimate | None" = None
    savings: Mapping[str, Saving] = field(default_factory=dict)
    min_saving: MinSaving | None = None
    below_min_saving: tuple[str, ...] = ()

    @property
    def step_s(self) -> float | None:
        """The step a saving's share is of: one call among calls dispatched back to back, as a
        training loop runs them, at its upper bound (communication not hidden behind compute)."""
        return None if self.step is None else self.step.dispatched_upper_s
