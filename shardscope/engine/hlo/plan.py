"""The compiled communication plan as values: every collective instruction of one module with
the loops around it, what it carries, what it costs per call and its verdict.

:mod:`shardscope.engine.hlo.compiled` builds a :class:`CompiledPlan` from a module's text; the
verdicts, fixes, names and the pairing with the jaxpr read these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardscope.engine.counts import PerCall, known_product, total_executions
from shardscope.engine.hlo.partitioner_warnings import INVOLUNTARY_REMAT, PartitionerWarning
from shardscope.engine.hlo.shapes import DTYPE_BITS
from shardscope.engine.hlo.text import HloModule
from shardscope.engine.hlo.verdicts import NEEDED
from shardscope.engine.jaxpr.verdicts import Verdict
from shardscope.engine.pytree_paths import is_source_line, labelled_argument, listed

__all__ = ["CompiledLoop", "CompiledOperand", "CompiledCollective", "CompiledPlan"]


_PARTITIONER = "partitioner"
"""``pairing.PARTITIONER``, spelled here: pairing names this module's types, so it is not imported."""

@dataclass(frozen=True)
class CompiledLoop:
    """A while loop of the module: the instruction, its body, its trip count (None: unknown),
    where the program made it and its ``op_name`` (``jit(step)/while``)."""

    name: str
    body: str
    trip_count: int | None
    source: str = ""
    op_name: str = ""


@dataclass(frozen=True)
class CompiledOperand:
    """One value a collective carries: a combined (tuple-shaped) collective carries several."""

    instruction: str
    shape: str
    bytes: int
    value: str = ""
    verdict: str = NEEDED
    computed: bool = False
    """A value the step computes on its way to an output (a loss, a metric): no argument and no
    argument's gradient, so a fix has nothing to cast for it (named ``loss``, or ``out[2]``)."""
    scaling: str = ""
    """For a value the step computes (:attr:`computed`): ``mean`` when the program divides it by
    the rows it covers, ``sum`` when by nothing, ``unknown`` for another factor
    (:mod:`~shardscope.engine.hlo.loss_scaling`); ``""`` for any other value."""
    promoted_from: str = ""
    """The program's own element type where the compiler carries the value in a wider one
    (``bf16``: XLA:CPU all-reduces a bf16 sum in f32, :mod:`~shardscope.engine.hlo.promotion`),
    else ``""``."""

    @property
    def dtype(self) -> str:
        """The element type the compiled instruction carries it in (``f32``)."""
        return self.shape.split("[", 1)[0] if "[" in self.shape else ""

    @property
    def written_bytes(self) -> int:
        """Its bytes in the program's own type: :attr:`bytes`, or for a value the compiler
        promoted, what the narrow type holds (a bf16 sum carried in f32: half)."""
        wide = DTYPE_BITS.get(self.dtype, 0)
        if not self.promoted_from or not wide:
            return self.bytes
        return self.bytes * DTYPE_BITS.get(self.promoted_from, wide) // wide

    @property
    def dims(self) -> tuple[int, ...]:
        """The operand's dimensions (from its logical shape)."""
        inner = self.shape[self.shape.find("[") + 1 : self.shape.find("]")] if "[" in self.shape else ""
        return tuple(int(d) for d in inner.split(",") if d.strip().isdigit())


@dataclass(frozen=True)
class CompiledCollective(PerCall):
    """One collective instruction of the compiled module and what it costs per call.

    ``loops`` are the while loops around it, outermost first; ``bytes_per_execution`` is the
    per-device payload, the size of its operands (as the jaxpr view counts). An ``-start``/
    ``-done`` pair is one collective (the start); a collective wrapped by an ``async-start`` or
    a fusion is listed as itself, with the wrapper's name in ``wrapper``; the TPU's async
    collective fusion (the same collective in three fusions) is one collective.
    """

    name: str
    kind: str
    opcode: str
    computation: str
    operands: tuple[CompiledOperand, ...]
    loops: tuple[CompiledLoop, ...]
    in_conditional: bool
    groups: tuple[tuple[int, ...], ...] | None
    axes: tuple[str, ...] | None
    written_by: str
    source: str
    op_name: str
    verdict: Verdict
    equations: tuple[str, ...] = ()
    paths: int = 1
    wrapper: str = ""
    scatters: bool = False
    source_file: str = ""  # the whole path of ``source``'s file, for annotations on the user's line
    in_condition_of: tuple[str, ...] = ()
    layout_change: str = ""
    """For an all-gather, all-to-all or collective-permute: how it moves the value's shards
    (``dimension 2 gathered over x``); a reshard when the partitioner wrote it."""
    steps: tuple[tuple[str, str], ...] = ()
    """A TPU async collective fusion's other copies, each with the computation it runs in: the
    fusions that step it beside their own compute (its time overlaps theirs by construction:
    :func:`~shardscope.engine.hlo.roofline.overlapped_times`) and the one that finishes it."""
    operand_equations: tuple[str, ...] = ()
    """Each operand's jaxpr collective where pairing placed one of a partial-auto shard_map by its
    shape (its bytes are the partitioner's split of the jaxpr's, so bytes do not tell which
    operand it is), else ``""``; empty when pairing placed none so."""

    @property
    def loop_trip_counts(self) -> tuple[int | None, ...]:
        """The enclosing loops' trip counts, outermost first (None: not known statically)."""
        return tuple(loop.trip_count for loop in self.loops)

    @property
    def runs_per_loop(self) -> tuple[int | None, ...]:
        """How often each enclosing loop runs it per run of the loop: its trip count, one more
        for a loop whose condition holds it (tested before every iteration and once at the end)."""
        return tuple(None if loop.trip_count is None else loop.trip_count + (loop.name in self.in_condition_of)
                     for loop in self.loops)

    @property
    def in_loop(self) -> bool:
        """True when a while loop encloses it."""
        return bool(self.loops)

    @property
    def executions(self) -> int | None:
        """Runs per call: the product of the loops' trip counts (None when one is unknown)."""
        runs = known_product(self.runs_per_loop)
        return None if runs is None else runs * self.paths

    @property
    def is_reshard(self) -> bool:
        """True for a collective the partitioner inserted to change a value's layout (an
        all-gather, all-to-all or collective-permute), not a reduction the math needs."""
        return self.written_by == _PARTITIONER and bool(self.layout_change)

    @property
    def bytes_per_execution(self) -> int:
        """Per-device bytes of one run: its operands together."""
        return sum(op.bytes for op in self.operands)

    @property
    def written_bytes_per_execution(self) -> int:
        """Per-device bytes of one run in the program's own types: what a compiler that does not
        promote them moves (:attr:`bytes_per_execution` where nothing was promoted)."""
        return sum(op.written_bytes for op in self.operands)

    @property
    def written_bytes_per_call(self) -> int | None:
        """:attr:`written_bytes_per_execution` times the runs per call (None when those are unknown)."""
        runs = self.executions
        return None if runs is None else runs * self.written_bytes_per_execution

    @property
    def promotion(self) -> tuple[str, str] | None:
        """``("bf16", "f32")`` when the compiler carries its values in a wider type than the
        program wrote (each promoted operand's; the first where they differ), else None."""
        promoted = next((op for op in self.operands if op.promoted_from), None)
        return None if promoted is None else (promoted.promoted_from, promoted.dtype)

    @property
    def verdict_kind(self) -> str:
        """``deferrable``, ``loop_invariant`` or ``needed``."""
        return self.verdict.kind

    @property
    def value(self) -> str:
        """The value(s) it carries: ``params['W']``, ``params['W'], params['V']``, or ``3 values``."""
        return listed(op.value for op in self.operands)

    @property
    def arguments(self) -> str:
        """What a fix casts or reshards for it: :attr:`value` with each gradient's argument in its
        place (``params['W']`` for ``grad(params['W'])``), source lines left out."""
        return listed(labelled_argument(op.value) for op in self.operands if not is_source_line(op.value))

    @property
    def combined(self) -> bool:
        """True when XLA's combiner merged several collectives into this one."""
        return len(self.operands) > 1

    @property
    def placement(self) -> str:
        """``outside loops``, ``in the while body``, ``in the while condition`` (the loop's test,
        which runs once more than its body) or ``in 2 nested while bodies``."""
        if not self.loops:
            return "outside loops"
        if self.loops[-1].name in self.in_condition_of:
            return "in the while condition" if len(self.loops) == 1 else (
                f"in the condition of the innermost of {len(self.loops)} nested while loops")
        return "in the while body" if len(self.loops) == 1 else f"in {len(self.loops)} nested while bodies"

    def describe(self) -> str:
        """``psum_invariant of params['W'] -> all-reduce.2 in the while body, x4/call`` in words."""
        where = self.placement
        head = ", ".join(self.equations) + " -> " if self.equations else ""
        what = f" of {self.value}" if self.value else ""
        merged = (f" (XLA's combiner merged {len(self.operands)} {self.kind}s into this one)" if self.combined else "")
        return f"{head}{self.name}{what} {where}, {self.runs.badge()}{merged}"


@dataclass(frozen=True)
class CompiledPlan:
    """Every collective of one compiled module, with the backend that compiled it."""

    backend: str
    collectives: tuple[CompiledCollective, ...]
    loops: tuple[CompiledLoop, ...]
    dead_equations: tuple[str, ...] = ()
    unmatched_equations: tuple[str, ...] = ()
    module: HloModule | None = field(default=None, repr=False, compare=False)
    partitioner: tuple[PartitionerWarning, ...] = ()
    """What the partitioner warned about while the module compiled (an involuntary full
    rematerialization: a whole tensor gathered onto every device to change its layout)."""

    @property
    def rematerializations(self) -> tuple[PartitionerWarning, ...]:
        """The partitioner's involuntary full rematerializations: ``check`` fails on them."""
        return tuple(w for w in self.partitioner if w.kind == INVOLUNTARY_REMAT)

    @property
    def findings(self) -> tuple[CompiledCollective, ...]:
        """The collectives inside loops: the ones a verdict is about."""
        return tuple(c for c in self.collectives if c.in_loop)

    @property
    def flagged(self) -> tuple[CompiledCollective, ...]:
        """The collectives a loop runs without needing to (deferrable or loop-invariant)."""
        return tuple(c for c in self.collectives if c.verdict.flagged)

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per call (None when a loop's trip count is unknown)."""
        return total_executions(self.collectives)

    def counts(self) -> dict[str, int | None]:
        """Runs per call of each kind, e.g. ``{"all-reduce": 4}`` (None when a count is unknown)."""
        found: dict[str, list[CompiledCollective]] = {}
        for c in self.collectives:
            found.setdefault(c.kind, []).append(c)
        return {kind: total_executions(group) for kind, group in found.items()}

    def loop(self, name: str) -> CompiledLoop | None:
        """The loop called ``name``."""
        return next((loop for loop in self.loops if loop.name == name), None)


