"""The fix for a compiled collective that a loop runs without needing to, in the program's style.

- ``shard_map``: cast the replicated value to varying before the loop, accumulate per device,
  ``psum`` once after it (what the jaxpr view says too);
- jit with Explicit axes: the parameters resharded ``reduced``, the accumulator started
  ``unreduced``, one ``jax.reshard`` to the replicated spec after the loop;
- jit with Auto axes: the partitioner has no way to be told "accumulate unreduced", so the fix
  is one of the two above written as code (Explicit axes, or the loop inside a ``shard_map``).

A loop-invariant collective moves before the loop in every style: gather (or reduce) the value
once and keep it, which costs its size in memory for the whole loop.
"""

from __future__ import annotations

STYLES = ("shard_map", "explicit", "auto")


def deferral_fix(style: str, value: str, axes: tuple[str, ...], rank: int, runs_before: str, runs_after: str) -> str:
    """The code that makes a per-iteration sum one sum after the loop, for ``style``."""
    names = ", ".join(repr(a) for a in axes) or "'data'"
    axis = names if len(axes) == 1 else f"({names})"
    reduced = "{" + names + "}"
    nones = ", ".join(["None"] * max(rank, 1))
    what = value or "the parameters"
    counts = f"{runs_after} run(s)/call instead of {runs_before}"
    if style == "shard_map":
        return (f"cast {what} to varying before the loop (lax.pcast(value, {axis}, to='varying')), start the "
                f"accumulator varying too, and lax.psum(acc, {axis}) once after the loop: {counts}.")
    explicit = (f"Wr = jax.reshard(W, P({nones}, reduced={reduced})) before the loop and take the gradient of Wr; "
                f"acc = jax.reshard(jnp.zeros_like(W), P({nones}, unreduced={reduced})) as the accumulator; "
                f"jax.reshard(acc, P({nones})) after the loop")
    if style == "explicit":
        return f"for {what}: {explicit}: {counts}."
    return (f"the partitioner sums {what} in every iteration and jit with Auto axes cannot say otherwise. Either "
            f"use Explicit axes (jax.make_mesh(..., axis_types=(AxisType.Explicit, ...)), jax.set_mesh(mesh)) and "
            f"{explicit}; or run the loop inside jax.shard_map(step, mesh=mesh, in_specs=(P(), P(None, {axis})), "
            f"out_specs=P(), axis_names={reduced}) with lax.pcast(params, {axis}, to='varying') before it and "
            f"lax.psum(acc, {axis}) after it: {counts}.")


def hoist_fix(style: str, kind: str, value: str, runs_before: str, runs_after: str, hoist_bytes: int) -> str:
    """The code that moves a loop-invariant collective before the loop, for ``style``."""
    what = value or "its operand"
    counts = f"{runs_after} run(s)/call instead of {runs_before}; its {hoist_bytes:,} B result per device then stays in memory for the whole loop"
    if style == "shard_map":
        return f"move the {kind} of {what} before the loop: {counts}."
    if style == "explicit":
        return f"reshard {what} before the loop (jax.reshard(value, P()) for a gathered parameter): {counts}."
    return (f"constrain {what} before the loop (lax.with_sharding_constraint(value, NamedSharding(mesh, P())) for a "
            f"gathered parameter), so the partitioner runs the {kind} once: {counts}.")
