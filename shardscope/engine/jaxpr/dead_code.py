"""Which jaxpr collectives never run, and the mesh and style of a traced program.

JAX's own dead-code elimination (``jax._src.interpreters.partial_eval.dce_jaxpr``) removes the
equations whose results nothing uses: the loss ``pmean`` under ``jax.grad``, a ``ppermute``
whose result is dropped; applied to every sub-jaxpr too, since it keeps a while loop's body
whole where XLA does not (one half of a tuple psum whose result the iteration drops). The compiler removes them as well, so they must not count as runs.
Equations keep their identity through the elimination, so the survivors are matched by
identity and named as :mod:`shardscope.engine.jaxpr.model` names them.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterator, Union

from shardscope.engine.jaxpr.model import COLLECTIVE_PRIMITIVES, open_jaxpr, qualify, sub_jaxprs

if TYPE_CHECKING:
    import jax
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn

    AnyJaxpr = Union[ClosedJaxpr, Jaxpr]


def dead_collectives(closed_jaxpr: "AnyJaxpr") -> tuple[str, ...]:
    """The equation ids (``shard_map_0/ppermute_0``) of the collectives DCE removes."""
    from jax._src.interpreters import partial_eval as pe

    jaxpr = open_jaxpr(closed_jaxpr)
    alive: set[int] = set()

    def keep(block: "Jaxpr") -> None:
        # a loop's body keeps every equation through JAX's elimination of the loop; XLA removes
        # what reaches none of the body's results (a psum of a value the iteration drops)
        kept, _ = pe.dce_jaxpr(block, [True] * len(block.outvars), instantiate=True)
        for eqn in kept.eqns:
            if eqn.primitive.name in COLLECTIVE_PRIMITIVES:
                alive.add(id(eqn))
            for _, sub in sub_jaxprs(eqn):
                keep(open_jaxpr(sub))

    keep(jaxpr)
    return tuple(eqn_id for eqn_id, eqn in named_equations(jaxpr, "") if eqn.primitive.name in COLLECTIVE_PRIMITIVES
                 and id(eqn) not in alive)


def _equations(jaxpr: "Jaxpr") -> Iterator["JaxprEqn"]:
    for eqn in jaxpr.eqns:
        yield eqn
        for _, sub in sub_jaxprs(eqn):
            yield from _equations(sub)


def named_equations(jaxpr: "AnyJaxpr", block_id: str = "") -> Iterator[tuple[str, "JaxprEqn"]]:
    """``(equation id, JAX equation)`` of every equation at any depth, in the order and with
    the ids of :mod:`shardscope.engine.jaxpr.model` (how the raw equations behind a
    :class:`~shardscope.engine.jaxpr.model.Program` are found)."""
    counts: Counter[str] = Counter()
    for eqn in jaxpr.eqns:
        primitive = eqn.primitive.name
        name = f"{primitive}_{counts[primitive]}"
        counts[primitive] += 1
        eqn_id = qualify(block_id, name)
        yield eqn_id, eqn
        for role, sub in sub_jaxprs(eqn):
            yield from named_equations(sub, eqn_id if role == "body" else f"{eqn_id}.{role}")


def mesh_and_style(closed_jaxpr: "AnyJaxpr", compiled: "jax.stages.Compiled | None" = None
                   ) -> tuple["jax.sharding.Mesh | None", str]:
    """``(mesh, style)``: the program's mesh (a ``shard_map``'s, else its arguments' shardings')
    and ``shard_map``, ``explicit`` (every mesh axis Explicit) or ``auto``."""
    jaxpr = open_jaxpr(closed_jaxpr)
    for eqn in _equations(jaxpr):
        if eqn.primitive.name == "shard_map" and eqn.params.get("mesh") is not None:
            return eqn.params["mesh"], "shard_map"
    mesh = None
    shardings = []
    if compiled is not None:
        try:
            import jax

            shardings = jax.tree.leaves(compiled.input_shardings) + jax.tree.leaves(compiled.output_shardings)
        except Exception:  # a compiled object without shardings (a single device): no mesh
            shardings = []
    for sharding in shardings:
        mesh = getattr(sharding, "mesh", None)
        if mesh is not None and getattr(mesh, "axis_names", None):
            break
    else:
        mesh = None
    types = [str(t) for t in getattr(mesh, "axis_types", ())]
    explicit = bool(types) and all("Explicit" in t for t in types)
    return mesh, "explicit" if explicit else "auto"
