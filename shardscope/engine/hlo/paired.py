"""One collective as a user sees it: the instruction XLA runs, with the jaxpr equations it comes from.

The compiled plan says what runs; the jaxpr says what the program wrote and where. A
``shard_map`` ``psum`` and the all-reduce it compiles to are one collective, not two: ``check``
counts it once. Its verdict is the compiled instruction's, judged on the compiled module value
by value (:mod:`shardscope.engine.hlo.verdicts`): the jaxpr does not vote, it gives the names,
the lines and, where it judges the same, the program's own wording of the fix. A jaxpr
collective the compiled module has no instruction for is listed alone: ``dead`` (JAX's
dead-code elimination removes it, and so does the compiler: it never runs), or, when the
compiled plan has no instruction of its own (the compiler removed it: a sum over a one-device
axis; or merged it into an equal one: a loop-invariant sum it moved before its loop, beside the
same sum there), unpaired: it runs in no loop and nothing flags it. Without a compiled plan
(a program only traced) the jaxpr's verdict is all there is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from shardscope.engine.counts import Count, PerCall
from shardscope.engine.hlo.pairing import PROGRAM
from shardscope.engine.hlo.promotion import promotion_text
from shardscope.engine.jaxpr.verdicts import Verdict, with_all_leaves
from shardscope.engine.pytree_paths import is_gradient_label, labelled_argument
from shardscope.collective_kinds import OF_PRIMITIVE
from shardscope.verdict_kinds import DEAD, NEEDED

if TYPE_CHECKING:
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledPlan
    from shardscope.engine.jaxpr.dataflow import Collective

DEAD_REASON = f"{DEAD}: the compiler removes it (nothing uses its result), so it never runs."

UNPAIRED_REASON = ("No instruction of the compiled module is its own: the compiler removed it (a sum over an axis of "
                   "one device) or merged it into an equal one (a loop-invariant sum moved before its loop, where the "
                   "same sum runs), so it runs in no loop of its own and nothing is judged.")


@dataclass(frozen=True)
class PairedCollective(PerCall):
    """A compiled collective with the jaxpr collectives it comes from, or a jaxpr collective alone.

    ``compiled`` is None for a jaxpr collective with no instruction: ``dead`` when the compiler
    removes it, else unpaired. Every number is the compiled instruction's where there is one.
    """

    compiled: "CompiledCollective | None"
    equations: "tuple[Collective, ...]" = ()
    dead: bool = False
    unpaired: bool = False
    """A jaxpr collective of a compiled program that no compiled instruction carries."""

    @property
    def opcode(self) -> str | None:
        """The HLO collective kind (``all-reduce``), always: the instruction's, or for a jaxpr
        collective with no instruction the kind its primitive compiles to (None for one that
        compiles to no collective instruction: ``psend``/``precv`` are HLO send/recv)."""
        if self.compiled is not None:
            return self.compiled.kind
        return OF_PRIMITIVE.get(self.equations[0].primitive)

    @property
    def label(self) -> str:
        """What the tables name it: the compiled kind (``all-reduce``) where there is an instruction,
        else the jaxpr primitive the program wrote (``psum``: a dead or unpaired one has no instruction)."""
        return self.compiled.kind if self.compiled is not None else self.equations[0].primitive

    @property
    def kind(self) -> str:
        """:attr:`label` (kept for callers of the public API; ask :attr:`opcode` for the HLO kind)."""
        return self.label

    @property
    def primitives(self) -> tuple[str, ...]:
        """The JAX primitives of the paired jaxpr collectives (``psum_invariant``), in order, each once."""
        return tuple(dict.fromkeys(e.primitive for e in self.equations))

    @property
    def axes(self) -> tuple[str, ...] | None:
        """The mesh axes it spans (None when the compiled groups match no set of mesh axes)."""
        if self.compiled is not None:
            return self.compiled.axes
        return self.equations[0].axes

    @property
    def value(self) -> str:
        """The value(s) it carries, as the jaxpr view names them."""
        if self.compiled is not None and self.compiled.value:
            return self.compiled.value
        names = list(dict.fromkeys(e.value for e in self.equations if e.value))
        return ", ".join(names)

    @property
    def values(self) -> tuple[str, ...]:
        """Every value it carries, each once: a combined instruction's operands' and its equations'."""
        names = [op.value for op in self.compiled.operands] if self.compiled is not None else []
        names += [e.value for e in self.equations]
        return tuple(dict.fromkeys(name for name in names if name))

    @property
    def source(self) -> str:
        """The user's line that made it: the jaxpr's where it pairs, else the compiled metadata's."""
        written = next((e.source for e in self.equations if e.source), "")
        return written or (self.compiled.source if self.compiled is not None else "")

    @property
    def source_file(self) -> str:
        """The whole path of :attr:`source`'s file (empty when there is no source line)."""
        written = next((e for e in self.equations if e.source), None)
        if written is not None:
            return written.source_file
        return self.compiled.source_file if self.compiled is not None else ""

    @property
    def written_by(self) -> str:
        """``program`` or ``partitioner``."""
        return self.compiled.written_by if self.compiled is not None else PROGRAM

    @property
    def loop_trip_counts(self) -> tuple[int | None, ...]:
        """The enclosing loops' trip counts, outermost first (None: not known statically)."""
        if self.compiled is not None:
            return self.compiled.loop_trip_counts
        return () if self.dead or self.unpaired else self.equations[0].loop_trip_counts

    @property
    def in_loop(self) -> bool:
        """True when it runs inside a loop (a dead collective runs nowhere)."""
        return bool(self.loop_trip_counts)

    @property
    def in_conditional(self) -> bool:
        """True inside a conditional's branch: its runs are an upper bound."""
        if self.compiled is not None:
            return self.compiled.in_conditional
        return not (self.dead or self.unpaired) and self.equations[0].in_conditional

    @property
    def executions(self) -> int | None:
        """Runs per call (0 for a dead or unpaired collective; None when a loop's trip count is unknown)."""
        if self.dead or self.unpaired:
            return 0
        return self.compiled.executions if self.compiled is not None else self.equations[0].executions

    @property
    def bytes_per_execution(self) -> int:
        """Per-device bytes of one run."""
        if self.compiled is not None:
            return self.compiled.bytes_per_execution
        return self.equations[0].bytes_per_execution


    @property
    def bytes_count(self) -> Count:
        """:attr:`bytes_per_call` as a :class:`Count`: the compiled instruction's, else the jaxpr
        collective's (at most that, in a conditional's branch or a partial-auto shard_map)."""
        if self.compiled is None and not (self.dead or self.unpaired):
            return self.equations[0].bytes_count
        return Count(self.bytes_per_call, self.in_conditional)

    @property
    def flagged(self) -> bool:
        """True when a loop runs it without needing to: the compiled instruction's verdict where
        there is one, the jaxpr's for a program only traced."""
        if self.dead or self.unpaired or not self.in_loop:
            return False
        if self.compiled is not None:
            return self.compiled.verdict.flagged
        return any(e.verdict is not None and e.verdict.flagged for e in self.equations)

    @property
    def verdict(self) -> Verdict:
        """The verdict shown: the compiled instruction's, in the program's own words where the
        jaxpr judges it the same (its fix names the program's loop and values; of a combined
        one's equations, the one that moves the most bytes) with the compiled numbers; the
        jaxpr's for a program only traced."""
        if self.dead:
            return Verdict(DEAD, DEAD_REASON)
        if self.unpaired:
            return Verdict(DEAD, UNPAIRED_REASON)
        if self.compiled is None:
            return self.equations[0].verdict or Verdict(NEEDED, "")
        compiled = self.compiled.verdict
        if not self.in_loop or not compiled.flagged or self.written_by != PROGRAM:
            return compiled
        same = [e.verdict for e in self.equations if e.verdict is not None and e.verdict.kind == compiled.kind]
        if not same or len(same) != len(self.equations):
            return compiled
        written, biggest = max(zip(same, self.equations), key=lambda pair: pair[1].bytes_per_execution)
        if written.executions_after != compiled.executions_after:
            return compiled  # the compiler changed the loops: the jaxpr's numbers would not hold
        if any(None in e.loop_trip_counts for e in self.equations) and None not in self.compiled.loop_trip_counts:
            return compiled  # a while_loop of a constant bound: the jaxpr's "an unknown number" is a number here
        fix = written.fix
        if fix is not None and len(self.equations) > 1:  # one sum of several leaves' gradients: the fix says each
            leaves = [labelled_argument(e.value) for e in self.equations if is_gradient_label(e.value)]
            fix = with_all_leaves(fix, labelled_argument(biggest.value), leaves)
        if written.hoist_bytes != compiled.hoist_bytes:  # the compiler changed the type (a TPU's bf16 weights)
            said = f"{written.hoist_bytes:,} B" if written.hoist_bytes is not None else None
            if fix is None or compiled.hoist_bytes is None or said is None or fix.count(said) != 1:
                return compiled  # the program's words hold a number the compiled instruction does not
            fix = fix.replace(said, f"{compiled.hoist_bytes:,} B")  # the program's words, the compiled bytes
        return Verdict(compiled.kind, written.reason, fix, compiled.loop_ids, compiled.executions_after,
                       compiled.hoist_bytes)

    @property
    def verdict_kind(self) -> str:
        """``deferrable``, ``loop_invariant``, ``needed`` or ``dead``."""
        return self.verdict.kind

    def pairing(self) -> str:
        """``psum_invariant of params['W'] -> all-reduce.2 in the while body, x4/call`` in words."""
        written = " + ".join(f"{e.primitive} of {e.value}" if e.value else e.primitive for e in self.equations)
        if self.compiled is None:
            what = written or self.label
            return f"{what}: {DEAD_REASON}" if self.dead else f"{what}: no compiled instruction was found for it"
        c = self.compiled
        where = c.placement
        instruction = c.name if c.name.startswith(c.kind) else f"{c.kind} {c.name}"  # XLA may name it after the op
        head = f"{written} -> {instruction}" if written else f"{instruction}{f' of {self.value}' if self.value else ''}"
        text = f"{head} {where}, {self.runs.badge()}"
        if c.combined:
            text += f" (XLA's combiner merged {len(c.operands)} {c.kind}s into this one)"
        promoted = promotion_text(c)
        if promoted:
            text += f" ({promoted})"
        text += "" if self.equations else f", written by the {c.written_by}"
        if c.is_reshard:
            text += f": a reshard ({f'{self.value}: ' if self.value else ''}{c.layout_change}), not a reduction"
        return text


def paired_collectives(jaxpr: "Sequence[Collective]", plan: "CompiledPlan | None") -> tuple[PairedCollective, ...]:
    """Every collective of one program, each once: the plan's instructions in order with the jaxpr
    collectives they pair with, then the jaxpr collectives with none (unpaired, then dead).

    Without a plan (a program only traced) each jaxpr collective stands alone.
    """
    if plan is None:
        return tuple(PairedCollective(None, (c,)) for c in jaxpr)
    by_id = {c.equation_id: c for c in jaxpr}
    found = [PairedCollective(c, tuple(by_id[e] for e in c.equations if e in by_id)) for c in plan.collectives]
    paired = {e for c in plan.collectives for e in c.equations}
    dead = set(plan.dead_equations)
    found += [PairedCollective(None, (c,), unpaired=True) for c in jaxpr
              if c.equation_id not in paired and c.equation_id not in dead]
    found += [PairedCollective(None, (c,), dead=True) for c in jaxpr if c.equation_id in dead]
    return tuple(found)
