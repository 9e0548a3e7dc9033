"""One :class:`Analysis` value: everything shardscope knows about a function's plans.

The TUI, the text report, the JSON and the diff export are all renderings of it. This module
(and everything it imports) never imports Textual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from shardscope.engine.counts import Count, total_runs
from shardscope.errors import Cancelled
from shardscope.pipeline.comparison import Comparison, CompiledWork, compare, compiled_work
from shardscope.config.settings import Settings

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.engine.joined.inspection import Inspection
    from shardscope.engine.jaxpr.dataflow import Collective, Loop
    from shardscope.engine.jaxpr.model import Program
    from shardscope.engine.hlo.paired import PairedCollective
    from shardscope.engine.hlo.target_plan import TargetPlan
    from shardscope.engine.dispatch.plan import DispatchPlan
    from shardscope.measure.crosscheck import GradientCheck
    from shardscope.measure.speedup import Speedup
    from shardscope.measure.timed_on import TimedOn
    from shardscope.measure.timing import RunTimes
    from shardscope.config.shapes import Shapes
    from shardscope.sources.examples import ArgumentsDoNotFit
    from shardscope.errors import ShardscopeError

STAGES = ("loading", "tracing", "compiling", "timing", "checking")
"""The stages an analysis reports progress for, in order."""

Progress = Callable[[str, float], None]
"""``progress(stage, fraction_done)``; may raise :class:`Cancelled` to stop the analysis."""


@dataclass(frozen=True)
class PlanResult:
    """One plan's (or program's) analysis: the engine's :class:`Inspection` of it (what was
    traced, what XLA compiled, the verdicts, its plans on the targets) with what the pipeline
    measured around it (graph, timings, memory, checks). Filled in by :func:`analyze`.

    Frozen and complete: nothing is computed later on whichever thread touches it first.
    ``graph`` is None when analysed with ``graphs=False`` (``report`` and ``diff`` never draw).
    ``collectives`` are the jaxpr's collective equations; ``compiled`` is what XLA runs (every
    collective instruction, the partitioner's too) and ``paired`` the two joined, each
    collective once (:mod:`shardscope.engine.hlo.paired`). ``jaxpr_runs`` counts what the jaxpr
    writes, ``compiled_runs`` what the compiled module runs.
    """

    name: str
    description: str
    role: str  # baseline, candidate or floor (shardscope.plans.registry.Plan.role)
    inspection: "Inspection"
    loops: "tuple[Loop, ...]"  # every jaxpr loop, with the collectives inside it
    canonical_text: str  # the program's canonical one-line-per-equation text
    jaxpr_runs: Count  # the jaxpr's collective runs per call (an upper bound with collectives in cond branches)
    jaxpr_bytes: Count  # per-device bytes the jaxpr's collectives move per call (at most: dataflow.payload_count)
    graph: Any = None  # networkx.DiGraph (shardscope.engine.jaxpr.dataflow.build_graph): no stubs
    # The rest needs the compiled program; None when analysed with measure=False (and not compile=True).
    run_s: "RunTimes | None" = None
    memory: dict[str, int] | None = None
    max_abs_err: float | None = None
    cost_analysis: dict[str, float] | None = None  # XLA's cost_analysis(): a loop body counted once
    mesh: str | None = None  # a program's own mesh (``batch=8``); None for a plan (it uses the settings' mesh)
    # a user's step that is not jitted: the calls it makes, each module compiled alone (what runs)
    dispatches: "DispatchPlan | None" = None

    @classmethod
    def from_inspection(cls, inspection: "Inspection", *, name: str, description: str, role: str, graphs: bool,
                        **measured: Any) -> "PlanResult":  # the measured fields, each of its own type
        """The result for one inspected program (a plan's or a program file's): its loops, per-call
        counts and (with ``graphs``) its dataflow graph, plus what was ``measured``."""
        from shardscope.engine.jaxpr import dataflow  # numpy (about 0.13 s): not on `import shardscope.cli`'s path

        program = inspection.program
        return cls(
            name=name,
            description=description,
            role=role,
            inspection=inspection,
            loops=inspection.loops,
            canonical_text=program.canonical_text(),
            jaxpr_runs=dataflow.per_call_count(program, lambda eqn: 1),
            jaxpr_bytes=dataflow.payload_count(program),
            graph=dataflow.build_graph(program) if graphs else None,
            **measured,
        )

    @property
    def compiled_work(self) -> "CompiledWork | None":
        """What its compiled module runs, for telling two plans' times apart from noise (None when
        not compiled, or when what runs is a step's dispatches rather than one module)."""
        return None if self.dispatches is not None else compiled_work(self.compiled, self.memory, self.cost_analysis)

    @property
    def program(self) -> "Program":
        """The jaxpr as the engine models it."""
        return self.inspection.program

    @property
    def collectives(self) -> "tuple[Collective, ...]":
        """The jaxpr's collective equations."""
        return self.inspection.collectives

    @property
    def compiled(self) -> "CompiledPlan | None":
        """What XLA runs (None when it was only traced)."""
        return self.inspection.compiled

    @property
    def paired(self) -> "tuple[PairedCollective, ...]":
        """Every collective once: the compiled ones with the equations they come from, then the rest."""
        return self.inspection.paired

    @property
    def trace_s(self) -> float:
        """Seconds to trace it."""
        return self.inspection.trace_s

    @property
    def compile_from_cache(self) -> bool:
        """True when JAX's persistent compilation cache served the executable (``compile_s`` is
        reading it back, not compiling)."""
        return self.inspection.compile_from_cache

    @property
    def compile_s(self) -> float | None:
        """Seconds to compile it (None when it was only traced)."""
        return self.inspection.compile_s

    @property
    def targets(self) -> "tuple[TargetPlan, ...]":
        """Its plan on each ``--target`` (compiled there, never run)."""
        return self.inspection.targets

    @property
    def compiled_runs(self) -> Count | None:
        """Compiled collective runs per call (None when not compiled; an upper bound with collectives
        in conditional branches)."""
        if self.compiled is None:
            return None
        return total_runs(self.compiled.collectives)

    @property
    def compiled_bytes(self) -> Count | None:
        """Per-device bytes the compiled collectives move per call (None when not compiled)."""
        if self.compiled is None:
            return None
        per_call = [c.bytes_per_call for c in self.compiled.collectives]
        known = [n for n in per_call if n is not None]
        return Count(sum(known) if len(known) == len(per_call) else None, any(c.in_conditional for c in self.compiled.collectives))

    @property
    def compiled_written_bytes(self) -> Count | None:
        """:attr:`compiled_bytes` in the program's own types: what a compiler that does not promote
        its sums moves (XLA:CPU carries a bf16 psum in f32; None when not compiled)."""
        if self.compiled is None:
            return None
        per_call = [c.written_bytes_per_call for c in self.compiled.collectives]
        known = [n for n in per_call if n is not None]
        return Count(sum(known) if len(known) == len(per_call) else None, any(c.in_conditional for c in self.compiled.collectives))

    @property
    def flagged(self) -> "tuple[PairedCollective, ...]":
        """The collectives a loop runs without needing to, each once (by the compiled module's verdicts)."""
        return tuple(c for c in self.paired if c.flagged)

    def on_target(self, target: str) -> "TargetPlan | None":
        """Its plan on ``target`` (``tpu:v5e:2x2``; None when it was not compiled for it)."""
        return next((t for t in self.targets if t.target == target), None)

    @property
    def title(self) -> str:
        """How headers name it: ``naive plan``, or ``step program`` for a program file's function."""
        return f"{self.name} program" if self.role == "program" else f"{self.name} plan"

    @property
    def collectives_in_loops(self) -> int:
        """Collective equations inside at least one loop."""
        return sum(c.in_loop for c in self.collectives)

    @property
    def jaxpr_runs_per_call(self) -> int | None:
        """The jaxpr's collective runs per call (None if a loop around one has no static trip count)."""
        return self.jaxpr_runs.value

    @property
    def jaxpr_bytes_per_call(self) -> int | None:
        """Per-device bytes the jaxpr's collectives move per call (None if unknown)."""
        return self.jaxpr_bytes.value

    @property
    def per_call_is_upper_bound(self) -> bool:
        """True when collectives sit in ``cond`` branches, so per-call totals are upper bounds."""
        return self.jaxpr_runs.upper_bound


@dataclass(frozen=True)
class ReferenceResult:
    """The unchunked VJP: the gradient every plan is checked against, and its cost."""

    compile_s: float | None
    run_s: RunTimes | None
    memory: dict[str, int] | None
    compile_from_cache: bool = False  # JAX's persistent cache served it: ``compile_s`` is the read


class Origin(Protocol):
    """Where an analysis' programs came from, and what that changes in how it reads.

    Every rendering asks the origin rather than branching on what kind of file was analysed.
    """

    @property
    def name(self) -> str:
        """What was analysed: the demo function, or the program file's stem."""
        ...

    @property
    def description(self) -> str:
        """The demo's description, or the program file's."""
        ...

    @property
    def noun(self) -> str:
        """``plan`` or ``program``: what one of the analysis' programs is called."""
        ...

    @property
    def chunked(self) -> bool:
        """True when shardscope chunked the programs itself: the mesh, batch and chunk-size settings
        (the sidebar, the sweep) apply."""
        ...

    @property
    def path(self) -> Path:
        """The file analysed."""
        ...

    def headline(self, analysis: Analysis) -> list[str]:
        """The first lines of every rendering: what was analysed, on which mesh."""
        ...

    def timing_note(self, repeats: int, backend: str) -> str:
        """How the programs were timed, in one sentence."""
        ...

    @property
    def checked(self) -> str:
        """``gradients`` or ``outputs``: what the cross-checks compare."""
        ...

    def export_stem(self, analysis: Analysis, comparison: Comparison) -> str:
        """The diff export's file name without suffix."""
        ...


@dataclass(frozen=True)
class Analysis:
    """Everything shardscope shows for one analysed file: a demo's plans or a program file's programs.

    ``plans`` holds every program that could be built, in display order (the registry's for a
    demo's plans, the file's for its programs); ``unavailable`` maps each one that could not to
    the reason; ``comparison`` is the default baseline vs candidate. ``origin`` says where the
    programs came from (:class:`~shardscope.pipeline.demo_plans.DemoPlans`,
    :class:`~shardscope.pipeline.program_files.ProgramFileOrigin`): every rendering asks it what
    differs. What only a demo's plans have (``shapes``, the unchunked ``reference``) is None for
    a program file.
    """

    origin: Origin
    settings: Settings  # resolved: function and chunk size filled in
    backend: str
    shapes: "Shapes | None"  # None for a program file (no batch, no chunks)
    plans: dict[str, PlanResult]
    reference: ReferenceResult | None  # None for a program file: there is no unchunked reference
    comparison: Comparison
    unavailable: dict[str, str] = field(default_factory=dict)
    processes: int = 1  # JAX processes the devices span (jax.distributed)
    collectives_transport: str = "in-process"  # how collectives cross processes: "in-process", "gloo", ...
    # each program's result against the first one's of its group; empty when not measured
    checks: tuple["GradientCheck", ...] = ()
    what_if_notes: tuple[str, ...] = ()  # with what-if: each rewrite left out of the programs, with why
    what_if_shown: int = 0  # with what-if: the verified rewrites among the programs
    timed_on: "TimedOn | None" = None  # the devices the programs were timed on (None: not measured)
    # asked to measure, but nothing ran: a program's example arguments do not fit in memory here
    not_timed: "ArgumentsDoNotFit | None" = None
    # what a profile (--profile-dir, --profile) could not be put on: each one message; the plans stay
    profile_errors: tuple["ShardscopeError", ...] = ()

    @property
    def function(self) -> str:
        """The demo function, or the program file's stem."""
        return self.origin.name

    @property
    def description(self) -> str:
        """What was analysed, in one line."""
        return self.origin.description

    @property
    def target_names(self) -> list[str]:
        """The targets its plans were compiled for (``tpu:v5e:2x2``, ``gpu:h100:8``), in the order given."""
        return list(dict.fromkeys(t.target for plan in self.plans.values() for t in plan.targets))

    def on_target(self, target: str) -> "list[tuple[PlanResult, TargetPlan]]":
        """Each plan compiled for ``target``, with its plan there."""
        return [(plan, on) for plan in self.plans.values() if (on := plan.on_target(target)) is not None]

    @property
    def gradient_checks(self) -> tuple["GradientCheck", ...]:
        """The plans' gradients against each other."""
        return tuple(c for c in self.checks if c.subject == "gradients")

    @property
    def output_checks(self) -> tuple["GradientCheck", ...]:
        """The programs' outputs against each other (same example arguments, same structure only)."""
        return tuple(c for c in self.checks if c.subject == "outputs")

    @property
    def warnings(self) -> list[str]:
        """What the user should know that no number shows on its own: a gradient that is not
        finite (NaN or inf), plans that disagree, programs whose outputs are not finite (their
        comparison is weaker there)."""
        non_finite_plans = [name for name, plan in self.plans.items()
                            if plan.max_abs_err is not None and not math.isfinite(plan.max_abs_err)]
        not_finite = [
            f"the {name} plan's gradient is not finite (NaN or inf somewhere, in it or in the "
            "reference): its max_abs_err is nan, not a small number"
            for name in non_finite_plans
        ]
        # NaN or inf where the other plan has numbers: the not-finite warning already says what happened
        checks = [c for c in self.checks
                  if not (c.non_finite_mismatch and {c.baseline, c.candidate} & set(non_finite_plans))]
        outputs = [f"the {c.baseline} and {c.candidate} programs' outputs: {c.non_finite_note}"
                   for c in self.output_checks if c.agree and c.non_finite_note]
        return not_finite + [check.warning for check in checks if check.warning] + outputs

    @property
    def has_non_finite_gradient(self) -> bool:
        """True when a plan's gradient error is NaN (a NaN or inf in a gradient)."""
        return any(p.max_abs_err is not None and not math.isfinite(p.max_abs_err) for p in self.plans.values())

    @property
    def measured(self) -> bool:
        """True when the plans were compiled and timed (not only traced): some plan has a time.
        False for an analysis with no plans (every program unavailable)."""
        return any(plan.run_s is not None for plan in self.plans.values())

    @property
    def speedup(self) -> float | None:
        """The comparison's median per-round ratio baseline/candidate (None when not measured)."""
        return None if self.comparison.speedup is None else self.comparison.speedup.median

    @property
    def measured_speedup(self) -> "Speedup | None":
        """The comparison's :class:`shardscope.measure.speedup.Speedup` (median, spread, verdict); None unmeasured."""
        return self.comparison.speedup

    def speedup_text(self) -> str | None:
        """``deferred is 2.22x faster than naive (per-round ratios 2.10-2.35x)``, or None when not measured."""
        return self.comparison.speedup_text()

    def compare(self, baseline: str, candidate: str) -> Comparison:
        """Another comparison of two of the plans (computes a diff: call it off the UI thread)."""
        if (baseline, candidate) == (self.comparison.baseline, self.comparison.candidate):
            return self.comparison
        return compare(self.plans, baseline, candidate)

    def export_stem(self, comparison: Comparison | None = None) -> str:
        """The export file's name without suffix, for ``comparison`` (default: the analysis'):
        ``<function>-<mesh>-c<chunk>`` for a demo's plans (1-D: ``4dev``),
        ``<file>-<baseline>-vs-<candidate>-<devices>dev`` for a program file."""
        return self.origin.export_stem(self, comparison or self.comparison)


__all__ = ["Analysis", "Cancelled", "Origin", "PlanResult", "Progress", "ReferenceResult", "STAGES"]
