"""A rematerialization's fix, checked by compiling it.

For one of the program's inputs, the value the partitioner could not reshard is given the
layout it was needed in as it enters the program (its argument's sharding). For a value the
program computes (an activation), it is resharded where its line makes it, in steps the
partitioner takes with one all-to-all each (:mod:`shardscope.engine.reshard_steps`): the
program's own trace is run again with a ``with_sharding_constraint`` through each layout after
that equation. Where no such chain works, the input that feeds the value is given the target
layout instead. The program is traced and compiled again; the fix holds when the partitioner no
longer warns and the compiled collectives move no more bytes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, Callable, Sequence

from shardscope.engine.compilation import compile_capturing
from shardscope.engine.hlo.compiled import compiled_plan, jax_traced
from shardscope.engine.hlo.partitioner_warnings import INVOLUNTARY_REMAT, FixCheck, PartitionerWarning
from shardscope.engine.hlo.plan import CompiledPlan
from shardscope.engine.reshard_steps import Layout, all_to_all_steps, spec_text
from shardscope.engine.traceable import Traceable

if TYPE_CHECKING:
    import jax
    from jax.extend.core import ClosedJaxpr
    from jax.sharding import Mesh, PartitionSpec
    from jax.stages import Lowered


def collective_bytes(plan: CompiledPlan) -> int:
    """Bytes per device every compiled collective moves in one call (each run counted)."""
    return sum(c.bytes_per_execution * (c.executions or 1) for c in plan.collectives)


def with_fixes(program: Traceable, plan: CompiledPlan) -> CompiledPlan:
    """``plan`` with each rematerialization given its :class:`FixCheck`: of one of ``program``'s
    inputs, or of a value it computes at one of its lines (the others are left without one)."""
    if not plan.rematerializations:
        return plan
    fixed = tuple(_checked(program, plan, w) if w.kind == INVOLUNTARY_REMAT else w for w in plan.partitioner)
    return dataclasses.replace(plan, partitioner=fixed)


def _checked(program: Traceable, plan: CompiledPlan, warning: PartitionerWarning) -> PartitionerWarning:
    # in the function, as the engine imports JAX: `import shardscope` must not load it
    import jax

    leaves, treedef = jax.tree.flatten((program.args, program.kwargs))
    if warning.target_axes is None or len(leaves) != len(program.input_names):
        return warning
    mesh = _mesh_of(leaves)
    if mesh is None:
        return warning
    if warning.op_name in program.input_names:
        k = program.input_names.index(warning.op_name)
        return dataclasses.replace(warning, fix=_check(plan, lambda: _with_input_layout(program, k, warning, mesh)))
    if not warning.is_intermediate or warning.value_line is None:
        return warning
    return _checked_intermediate(program, plan, warning, mesh)


def _checked_intermediate(program: Traceable, plan: CompiledPlan, warning: PartitionerWarning,
                          mesh: "Mesh") -> PartitionerWarning:
    """The value resharded in all-to-all steps where its line makes it, else its input given
    the target layout: the first of them that compiles without the rematerialization."""
    import jax

    try:
        traced = jax_traced(program.function.trace(*program.args, **program.kwargs))
    except Exception:  # traced once already; a second trace that fails leaves the finding without a fix
        return warning
    closed = traced.jaxpr
    leaves = jax.tree.leaves((program.args, program.kwargs))
    index = _value_equation(closed, warning)
    if index is None or len(closed.jaxpr.invars) != len(leaves):
        return warning
    tried: FixCheck | None = None
    steps = all_to_all_steps(warning.source_axes, warning.target_axes, warning.shape, dict(mesh.shape)) \
        if warning.source_axes is not None and warning.target_axes is not None else None
    if steps is not None:
        tried = _check(plan, lambda: _with_value_resharded(closed, index, steps, mesh, leaves))
        tried = dataclasses.replace(tried, through=tuple(spec_text(s) for s in steps[:-1]))
        if tried.verified:
            return dataclasses.replace(warning, fix=tried)
    for k in _inputs_feeding(closed, index, warning.shape):
        name = program.input_names[k]
        given = _check(plan, lambda: _with_input_layout(program, k, warning, mesh))
        if given.verified or tried is None:
            tried = dataclasses.replace(given, input=name)
        if given.verified:
            break
    return dataclasses.replace(warning, fix=tried) if tried is not None else warning


def _check(plan: CompiledPlan, lower: Callable[[], "Lowered"]) -> FixCheck:
    """Compile what ``lower`` lowers and count what is left: the rematerializations and bytes."""
    before = collective_bytes(plan)
    try:
        compiled, messages = compile_capturing(lower())
    except Exception:  # the fix does not compile: said as not verified, the finding stands
        return FixCheck(-1, before, -1)
    text = compiled.as_text()
    if text is None:  # nothing to count the fix's bytes in: not verified, as a fix that does not compile
        return FixCheck(-1, before, -1)
    fixed = compiled_plan(text)
    remats = sum("Involuntary full rematerialization" in m for m in messages)
    kinds = Counter(c.kind for c in fixed.collectives)
    return FixCheck(remats, before, collective_bytes(fixed), kinds_after=tuple(sorted(kinds.items())))


def _with_input_layout(program: Traceable, k: int, warning: PartitionerWarning, mesh: "Mesh") -> "Lowered":
    """The program lowered with its input ``k`` given the warning's target layout."""
    import jax
    from jax.sharding import NamedSharding

    leaves, treedef = jax.tree.flatten((program.args, program.kwargs))
    assert warning.target_axes is not None  # checked by the caller
    leaves[k] = jax.ShapeDtypeStruct(leaves[k].shape, leaves[k].dtype,
                                     sharding=NamedSharding(mesh, _partition_spec(warning.target_axes)))
    args, kwargs = jax.tree.unflatten(treedef, leaves)
    return program.function.trace(*args, **kwargs).lower()


def _with_value_resharded(closed: "ClosedJaxpr", index: int, steps: Sequence[Layout], mesh: "Mesh",
                          leaves: "Sequence[jax.Array | jax.ShapeDtypeStruct]") -> "Lowered":
    """The program's trace run again with the result of equation ``index`` constrained to each
    layout of ``steps`` in turn, lowered over the same arguments."""
    import jax
    from jax.sharding import NamedSharding

    def reshard(value: "jax.Array") -> "jax.Array":
        for layout in steps:
            value = jax.lax.with_sharding_constraint(value, NamedSharding(mesh, _partition_spec(layout)))
        return value

    def fixed(*values: "jax.Array") -> list:
        return _evaluated(closed, values, index, reshard)

    specs = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=getattr(leaf, "sharding", None)) for leaf in leaves]
    return jax.jit(fixed).trace(*specs).lower()


def _evaluated(closed: "ClosedJaxpr", values: "Sequence[jax.Array]", index: int,
               change: "Callable[[jax.Array], jax.Array]") -> list:
    """``closed`` evaluated on ``values`` as ``jax.core.eval_jaxpr`` does (each equation under its
    own lines), the result of equation ``index`` passed through ``change``."""
    from jax._src import source_info_util  # jax exports no way to bind under an equation's own lines
    from jax.extend.core import Literal

    env: dict[object, object] = dict(zip(closed.jaxpr.constvars, closed.consts))
    env.update(zip(closed.jaxpr.invars, values))

    def read(var: object) -> object:
        return var.val if isinstance(var, Literal) else env[var]

    for k, eqn in enumerate(closed.jaxpr.eqns):
        params = eqn.primitive.get_bind_params(eqn.params)
        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        with source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack), eqn.ctx.manager:
            out = eqn.primitive.bind(*[read(v) for v in eqn.invars], **params)
            outs = list(out) if eqn.primitive.multiple_results else [out]
            if k == index:
                outs = [change(o) for o in outs]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in closed.jaxpr.outvars]


def _value_equation(closed: "ClosedJaxpr", warning: PartitionerWarning) -> int | None:
    """The top-level equation that makes the warning's value: the last one of its line with one
    result of its shape (``jax.nn.gelu(acts * 2.0)`` is the gelu, not the product), of the
    warning's own primitive where one is (``out = jnp.tanh(acts) + resid``: the tanh, not the sum)."""
    from jax._src import source_info_util  # the equations' user frames, as the jaxpr view reads them

    assert warning.value_line is not None  # checked by the caller
    primitive = warning.op_name.split(";", 1)[0].rsplit("/", 1)[-1]
    found: list[tuple[int, str]] = []
    for k, eqn in enumerate(closed.jaxpr.eqns):
        frames = {(f.file_name, f.start_line) for f in source_info_util.user_frames(eqn.source_info.traceback)}
        if warning.value_line in frames and len(eqn.outvars) == 1 and \
                tuple(getattr(eqn.outvars[0].aval, "shape", ())) == warning.shape:
            found.append((k, eqn.primitive.name))
    own = [k for k, name in found if name == primitive]
    return own[-1] if own else found[-1][0] if found else None


def _inputs_feeding(closed: "ClosedJaxpr", index: int, shape: tuple[int, ...]) -> list[int]:
    """The program inputs of ``shape`` that equation ``index`` computes from, through the
    equations before it."""
    from jax.extend.core import Literal

    inputs = {v: k for k, v in enumerate(closed.jaxpr.invars)}
    makers = {v: eqn for eqn in closed.jaxpr.eqns[:index] for v in eqn.outvars}
    found: set[int] = set()
    stack = [v for v in closed.jaxpr.eqns[index].invars if not isinstance(v, Literal)]
    seen: set[object] = set()
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if var in inputs and tuple(getattr(var.aval, "shape", ())) == shape:
            found.add(inputs[var])
        elif var in makers:
            stack += [v for v in makers[var].invars if not isinstance(v, Literal)]
    return sorted(found)


def _mesh_of(leaves: Sequence[object]) -> "Mesh | None":
    """The mesh the program's arguments are laid out over (the first one's)."""
    for leaf in leaves:
        mesh = getattr(getattr(leaf, "sharding", None), "mesh", None)
        if mesh is not None and getattr(mesh, "shape", None):
            return mesh
    return None


def _partition_spec(layout: Layout) -> "PartitionSpec":
    from jax.sharding import PartitionSpec

    return PartitionSpec(*(None if not axes else axes[0] if len(axes) == 1 else axes for axes in layout))

