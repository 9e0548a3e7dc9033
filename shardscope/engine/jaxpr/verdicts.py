"""Whether a collective inside a loop has to run there, each verdict with its one-sentence fix.

- ``deferrable``: a reduction whose result reaches the loop's outputs only through additions
  into a carry (through scaling by a value that is the same on every device, reshapes, dtype
  casts, ``cond`` branches and calls too: :mod:`shardscope.engine.jaxpr.linearity`). The sum over devices
  commutes with the sum over iterations, so one reduction after the loop gives the same result.
- ``loop_invariant``: its operands do not depend on anything the loop changes (its carry or the
  slice of ``xs`` it is on): it can move before the loop, keeping its result alive meanwhile.
- ``needed``: anything else in a loop (a ``ppermute`` in a pipeline, a reduction whose result
  the next iteration reads), and every collective outside loops (it already runs once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from shardscope.engine.counts import Count, known_product, runs_per_call
from shardscope.engine.jaxpr.linearity import AdditivePaths
from shardscope.engine.jaxpr.loop_names import loop_words
from shardscope.engine.jaxpr.model import Equation, short_source, source_line
from shardscope.engine.jaxpr.valueflow import ValueIndex, input_role
from shardscope.engine.pytree_paths import listed, path_root
from shardscope.collective_kinds import LAX_FUNCTIONS, PSUM, PSUM_INVARIANT, SCATTERING, SUMS
from shardscope.verdict_kinds import DEFERRABLE, FLAGGED, JUDGED, LOOP_INVARIANT, NEEDED, SPLITTABLE, STACKABLE

# the verdicts' names and which fail the check: one table for every layer (shardscope.verdict_kinds)
__all__ = ["DEFERRABLE", "FLAGGED", "LOOP_INVARIANT", "NEEDED", "SPLITTABLE", "STACKABLE", "VERDICTS"]

VERDICTS = JUDGED
"""The verdicts a collective that runs can get: deferrable, loop_invariant, stackable, splittable, needed.

``stackable``: a collective whose result each iteration writes into its own slot of a stacked
buffer: one collective of the whole buffer after the loop gives the same result, the same bytes in
one run instead of one per iteration. A trade-off, not a waste: it saves the runs' latency (a
per-step loss) and loses each run's overlap with the next iteration's work, so ``check`` does not
fail on it. ``splittable``: a combined sum some of whose values, at least half its bytes, only
accumulate while the others are read in the loop: the instruction stays and runs as often; split
out and accumulated per device, those values run once after the loop. A trade-off, not a waste: it
saves their bytes in every iteration but no run (latency is paid per run), so ``check`` does not
fail on it."""

REDUCTIONS = SUMS
"""Collectives that sum over devices, so they commute with a sum over loop iterations."""

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


ADDED_TERM_REASON = ("Something else is added into the accumulator with it (weight decay, say): summed over the "
                     "devices after the loop, that term would count once per device, so it must run there.")
"""The reason of a sum added into an accumulator together with another term, in both views."""


CONDITION_REASON = ("It computes the while loop's condition: the loop's test runs it before every iteration "
                    "(once more than the body), and the loop cannot go on without its result.")
"""The reason of a collective in a while loop's condition, in both views."""


class Classifier:
    """Gives every collective of one program its verdict (one index, per-loop facts cached)."""

    def __init__(self, index: ValueIndex) -> None:
        self.index = index
        self._varying: dict[str, set[tuple[str, str]]] = {}

    def verdict(self, eqn: Equation, loops: tuple[Equation, ...], conditional: bool = False,
                gradient_of: str = "") -> Verdict:
        """The verdict of the collective ``eqn``, inside ``loops`` (outermost first).

        ``conditional``: it sits in a ``cond`` branch, so its runs per call are an upper bound.
        ``gradient_of``: the program input whose gradient a ``psum_invariant`` sums (``W``,
        ``params['W1']``; empty when unknown), which the fix casts to varying.
        """
        if not loops:
            return Verdict(NEEDED, "It runs once per call, outside any loop.")
        invariant_in = self._invariant_loops(eqn, loops)
        if invariant_in:
            return self._loop_invariant(eqn, loops, invariant_in, conditional)
        if self.index.block_of[eqn.id].block.role == "cond":
            return Verdict(NEEDED, CONDITION_REASON)
        if eqn.primitive in REDUCTIONS:
            paths = AdditivePaths(self.index, eqn)
            deferred_out_of = paths.loops()
            if deferred_out_of:
                return self._deferrable(eqn, loops, deferred_out_of, conditional, gradient_of)
            if paths.added_term:
                return Verdict(NEEDED, ADDED_TERM_REASON)
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

    def _loop_invariant(self, eqn: Equation, loops: tuple, hoisted: tuple, conditional: bool) -> Verdict:
        remaining = loops[: len(loops) - len(hoisted)]
        after = _runs(remaining)
        cost = sum(v.nbytes for v in eqn.outputs)
        where = _loops_words(hoisted)
        return Verdict(
            LOOP_INVARIANT,
            f"Its operand does not change inside {where}: every run moves the same data.",
            fix=(
                f"move the {eqn.primitive} before {where} ({runs_per_call(_runs_text(after))} instead of "
                f"{_runs_text(_runs(loops), conditional)}); its {cost:,} B result per device then stays in memory for the whole loop."
            ),
            loop_ids=tuple(loop.id for loop in hoisted),
            executions_after=after,
            hoist_bytes=cost,
        )

    # ------------------------------------------------------------------ deferral

    def _deferrable(self, eqn: Equation, loops: tuple, deferred: tuple, conditional: bool,
                    gradient_of: str = "") -> Verdict:
        remaining = tuple(loop for loop in loops if loop not in deferred)
        after = _runs(remaining)
        axes = axes_argument(eqn.axes)
        where = _loops_words(deferred)
        reason = (f"Its result is only added into the carry of {where}: the sum over devices commutes "
                  "with the sum over iterations.")
        counts = f"{runs_per_call(_runs_text(after))} instead of {_runs_text(_runs(loops), conditional)}."
        written = _written_sum(eqn) if eqn.primitive == PSUM_INVARIANT and not gradient_of else None
        if written is not None:  # the program's own lax.psum of a varying value: the sum moves, nothing is cast
            fix = (f"move the lax.{written} at {short_source(eqn.source)} after {where}: add the unsummed value "
                   f"into the accumulator, started varying (lax.pcast(zeros, {axes}, to='varying')), and "
                   f"lax.{written}(acc, {axes}) once after the loop: {counts}")
        elif eqn.primitive == PSUM_INVARIANT:
            # the transpose of the implicit pvary of a value that is the same on every device
            what, code = cast_to_varying(gradient_of, axes)
            fix = (f"cast {what} to varying before {where}: {code}; start the accumulator varying too, and "
                   f"lax.psum(acc, {axes}) once after the loop: {counts}")
        else:  # a sum of varying values: it moves; a reduce-scatter's accumulator is the unscattered size
            scattered = eqn.primitive in _SCATTERED
            origin = _transposed_gather(eqn) if scattered else ""
            tiled = ", tiled=True" if origin and "tiled=True" in source_line(eqn.source) else ""  # as the gather was
            after_loop = f"lax.psum_scatter(acc, {{axes}}{tiled})" if scattered else "lax.psum(acc, {axes})"
            value = ("the gradient of the gathered value instead" if origin else
                     "the unscattered value" if scattered else "the unsummed value")
            fix = ((f"it is the transpose of the lax.all_gather at {origin}: take " if origin else "add ")
                   + f"{value}{' and add it' if origin else ''} into an accumulator"
                   + (" of the gathered size" if scattered else "")
                   + f", started varying (lax.pcast(zeros, {axes}, to='varying')), and "
                   f"{after_loop.format(axes=axes)} once after {where}: {counts}")
        return Verdict(
            DEFERRABLE,
            reason,
            fix=fix,
            loop_ids=tuple(loop.id for loop in deferred),
            executions_after=after,
        )


_SUM_CALL = re.compile(rf"\b({'|'.join(LAX_FUNCTIONS[PSUM])})\(")
"""A call of ``lax.psum`` or ``lax.pmean`` on a source line (the functions that bind ``psum``)."""


def _written_sum(eqn: Equation) -> str | None:
    """``psum`` or ``pmean`` when the user's line that made this ``psum_invariant`` calls it:
    the program summed a varying value itself (no pvary's transpose, nothing to cast)."""
    found = _SUM_CALL.search(source_line(eqn.source)) if eqn.source else None
    return found.group(1) if found else None


def axes_argument(axes: tuple[str, ...]) -> str:
    """The mesh axes as ``lax.pcast`` and ``lax.psum`` take them: ``'s'``, ``('data', 'model')``."""
    return repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))


def cast_to_varying(gradient_of: str, axes: str) -> tuple[str, str]:
    """What to cast and the line that does it: the argument by its name (``W``, ``W =
    lax.pcast(W, 's', to='varying')``), a pytree argument as a whole when the gradient is of one
    of its leaves (``params = jax.tree.map(...)``), else a description and a template."""
    root = re.match(r"[A-Za-z_]\w*", gradient_of)
    if root is None or gradient_of.startswith("args["):
        return ("the replicated value whose gradient this is (e.g. params)",
                f"lax.pcast(value, {axes}, to='varying')")
    name = root.group()
    if name == gradient_of:
        return name, f"{name} = lax.pcast({name}, {axes}, to='varying')"
    return (f"{name} {_leaves_words((gradient_of,))}",
            f"{name} = jax.tree.map(lambda p: lax.pcast(p, {axes}, to='varying'), {name})")


def _leaves_words(leaves: Sequence[str]) -> str:
    """``(this is the gradient of its leaf params['W1'])``; of several, ``(these are the gradients
    of its leaves params['W1'], params['W2'] and 2 more)`` (:func:`~shardscope.engine.pytree_paths.listed`)."""
    if len(leaves) == 1:
        return f"(this is the gradient of its leaf {leaves[0]})"
    return f"(these are the gradients of its leaves {listed(leaves)})"


def with_all_leaves(fix: str, gradient_of: str, leaves: Sequence[str]) -> str:
    """``fix``, written for the one leaf ``gradient_of`` (:func:`cast_to_varying`), saying every
    leaf of ``leaves`` of the same argument whose gradient one combined sum carries: the cast of
    the whole tree covers them all, and the fix says so."""
    root = path_root(gradient_of)
    ordered = tuple(dict.fromkeys((gradient_of, *(leaf for leaf in leaves if path_root(leaf) == root))))
    if len(ordered) < 2:
        return fix
    return fix.replace(_leaves_words((gradient_of,)), _leaves_words(ordered), 1)


def _runs_text(runs: int | None, upper_bound: bool = False) -> str:
    """``4``, ``≤ 4`` (an upper bound: inside a ``cond`` branch), or ``an unknown number``."""
    if runs is None:
        return "an unknown number"
    return Count(runs, upper_bound).text()


_SCATTERED = SCATTERING


def _transposed_gather(eqn: Equation) -> str:
    """``fsdp.py:19 (loss)`` when the user's line that made this sum gathers (the reduce-scatter
    is the transpose of an ``all_gather`` there), else empty."""
    return short_source(eqn.source) if eqn.source and "all_gather(" in source_line(eqn.source) else ""


def _runs(loops: tuple[Equation, ...]) -> int | None:
    """Runs per call inside ``loops``: the product of their trip counts (None when one is unknown)."""
    return known_product(loop.trip_count for loop in loops)


def _loops_words(loops: tuple[Equation, ...]) -> str:
    """``the lax.fori_loop at step.py:40 (step) (4 iterations)``; for nested loops (``loops``
    innermost first) ``the 2 nested loops (2 x 8 iterations: the lax.scan at rnn.py:36 (rnn)
    inside the plan's chunk loop)``, the trip counts outermost first. Each loop is named as its
    user wrote it (:func:`~shardscope.engine.jaxpr.loop_names.loop_words`)."""
    trips = " x ".join("?" if loop.trip_count is None else str(loop.trip_count) for loop in reversed(loops))
    words = [loop_words(loop.primitive, loop.written_as, loop.source) for loop in loops]
    if len(loops) == 1:
        count = "an unknown number of" if loops[0].trip_count is None else trips
        return f"{words[0]} ({count} iterations)"
    return f"the {len(loops)} nested loops ({trips} iterations: {' inside '.join(words)})"


def _taint(index: ValueIndex, loop: Equation) -> set[tuple[str, str]]:
    """The values in ``loop``'s blocks (nested ones too) computed from its carry or ``xs``."""
    seeds = [(b.id, v.name) for b in loop.blocks for v in b.inputs if input_role(v.name) in ("carry", "xs")]
    # an inner loop's outputs count as changing whatever its body does, which can only make
    # fewer verdicts invariant; the loop's own outputs are outside it
    values, _ = index.reach(seeds, stop_at=frozenset(b.id for b in loop.blocks), loop_outputs=True)
    return values
