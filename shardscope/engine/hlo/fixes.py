"""The verdict on a compiled collective in words, and its fix in the program's style.

- ``shard_map``: cast the replicated value to varying before the loop, accumulate per device,
  ``psum`` once after it (what the jaxpr view says too);
- jit with Explicit axes: the parameters resharded ``reduced``, the accumulator started
  ``unreduced``, one ``jax.reshard`` back to the value's own spec after the loop (each spec
  keeps the dimensions the value is sharded over other axes: :func:`resharded`);
- jit with Auto axes: the partitioner has no way to be told "accumulate unreduced", so the fix
  is one of the two above written as code (Explicit axes, or the loop inside a ``shard_map``).

A loop-invariant collective moves before the loop in every style: gather (or reduce) the value
once and keep it, which costs its size in memory for the whole loop.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Iterable

from shardscope.engine.counts import Count, runs_per_call
from shardscope.engine.hlo.stacking import LATENCY_BOUND_BYTES, stackable_verdict
from shardscope.engine.hlo.verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, STACKABLE, OperandVerdict, runs_after
from shardscope.engine.jaxpr.verdicts import ADDED_TERM_REASON, CONDITION_REASON, SPLITTABLE, Verdict
from shardscope.collective_kinds import REDUCE_SCATTER, SUM_KINDS
from shardscope.engine.hlo.replica_groups import MeshShape, whole_axes
from shardscope.engine.pytree_paths import is_gradient_label, is_source_line, labelled_argument, path_root

if TYPE_CHECKING:
    from shardscope.engine.hlo.loops import LoopCounts
    from shardscope.engine.hlo.plan import CompiledCollective, CompiledOperand
    from shardscope.engine.hlo.text import Instruction

STYLES = ("shard_map", "explicit", "auto")


@dataclass(frozen=True)
class Signature:
    """What a jit program's fix must say of the whole function: its arguments with their leaves'
    specs (through ``jax.shard_map``, ``in_specs`` has one entry per argument; on Explicit axes,
    a value resharded ``reduced`` keeps its own), the devices each sum spans, and the values its
    sums carry that are no gradient (a loss: a mean over the batch, which inside the
    ``shard_map`` each device computes over its own shard only)."""

    arguments: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, each leaf's spec text: ``P(None, 'data')``)
    devices: int = 0
    losses: tuple[str, ...] = ()
    one_device_axes: frozenset[str] = frozenset()  # mesh axes of size 1: they split nothing
    axis_sizes: tuple[tuple[str, int], ...] = ()  # each mesh axis's size, where the mesh is known
    loss_scalings: tuple[tuple[str, str], ...] = ()  # each loss and whether it is a mean, a sum or unknown

    def scaling(self, loss: str) -> str:
        """``mean``, ``sum`` or ``unknown`` (:mod:`~shardscope.engine.hlo.loss_scaling`) for the loss ``loss``."""
        return dict(self.loss_scalings).get(loss, "unknown")

    def divisor(self, axes: tuple[str, ...]) -> int:
        """What a sum over ``axes`` is divided by for the mean over the batch: the devices of those
        axes (each device's ``jnp.mean`` is over its own rows of the batch split over them; an
        axis the sum does not run over, a tensor-parallel one, does not split the batch), else
        :attr:`devices` when an axis's size is not known (0: unknown)."""
        sizes = dict(self.axis_sizes)
        if axes and all(a in sizes for a in axes):
            return prod(sizes[a] for a in axes)
        return self.devices

    def divided_by(self, axes: tuple[str, ...]) -> str:
        """`` / 4`` after a sum over ``axes``, for the mean over the batch (in words when unknown)."""
        n = self.divisor(axes)
        return f" / {n}" if n else " divided by the device count"

    def spec_of(self, value: str) -> str:
        """The spec text the leaves of ``value``'s argument share (that of ``params`` for
        ``params['W1']``), empty when it is not known."""
        return dict(argument_specs_text(self.arguments)).get(path_root(value), "")

    def in_specs(self, axis: str, manual: tuple[str, ...] | None = None, whole: str = "") -> str:
        """``(P(), P(None, 'data'), P(None, 'data'))``: one spec per argument (a guess of two
        without them: the replicated parameters, the sharded batch), each the argument's own text
        unless it is sharded over axes besides ``manual``: then naming only those (as a
        partial-auto ``shard_map``'s ``in_specs`` must). The argument ``whole`` (the parameters
        whose gradients the loop sums over ``manual``) names none of ``manual``: the step's code
        needs each parameter whole inside the ``shard_map`` (a slice of a weight split over the
        batch's axis fails its matmul), so it enters replicated over them."""
        kept = manual if manual is not None and self._named_besides(manual) else None
        specs = [spec for _, spec in argument_specs_text(self.arguments, kept, (whole,) if whole else (), manual or ())]
        specs = specs or ["P()", f"P(None, {axis})"]
        return "(" + ", ".join(specs) + ("," if len(specs) == 1 else "") + ")"

    def split_over(self, name: str, axes: tuple[str, ...]) -> bool:
        """True when a leaf of the argument ``name`` is sharded over one of ``axes``."""
        return any(set(named_axes(spec)) & set(axes) for n, leaves in self.arguments if n == name for spec in leaves)

    def other_axes(self, manual: tuple[str, ...]) -> tuple[str, ...]:
        """The mesh axes besides ``manual`` that the arguments are sharded over (``model``): those a
        ``shard_map`` over ``manual`` leaves to the partitioner. An axis of one device is none of
        them: it splits nothing, so the ``shard_map`` may as well be over every axis."""
        return tuple(sorted(self._named_besides(manual) - self.one_device_axes))

    def _named_besides(self, manual: tuple[str, ...]) -> set[str]:
        """The axes the arguments' specs name besides ``manual``."""
        return {a for _, leaves in self.arguments for spec in leaves for a in named_axes(spec)} - set(manual)

    @property
    def divided(self) -> str:
        """`` / 8`` after a sum over the devices, for the mean over the batch (the count in words when unknown)."""
        return f" / {self.devices}" if self.devices else " divided by the device count"

    def loss_words(self, axis: str) -> str:
        """What the loss needs inside the ``shard_map``: its sum over the devices and the division."""
        losses = list(self.losses)
        if not losses:
            return ""
        what = ", ".join(losses)
        it = "it" if len(losses) == 1 else "each"
        kinds = {self.scaling(loss) for loss in losses}
        head = f"; inside it each device's {what} covers its own shard of the batch only: return lax.psum({it}, {axis})"
        if kinds == {"mean"}:
            return f"{head}{self.divided} (lax.pmean) for the mean over the batch"
        if kinds == {"sum"}:
            return f"{head}, undivided: {'it is a sum' if len(losses) == 1 else 'each is a sum'} over rows, as the program computes {it}"
        return f"{head},{self.divided} (lax.pmean) only where {it} is a mean over the batch's rows (a sum over rows is not divided)"


def _whole_words(signature: Signature, root: str, summed: tuple[str, ...], names: str) -> str:
    """Said when the parameters ``root`` come sharded over the axes the loop sums over: inside
    the ``shard_map`` the step's code needs them whole, so its ``in_specs`` gives them ``P()``
    over those axes, and the partitioner gathers them before it, once per call."""
    if not root or not signature.split_over(root, summed):
        return ""
    return (f"; {root} comes sharded over {names}, the {'axis' if len(summed) == 1 else 'axes'} the loop's sum runs "
            f"over, so it enters the shard_map "
            f"replicated over {'it' if len(summed) == 1 else 'them'} (P() there in its in_specs, not its own "
            f"split): the step's code needs each parameter whole on every device (a slice of a weight split over "
            f"{names} fails its matmul, and lax.pcast refuses a value already varying), and the partitioner "
            "gathers it before the shard_map, once per call")


def argument_specs_text(arguments: tuple[tuple[str, tuple[str, ...]], ...],
                        manual: tuple[str, ...] | None = None, whole: tuple[str, ...] = (),
                        over: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """Each argument's name and the spec its leaves share, as code: with ``manual``, as a
    partial-auto ``shard_map``'s ``in_specs`` takes it (only those axes named: the others stay
    with the partitioner); where the leaves differ, the code that reads them. The arguments
    named in ``whole`` (parameters) name none of the axes ``over`` (those a ``shard_map``'s
    loop sums over): they enter it replicated over them, each device holding them whole."""
    found = []
    for name, leaves in arguments:
        if name in whole and over:
            leaves = tuple(_manual_spec(spec, tuple(a for a in named_axes(spec) if a not in over)) for spec in leaves)
        kept = {_manual_spec(spec, manual) for spec in leaves}
        if len(kept) == 1:
            found.append((name, kept.pop()))
        elif manual is None or all(_manual_spec(spec, manual) == spec for spec in leaves):
            found.append((name, f"jax.tree.map(lambda a: a.sharding.spec, {name})"))
        else:  # each leaf's own spec without the axes left to the partitioner
            keep = "{" + ", ".join(repr(a) for a in manual) + "}"
            found.append((name, f"jax.tree.map(lambda a: P(*(tuple(n for n in (e if isinstance(e, tuple) else (e,)) "
                                f"if n in {keep}) or None for e in a.sharding.spec)), {name})"))
    return tuple(found)


def _manual_spec(spec: str, manual: tuple[str, ...] | None) -> str:
    """The spec text ``spec`` naming only the ``manual`` axes (all when None); ``spec`` itself
    when it is no plain spec's text."""
    if manual is None:
        return spec
    dims = _kept_dimensions(spec, tuple(a for a in named_axes(spec) if a not in manual))
    return spec if dims is None else f"P({dims})"


def named_axes(spec: str) -> tuple[str, ...]:
    """The mesh axes the plain spec text ``spec`` shards over (none when it is no plain spec's text)."""
    entries = _spec_entries(spec)
    return tuple(a for e in entries or () for a in ((e,) if isinstance(e, str) else e or ()))


def summed_losses(collectives: "tuple[CompiledCollective, ...]", mesh: MeshShape | None = None) -> tuple[tuple[str, ...], int]:
    """The values the plan's sums carry that the step computes (a loss or a metric, ``loss``, which a
    ``shard_map`` must sum itself: :attr:`CompiledOperand.computed`), and how many devices their
    sum spans inside the ``shard_map`` (0 when none): those of the whole axes the fix names, not
    the group the partitioner chose (a reshape of the batch can leave groups of 2 of ``data``'s 8)."""
    found = {op.value: collective_devices(c, mesh) for c in collectives if c.kind in SUM_KINDS
             for op in c.operands if op.value and op.computed}
    return tuple(found), max(found.values(), default=0)


def collective_devices(c: "CompiledCollective", mesh: MeshShape | None) -> int:
    """The devices of the whole mesh axes ``c`` spans, else of its first group."""
    axes = whole_axes(c.axes or ())
    if mesh is not None and axes and all(a in mesh.names for a in axes):
        return prod(mesh.sizes[mesh.names.index(a)] for a in axes)
    return len(c.groups[0]) if c.groups else 0


def deferral_fix(style: str, value: str, axes: tuple[str, ...], values: int, runs_before: str, runs_after: str,
                 signature: Signature = Signature(), computed: frozenset[str] = frozenset()) -> str:
    """The code that makes a per-iteration sum one sum after the loop, for ``style``; ``value``:
    what the user casts (the parameters whose gradients it sums: ``params['W1']``, not
    ``grad(params['W1'])``); ``values``: how many values the sum carries (several: the fix maps
    over their tree); ``signature``: the function's arguments and losses, for the ``shard_map``
    route; ``computed``: the names in ``value`` of values the step computes (a loss), which have
    nothing to cast. Each spec keeps the dimensions the value's argument is sharded on over other
    axes (``signature``'s specs: :func:`resharded`); a replicated value's specs name none
    (``P(reduced=...)``, ``P()``, whatever its rank); a part of an axis (``data:(1)4``) is
    named by its axis, as code names it."""
    axes = whole_axes(axes)
    names = ", ".join(repr(a) for a in axes) or "'data'"
    axis = names if len(axes) <= 1 else f"({names})"
    reduced = "{" + names + "}"
    summed = axes or ("data",)
    what = value or "the parameters"
    counts = f"{runs_per_call(runs_after)} instead of {runs_before}"
    if style == "shard_map":
        return (f"cast {what} to varying before the loop (lax.pcast(value, {axis}, to='varying')), start the "
                f"accumulator varying too, and lax.psum(acc, {axis}) once after the loop: {counts}.")
    if values > 1:
        root = _common_root(value, computed)
        spec = signature.spec_of(root)
        to_reduced, to_unreduced = resharded(spec, "p", summed, "reduced"), resharded(spec, "a", summed, "unreduced")
        explicit = (f"{root}_r = jax.tree.map(lambda p: jax.reshard(p, {to_reduced}), {root}) before the loop and take "
                    f"the gradient of {root}_r; acc = jax.tree.map(lambda a: jax.reshard(a, {to_unreduced}), "
                    f"jax.tree.map(jnp.zeros_like, {root})) as the accumulator; jax.tree.map(lambda a: "
                    f"jax.reshard(a, {resharded(spec, 'a', summed)}), acc) after the loop")
    elif value in computed:  # a value the step computes (a loss): nothing to cast, its sum is what accumulates
        explicit = (f"add each iteration's {value} into an accumulator started unreduced "
                    f"(acc = jax.reshard(jnp.zeros_like(...), P(unreduced={reduced}))) instead of its sum over the "
                    "devices, and jax.reshard(acc, P()) after the loop")
    else:
        param = value or "W"
        spec = signature.spec_of(param)
        explicit = (f"w_r = jax.reshard({param}, {resharded(spec, param, summed, 'reduced')}) before the loop and "
                    f"take the gradient of w_r; acc = jax.reshard(jnp.zeros_like({param}), "
                    f"{resharded(spec, param, summed, 'unreduced')}) as the accumulator; "
                    f"jax.reshard(acc, {resharded(spec, 'acc', summed)}) after the loop")
    if style == "explicit":
        return f"for {what}: {explicit}: {counts}."
    loss = values == 1 and value in computed
    root = "" if loss else _common_root(value, computed) if values > 1 else path_root(value) or "params"
    shard_map = (f"jax.shard_map(step, mesh=mesh, in_specs={signature.in_specs(axis, summed, root)}, out_specs=P(), "
                 f"axis_names={reduced})")
    if loss:  # a loss: each device adds its own, one sum after the loop, divided only for a mean over rows
        divided, scaling = signature.divided_by(summed), signature.scaling(value)
        inside = f"where each device adds its own {value} into the accumulator and lax.psum(acc, {axis})"
        if scaling == "mean":
            inside += f"{divided} runs once after it (each device's {value} is the mean over its own rows)"
        elif scaling == "sum":
            inside += (f" runs once after it, undivided: {value} is a sum over rows, and the devices' sums add up "
                       "to the batch's")
        else:
            inside += (f" runs once after it, then{divided} (lax.pmean) only if {value} is a mean over the batch's "
                       "rows (each device's is then over its own rows); a sum over rows is not divided")
    else:
        inside = (f"with lax.pcast({root if values > 1 else value or 'params'}, {axis}, to='varying') "
                  f"before it and lax.psum(acc, {axis}){signature.divided_by(summed)} after it (lax.pmean: each device's "
                  f"jnp.mean is over its own rows; a loss summed over rows takes lax.psum alone){signature.loss_words(axis)}"
                  + _whole_words(signature, root, summed, names))
    explicit_axes = "Explicit axes (jax.make_mesh(..., axis_types=(AxisType.Explicit, ...)), jax.set_mesh(mesh))"
    others = signature.other_axes(summed)
    if not others:
        # JAX refuses a value reduced over an axis beside one sharded over it in one operation, and a
        # parameter resharded back to replicated at that use has its sum in the loop again (checked on
        # jax 0.10.2: a bias's all-reduce stays in the while body): the shard_map route covers it
        caveat = ("" if values == 1 and value in computed else
                  f" (a parameter that meets the batch's values in an elementwise operation, such as a bias added to "
                  f"the activations, cannot be typed reduced over {names}: JAX refuses it, and resharding it back "
                  "before that use leaves its sum in the loop; the shard_map route below covers it)")
        return (f"the partitioner sums {what} in every iteration and jit with Auto axes cannot say otherwise. Either "
                f"use {explicit_axes} and {explicit}{caveat}; or run the loop inside {shard_map} {inside}: {counts}.")
    # a partial-auto shard_map leaves the other axes to the partitioner: the step's code is unchanged
    # inside it; Explicit axes type every value over them too, which a program written for Auto axes
    # does not satisfy as it stands (a matmul of a weight sharded over them needs its out_sharding)
    other = ", ".join(repr(a) for a in others)
    return (f"the partitioner sums {what} in every iteration and jit with Auto axes cannot say otherwise: run the loop "
            f"inside {shard_map} {inside}: {counts}. Its in_specs name only {names}: {other} "
            f"{'stays' if len(others) == 1 else 'stay'} with the partitioner, which shards and sums over "
            f"{'it' if len(others) == 1 else 'them'} as before. {explicit_axes} are no drop-in alternative here: "
            f"with arguments sharded over {other} too, each matmul of such a value needs an out_sharding, and a value "
            f"reduced over {names} cannot meet one sharded over {names} in an operation (a bias added to the "
            f"batch's activations) until it is resharded; with those changes made, {explicit}.")


def resharded(spec: str, leaf: str, axes: tuple[str, ...], kind: str = "", name: str = "P") -> str:
    """The spec a fix reshards ``leaf`` to: its own with ``kind`` (``reduced``, ``unreduced``, or
    none: the spec after the loop's one sum) over ``axes``.

    ``spec`` is the spec its argument's leaves share, as
    :func:`~shardscope.engine.hlo.compiled.spec_text` writes it: ``P(None, 'model')`` gives
    ``P(None, 'model', reduced={'data'})``, the dimensions sharded over other axes kept
    (``P(reduced=...)`` alone would gather them: an all-gather more, and a sum of the whole
    value). A dimension sharded over ``axes`` themselves is not (a value reduced over an axis is
    whole along it); a replicated spec names no dimension, ``P(reduced={'data'})``, whatever the
    value's rank. Any other text (leaves sharded differently, shardings not known) reads
    ``leaf``'s own spec in the code. ``name``: what the program calls ``PartitionSpec``."""
    dims = _kept_dimensions(spec, axes)
    if dims is None:  # ``*spec`` of a spec with a reduced or unreduced set raises: its ``partitions`` do not
        dims = f"*jax.typeof({leaf}).sharding.spec.partitions"
    sets = f"{kind}={{{', '.join(repr(a) for a in axes)}}}" if kind else ""
    return f"{name}(" + ", ".join(part for part in (dims, sets) if part) + ")"


def _kept_dimensions(spec: str, axes: tuple[str, ...]) -> str | None:
    """The dimensions of the spec text ``spec`` without ``axes`` (``None, 'model'``; empty when
    none is sharded), or None when ``spec`` is no plain spec's text: each entry None, an axis
    name or a tuple of them (not ``P(...)``, an unconstrained dimension, a reduced set)."""
    entries = _spec_entries(spec)
    if entries is None:
        return None
    kept = []
    for entry in entries:
        names = tuple(a for a in ((entry,) if isinstance(entry, str) else entry or ()) if a not in axes)
        kept.append(None if not names else names[0] if len(names) == 1 else names)
    while kept and kept[-1] is None:
        kept.pop()
    return ", ".join("None" if e is None else repr(e) for e in kept)


def _spec_entries(spec: str) -> tuple | None:
    """The entries of the plain spec text ``spec`` (each None, an axis name or a tuple of them),
    None when it is no plain spec's text."""
    if not (spec.startswith("P(") and spec.endswith(")")) or "=" in spec:
        return None
    inner = spec[2:-1].strip().removesuffix(",")  # P(('data', 'model'),) as JAX prints a one-entry spec
    try:
        entries = ast.literal_eval(f"({inner},)") if inner else ()
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    plain = isinstance(entries, tuple) and all(
        e is None or isinstance(e, str) or (isinstance(e, tuple) and all(isinstance(a, str) for a in e)) for e in entries)
    return entries if plain else None


def _common_root(value: str, computed: frozenset[str] = frozenset()) -> str:
    """The root of the paths in ``value`` (``params['w1'], params['w2']`` -> ``params``; a
    model's ``model.hidden.kernel`` -> ``model``), ``params`` when they have none in common;
    the values the step computes (``computed``: a loss beside the gradients) are no parameter."""
    roots = {path_root(name) for name in value.split(",")
             if name.strip() and name.strip() not in computed}
    roots.discard("")
    return roots.pop() if len(roots) == 1 and all(r.isidentifier() for r in roots) else "params"


def hoist_fix(style: str, kind: str, value: str, runs_before: str, runs_after: str, hoist_bytes: int | None) -> str:
    """The code that moves a loop-invariant collective before the loop, for ``style``
    (``hoist_bytes`` None: results of a loop inside with an unknown trip count)."""
    what = value or "its operand"
    size = "an unknown number of bytes" if hoist_bytes is None else f"{hoist_bytes:,} B"
    counts = f"{runs_per_call(runs_after)} instead of {runs_before}; its {size} result per device then stays in memory for the whole loop"
    if style == "shard_map":
        return f"move the {kind} of {what} before the loop: {counts}."
    if style == "explicit":
        return f"reshard {what} before the loop (jax.reshard(value, P()) for a gathered parameter): {counts}."
    return (f"constrain {what} before the loop (lax.with_sharding_constraint(value, NamedSharding(mesh, P())) for a "
            f"gathered parameter), so the partitioner runs the {kind} once: {counts}.")


def verdict_of(c: "CompiledCollective", verdicts: "tuple[OperandVerdict, ...]", style: str, counts: "LoopCounts",
               loops: "tuple[Instruction, ...]", added_term: bool = False, signature: Signature = Signature()) -> Verdict:
    """The collective's verdict in words: its operands' one when they agree, else needed.
    ``added_term``: a sum added into its accumulator together with another term (weight decay,
    :mod:`shardscope.engine.hlo.added_terms`), which is then why it is needed; ``signature``:
    what the fix through a ``shard_map`` says of the whole function."""
    if not loops:
        return Verdict(NEEDED, "It runs once per call, outside any loop.")
    kinds = {v.kind for v in verdicts}
    runs_before = _runs_text(c.executions, c.in_conditional)
    if kinds == {LOOP_INVARIANT}:
        left, slots = verdicts[0].loops, verdicts[0].slots
        after = runs_after(loops, left, counts)
        one = verdicts[0].bytes_after or sum(op.bytes for op in c.operands)  # what a hoisted run keeps: its result
        cost = None if slots is None else one * slots
        reason = f"Its operand does not change inside {_loops_words(c, left)}: every run moves the same data."
        if verdicts[0].stacked:  # it changes with a loop inside: every one of that loop's results is kept
            reason = (f"Its operand does not change inside {_loops_words(c, left)}, only with the loop inside it: each "
                      f"iteration of {_loops_words(c, left)} repeats the same runs. Run before it, the "
                      f"{_runs_text(slots)} results of the loop inside stay in memory together: "
                      + (f"{cost:,} B per device ({slots} x {one:,} B)." if cost is not None else "an unknown size."))
        return Verdict(LOOP_INVARIANT, reason,
                       hoist_fix(style, c.kind, c.value, runs_before, _runs_text(after), cost), left, after, cost)
    if kinds == {DEFERRABLE} and len({v.loops for v in verdicts}) == 1:
        return _deferrable(c, verdicts, style, counts, loops, runs_before, signature)
    if kinds == {STACKABLE} and len({v.loops for v in verdicts}) == 1:
        left = verdicts[0].loops
        after = runs_after(loops, left, counts)
        return stackable_verdict(c.kind, _loops_words(c, left), sum(v.bytes_after or 0 for v in verdicts),
                                 sum(v.bytes_per_run or 0 for v in verdicts), runs_before, _runs_text(after), left, after)
    if any(v.stacked for v in verdicts) and kinds <= {NEEDED, STACKABLE}:
        return Verdict(NEEDED, "It writes each iteration's sum into its own slot of a stacked output "
                               "(dynamic-update-slice): one sum after the loop would move as many bytes and lose "
                               "its overlap with the next iteration's work.")
    if DEFERRABLE in kinds and kinds != {DEFERRABLE}:
        return _partly_deferrable(c, verdicts, style, counts, loops, runs_before, signature)
    if DEFERRABLE in kinds:
        return Verdict(NEEDED, "Its values only accumulate into carries, but of different loops: as one combined "
                               "instruction it runs in the innermost of them.")
    if c.loops[-1].name in c.in_condition_of:
        return Verdict(NEEDED, CONDITION_REASON)
    if c.kind in SUM_KINDS and any(v.carry_read for v in verdicts):
        return Verdict(NEEDED, "Its result is added into a carry that the loop also reads (the next iteration uses "
                               "the sum, as a tensor-parallel layer's activation is): the carry is not an accumulator, "
                               "so the sum must run in every iteration.")
    if c.kind in SUM_KINDS:
        if added_term:
            return Verdict(NEEDED, ADDED_TERM_REASON)
        return Verdict(NEEDED, _read_reason(verdicts))
    return Verdict(NEEDED, "Its operand changes every iteration and it is not a sum that could be accumulated: "
                           "it must run in the loop.")


def _deferrable(c: "CompiledCollective", verdicts: "tuple[OperandVerdict, ...]", style: str, counts: "LoopCounts",
                loops: "tuple[Instruction, ...]", runs_before: str, signature: Signature) -> Verdict:
    left = verdicts[0].loops
    after = runs_after(loops, left, counts)
    moved = sum(v.bytes_after or 0 for v in verdicts)
    grows = moved if c.kind == REDUCE_SCATTER or c.scatters else 0  # the unscattered accumulator, every slot of it
    reason = ((_masked_words(c, left, moved) if any(v.masked for v in verdicts) else
               f"Its result is only added into the carry of {_loops_words(c, left)}: the sum over devices commutes with "
               f"the sum over iterations, so one {c.kind} of the {moved:,} B accumulator after the loop gives the same "
               "result") + (" (the accumulator stacks each inner iteration's slot)" if any(v.stacked for v in verdicts) else "")
              + (f"; the accumulator then holds the whole unscattered sum, {grows:,} B per device" if grows else "") + "."
              + _partners(verdicts) + _unknown_saving(verdicts))
    return Verdict(DEFERRABLE, reason,
                   deferral_fix(style, c.arguments, c.axes or (), len(c.operands), runs_before, _runs_text(after), signature,
                                _computed(c.operands)),
                   left, after)


def _read_reason(verdicts: "tuple[OperandVerdict, ...]") -> str:
    """Why a sum read in its loop must run there, naming what reads it where the walk found it
    (``the integer_pow at tp3.py:11 (loss) uses it in the same iteration``)."""
    reader = next((v.read_by for v in verdicts if v.read_by is not None), None)
    if reader is None:
        return "Its result is read inside the loop, not only added into a carry: it must run there."
    passed = "backward pass's " if reader.backward else ""
    at = f" at {reader.source}" if reader.source else ""
    return (f"Its result is read inside the loop, not only added into a carry: the {passed}{reader.operation}{at} "
            "uses it in the same iteration, so it must run there.")


def _masked_words(c: "CompiledCollective", left: tuple[str, ...], moved: int) -> str:
    """Why a sum that reaches its loop's carry through the partitioner's scatter into a replicated
    accumulator (kept on one device of the group, summed over the group again) can leave it."""
    return (f"Its result reaches the carry of {_loops_words(c, left)} through the partitioner's scatter-add into the "
            "replicated accumulator: each iteration the compiler keeps the accumulator and the sum on one device of "
            "the group (a select on the partition id), adds each device's own updates and sums the whole buffer over "
            "the group again, which only adds the sums into the carry: every device can accumulate its own values "
            f"instead, and one {c.kind} of the {moved:,} B accumulator after the loop gives the same result")


def _partners(verdicts: "tuple[OperandVerdict, ...]") -> str:
    """Said of a sum added into the same accumulator as other sums (XLA:GPU's copy of a loop's
    last iterations; the other sum of the partitioner's scatter into a replicated accumulator):
    they leave together, that one run after the loop is all of theirs."""
    names = sorted({name for v in verdicts for name in v.partners})
    if not names:
        return ""
    listed = ", ".join(names)
    if any(v.masked for v in verdicts):
        return (f" {listed} {'is' if len(names) == 1 else 'are'} the other sum of that update: "
                f"{'it leaves' if len(names) == 1 else 'they leave'} the loop with this one, and the one run after it "
                "is theirs too.")
    return (f" {listed} {'adds' if len(names) == 1 else 'add'} into the same accumulator (a copy of the loop's "
            f"last iterations, say): {'it leaves' if len(names) == 1 else 'they leave'} the loop with this one, and "
            "the one run after it is theirs too.")


def _unknown_saving(verdicts: "tuple[OperandVerdict, ...]") -> str:
    """Said of an accumulator larger than one run under a loop whose trip count is unknown: the
    deferral is valid, and whether it moves fewer bytes depends on how often the loop runs."""
    if not any(v.saving_unknown for v in verdicts):
        return ""
    moved = sum(v.bytes_after or 0 for v in verdicts)
    run = sum(v.bytes_per_run or 0 for v in verdicts) or 1
    return (f" The loop's trip count is unknown, so the runs it saves are too: the {moved:,} B accumulator is larger "
            f"than one run's {run:,} B, and moving it once after the loop moves fewer bytes only when the loop runs "
            f"more than {moved // run} time{'' if moved // run == 1 else 's'}.")


def _partly_deferrable(c: "CompiledCollective", verdicts: "tuple[OperandVerdict, ...]", style: str, counts: "LoopCounts",
                       loops: "tuple[Instruction, ...]", runs_before: str, signature: Signature) -> Verdict:
    """A combined sum some of whose values only accumulate into a carry while the others are read
    in the loop (the gradients beside a statistic the loop reads): the instruction stays, and
    runs as often, whatever is split out of it. Splitting saves bytes, not runs: ``splittable``
    when the values that need not run there are at least half its bytes (split out and
    accumulated per device, they run once after the loop), ``needed`` when fewer (a scalar
    riding along a sum the loop needs saves hardly a byte). No loops are named to leave (the
    instruction does not), so no rewrite is offered for it."""
    parts = list(zip(c.operands, verdicts))
    deferred = [(op, v) for op, v in parts if v.kind == DEFERRABLE]
    kept = [op for op, v in parts if v.kind != DEFERRABLE]
    moved, total = sum(op.bytes for op, _ in deferred), sum(op.bytes for op in c.operands)
    values = ", ".join(op.value for op, _ in deferred if op.value)
    others = ", ".join(op.value for op in kept if op.value)
    cast = ", ".join(labelled_argument(op.value) for op, _ in deferred if op.value and not is_source_line(op.value))
    left = deferred[0][1].loops
    one, other = len(deferred) == 1, len(kept) == 1
    reason = (f"{len(deferred)} of its {len(verdicts)} values ({values or 'unnamed'}: {moved:,} of its {total:,} B per "
              f"run) only {'accumulates' if one else 'accumulate'} into the carry of {_loops_words(c, left)}; the "
              f"{'other' if other else f'other {len(kept)}'}{f' ({others})' if others else ''} "
              f"{'is' if other else 'are'} read inside the loop and {'keeps' if other else 'keep'} the {c.kind} there, "
              f"{runs_per_call(runs_before)} whatever is split out of it.")
    if moved < total - moved:
        return Verdict(NEEDED, reason + " Most of its bytes must run there: split out, the others would save "
                                        f"{moved:,} B per run and no run.")
    after = runs_after(loops, left, counts)
    saved = _bytes_saved(c.executions, [(op.bytes, v.bytes_after or op.bytes, runs_after(loops, v.loops, counts))
                                        for op, v in deferred])
    trade = ("its runs are small, so their latency is most of their cost and splitting saves little time"
             if total < LATENCY_BOUND_BYTES else "its runs are large enough to cost their bytes more than their "
             "latency, so the bytes split out are most of what they would save")
    where = ("once after the loop" if after == 1 else
             f"outside {_loops_words(c, left)}, {runs_per_call(_runs_text(after))}")
    reason += (f" Split out and accumulated per device, {'its' if one else 'their'} sum{'' if one else 's'} can run "
               f"{where} with the same result: "
               + (f"{saved:,} B fewer per call" if saved is not None else
                  f"{moved:,} B fewer in every iteration but the last")
               + f", in as many runs of the {c.kind} in the loop. A trade-off, not waste: it saves bandwidth, not the "
               f"runs' latency, and {trade}.")
    fix = (deferral_fix(style, cast, c.axes or (), len(deferred), runs_before, _runs_text(after), signature,
                        _computed(op for op, _ in deferred))
           + f" The {c.kind} left in the loop still runs {runs_per_call(runs_before)}, moving {total - moved:,} B per "
           f"run instead of {total:,} B.")
    return Verdict(SPLITTABLE, reason, fix, (), c.executions)


def _bytes_saved(runs: int | None, deferred: list[tuple[int, int, int | None]]) -> int | None:
    """Bytes per call a split saves: each value's bytes in every run of the loop, less its
    accumulator's in each run after it (``deferred``: per value, its bytes per run, its
    accumulator's and the runs after the split); None when a trip count is unknown."""
    if runs is None or any(after is None for _, _, after in deferred):
        return None
    return sum(runs * size - (after or 0) * accumulator for size, accumulator, after in deferred)


def _computed(operands: "Iterable[CompiledOperand]") -> frozenset[str]:
    """The names of the values among ``operands`` that the step computes (a loss)."""
    return frozenset(op.value for op in operands if op.computed and op.value)


def _loops_words(c: "CompiledCollective", left: tuple[str, ...]) -> str:
    loops = [loop for loop in c.loops if loop.name in left]
    trips = " x ".join("?" if loop.trip_count is None else str(loop.trip_count) for loop in loops)
    if len(loops) == 1:
        count = "an unknown number of" if loops[0].trip_count is None else trips
        return f"the while loop {loops[0].name} ({count} iterations)"
    return f"the {len(loops)} nested while loops ({trips} iterations)"


def _runs_text(runs: int | None, upper_bound: bool = False) -> str:
    return "an unknown number of" if runs is None else Count(runs, upper_bound).text()
