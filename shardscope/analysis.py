"""One :class:`Analysis` value: everything shardscope knows about a function's two plans.

The TUI, the text report, the JSON and the diff export are all renderings of it. This module
(and everything it imports) never imports Textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

from shardscope.counts import count_text
from shardscope.errors import Cancelled, SettingsError, ShardscopeError
from shardscope.settings import Settings

STAGES = ("loading", "tracing", "compiling", "timing", "checking")
"""The stages an analysis reports progress for, in order."""

Progress = Callable[[str, float], None]
"""``progress(stage, fraction_done)``; may raise :class:`Cancelled` to stop the analysis."""


@dataclass(frozen=True)
class PlanResult:
    """One plan (naive or deferred): its program, graph, collectives, HLO and measurements."""

    name: str
    program: Any  # shardscope.program.Program
    collectives: tuple  # tuple[shardscope.dataflow.Collective, ...]
    trace_s: float
    # The rest needs the compiled program; None when analysed with measure=False.
    hlo: Any = None  # shardscope.hlo.HloSummary
    compile_s: float | None = None
    run_s: Any = None  # shardscope.measure.RunTimes
    memory: dict[str, int] | None = None
    max_abs_err: float | None = None

    @cached_property
    def graph(self) -> Any:
        """The dataflow graph (``networkx.DiGraph``); ``analyze`` builds it unless ``graphs=False``."""
        from shardscope.dataflow import build_graph

        return build_graph(self.program)

    @cached_property
    def canonical_text(self) -> str:
        """The program's canonical one-line-per-equation text."""
        return self.program.canonical_text()

    @cached_property
    def loops(self) -> tuple:
        """Every loop of the program with the collectives inside it (``dataflow.Loop``)."""
        from shardscope.dataflow import loops

        return loops(self.program, self.collectives)

    @property
    def collectives_in_loops(self) -> int:
        """Collective equations inside at least one loop."""
        return sum(c.in_loop for c in self.collectives)

    @cached_property
    def executed_collectives(self) -> int | None:
        """Collectives run per call (None if a loop around one has no static trip count).

        Only one branch of a ``cond`` runs: the largest counts, an upper bound when
        :attr:`per_call_is_upper_bound`.
        """
        from shardscope.dataflow import per_call

        return per_call(self.program, lambda eqn: 1)

    @cached_property
    def bytes_per_call(self) -> int | None:
        """Per-device bytes moved by collectives per call (None if unknown)."""
        from shardscope.dataflow import payload_bytes, per_call

        return per_call(self.program, payload_bytes)

    @property
    def per_call_is_upper_bound(self) -> bool:
        """True when collectives sit in ``cond`` branches, so per-call totals are upper bounds."""
        from shardscope.dataflow import has_conditional

        return has_conditional(self.collectives)

    def structure_summary(self) -> str:
        """One line of what the program is (deterministic): collectives, loops, bytes."""
        return (
            f"{len(self.collectives)} collective(s), {self.collectives_in_loops} in loops, "
            f"{count_text(self.executed_collectives)} executed/call, {count_text(self.bytes_per_call)} B/call"
        )

    def summary(self) -> str:
        """One line: the structure summary plus run time and gradient error when measured."""
        if self.run_s is None:
            return self.structure_summary()
        return (
            f"{self.structure_summary()}, run median {self.run_s.median * 1e3:.3f} ms, "
            f"max_abs_err {self.max_abs_err:.2e}"
        )


@dataclass(frozen=True)
class ReferenceResult:
    """The unchunked VJP: the gradient every plan is checked against, and its cost."""

    compile_s: float | None
    run_s: Any
    memory: dict[str, int] | None


@dataclass(frozen=True)
class Analysis:
    """Everything shardscope shows for one :class:`Settings`."""

    settings: Settings  # resolved: function and chunk size filled in
    function: str
    description: str
    backend: str
    shapes: Any  # shardscope.plans.Shapes
    plans: dict[str, PlanResult]
    reference: ReferenceResult
    # each plan's gradient against the first plan's (shardscope.crosscheck.GradientCheck); empty unmeasured
    gradient_checks: tuple = ()

    @property
    def warnings(self) -> list[str]:
        """What the user should know that no number shows on its own: plans that disagree."""
        return [check.warning for check in self.gradient_checks if check.warning]

    @property
    def measured(self) -> bool:
        """True when the plans were compiled and timed (not only traced)."""
        return self.plans["naive"].run_s is not None

    @property
    def speedup(self) -> float | None:
        """Naive median run time over deferred median run time (None when not measured)."""
        if not self.measured:
            return None
        return self.plans["naive"].run_s.median / self.plans["deferred"].run_s.median

    def headline(self) -> list[str]:
        """The settings in words, as every rendering heads its output."""
        s = self.shapes
        return [
            f"shardscope: {self.settings.path.name}::{self.function}",
            f"mesh {self.settings.axis}={s.devices} ({self.backend}), batch N={s.batch}, "
            f"{s.per_device_batch}/device, chunk size {s.chunk_size} -> {s.chunks_per_device} chunks/device",
        ]

    def diff_text(self) -> str:
        """The jaxpr diff export (the same text as ``shardscope diff``)."""
        from shardscope.diff import diff_text

        return diff_text(self)

    def export_stem(self) -> str:
        """``<function>-<devices>dev-c<chunk>``: the export file's name without suffix."""
        return f"{self.function}-{self.shapes.devices}dev-c{self.shapes.chunk_size}"


def analyze(
    settings: Settings,
    progress: Progress | None = None,
    demo_file: Any = None,
    *,
    measure: bool = True,
    graphs: bool = True,
) -> Analysis:
    """Load, trace, compile, time and check the plans of ``settings``.

    The CPU device count must already be set (:func:`shardscope.devices.ensure_devices`).
    ``demo_file`` skips loading when the caller already holds the loaded file. With
    ``measure=False`` the plans are only traced: no HLO, timings, memory or error. With
    ``graphs=False`` the dataflow graphs are left to be built on first use (``report`` and
    ``diff`` never use them, and skip importing networkx).
    Raises :class:`ShardscopeError` for anything the user can fix.
    """
    report = progress or (lambda stage, fraction: None)
    report("loading", 0.0)

    import jax

    from shardscope import plans
    from shardscope.demos import load_demo_file

    if settings.repeats < 1:
        raise SettingsError(f"repeats must be at least 1, not {settings.repeats}.", "time each plan at least once")
    demo_file = demo_file or load_demo_file(settings.path)
    demo_fn = demo_file.get(settings.function)
    built = plans.build_plans(demo_fn, settings)
    settings = settings.with_(function=demo_fn.name, chunk_size=built.shapes.chunk_size)
    names = (*plans.PLAN_NAMES, "reference") if measure else plans.PLAN_NAMES
    traced = _trace(built, names, settings.axis, report)
    measured = _measure(built, traced, settings.repeats, report) if measure else {}

    results = {}
    for name in plans.PLAN_NAMES:
        inspection = inspect_plan(traced[name][0], name, built.args, traced[name][1])
        results[name] = PlanResult(
            name=name,
            program=inspection.program,
            collectives=inspection.collectives,
            trace_s=traced[name][1],
            **measured.get(name, {}),
        )
        if graphs:
            results[name].graph  # noqa: B018 - built here, in the caller's (worker) thread
    reference = measured.get("reference", {})
    return Analysis(
        gradient_checks=measured.get("gradient_checks", ()),
        settings=settings,
        function=demo_fn.name,
        description=demo_fn.spec.description,
        backend=jax.default_backend(),
        shapes=built.shapes,
        plans=results,
        reference=ReferenceResult(reference.get("compile_s"), reference.get("run_s"), reference.get("memory")),
    )


def inspect_plan(traced: Any, name: str, args: tuple, trace_s: float) -> Any:
    """A plan read by the same engine as any program (:func:`shardscope.inspection.inspect_traced`).

    Its inputs are ``params``, ``x`` and the cotangent ``v``; its outputs are the gradients of
    ``params``, named after the parameter they are the gradient of.
    """
    from shardscope.inspection import inspect_traced, pytree_names

    params, x, v = args
    inputs = pytree_names(params, "params") + pytree_names(x, "x") + pytree_names(v, "v")
    return inspect_traced(traced, name, inputs, pytree_names(traced.out_info, "params"), trace_s)


def _trace(built: Any, names: tuple[str, ...], axis: str, report: Progress) -> dict[str, tuple[Any, float]]:
    """Trace each program once: ``{name: (traced, seconds)}``."""
    from shardscope import measure, plans

    traced = {}
    for i, name in enumerate(names):
        report("tracing", i / len(names))
        try:
            traced[name] = measure.timed(lambda: built.functions[name].trace(*built.args))
        except ShardscopeError:
            raise
        except Exception as exc:
            raise plans.describe_trace_error(exc, axis) from exc
    return traced


def _measure(built: Any, traced: dict, repeats: int, report: Progress) -> dict[str, dict[str, Any]]:
    """Compile each traced program once, time them interleaved, check the gradients."""
    import jax

    from shardscope import hlo, measure, plans
    from shardscope.crosscheck import compare

    compiled, compile_s = {}, {}
    for i, name in enumerate(traced):
        report("compiling", i / len(traced))
        try:
            compiled[name], compile_s[name] = measure.timed(lambda: traced[name][0].lower().compile())
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ShardscopeError(
                f"XLA failed to compile the {name} plan: {type(exc).__name__}: {first}",
                "run with --debug for the full error",
            ) from exc

    report("timing", 0.0)
    times = measure.time_interleaved(
        compiled, built.args, repeats, on_round=lambda i: report("timing", (i + 1) / repeats)
    )
    report("checking", 0.0)
    expected = compiled["reference"](*built.args)
    backend = jax.default_backend()
    out: dict[str, Any] = {
        name: {"compile_s": compile_s[name], "run_s": times[name], "memory": measure.memory(compiled[name])}
        for name in compiled
    }
    gradients = {}
    for name in plans.PLAN_NAMES:
        out[name]["hlo"] = hlo.summarize(compiled[name].as_text(), backend)
        gradients[name] = compiled[name](*built.args)
        out[name]["max_abs_err"] = measure.max_abs_err(gradients[name], expected)
    out["gradient_checks"] = compare(gradients)
    report("checking", 1.0)
    return out


__all__ = ["Analysis", "Cancelled", "PlanResult", "Progress", "ReferenceResult", "STAGES", "analyze"]
