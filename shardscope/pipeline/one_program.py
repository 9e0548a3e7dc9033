"""The one path from a program to its :class:`~shardscope.engine.joined.inspection.Inspection`.

Every consumer reads a program here: ``shardscope.inspect`` and ``inspect_on``,
:mod:`shardscope.testing`, ``check`` (a program file's programs; a demo's plans through the
pipeline) and the pipeline behind ``report`` and the explorer, per program. A fix made on this
path reaches all of them. Two steps, so that the pipeline can trace every program before it
compiles one (its progress runs stage by stage):

- :func:`trace_program`: ``function.trace(*args, **kwargs)`` and the jaxpr's view; a program
  that does not trace raises :class:`NotTraced`, with its error and a one-line reason.
- :func:`compile_program`: a step that is not jitted is read as its dispatches (each call's
  module compiled alone; no target's compiler merges separate calls, so none is compiled for
  them). Any other program is compiled for the CPU first and its compiled plan read (paired
  with the jaxpr, a rematerialization's fix compiled and checked), then for each target, whose
  plan is compared with the CPU's; the program's own names are put on them (``relabel``: a
  demo's plans). A slice's compile is the process's peak of memory and leaves much of it
  resident after it, while the CPU's executable holds little once its compile's freed memory
  is given back: so the CPU never goes after the slice, and its compile never grows on top of
  what the slice's left. A Llama-3-8B-shaped step on 1,024 chips (``benchmarks/llama_adamw_step.py``,
  one process, freed memory given back after each compile): the slice's compile peaked at
  1,812 MiB and left 1,240 MiB, the CPU's after it peaked at 2,093 MiB; the CPU's first left
  ~600 MiB and the slice's after it peaked at ~1,850-1,900 MiB. ``check`` runs the CPU's
  compile beside the slice's instead (:func:`_compiled_beside`): the CPU's is over while the
  slice's is still growing (the same peak: 1,846 and 1,874 MiB for ``benchmarks/moe_step.py``
  on 1,024 chips on 2 cores, 5,255 and 5,190 MiB for the Llama step on 13), and its wall time
  is hidden beside the slice's.

What differs between consumers is said by the program (:class:`PipelineProgram`: how it is
named, what its errors say) and by :class:`Compiling` (the targets, the CPU's XLA options, what
runs between the compiles), never by another path. This module changes nothing process-wide:
the pipeline pauses the collector around it, ``check`` gives freed memory back between the compiles.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Sequence

from shardscope.engine.compilation import compile_traced
from shardscope.engine.compile_abort import naming_compiles
from shardscope.engine.compile_log import compiling_beside, host_threads
from shardscope.engine.device_request import device_request
from shardscope.engine.dispatch.plan import DispatchPlan, is_dispatch_sequence, reads_a_value_error
from shardscope.engine.hlo.compiled import jax_traced
from shardscope.engine.joined.inspection import API_DEBUG, InspectedCall, Inspection, dispatches_of, inspect_traced, with_compiled
from shardscope.engine.pytree_paths import pytree_names
from shardscope.engine.joined.remat_fixes import with_fixes
from shardscope.engine.traceable import Traceable, traceable
from shardscope.errors import ShardscopeError, TraceError, quote_error
from shardscope.failures import trace_error
from shardscope.pipeline.workload import Arguments, PipelineProgram
from shardscope.targets.count_hint import trace_over_more
from shardscope.targets.plans import compile_for_targets, load_targets, parse_targets, target_plans

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced

    from shardscope.engine.hlo.plan import CompiledPlan
    from shardscope.engine.hlo.target_plan import TargetPlan
    from shardscope.targets.base import TargetDevices
    from shardscope.targets.compile import OutOfMemory, TargetCompilation


@dataclass(frozen=True)
class Compiling:
    """How a caller has its programs compiled: for which ``targets`` (nothing runs there), with
    which XLA options for the CPU's compile (``check`` compiles it
    :data:`~shardscope.engine.compilation.READ_ONLY` when nothing will run it), and what runs
    between the CPU's compile and the targets' (``check`` gives the freed memory back there, so
    that a slice's compile starts from what is live: :mod:`shardscope.pipeline.freed_memory`)."""

    targets: "Sequence[TargetDevices]" = ()
    cpu_options: dict[str, object] | None = None
    before_targets: Callable[[], object] = field(default=lambda: None)
    beside: bool = False
    """Whether the CPU's compile may run beside the targets' (``check``, which owns the process:
    :func:`_compiled_beside`), instead of before them."""


@dataclass(frozen=True)
class TracedProgram:
    """A program traced once: its trace and the jaxpr's view of it (no compiled plan yet)."""

    program: PipelineProgram
    traced: "Traced"
    inspection: Inspection

    def only_traced(self) -> Inspection:
        """The inspection of the program traced and not compiled (``diff``), named as its source names it."""
        return self.program.relabel(self.inspection)


@dataclass(frozen=True)
class InspectedProgram:
    """A program's inspection and the CPU's executable the pipeline runs and times (None for a
    step of dispatches: each of its calls is its own module)."""

    inspection: Inspection
    executable: "Compiled | None"


class NotTraced(Exception):
    """A program that did not trace: the ``error`` a command shows (its ``__cause__`` is JAX's)
    and the ``reason`` an optional one is listed as unavailable under."""

    def __init__(self, error: ShardscopeError, reason: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason


def trace_program(program: PipelineProgram) -> TracedProgram:
    """``program`` traced on its arguments, with the jaxpr's view; :class:`NotTraced` when JAX
    (or the program itself: ``sys.exit()``) refuses it. A :class:`ShardscopeError` raised while
    tracing is shardscope's own and passes as it is."""
    args, kwargs = program.arguments
    start = time.perf_counter()
    try:
        traced = program.function.trace(*args, **kwargs)
    except ShardscopeError:
        raise
    except (Exception, SystemExit) as exc:  # SystemExit: the model called sys.exit()
        error, reason = program.trace_failure(exc)
        raise NotTraced(error, reason) from exc
    trace_s = time.perf_counter() - start
    inspection = inspect_traced(traced, program.name, program.input_names(traced), program.output_names(traced),
                                trace_s)
    return TracedProgram(program, traced, inspection)


def compile_program(traced: TracedProgram, compiling: Compiling = Compiling()) -> InspectedProgram:
    """The inspection of a traced program, compiled for the CPU and for ``compiling.targets``
    (see the module docstring). Raises the program's compile error, and
    :class:`~shardscope.errors.TargetError` where a target cannot compile it."""
    with naming_compiles(traced.program.title):  # XLA's abort names it (shardscope.engine.compile_abort)
        return _compiled_program(traced, compiling)


def _compiled_program(traced: TracedProgram, compiling: Compiling) -> InspectedProgram:
    program, trace = traced.program, traced.traced
    steps = program.dispatches(trace)
    if steps is not None:
        return InspectedProgram(replace(traced.inspection, dispatches=steps, compile_s=steps.compile_s), None)
    host = _host_beside(compiling)
    if host is not None:
        cpu, compilations = _compiled_beside(traced, compiling, host)
    else:
        cpu = _on_cpu(traced, compiling.cpu_options)  # first: see the module docstring
        if compiling.targets:
            compiling.before_targets()
        compilations = compile_for_targets(trace, compiling.targets, program.title) if compiling.targets else ()
    targets: tuple[TargetPlan, ...] = ()
    if compiling.targets:
        targets = target_plans(trace, cpu.executable, program.relabel(cpu.inspection), compiling.targets,
                               program.title, cpu.inputs, cpu.outputs, program.relabel, compilations)
    request = device_request(jax_traced(trace), cpu.executable)
    inspection = replace(cpu.inspection, compiled=cpu.fixed, targets=targets,
                         call=InspectedCall(cpu.call, jax_traced(trace), cpu.executable), device_request=request,
                         one_device="" if request is not None else _one_device(trace, cpu))
    return InspectedProgram(program.relabel(inspection), cpu.executable)


ONE_DEVICE_COUNT = 8
"""The device count a program over one device is told to trace over when nothing says another
(shardscope's own default count of CPU devices)."""


def _one_device(trace: "Traced", cpu: _OnCpu) -> str:
    """What a program compiled over one device with collectives in its plan means (each runs over
    a group of one device: nothing is exchanged, no loop's collective costs what it would), with
    the hint ``inspect_on`` gives for a program over too few devices; "" for any other program."""
    import jax  # loaded by now: the program was traced

    module = cpu.fixed.module  # the devices it runs over: its partitions times its replicas
    if not cpu.fixed.collectives or module is None or module.num_partitions * module.replica_count != 1:
        return ""
    count = jax.device_count() if jax.device_count() > 1 else ONE_DEVICE_COUNT
    kinds = ", ".join(dict.fromkeys(f"{c.kind}[]" for c in cpu.fixed.collectives))
    ways = ", or ".join(trace_over_more(jax_traced(trace), 1, count))
    return (f"The program's mesh spans 1 device: its collectives ({kinds}) run over groups of one device, on no mesh "
            f"axis, and exchange nothing, so this plan shows none of the communication of a sharded run. To see it, "
            f"{ways}.")


@dataclass(frozen=True)
class _OnCpu:
    """A program compiled for the CPU and read: its executable, the inspection with the CPU's
    compiled plan, that plan with its rematerializations' fixes, the call."""

    executable: "Compiled"
    inspection: Inspection
    fixed: "CompiledPlan"
    call: Traceable
    inputs: list[str]
    outputs: list[str]


def _on_cpu(traced: TracedProgram, options: dict[str, object] | None) -> _OnCpu:
    program, trace = traced.program, traced.traced
    executable, compile_s = compile_on_cpu(program, trace, options)
    inputs, outputs = program.input_names(trace), program.output_names(trace)
    inspection = with_compiled(traced.inspection, trace, executable, compile_s, inputs, outputs)
    assert inspection.compiled is not None  # read from ``executable``
    call = Traceable(program.function, *program.arguments, tuple(inputs), program.eager)
    fixed = with_fixes(call, inspection.compiled)  # its compiles are the CPU's too
    return _OnCpu(executable, inspection, fixed, call, inputs, outputs)


def _host_beside(compiling: Compiling) -> frozenset[int] | None:
    """The CPU backend's threads when the CPU's compile may run beside the targets' (``beside``,
    targets that are not the CPU, a CPU backend shardscope saw start: :func:`_compiled_beside`), else None."""
    if not compiling.beside or not compiling.targets:
        return None
    if any(devices.target.platform == "cpu" for devices in compiling.targets):
        return None  # compiled by the CPU's own client, on its threads: its lines could not be told apart
    return host_threads()


def _compiled_beside(traced: TracedProgram, compiling: Compiling, host: frozenset[int]
                     ) -> "tuple[_OnCpu, tuple[tuple[TargetCompilation | OutOfMemory, float], ...]]":
    """The CPU's compile (and its reading, its fixes' compiles, ``before_targets``) in a thread of
    its own while this one compiles for the targets: a slice's compile runs on many threads and
    takes several times as long, so the CPU's costs little wall time beside it. Both redirect
    descriptor 2 through one pipe, each compile's partitioner lines told apart by the threads
    that wrote them (:func:`~shardscope.engine.compile_log.compiling_beside`). The CPU's errors
    come first, as when it compiles first."""
    outcome: dict[str, object] = {}

    def on_cpu() -> None:
        try:
            with shared.joined(host=True):
                outcome["cpu"] = _on_cpu(traced, compiling.cpu_options)
            compiling.before_targets()
        except BaseException as exc:  # noqa: BLE001 - raised in the compiling thread, first
            outcome["error"] = exc

    compilations: tuple[tuple[TargetCompilation | OutOfMemory, float], ...] = ()
    with compiling_beside(host) as shared:
        worker = threading.Thread(target=on_cpu, name="shardscope-cpu-compile", daemon=True)
        worker.start()
        try:
            with shared.joined(host=False):
                compilations = compile_for_targets(traced.traced, compiling.targets, traced.program.title,
                                                   stop=lambda: "error" in outcome)
        except BaseException as exc:  # noqa: BLE001 - raised once the CPU's side has ended
            outcome["target_error"] = exc
        worker.join()
    for raised in ("error", "target_error"):
        if raised in outcome:
            raise outcome[raised]  # type: ignore[misc]
    cpu = outcome["cpu"]
    assert isinstance(cpu, _OnCpu)
    return cpu, compilations


def compile_on_cpu(program: PipelineProgram, trace: "Traced",
                   options: dict[str, object] | None = None) -> "tuple[Compiled, float]":
    """``trace`` compiled for the CPU (with XLA's ``options``) and the seconds it took; XLA's
    error as the program's own (:meth:`PipelineProgram.compile_error`)."""
    start = time.perf_counter()
    try:
        executable = compile_traced(trace, options)
    except ShardscopeError:
        raise
    except Exception as exc:
        raise program.compile_error(exc) from exc
    return executable, time.perf_counter() - start


def inspect_program(program: PipelineProgram, compiling: Compiling = Compiling()) -> Inspection:
    """``program`` traced, compiled and read (:func:`trace_program`, :func:`compile_program`);
    one that does not trace raises its error."""
    try:
        traced = trace_program(program)
    except NotTraced as failed:
        raise failed.error from failed.__cause__
    return compile_program(traced, compiling).inspection


def user_program(fn: Callable, args: tuple, kwargs: dict, name: str | None = None,
                 debug: str = API_DEBUG) -> PipelineProgram:
    """A user's function on its example arguments as a program (``shardscope.inspect``,
    ``check``, a program file's ``@shardscope.program``), named ``name`` (default: its own);
    its errors say that ``debug`` shows the whole of JAX's error. Nothing is run: a program
    file gives its programs the arguments to run on (:mod:`shardscope.pipeline.program_files`)."""
    label = name if name else str(getattr(fn, "__name__", type(fn).__name__))
    program = traceable(fn, args, kwargs)

    def dispatches(traced: "Traced") -> DispatchPlan | None:
        if not is_dispatch_sequence(fn, jax_traced(traced).jaxpr):
            return None
        return dispatches_of(program, traced, label, debug)

    def compile_failure(exc: BaseException) -> ShardscopeError:
        return TraceError(f"{label} traces but does not compile on its example arguments: {quote_error(exc)}",
                          f"jax.jit({label}).lower(*args).compile() fails the same way; {debug}")

    return PipelineProgram(
        name=label, description="", role="program", function=program.function,
        arguments=(program.args, program.kwargs),
        input_names=lambda traced: list(program.input_names),
        output_names=lambda traced: pytree_names(traced.out_info, "out"),
        run_arguments=_not_run,
        trace_failure=lambda exc: _trace_failure(fn, label, exc, debug),
        dispatches=dispatches, eager=program.eager, compile_failure=compile_failure, called=label,
    )


def _not_run(traced: "Traced", compiled: "Compiled") -> Arguments:
    raise RuntimeError("a program inspected alone has no arguments to run on: a program file's have")


def _trace_failure(fn: Callable, name: str, exc: BaseException, debug: str) -> tuple[ShardscopeError, str]:
    """The error a user's program raises when it does not trace, and the one-line reason it is
    listed under (the explorer's notes, the diff export's head): a step that is not jitted and
    reads a value says so (it runs eagerly, but its dispatches are read from a trace)."""
    if isinstance(exc, SystemExit):
        return (TraceError(f"{name} called sys.exit({exc.code!r}) while being traced.",
                           "shardscope traces the program: it must return, not exit"),
                f"it called sys.exit({exc.code!r}) while being traced")
    eager = None if hasattr(fn, "trace") else reads_a_value_error(exc, name, debug)
    error = eager if eager is not None else trace_error(exc, name, demo=False, debug=debug)
    return error, "it fails to trace: " + " ".join(quote_error(exc, 3).split())


def inspect(fn: Callable, *args: object, **kwargs: object) -> Inspection:
    """Trace, lower and compile ``fn(*args, **kwargs)`` (nothing runs) and read both views.

    ``fn`` is any callable JAX can trace: a ``jax.jit`` object, a plain function (jitted here),
    an ``nnx.jit`` function, an ``eqx.filter_jit`` wrapper, a ``functools.partial`` or a bound
    method; with ``jax.shard_map`` inside or jit with shardings (the partitioner's collectives
    are in the compiled module only). ``args`` are arrays or ``jax.ShapeDtypeStruct`` pytrees
    (placed with their shardings, or shapes with ``sharding=``). The jaxpr is read, then
    ``traced.lower().compile()`` gives the module the compiled plan reads: the program
    compiles once, as ``jax.jit(fn).lower(*args).compile()`` would. Raises
    :class:`~shardscope.errors.TraceError` when it does not trace or compile.
    """
    return inspect_program(user_program(fn, args, kwargs))


def inspect_on(targets: str | Sequence[str], fn: Callable, args: tuple, kwargs: dict) -> Inspection:
    """:func:`inspect` of ``fn(*args, **kwargs)`` with its plan on each target too
    (``"gpu:h100:8"``, ``"tpu:v5e:2x4"``): ``inspection.targets`` holds them, beside the CPU's.
    Made for one target, the inspection counts (``counts()``) and prints that target's plan,
    then the CPU's, each labelled."""
    texts = (targets,) if isinstance(targets, str) else tuple(targets)
    loaded = load_targets(parse_targets(texts))
    inspection = inspect_program(user_program(fn, args, kwargs), Compiling(targets=loaded))
    if len(inspection.targets) != 1:
        return inspection
    # made for one target: it counts and shows that target's plan first
    return replace(inspection, shown_on=inspection.targets[0].target)
