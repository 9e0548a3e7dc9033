"""The analysis of one program: every collective, where it runs, how often, and whether it must.

An :class:`Inspection` is one program read two ways: its jaxpr (what the program writes) and
its compiled module (what XLA runs, the partitioner's collectives too), paired.
:func:`inspect_traced` and :func:`with_compiled` read a trace and its executable into one; every
program a user or shardscope writes reaches them along one path,
:mod:`shardscope.pipeline.one_program` (``shardscope.inspect``, ``check``, the explorer and
``report``), which traces, compiles for the CPU and the targets and adds the fixes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Sequence

from shardscope.engine.compilation import served_from_cache
from shardscope.engine.counts import total_executions
from shardscope.engine.device_request import DeviceRequest
from shardscope.engine.dispatch.plan import DispatchPlan, dispatch_plan
from shardscope.engine.extensions import EXTENSIONS, Rewrites
from shardscope.engine.hlo.compiled import HoldsTraced, jax_traced, plan_of
from shardscope.engine.hlo.measured import MeasuredPlan
from shardscope.engine.hlo.paired import PairedCollective, paired_collectives
from shardscope.engine.hlo.partitioner_warnings import PartitionerWarning
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.jaxpr.dataflow import collectives, loops
from shardscope.engine.jaxpr.model import equation_source, from_jaxpr, short_source
from shardscope.engine.pytree_paths import argument_names, pytree_names
from shardscope.engine.traceable import Traceable
from shardscope.errors import ShardscopeError, TraceError, quote_error

if TYPE_CHECKING:
    from rich.console import RenderableType
    from jax.stages import Compiled, Traced

    from shardscope.engine.dispatch.plan import DispatchFinding
    from shardscope.engine.hlo.target_plan import TargetPlan
    from shardscope.engine.jaxpr.dataflow import Collective, Loop
    from shardscope.engine.jaxpr.model import Program

__all__ = ["InspectedCall", "Inspection", "argument_names", "inspect_traced", "pytree_names", "with_compiled"]


@dataclass(frozen=True)
class InspectedCall:
    """What :func:`inspect` traced and compiled: the program as JAX traces it (its dynamic
    arguments and their names), the trace and the compiled program. A what-if rewrites and
    runs it (:meth:`Inspection.what_if`)."""

    program: Traceable
    traced: "Traced"
    compiled: "Compiled"


@dataclass(frozen=True)
class Inspection:
    """One program, as written (its jaxpr) and as XLA compiled it, with each collective's verdict.

    ``collectives`` are the jaxpr's collective equations (what the program writes; a jit with
    shardings has none there); ``compiled`` is the compiled plan (what runs: every collective
    instruction of the partitioned module, the partitioner's too), None for a program that was
    only traced. :attr:`paired` joins the two, one entry per collective: what the tables, the
    findings and ``check``'s exit code count. ``targets`` are its plans on the TPU slices
    ``check --target`` compiled it for (nothing runs there). ``dispatches`` is set for a step
    that is not jitted and calls jitted functions (:mod:`shardscope.engine.dispatch.plan`): what
    runs is each call's own module, and the counts are per step, summed over the calls.
    """

    function: str
    program: Program
    collectives: tuple[Collective, ...]
    trace_s: float = 0.0
    compiled: CompiledPlan | None = None
    compile_s: float | None = None
    compile_from_cache: bool = False  # JAX's persistent cache served the executable: compile_s is its read
    targets: tuple[TargetPlan, ...] = ()
    call: InspectedCall | None = field(default=None, repr=False, compare=False)
    dispatches: DispatchPlan | None = None
    dumped: str = ""
    """The dump file this inspection's plan was read from (``check --xla-dump``: no jaxpr, nothing
    traced); empty for a program shardscope traced and compiled."""

    shown_on: str = ""
    """The target this inspection was made for (``inspect_on("gpu:h100:8", ...)``): its plan is
    the one :meth:`counts` and :attr:`executed_collectives` count and printing shows first (the
    CPU's after it, labelled); empty for the CPU's."""
    measured: MeasuredPlan | None = None
    """The compiled plan's times in a profile (``--profile``, ``--profile-dir``), None without one."""
    profile_note: str = ""
    """Why a profile given put no times on this plan (it does not hold it, it is of another
    program, it cannot be read); empty otherwise."""
    device_request: DeviceRequest | None = None
    """Set when the program spans fewer devices than its source asks for, and JAX started fewer
    (a notebook that forgot ``jax_num_cpu_devices``): printing says so first, and the assertions
    of :mod:`shardscope.testing` fail on it."""
    one_device: str = ""
    """Set when the compiled program spans one device and still has collectives (each over a
    group of one: ``all-reduce[]``, no mesh axis), and no :attr:`device_request` says why: what
    that means and how to trace it over more devices (the hint ``inspect_on`` gives for it);
    printing says it first. Empty otherwise."""

    @property
    def mesh_note(self) -> str:
        """What every rendering (the text, the notebook's HTML, ``check --json``'s ``mesh_note``)
        says first of the devices the program spans: :attr:`device_request`'s note, else
        :attr:`one_device`; empty for a program over the devices it means."""
        return self.device_request.note() if self.device_request is not None else self.one_device

    @property
    def compiler(self) -> str:
        """Whose plan :attr:`compiled` is: ``XLA:CPU``, or the compiler of the chips it ran on
        (``--on tpu``: ``XLA:TPU``), or a dumped module's own compiler."""
        if self.compiled is not None:
            return f"XLA:{self.compiled.backend.upper()}"
        return "XLA:CPU"

    @property
    def shown_plan(self) -> TargetPlan | None:
        """The plan on :attr:`shown_on` (None for an inspection of the CPU's plan)."""
        return next((plan for plan in self.targets if plan.target == self.shown_on), None) if self.shown_on else None

    @cached_property
    def loops(self) -> tuple[Loop, ...]:
        """Every jaxpr loop with the collectives inside it."""
        return loops(self.program, self.collectives)

    @cached_property
    def paired(self) -> tuple[PairedCollective, ...]:
        """Every collective once: each compiled instruction with the jaxpr collectives it comes
        from, then the jaxpr collectives with none (dead ones last)."""
        if self.dispatches is not None:
            return tuple(c for d in self.dispatches.dispatches for c in d.inspection.paired)
        return paired_collectives(self.collectives, self.compiled)

    @property
    def findings(self) -> tuple[PairedCollective, ...]:
        """The collectives that run inside loops: the ones a verdict is about."""
        return tuple(c for c in self.paired if c.in_loop)

    @property
    def flagged(self) -> tuple[PairedCollective, ...]:
        """The collectives a loop runs without needing to, each once: by the compiled module's verdicts
        (the jaxpr's for a program only traced)."""
        return tuple(c for c in self.paired if c.flagged)

    @property
    def dispatch_findings(self) -> tuple[DispatchFinding, ...]:
        """The collectives of modules a step that is not jitted calls more than once, each with
        its verdict across the calls (empty for any other program)."""
        return self.dispatches.findings if self.dispatches is not None else ()

    @property
    def fails_check(self) -> bool:
        """True when ``check`` fails on it: a loop runs a collective it need not, or the step
        runs one once per call where once per step would do, or the partitioner fell back to an
        involuntary full rematerialization."""
        return bool(self.flagged) or any(f.flagged for f in self.dispatch_findings) or bool(self.rematerializations)

    @property
    def rematerializations(self) -> tuple[PartitionerWarning, ...]:
        """The partitioner's involuntary full rematerializations of the compile."""
        return self.compiled.rematerializations if self.compiled is not None else ()

    @property
    def dead_collectives(self) -> tuple[Collective, ...]:
        """The jaxpr collectives the compiler removes (nothing uses their result): they never run."""
        dead = set(self.compiled.dead_equations) if self.compiled is not None else set()
        return tuple(c for c in self.collectives if c.equation_id in dead)

    @property
    def live_collectives(self) -> tuple[Collective, ...]:
        """The jaxpr collectives that run (all but :attr:`dead_collectives`)."""
        dead = {c.equation_id for c in self.dead_collectives}
        return tuple(c for c in self.collectives if c.equation_id not in dead)

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per call of the compiled module (None when a count is unknown); per
        step, summed over its calls, for a sequence of dispatches."""
        if self.dispatches is not None:
            return self.dispatches.executed_collectives
        return self._plan().executed_collectives

    def counts(self) -> dict[str, int | None]:
        """Runs per call of each compiled collective kind, ``{"all-reduce": 4}``: what XLA runs
        (on :attr:`shown_on`'s compiler for an inspection made for a target),
        the partitioner's collectives too and combined ones once (None when a loop around one
        has no static trip count; collectives in conditional branches all count). For a
        sequence of dispatches, runs per step: each module's counts times its calls."""
        if self.dispatches is not None:
            return self.dispatches.counts()
        return self._plan().counts()

    def jaxpr_counts(self) -> dict[str, int | None]:
        """Runs per call of each JAX collective primitive the program writes, ``{"psum_invariant": 8}``,
        without the dead ones (None when a loop around one has no static trip count)."""
        totals: dict[str, list[Collective]] = {}
        for c in self.live_collectives:
            totals.setdefault(c.primitive, []).append(c)
        return {primitive: total_executions(found) for primitive, found in totals.items()}

    def what_if(self) -> Rewrites:
        """Every flagged finding rewritten as a user would fix it, each checked before it counts.

        A ``deferrable`` sum is moved out of its loop (``shard_map``: the value cast to varying
        before the loop, one ``psum`` after it; jit with Explicit axes: ``reduced`` parameters, an
        ``unreduced`` accumulator, one reshard after; jit with Auto axes: the same on the program
        traced again with Explicit axes), a ``loop_invariant`` collective moved before its loop.
        Each rewrite is compiled and planned, and run beside the original on the same arguments
        (filled from seed 0): its :attr:`~shardscope.whatif.what_if.Rewrite.status` is
        ``verified`` only when the moved collectives run as often as predicted and the outputs
        match within the dtype's tolerance; otherwise it says why. Returns a
        :class:`~shardscope.whatif.what_if.WhatIf` (``print()`` it; ``.rewrites``, each with its
        rewritten ``program`` and ``patch``). Computed once per inspection.
        """
        return self._what_if

    @cached_property
    def _what_if(self) -> Rewrites:
        if self.dispatches is not None:
            raise ShardscopeError(
                f"{self.function} is a sequence of dispatches: what_if() rewrites one compiled program, not the calls "
                "a step makes.", "apply the fix the findings name, or jax.jit the step to see XLA's merged program")
        if self.call is None or self.compiled is None:
            raise ShardscopeError(
                f"{self.function} has no traced and compiled call to rewrite: what_if() needs the inspection "
                "shardscope.inspect(fn, *args) returns.",
                "a demo's deferred plan is already its naive plan rewritten: `shardscope report FILE` times both")
        if EXTENSIONS.what_if is None:
            raise RuntimeError("the what-if is not loaded: import shardscope.whatif.what_if (shardscope.inspect does)")
        return EXTENSIONS.what_if(self)

    def _plan(self) -> CompiledPlan:
        shown = self.shown_plan
        if shown is not None:
            return shown.compiled
        if self.compiled is None:
            raise ValueError(f"{self.function} was only traced: it has no compiled plan (jaxpr_counts() reads the jaxpr)")
        return self.compiled

    def __rich__(self) -> RenderableType:
        """The findings table with the fixes under it (``rich.print(inspection)``); a step's
        dispatches with each module's collectives."""
        return EXTENSIONS.rich(self) if EXTENSIONS.rich is not None else str(self)

    def __str__(self) -> str:
        return EXTENSIONS.text(self) if EXTENSIONS.text is not None else repr(self)

    def _repr_html_(self) -> str | None:
        """The same table in a notebook (None, the text, where the HTML rendering is not loaded)."""
        return EXTENSIONS.html(self) if EXTENSIONS.html is not None else None

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # Any: IPython's printer (IPython not required)
        printer.text(str(self))


API_DEBUG = "JAX's whole error is this exception's __cause__"
"""Where the Python API's trace errors say the whole of JAX's error is (the CLI says ``--debug``)."""


def dispatches_of(program: Traceable, traced: "Traced | HoldsTraced", name: str, debug: str = API_DEBUG) -> DispatchPlan:
    """The :class:`~shardscope.engine.dispatch.plan.DispatchPlan` of the step ``program`` traced as
    one jit (``traced``): each call's module compiled alone; a call that does not compile alone
    is one :class:`TraceError`."""
    import jax

    traced = jax_traced(traced)
    arguments = jax.tree.leaves((program.args, program.kwargs))
    names = list(program.input_names) if len(program.input_names) == len(arguments) else [""] * len(arguments)
    sources = [short_source(equation_source(eqn)) for eqn in traced.jaxpr.jaxpr.eqns]
    try:
        return dispatch_plan(traced.jaxpr, arguments, names, sources, inspect_traced)
    except ShardscopeError:
        raise
    except Exception as exc:
        raise TraceError(f"{name} traces, but a call it makes does not compile alone: {quote_error(exc)}",
                         f"call the jitted function on its own with those arguments: it fails the same way; {debug}"
                         ) from exc


def inspect_traced(
    traced: Traced, function: str, input_names: Sequence[str], output_names: Sequence[str], trace_s: float = 0.0,
    *, compiled: Compiled | None = None, compile_s: float | None = None,
) -> Inspection:
    """The :class:`Inspection` of an already traced program (``jax.jit(f).trace(...)``, or flax's
    ``nnx.jit``); with ``compiled`` (its ``lower().compile()``), its compiled plan too."""
    traced = jax_traced(traced)
    program = from_jaxpr(traced.jaxpr)
    names_in, names_out = value_names(traced, program, input_names, output_names)
    inspection = Inspection(function, program, collectives(program, names_in, names_out), trace_s)
    if compiled is None:
        return inspection
    return with_compiled(inspection, traced, compiled, compile_s, input_names, output_names)


def with_compiled(inspection: Inspection, traced: "Traced | HoldsTraced", compiled: Compiled, compile_s: float | None,
                  input_names: Sequence[str], output_names: Sequence[str]) -> Inspection:
    """``inspection`` (the jaxpr's view of ``traced``) with the compiled plan of ``compiled``: the
    module read once and paired with the jaxpr's collectives as the trace read them (a demo's
    plan names its own collectives only after this: relabelled sources would pair with no line)."""
    traced = jax_traced(traced)
    names_in, names_out = value_names(traced, inspection.program, input_names, output_names)
    plan = plan_of(traced, compiled, input_names=names_in, output_names=names_out, program=inspection.program,
                   jaxpr_collectives=inspection.collectives)
    return dataclasses.replace(inspection, compiled=plan, compile_s=compile_s,
                               compile_from_cache=served_from_cache(compiled))


def value_names(traced: Traced, program: Program, input_names: Sequence[str],
                output_names: Sequence[str]) -> tuple[list[str], list[str]]:
    """The names of the program's inputs and outputs, each list blank where it does not name every
    value (a ``static_argnums`` argument is named but is no input of the jaxpr)."""
    invars = len(traced.jaxpr.jaxpr.invars)
    names_in = list(input_names) if len(input_names) == invars else [""] * invars
    outvars = len(program.root.outputs)
    names_out = list(output_names) if len(output_names) == outvars else [""] * outvars
    return names_in, names_out
