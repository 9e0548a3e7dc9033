"""Whether a collective inside a loop has to run there, each verdict with its one-sentence fix.

- ``deferrable``: a reduction whose result reaches the loop's outputs only through additions
  into a carry (through scaling by a value that is the same on every device, reshapes and dtype
  casts too). The sum over devices commutes with the sum over iterations, so one reduction
  after the loop gives the same result.
- ``loop_invariant``: its operands do not depend on anything the loop changes (its carry or the
  slice of ``xs`` it is on): it can move before the loop, keeping its result alive meanwhile.
- ``needed``: anything else in a loop (a ``ppermute`` in a pipeline, a reduction whose result
  the next iteration reads), and every collective outside loops (it already runs once).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from shardscope.counts import count_text
from shardscope.jaxpr_model import Equation
from shardscope.valueflow import BlockFacts, ValueIndex, input_role

DEFERRABLE, LOOP_INVARIANT, NEEDED = "deferrable", "loop_invariant", "needed"
VERDICTS = (DEFERRABLE, LOOP_INVARIANT, NEEDED)
FLAGGED = frozenset({DEFERRABLE, LOOP_INVARIANT})
"""The verdicts ``shardscope check`` fails on: work the loop does that it does not need to."""

REDUCTIONS = frozenset(
    {"psum", "psum_invariant", "reduce_scatter", "unreduced_psum", "unreduced_reduce_scatter", "psum_scatter"}
)
"""Collectives that sum over devices, so they commute with a sum over loop iterations."""

_LINEAR = frozenset(
    {
        "add", "add_any", "sub", "neg", "convert_element_type", "reshape", "squeeze", "expand_dims",
        "broadcast_in_dim", "transpose", "copy", "copy_p", "reduce_sum", "pvary", "pcast", "real", "imag",
    }
)
"""Operations linear in each operand: a sum of their inputs' sums is the sum of their outputs."""

_SCALING = frozenset({"mul", "div", "dot_general"})
"""Linear in one operand when the other one does not come from the reduction."""


@dataclass(frozen=True)
class Verdict:
    """What a collective's loop placement costs and how to change it.

    ``loop_ids`` are the loops it can leave (outermost last); ``executions_after`` is how often
    it would run per call after the fix (None when a loop's trip count is unknown);
    ``hoist_bytes`` is the per-device memory a hoisted result keeps alive.
    """

    kind: str
    reason: str
    fix: str | None = None
    loop_ids: tuple[str, ...] = ()
    executions_after: int | None = None
    hoist_bytes: int | None = None

    @property
    def flagged(self) -> bool:
        """True when the loop does work it does not need to (``check`` exits 1)."""
        return self.kind in FLAGGED


class Classifier:
    """Gives every collective of one program its verdict (one index, per-loop facts cached)."""

    def __init__(self, index: ValueIndex) -> None:
        self.index = index
        self._varying: dict[str, set[tuple[str, str]]] = {}

    def verdict(self, eqn: Equation, loops: tuple[Equation, ...]) -> Verdict:
        """The verdict of the collective ``eqn``, inside ``loops`` (outermost first)."""
        if not loops:
            return Verdict(NEEDED, "It runs once per call, outside any loop.")
        invariant_in = self._invariant_loops(eqn, loops)
        if invariant_in:
            return self._loop_invariant(eqn, loops, invariant_in)
        if eqn.primitive in REDUCTIONS:
            deferred_out_of = self._deferrable_loops(eqn)
            if deferred_out_of:
                return self._deferrable(eqn, loops, deferred_out_of)
            return Verdict(NEEDED, "Its result is read inside the loop, not only added into a carry: it must run there.")
        return Verdict(NEEDED, "Its operand changes every iteration and it is not a sum that could be accumulated: "
                               "it must run in the loop.")

    # ------------------------------------------------------------------ loop invariance

    def _invariant_loops(self, eqn: Equation, loops: tuple[Equation, ...]) -> tuple[Equation, ...]:
        """The loops (innermost first) whose changing values ``eqn``'s operands do not depend on."""
        block_id = self.index.block_of[eqn.id].block.id
        operands = {(block_id, v.name) for v in eqn.inputs}
        found = []
        for loop in reversed(loops):
            if operands & self._loop_varying(loop):
                break
            found.append(loop)
        return tuple(found)

    def _loop_varying(self, loop: Equation) -> set[tuple[str, str]]:
        """Every value inside ``loop`` that depends on its carry or on the ``xs`` slice."""
        if loop.id not in self._varying:
            self._varying[loop.id] = _taint(self.index, loop)
        return self._varying[loop.id]

    def _loop_invariant(self, eqn: Equation, loops: tuple, hoisted: tuple) -> Verdict:
        remaining = loops[: len(loops) - len(hoisted)]
        after = _runs(remaining)
        cost = sum(v.nbytes for v in eqn.outputs)
        where = _loops_words(hoisted)
        return Verdict(
            LOOP_INVARIANT,
            f"Its operand does not change inside {where}: every run moves the same data.",
            fix=(
                f"move the {eqn.primitive} before {where} ({_runs_text(after)} runs/call instead of "
                f"{_runs_text(_runs(loops))}); its {cost:,} B result per device then stays in memory for the whole loop."
            ),
            loop_ids=tuple(loop.id for loop in hoisted),
            executions_after=after,
            hoist_bytes=cost,
        )

    # ------------------------------------------------------------------ deferral

    def _deferrable_loops(self, eqn: Equation) -> tuple[Equation, ...]:
        """The loops (innermost first) whose carries only accumulate ``eqn``'s result."""
        facts = self.index.block_of[eqn.id]
        values = [v.name for v in eqn.outputs if v.name != "_"]
        found: list[Equation] = []
        while facts.owner is not None:
            positions = _linear_outputs(self.index, facts, values)
            if positions is None or not positions:
                break
            owner = facts.owner
            if owner.kind == "loop" and facts.block.role == "body":
                if not all(_accumulates(self.index, facts, k) for k in positions):
                    break
                found.append(owner)
            elif owner.kind in ("cond", "loop") or owner.primitive == "shard_map":
                break  # a branch or a while's condition; leaving shard_map leaves the devices
            values = [owner.outputs[k].name for k in positions if k < len(owner.outputs)]
            facts = facts.outer
        return tuple(found)

    def _deferrable(self, eqn: Equation, loops: tuple, deferred: tuple) -> Verdict:
        remaining = tuple(loop for loop in loops if loop not in deferred)
        after = _runs(remaining)
        axes = ", ".join(repr(a) for a in eqn.axes)
        where = _loops_words(deferred)
        if eqn.primitive == "psum_invariant":
            # the transpose of the implicit pvary of a value that is the same on every device
            what = "the replicated value whose gradient this is (e.g. params)"
        else:
            what = "the accumulator"
        return Verdict(
            DEFERRABLE,
            f"Its result is only added into the carry of {where}: the sum over devices commutes "
            "with the sum over iterations.",
            fix=(
                f"cast {what} to varying before {where} (lax.pcast(value, {axes}, to='varying')), start the "
                f"accumulator varying too, and {_REDUCE_AFTER.get(eqn.primitive, 'lax.psum')}(acc, {axes}) once "
                f"after the loop: {_runs_text(after)} runs/call instead of {_runs_text(_runs(loops))}."
            ),
            loop_ids=tuple(loop.id for loop in deferred),
            executions_after=after,
        )


def _runs_text(runs: int | None) -> str:
    return "an unknown number" if runs is None else count_text(runs)


_REDUCE_AFTER = {"reduce_scatter": "lax.psum_scatter", "unreduced_reduce_scatter": "lax.psum_scatter"}


def _runs(loops: tuple[Equation, ...]) -> int | None:
    """Runs per call inside ``loops``: the product of their trip counts (None when one is unknown)."""
    counts = [loop.trip_count for loop in loops]
    return None if None in counts else prod(counts)


def _loops_words(loops: tuple[Equation, ...]) -> str:
    """``the scan loop (4 iterations)``, or ``the 2 nested loops (8 x 2 iterations)`` (innermost first)."""
    trips = " x ".join("?" if loop.trip_count is None else str(loop.trip_count) for loop in reversed(loops))
    if len(loops) == 1:
        count = "an unknown number of" if loops[0].trip_count is None else trips
        return f"the {loops[0].primitive} loop ({count} iterations)"
    return f"the {len(loops)} nested loops ({trips} iterations)"


def _linear_outputs(index: ValueIndex, facts: BlockFacts, names: list[str]) -> set[int] | None:
    """The block outputs ``names`` reach through linear operations only (None if any use is not).

    Scaling counts as linear when the factor does not come from ``names`` and is the same on
    every device (a factor that varies would change the sum over devices). An inner loop that
    only accumulates into the carry a value enters is linear in it too.
    """
    closure, stack, positions = set(names), list(names), set()
    while stack:
        name = stack.pop()
        positions.update(facts.output_positions.get(name, ()))
        for user, position in facts.uses.get(name, ()):
            outputs = _linear_step(index, user, position, closure)
            if outputs is None:
                return None
            for out in outputs:
                if out != "_" and out not in closure:
                    closure.add(out)
                    stack.append(out)
    return positions


def _linear_step(index: ValueIndex, user: Equation, position: int, closure: set[str]) -> list[str] | None:
    """The outputs of ``user`` that are linear in its operand ``position`` (None: not linear)."""
    if user.kind == "loop":
        return _through_loop(index, user, position)
    if user.blocks:
        return None
    if user.primitive in _LINEAR:
        return [v.name for v in user.outputs]
    if user.primitive in _SCALING:
        others = [v for i, v in enumerate(user.inputs) if i != position]
        if user.primitive == "div" and position != 0:
            return None
        if all(v.name not in closure and not v.varying for v in others):
            return [v.name for v in user.outputs]
    return None


def _through_loop(index: ValueIndex, loop: Equation, position: int) -> list[str] | None:
    """A value entering an inner loop's carry that the loop only adds to: that carry's output."""
    body = next((b for b in loop.blocks if b.role == "body"), None)
    if body is None or any(b.role == "cond" for b in loop.blocks):
        return None  # a while's condition could read the accumulator
    inner = index.sub_input(loop, body, position)
    if inner is None or input_role(inner) != "carry":
        return None
    facts = index.blocks[body.id]
    k = [v.name for v in body.inputs if input_role(v.name) == "carry"].index(inner)
    if _linear_outputs(index, facts, [inner]) != {k}:
        return None
    return [loop.outputs[k].name]


def _accumulates(index: ValueIndex, facts: BlockFacts, k: int) -> bool:
    """True when the body's output ``k`` is its carry ``k`` plus what the iteration adds.

    The carry input must reach that output, linearly, and nothing else: an accumulator that
    the iteration reads for anything but adding to it is not a plain sum.
    """
    carries = [v.name for v in facts.block.inputs if input_role(v.name) == "carry"]
    if k >= len(carries):
        return False  # a scan's stacked output (ys): every iteration's value is kept
    return _linear_outputs(index, facts, [carries[k]]) == {k}


def _taint(index: ValueIndex, loop: Equation) -> set[tuple[str, str]]:
    """The values in ``loop``'s blocks (nested ones too) computed from its carry or ``xs``."""
    sub_ids = {b.id for b in loop.blocks}
    stack = [
        (b.id, v.name) for b in loop.blocks for v in b.inputs if input_role(v.name) in ("carry", "xs")
    ]
    seen: set[tuple[str, str]] = set()
    while stack:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        facts = index.blocks[key[0]]
        for user, position in facts.uses.get(key[1], ()):
            if user.blocks:
                for sub in user.blocks:
                    inner = index.sub_input(user, sub, position)
                    if inner is not None:
                        stack.append((sub.id, inner))
                if user.kind == "loop":
                    # an inner loop's outputs depend on its inputs in ways its body spells out;
                    # every output counts as changing, which can only make fewer verdicts invariant
                    stack.extend((facts.block.id, v.name) for v in user.outputs if v.name != "_")
            else:
                stack.extend((facts.block.id, v.name) for v in user.outputs if v.name != "_")
        if facts.block.id in sub_ids:
            continue  # the loop's own outputs are outside it
        for k in facts.output_positions.get(key[1], ()):
            if facts.owner is not None and facts.block.role != "cond" and k < len(facts.owner.outputs):
                out = facts.owner.outputs[k]
                if out.name != "_":
                    stack.append((facts.outer.block.id, out.name))
    return seen
