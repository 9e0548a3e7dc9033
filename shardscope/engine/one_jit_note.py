"""The note on a step that is not jitted and calls jitted functions: it is analysed as one jit.

What runs is not one program: each call of a jitted function is its own module, dispatched on
its own (a Python loop over micro-batches dispatches its gradient function once per
micro-batch, each call with its own all-reduce). shardscope traces the step as ``jax.jit`` of
it, where XLA may merge across the calls, and counts that one program. Until the dispatches are
analysed one by one, the note says so. A wrapper around one jitted call (``functools.partial``
of a jitted function, ``eqx.filter_jit``) runs that one module: no note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardscope.engine.hlo_source import is_library_file

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, JaxprEqn

ONE_JIT_NOTE = (
    "{name} is not jitted and calls jitted functions ({callees}): it is analysed as jax.jit({name}), one "
    "program, where XLA may merge across the calls. What runs is each call dispatched as its own module: "
    "collectives are not counted per dispatch here."
)

_JIT_PRIMITIVES = frozenset({"jit", "pjit"})


def one_jit_note(fn: Any, closed: "ClosedJaxpr", name: str) -> str:
    """The note for ``fn`` traced as ``closed`` (see the module), or ``""`` when none applies."""
    if hasattr(fn, "trace") or hasattr(fn, "lower"):
        return ""
    eqns = closed.jaxpr.eqns
    if len(eqns) == 1 and eqns[0].primitive.name in _JIT_PRIMITIVES:
        return ""
    callees = list(dict.fromkeys(str(e.params.get("name", "")) for e in eqns if _user_jit(e)))
    if not callees:
        return ""
    return ONE_JIT_NOTE.format(name=name, callees=", ".join(c for c in callees if c) or "jitted functions")


def _user_jit(eqn: "JaxprEqn") -> bool:
    """A call of a jitted function the user wrote (``jnp.clip``'s own jit is JAX's): its callee
    is defined outside installed packages (the callee jaxpr's ``func_src_info``, ``f at FILE:LINE``)."""
    if eqn.primitive.name not in _JIT_PRIMITIVES:
        return False
    info = getattr(eqn.params["jaxpr"].jaxpr.debug_info, "func_src_info", None) or ""
    _, at, where = info.rpartition(" at ")
    file = where.rpartition(":")[0] if at else ""
    return bool(file) and not is_library_file(file)
