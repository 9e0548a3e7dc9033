"""The chunk-size trade-off: memory and run time of every plan at every chunk size.

Each (plan, chunk size) is traced and compiled once; the reference (which does not depend on
the chunk size) is compiled once for the whole sweep and checks every point's gradient. The
pick is the fastest point whose per-device footprint fits the memory budget.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from shardscope.distributed.workers import collectives_transport
from shardscope.engine.compilation import compile_traced
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.measured import MeasuredPlan, profile_onto
from shardscope.errors import SettingsError, ShardscopeError
from shardscope.hardware.fit import live_bytes, needed_bytes
from shardscope.measure import timing
from shardscope.measure.profile_capture import profile_each
from shardscope.measure.timed_on import TimedOn, timed_on
from shardscope.pipeline.comparison import CompiledWork, WorkDifference, compiled_work, work_differences
from shardscope.config.settings import Settings, divisors
from shardscope.sources.loading import load_demo_file

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.sources.demos import DemoFile
    import jax
    from shardscope.targets.base import TargetDevices
    from shardscope.plans.registry import Plans

SweepProgress = Callable[[int, int, int], None]
"""``progress(done, total, chunk_size)`` after each chunk size; may raise to cancel."""

def parse_chunk_sizes(text: str) -> tuple[int, ...]:
    """``1,2,4,8`` as ascending distinct chunk sizes."""
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise SettingsError(f"--chunk-sizes {text!r} is not a list of positive whole numbers.",
                            "write e.g. --chunk-sizes 1,2,4,8")
    return tuple(sizes)


@dataclass(frozen=True)
class SweepPoint:
    """One plan at one chunk size: its memory per device, run time and communication per call."""

    plan: str
    chunk_size: int
    chunks_per_device: int
    memory: dict[str, int]
    run_s: timing.RunTimes
    executed_collectives: int | None
    bytes_per_call: int | None
    max_abs_err: float
    target_memory: dict[str, int] | None = None  # memory_analysis() of its compile for the sweep's target
    target_platform: str = ""  # the target's platform (``tpu``, ``gpu``): how its memory_analysis() is read
    measured: MeasuredPlan | None = None  # --profile: its compiled plan's times under JAX's profiler
    compiled_work: CompiledWork | None = None
    """Its compiled collectives, memory and XLA's counts (:func:`~shardscope.pipeline.comparison.compiled_work`):
    two points with the same one are one program, whose times differ by noise only."""

    @property
    def footprint_bytes(self) -> int:
        """Per-device bytes the compiled program holds: arguments + outputs + temporaries - aliases."""
        return live_bytes(self.memory)

    @property
    def target_footprint_bytes(self) -> int | None:
        """The bytes per device the plan needs on the sweep's target (None without one), read as
        ``check`` and ``layouts`` read them (:func:`shardscope.hardware.fit.needed_bytes`: on a TPU
        libtpu's peak, whose temporaries' total is no peak)."""
        return None if self.target_memory is None else needed_bytes(self.target_memory, self.target_platform)


@dataclass(frozen=True)
class Sweep:
    """Every point of the sweep, the budget, and the pick."""

    function: str
    devices: int
    per_device_batch: int
    repeats: int
    points: tuple[SweepPoint, ...]
    memory_budget_bytes: int | None
    processes: int = 1
    collectives_transport: str = "in-process"
    unavailable: dict[str, str] = field(default_factory=dict)
    """Each plan that could not be built or traced here, with the reason (as the report lists it)."""
    mesh: dict[str, int] = field(default_factory=dict)
    """The mesh swept on, axis by axis (a demo's own mesh when the user gave none)."""
    target: str | None = None
    """The slice every point was also compiled for (``tpu:v5e:2x2``): the budget is its memory's."""
    timed_on: TimedOn | None = None
    """The devices every point was timed on (simulated CPU devices, or chips with ``--on``)."""

    def budgeted_bytes(self, point: SweepPoint) -> int:
        """The footprint the budget is checked against: the target's, else the CPU's."""
        on_target = point.target_footprint_bytes
        return point.footprint_bytes if self.target is None or on_target is None else on_target

    def fits(self, point: SweepPoint) -> bool:
        """True when ``point`` fits the budget (always, without a budget)."""
        return self.memory_budget_bytes is None or self.budgeted_bytes(point) <= self.memory_budget_bytes

    @property
    def pick(self) -> SweepPoint | None:
        """The fastest point (median run time) that fits the budget; None when none fits. Of points
        that compile to the same work as the fastest (:attr:`same_program`), the first swept: which
        of them is fastest is noise, and the pick must not change with it."""
        fitting = [p for p in self.points if self.fits(p)]
        if not fitting:
            return None
        fastest = min(fitting, key=lambda p: p.run_s.median)
        return self._same_work(fastest)[0]

    @property
    def same_program(self) -> tuple[SweepPoint, ...]:
        """The pick and every other point that fits and compiles to the same collectives, memory
        and XLA counts (naive, deferred and reduced at one chunk per device): one program under
        several names, none faster than the others but by noise. Empty when nothing fits."""
        pick = self.pick
        return () if pick is None else self._same_work(pick)

    @property
    def same_collectives(self) -> tuple[tuple[SweepPoint, tuple[WorkDifference, ...]], ...]:
        """The points at the pick's chunk size that fit and compile to the pick's collectives but
        not to its program (a few bytes more of temporaries: naive's one chunk through a loop of
        one iteration), each with what differs, pick's figure first: the table's rounded memory
        may show them alike, yet they are timed as other programs."""
        pick = self.pick
        if pick is None or pick.compiled_work is None:
            return ()
        same = self.same_program
        found = []
        for p in self.points:
            if p.chunk_size != pick.chunk_size or any(p is q for q in same) or p.compiled_work is None \
                    or not self.fits(p):
                continue
            differences = work_differences(pick.compiled_work, p.compiled_work)
            if differences:
                found.append((p, differences))
        return tuple(found)

    def _same_work(self, point: SweepPoint) -> tuple[SweepPoint, ...]:
        """``point`` and the points that fit with its compiled work, in the order swept."""
        if point.compiled_work is None:
            return (point,)
        return tuple(p for p in self.points if p is point or (self.fits(p) and p.compiled_work == point.compiled_work))

    @property
    def smallest_footprint(self) -> SweepPoint:
        """The point that needs the least memory per device (on the target, with one)."""
        return min(self.points, key=self.budgeted_bytes)

    @property
    def plan_names(self) -> list[str]:
        """The plans swept, in order."""
        return list(dict.fromkeys(p.plan for p in self.points))

    @property
    def chunk_sizes(self) -> list[int]:
        """The chunk sizes swept, ascending."""
        return sorted({p.chunk_size for p in self.points})


def run_sweep(
    settings: Settings,
    chunk_sizes: tuple[int, ...] | None = None,
    memory_budget_bytes: int | None = None,
    progress: SweepProgress | None = None,
    demo_file: DemoFile | None = None,
    target: "TargetDevices | None" = None,
) -> Sweep:
    """Compile and time every plan at every chunk size (default: every divisor of the per-device batch).

    ``demo_file`` skips loading when the caller already holds the loaded file; with ``target``
    (a loaded TPU slice as many devices wide as the mesh) each point is compiled for it too.
    """
    import jax

    from shardscope.plans import registry  # imports JAX (about 1 s): not for --help

    demo_fn = (demo_file or load_demo_file(settings.path)).get(settings.function)
    settings = settings.for_demo(demo_fn.default_mesh)  # the demo's own mesh when the user gave none
    first = registry.build_plans(demo_fn, settings.with_(chunk_size=None))
    per_device = first.shapes.per_device_batch
    sizes = chunk_sizes or tuple(divisors(per_device))
    bad = [c for c in sizes if per_device % c]
    if bad:
        raise SettingsError(
            f"chunk size(s) {', '.join(map(str, bad))} do not divide the per-device batch {per_device}.",
            f"valid chunk sizes: {', '.join(map(str, divisors(per_device)))}",
        )
    reference = _compile("reference", first.functions["reference"], first.args, settings.axis)
    expected = reference(*first.args)
    points: list[SweepPoint] = []
    unavailable: dict[str, dict[int, str]] = {}  # plan -> chunk size -> why
    for i, chunk in enumerate(sizes):
        built = registry.build_plans(demo_fn, settings.with_(chunk_size=chunk))
        traced, untraced = registry.trace_plans(built)
        for name, reason in {**built.unavailable, **untraced}.items():
            unavailable.setdefault(name, {})[chunk] = reason
        points += _points(built, traced, chunk, expected, settings, target)
        if progress is not None:
            progress(i + 1, len(sizes), chunk)
    return Sweep(
        function=demo_fn.name,
        devices=first.shapes.devices,
        per_device_batch=per_device,
        repeats=settings.repeats,
        points=tuple(points),
        memory_budget_bytes=memory_budget_bytes,
        processes=jax.process_count(),
        collectives_transport=collectives_transport(),
        unavailable={name: _reason(by_chunk, sizes) for name, by_chunk in unavailable.items()},
        mesh=dict(settings.mesh.axes),
        target=None if target is None else target.target.text(),
        timed_on=timed_on(jax.devices()[:first.shapes.devices]),
    )


def _reason(by_chunk: dict[int, str], sizes: tuple[int, ...]) -> str:
    """Why a plan is missing from the sweep: the reason, and at which chunk sizes unless at every one."""
    reasons = list(dict.fromkeys(by_chunk.values()))
    if len(by_chunk) == len(sizes) and len(reasons) == 1:
        return reasons[0]
    return "; ".join(
        f"at chunk size {', '.join(str(c) for c in by_chunk if by_chunk[c] == reason)}: {reason}" for reason in reasons
    )


def _points(built: Plans, traced: dict[str, tuple[jax.stages.Traced, float]], chunk: int,
            expected: Any,  # the reference's gradient: a pytree like the user's params
            settings: Settings, target: "TargetDevices | None" = None) -> list[SweepPoint]:
    """Compile and time each traced plan of ``built`` (one chunk size), interleaved; compile it
    for ``target`` too, for its memory there."""
    from shardscope.engine.jaxpr import dataflow  # numpy (about 0.13 s): not on `import shardscope.cli`'s path
    from shardscope.engine.jaxpr.model import from_jaxpr

    names = [name for name in built.plans if name in traced]
    compiled = {name: _compile(name, built.functions[name], built.args, settings.axis, traced[name][0])
                for name in names}
    times = timing.time_interleaved(compiled, built.args, settings.repeats)
    plans = {name: compiled_plan(fn.as_text() or "") for name, fn in compiled.items()}  # read once, used twice
    measured = _profiled(compiled, plans, built.args) if settings.profile else {}
    out = []
    for name in names:
        program = from_jaxpr(traced[name][0].jaxpr)
        memory = timing.memory(compiled[name])
        work = compiled_work(plans[name], memory, timing.cost_summary(compiled[name]))
        out.append(SweepPoint(
            plan=name,
            chunk_size=chunk,
            chunks_per_device=built.shapes.chunks_per_device,
            memory=memory,
            run_s=times[name],
            executed_collectives=dataflow.per_call(program, lambda eqn: 1),
            bytes_per_call=dataflow.per_call(program, dataflow.payload_bytes),
            max_abs_err=timing.max_abs_err(built.plans[name].gradient(compiled[name](*built.args)), expected),
            target_memory=None if target is None else _target_memory(traced[name][0], target, name),
            target_platform="" if target is None else target.target.platform,
            measured=measured.get(name),
            compiled_work=work,
        ))
    return out


def _profiled(compiled: dict[str, jax.stages.Compiled], plans: "dict[str, CompiledPlan]", args: tuple
              ) -> dict[str, MeasuredPlan]:
    """Each plan of one chunk size run under JAX's profiler, its compiled plan's (``plans``) times."""
    profiles = profile_each({name: functools.partial(fn, *args) for name, fn in compiled.items()})
    return {name: profile_onto(plans[name], profiles[name]) for name in compiled}


def _target_memory(traced: jax.stages.Traced, target: "TargetDevices", name: str) -> dict[str, int]:
    """``memory_analysis()`` of the plan compiled for ``target`` (nothing runs there)."""
    from shardscope.targets.compile import compile_for_target

    return compile_for_target(traced, target, f"the {name} plan").memory


def _compile(name: str, fn: jax.stages.Wrapped, args: tuple, axis: str, traced: jax.stages.Traced | None = None) -> jax.stages.Compiled:
    traced = traced if traced is not None else _trace_fn(fn, args, axis)
    try:
        return compile_traced(traced)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ShardscopeError(f"XLA failed to compile the {name} plan: {type(exc).__name__}: {first}",
                              "run with --debug for the full error") from exc


def _trace_fn(fn: jax.stages.Wrapped, args: tuple, axis: str) -> jax.stages.Traced:
    from shardscope.plans import registry  # imports JAX: the sweep's own module must not

    try:
        return fn.trace(*args)
    except ShardscopeError:
        raise
    except Exception as exc:
        raise registry.describe_trace_error(exc, axis) from exc
