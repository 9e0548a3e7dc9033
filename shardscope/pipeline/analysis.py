"""One :class:`Analysis` value: everything shardscope knows about a function's plans.

The TUI, the text report, the JSON and the diff export are all renderings of it. This module
(and everything it imports) never imports Textual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from shardscope.pipeline.comparison import Comparison, compare, default_pair
from shardscope.engine.counts import Count
from shardscope.errors import Cancelled, SettingsError, ShardscopeError, quote_error
from shardscope.pipeline.gc_pause import gc_paused, paused
from shardscope.plans.settings import Settings, check_axis_name

STAGES = ("loading", "tracing", "compiling", "timing", "checking")
"""The stages an analysis reports progress for, in order."""

Progress = Callable[[str, float], None]
"""``progress(stage, fraction_done)``; may raise :class:`Cancelled` to stop the analysis."""


@dataclass(frozen=True)
class PlanResult:
    """One plan's program, graph, collectives, HLO and measurements: filled in by :func:`analyze`.

    Frozen and complete: nothing is computed later on whichever thread touches it first.
    ``graph`` is None when analysed with ``graphs=False`` (``report`` and ``diff`` never draw).
    """

    name: str
    description: str
    role: str  # baseline, candidate or floor (shardscope.plans.registry.Plan.role)
    program: Any  # shardscope.engine.jaxpr_model.Program
    collectives: tuple  # tuple[shardscope.engine.dataflow.Collective, ...]
    loops: tuple  # tuple[shardscope.engine.dataflow.Loop, ...]: every loop, with the collectives inside it
    canonical_text: str  # the program's canonical one-line-per-equation text
    executed: Count  # collective runs per call (an upper bound with collectives in cond branches)
    bytes: Count  # per-device bytes moved by collectives per call
    trace_s: float
    graph: Any = None  # networkx.DiGraph (shardscope.engine.dataflow.build_graph)
    # The rest needs the compiled program; None when analysed with measure=False.
    hlo: Any = None  # shardscope.engine.hlo.HloSummary
    compile_s: float | None = None
    run_s: Any = None  # shardscope.measure.timing.RunTimes
    memory: dict[str, int] | None = None
    max_abs_err: float | None = None
    cost_analysis: dict[str, float] | None = None  # XLA's cost_analysis(): a loop body counted once
    mesh: str | None = None  # a program's own mesh (``batch=8``); None for a plan (it uses the settings' mesh)

    @classmethod
    @gc_paused
    def from_inspection(cls, inspection: Any, *, name: str, description: str, role: str, trace_s: float,
                        graphs: bool, **measured: Any) -> "PlanResult":
        """The result for one traced program (a plan's or a program file's): its collectives, loops,
        per-call counts and (with ``graphs``) its dataflow graph, plus what was ``measured``."""
        from shardscope.engine import dataflow

        program = inspection.program
        return cls(
            name=name,
            description=description,
            role=role,
            program=program,
            collectives=inspection.collectives,
            loops=dataflow.loops(program, inspection.collectives),
            canonical_text=program.canonical_text(),
            executed=dataflow.per_call_count(program, lambda eqn: 1),
            bytes=dataflow.per_call_count(program, dataflow.payload_bytes),
            trace_s=trace_s,
            graph=dataflow.build_graph(program) if graphs else None,
            **measured,
        )

    @property
    def title(self) -> str:
        """How headers name it: ``naive plan``, or ``step program`` for a program file's function."""
        return f"{self.name} program" if self.role == "program" else f"{self.name} plan"

    @property
    def collectives_in_loops(self) -> int:
        """Collective equations inside at least one loop."""
        return sum(c.in_loop for c in self.collectives)

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per call (None if a loop around one has no static trip count)."""
        return self.executed.value

    @property
    def bytes_per_call(self) -> int | None:
        """Per-device bytes moved by collectives per call (None if unknown)."""
        return self.bytes.value

    @property
    def per_call_is_upper_bound(self) -> bool:
        """True when collectives sit in ``cond`` branches, so per-call totals are upper bounds."""
        return self.executed.upper_bound


@dataclass(frozen=True)
class ReferenceResult:
    """The unchunked VJP: the gradient every plan is checked against, and its cost."""

    compile_s: float | None
    run_s: Any
    memory: dict[str, int] | None


@dataclass(frozen=True)
class Analysis:
    """Everything shardscope shows for one :class:`Settings`.

    ``plans`` holds every plan that could be built, in registry order; ``unavailable`` maps each
    plan that could not to the reason; ``comparison`` is the default baseline vs candidate.

    ``kind`` is ``"plans"`` for the plans built from a ``@shardscope.demo`` function, or
    ``"programs"`` for the ``@shardscope.program`` functions of a program file
    (:mod:`shardscope.pipeline.program_analysis`): then ``plans`` holds one result per program, and what
    only plans have (``shapes``, the unchunked ``reference``, ``max_abs_err``) is None.
    """

    settings: Settings  # resolved: function and chunk size filled in
    function: str  # the demo function; for a program file, the file's stem
    description: str
    backend: str
    shapes: Any  # shardscope.plans.shapes.Shapes; None for a program file (no batch, no chunks)
    plans: dict[str, PlanResult]
    reference: ReferenceResult | None  # None for a program file: there is no unchunked reference
    comparison: Comparison
    unavailable: dict[str, str] = field(default_factory=dict)
    processes: int = 1  # JAX processes the devices span (jax.distributed)
    collectives_transport: str = "in-process"  # how collectives cross processes: "in-process", "gloo", ...
    # each plan's gradient against the first plan's (shardscope.measure.crosscheck.GradientCheck); empty unmeasured
    gradient_checks: tuple = ()
    kind: str = "plans"  # or "programs"
    output_checks: tuple = ()  # programs: each one's outputs against the first one's (same structure only)

    @property
    def is_programs(self) -> bool:
        """True for the programs of a program file (no chunks, no reference, no gradients)."""
        return self.kind == "programs"

    @property
    def warnings(self) -> list[str]:
        """What the user should know that no number shows on its own: a gradient that is not
        finite (NaN or inf), plans that disagree."""
        not_finite = [
            f"the {name} plan's gradient is not finite (NaN or inf somewhere, in it or in the "
            "reference): its max_abs_err is nan, not a small number"
            for name, plan in self.plans.items()
            if plan.max_abs_err is not None and not math.isfinite(plan.max_abs_err)
        ]
        # with a NaN the plans "differ by inf": the not-finite warning already says what happened
        checks = [c for c in (*self.gradient_checks, *self.output_checks)
                  if not (not_finite and not math.isfinite(c.max_abs_diff))]
        return not_finite + [check.warning for check in checks if check.warning]

    @property
    def has_non_finite_gradient(self) -> bool:
        """True when a plan's gradient error is NaN (a NaN or inf in a gradient)."""
        return any(p.max_abs_err is not None and not math.isfinite(p.max_abs_err) for p in self.plans.values())

    @property
    def measured(self) -> bool:
        """True when the plans were compiled and timed (not only traced)."""
        return next(iter(self.plans.values())).run_s is not None

    @property
    def speedup(self) -> float | None:
        """The comparison's median per-round ratio baseline/candidate (None when not measured)."""
        return None if self.comparison.speedup is None else self.comparison.speedup.median

    @property
    def measured_speedup(self) -> Any:
        """The comparison's :class:`shardscope.measure.speedup.Speedup` (median, spread, verdict); None unmeasured."""
        return self.comparison.speedup

    def speedup_text(self) -> str | None:
        """``deferred is 2.22x faster than naive (per-round ratios 2.10-2.35x)``, or None when not measured."""
        return self.comparison.speedup_text()

    def compare(self, baseline: str, candidate: str) -> Comparison:
        """Another comparison of two of the plans (computes a diff: call it off the UI thread)."""
        if (baseline, candidate) == (self.comparison.baseline, self.comparison.candidate):
            return self.comparison
        if self.is_programs and baseline == candidate:  # a lone program: never "faster" than itself
            return Comparison(baseline, candidate, None, ())
        return compare(self.plans, baseline, candidate)

    def export_stem(self, comparison: Comparison | None = None) -> str:
        """``<function>-<mesh>-c<chunk>``: the export file's name without suffix (1-D: ``4dev``).

        For a program file (no chunks, each program its own mesh):
        ``<file>-<baseline>-vs-<candidate>-<devices>dev`` of ``comparison`` (default: the analysis').
        """
        if self.is_programs:
            comparison = comparison or self.comparison
            pair = comparison.baseline if comparison.baseline == comparison.candidate else (
                f"{comparison.baseline}-vs-{comparison.candidate}")
            return f"{self.function}-{pair}-{self.settings.devices}dev"
        mesh = self.settings.mesh
        where = f"{mesh.devices}dev" if len(mesh.axes) == 1 else "x".join(map(str, mesh.sizes)) + "dev"
        return f"{self.function}-{where}-c{self.shapes.chunk_size}"


def analyze(
    settings: Settings,
    progress: Progress | None = None,
    demo_file: Any = None,
    *,
    measure: bool = True,
    graphs: bool = True,
    plan_set: tuple | None = None,
) -> Analysis:
    """Load, trace, compile, time and check the plans of ``settings``.

    The CPU device count must already be set (:func:`shardscope.pipeline.devices.ensure_devices`).
    ``demo_file`` skips loading when the caller already holds the loaded file. With
    ``measure=False`` the plans are only traced: no HLO, timings, memory or error. With
    ``graphs=False`` no dataflow graph is built (``report`` and ``diff`` never draw one, and
    skip importing networkx). ``plan_set`` replaces the registry's plans
    (:data:`shardscope.plans.registry.PLANS`), e.g. to add the compute-only floor.
    Raises :class:`ShardscopeError` for anything the user can fix.
    """
    report = progress or (lambda stage, fraction: None)
    report("loading", 0.0)

    import jax

    from shardscope.pipeline import failures
    from shardscope.plans import registry
    from shardscope.sources.demos import load_demo_file
    from shardscope.distributed.workers import collectives_transport

    if settings.repeats < 1:
        raise SettingsError(f"repeats must be at least 1, not {settings.repeats}.", "time each plan at least once")
    for name in settings.mesh.names:
        check_axis_name(name)  # XLA aborts the process on a non-ASCII axis name
    demo_file = demo_file or load_demo_file(settings.path)
    demo_fn = demo_file.get(settings.function)
    settings = settings.for_demo(demo_fn.default_mesh)  # the demo's own mesh when the user gave none
    try:
        built = registry.build_plans(demo_fn, settings, registry.PLANS if plan_set is None else plan_set)
        settings = settings.with_(function=demo_fn.name, chunk_size=built.shapes.chunk_size)
        traced, unavailable = registry.trace_plans(built, with_reference=measure, progress=report)
        names = [name for name in built.plans if name in traced]
        measured = _measure(built, traced, settings, report) if measure else {}
    except SystemExit as exc:  # the model called sys.exit(): a message, not our exit status
        raise failures.system_exit(exc, settings.path, demo_fn.name) from None

    results = {}
    with paused():  # one pause for every plan: the collector catches up once, not after each phase
        for name in names:
            inspection = inspect_plan(traced[name][0], name, built.args, traced[name][1])
            plan = built.plans[name]
            results[name] = PlanResult.from_inspection(
                inspection, name=name, description=plan.description, role=plan.role, trace_s=traced[name][1],
                graphs=graphs, **measured.get(name, {}),
            )
    reference = measured.get(registry.REFERENCE, {})
    baseline, candidate = default_pair(results, {n: p.role for n, p in results.items()})
    return Analysis(
        gradient_checks=measured.get("gradient_checks", ()),
        settings=settings,
        function=demo_fn.name,
        description=demo_fn.spec.description,
        backend=jax.default_backend(),
        shapes=built.shapes,
        plans=results,
        reference=ReferenceResult(reference.get("compile_s"), reference.get("run_s"), reference.get("memory")),
        comparison=compare(results, baseline, candidate),
        unavailable={**built.unavailable, **unavailable},
        processes=jax.process_count(),
        collectives_transport=collectives_transport(),
    )


def inspect_plan(traced: Any, name: str, args: tuple, trace_s: float) -> Any:
    """A plan read by the same engine as any program (:func:`shardscope.engine.inspection.inspect_traced`).

    Its inputs are ``params``, ``x`` and the cotangent ``v``; its outputs are the gradients of
    ``params``, named after the parameter they are the gradient of.
    """
    from shardscope.engine.inspection import inspect_traced, pytree_names

    params, x, v = args
    inputs = pytree_names(params, "params") + pytree_names(x, "x") + pytree_names(v, "v")
    inspection = inspect_traced(traced, name, inputs, pytree_names(traced.out_info, "params"), trace_s)
    return with_plan_sources(inspection, name)


def with_plan_sources(inspection: Any, plan: str) -> Any:
    """``inspection`` with the plan's own collectives named as such: a collective no line of the
    user's made (the deferred plan's ``psum`` after the loop, the naive plan's ``all_gather`` of
    a sharded leaf) gets ``the deferred plan's own psum_invariant, after the chunk loop`` as its
    source, not a line of shardscope's plan bodies."""
    from dataclasses import replace

    if all(c.source for c in inspection.collectives):
        return inspection
    where = {site.equation.id: _placement(site) for site in inspection.program.sites()
             if site.equation.kind == "collective"}
    named = []
    for c in inspection.collectives:
        if not c.source:
            source = f"the {plan} plan's own {c.primitive}, {where[c.equation_id]}"
            c = replace(c, source=source, value=c.value or source)
        named.append(c)
    return replace(inspection, collectives=tuple(named))


def _placement(site: Any) -> str:
    """``inside the chunk loop``, ``before the chunk loop`` or ``after the chunk loop``: where a
    plan's collective sits against the plan's loop over the chunks (the outermost loop)."""
    if site.loops:
        return "inside the chunk loop" if len(site.loops) == 1 else "inside a loop in the chunk loop"
    names = [eqn.name for eqn in site.block.equations]
    loops = [i for i, eqn in enumerate(site.block.equations) if eqn.kind == "loop"]
    if not loops:
        return "with no loop around it"
    return "before the chunk loop" if names.index(site.equation.name) < loops[0] else "after the chunk loop"


def _measure(built: Any, traced: dict, settings: Settings, report: Progress) -> dict[str, dict[str, Any]]:
    """Compile each traced program once, time them interleaved, check the gradients."""
    import jax

    from shardscope.pipeline import failures
    from shardscope.engine import hlo
    from shardscope.measure import timing
    from shardscope.plans import registry
    from shardscope.measure.crosscheck import compare

    compiled, compile_s = {}, {}
    for i, name in enumerate(traced):
        report("compiling", i / len(traced))
        try:
            compiled[name], compile_s[name] = timing.timed(lambda: traced[name][0].lower().compile())
        except Exception as exc:
            raise ShardscopeError(
                f"XLA failed to compile the {name} plan: {quote_error(exc)}",
                "run with --debug for the full error",
            ) from exc

    report("timing", 0.0)
    repeats = settings.repeats
    with failures.quiet_callback_logs():
        for name, fn in compiled.items():  # the first run of each: a callback that raises is named
            try:
                jax.block_until_ready(fn(*built.args))
            except Exception as exc:
                raise failures.run_error(exc, name, settings.path) from exc
        times = timing.time_interleaved(
            compiled, built.args, repeats, warmup=1, on_round=lambda i: report("timing", (i + 1) / repeats)
        )
        report("checking", 0.0)
        expected = compiled[registry.REFERENCE](*built.args)
        backend = jax.default_backend()
        out: dict[str, Any] = {
            name: {"compile_s": compile_s[name], "run_s": times[name], "memory": timing.memory(compiled[name])}
            for name in compiled
        }
        gradients = {}
        for name, plan in built.plans.items():
            if name not in compiled:
                continue
            out[name]["hlo"] = hlo.summarize(compiled[name].as_text(), backend)
            out[name]["cost_analysis"] = timing.cost_summary(compiled[name])
            gradients[name] = plan.gradient(compiled[name](*built.args))
            out[name]["max_abs_err"] = timing.max_abs_err(gradients[name], expected)
        out["gradient_checks"] = compare(gradients)
    report("checking", 1.0)
    return out


__all__ = ["Analysis", "Cancelled", "PlanResult", "Progress", "ReferenceResult", "STAGES", "analyze"]
