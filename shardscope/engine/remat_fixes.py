"""A rematerialization's fix, checked by compiling it: the value that the partitioner could not
reshard is given the layout it was needed in as it enters the program (its argument's
sharding), and the program is traced and compiled again. The fix holds when the partitioner no
longer warns and the compiled collectives move no more bytes."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from shardscope.engine.compilation import compile_capturing
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.partitioner_warnings import INVOLUNTARY_REMAT, FixCheck, PartitionerWarning
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.traceable import Traceable

if TYPE_CHECKING:
    from jax.stages import Compiled


def collective_bytes(plan: CompiledPlan) -> int:
    """Bytes per device every compiled collective moves in one call (each run counted)."""
    return sum(c.bytes_per_execution * (c.executions or 1) for c in plan.collectives)


def with_fixes(program: Traceable, plan: CompiledPlan) -> CompiledPlan:
    """``plan`` with each rematerialization of one of ``program``'s inputs given its
    :class:`FixCheck` (the others are left without one)."""
    if not plan.rematerializations:
        return plan
    fixed = tuple(_checked(program, plan, w) if w.kind == INVOLUNTARY_REMAT else w for w in plan.partitioner)
    return dataclasses.replace(plan, partitioner=fixed)


def _checked(program: Traceable, plan: CompiledPlan, warning: PartitionerWarning) -> PartitionerWarning:
    # in the function, as the engine imports JAX: `import shardscope` must not load it
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    leaves, treedef = jax.tree.flatten((program.args, program.kwargs))
    if warning.target_axes is None or warning.op_name not in program.input_names or len(leaves) != len(
            program.input_names):
        return warning
    k = program.input_names.index(warning.op_name)
    sharding = getattr(leaves[k], "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None:
        return warning
    spec = PartitionSpec(*(None if not axes else axes[0] if len(axes) == 1 else axes for axes in warning.target_axes))
    leaves[k] = jax.ShapeDtypeStruct(leaves[k].shape, leaves[k].dtype, sharding=NamedSharding(mesh, spec))
    args, kwargs = jax.tree.unflatten(treedef, leaves)
    try:
        lowered = program.function.trace(*args, **kwargs).lower()
        compiled, messages = compile_capturing(lowered)
    except Exception:  # the fix does not compile: said as not verified, the finding stands
        return dataclasses.replace(warning, fix=FixCheck(-1, collective_bytes(plan), -1))
    after = _bytes_of(compiled)
    if after is None:  # nothing to count the fix's bytes in: not verified, as a fix that does not compile
        return dataclasses.replace(warning, fix=FixCheck(-1, collective_bytes(plan), -1))
    remats = sum("Involuntary full rematerialization" in m for m in messages)
    return dataclasses.replace(warning, fix=FixCheck(remats, collective_bytes(plan), after))


def _bytes_of(compiled: "Compiled") -> int | None:
    """What the compiled collectives move per call; None where JAX gives no module text."""
    text = compiled.as_text()
    return None if text is None else collective_bytes(compiled_plan(text))
