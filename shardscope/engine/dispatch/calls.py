"""The calls a step that is not jitted makes, each compiled as JAX compiles it when called.

``jax.make_jaxpr(step)`` of a step that is not jitted shows each call of a jitted function as
its own ``jit`` equation (its name, its closed jaxpr, its in/out shardings), and each operation
between them (an eager ``jnp`` add) as a primitive of its own; a Python loop over micro-batches
is unrolled into one equation per iteration. What runs is each of them as its own module: a
jitted callee compiled alone with the shardings its arguments arrive with, an eager operation
compiled by JAX's own per-primitive jit. :func:`compile_calls` walks the step's top-level
equations in order, carries each value's sharding from one call to the next (a step's
argument's own, then each module's output shardings), and compiles every distinct call once:
the same callee on the same shapes and shardings is one module, called as often as the step
calls it; the same callee on other shapes is another module.
"""

from __future__ import annotations

import contextlib
import inspect
import keyword
import re
import time
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Callable, Sequence

from shardscope.engine.compilation import compile_traced
from shardscope.engine.user_frames import is_library_file

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn
    from jax.sharding import Sharding
    from jax.stages import Compiled, Traced

__all__ = ["CompiledCall", "JIT_PRIMITIVES", "callee_file", "compile_calls", "is_user_jit"]

JIT_PRIMITIVES = frozenset({"jit", "pjit"})
"""A call of a jitted function in a jaxpr (``pjit`` before JAX renamed it)."""


@dataclass
class CompiledCall:
    """One distinct module the step dispatches: its name (a jitted callee's, or an eager
    primitive's), the positions of the step's equations that call it, and the callee traced
    alone (``traced``, ``compiled``) with its parameters' and results' names. ``function`` is
    what its calls call: the same for the modules of one function on other shapes."""

    name: str
    jitted: bool
    equations: list[int]
    traced: "Traced"
    compiled: "Compiled"
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    compile_s: float
    function: str = ""


def is_user_jit(eqn: "JaxprEqn") -> bool:
    """True for a call of a jitted function outside JAX's own (``jnp.clip``'s jit is JAX's): the
    user's, or a package's the user installed (a training engine's gradient function)."""
    if eqn.primitive.name not in JIT_PRIMITIVES:
        return False
    file = callee_file(eqn.params["jaxpr"])
    return bool(file) and not (is_library_file(file) and "jax" in PurePath(file).parts)


def callee_file(closed: "ClosedJaxpr") -> str:
    """The file that defines a jitted callee (from its jaxpr's ``func_src_info``, ``f at FILE:LINE``)."""
    info = getattr(closed.jaxpr.debug_info, "func_src_info", None) or ""
    _, at, where = info.rpartition(" at ")
    return where.rpartition(":")[0] if at else ""


def compile_calls(closed: "ClosedJaxpr", arguments: Sequence[object], input_names: Sequence[str]) -> list[CompiledCall]:
    """Every distinct module the step ``closed`` dispatches, in the order of first call.

    ``arguments`` are the step's flat arguments (placed arrays or ``jax.ShapeDtypeStruct``s):
    their shardings are what the first calls see. A value with no sharding of its own (an
    argument that is not placed, the ``jnp.zeros`` an eager op makes) is uncommitted, as JAX
    keeps it: the call that takes it places it. On Explicit axes every call compiles under the
    arguments' mesh (``jax.set_mesh``), where eager values are typed.
    """
    jaxpr = closed.jaxpr
    shardings: dict[Any, Any] = {}
    for var, value in zip(jaxpr.constvars, closed.consts):
        shardings[var] = _committed_sharding(value)
    for var, value in zip(jaxpr.invars, arguments):
        shardings[var] = _committed_sharding(value)
    names = {var: name for var, name in zip(jaxpr.invars, input_names)}
    calls: dict[tuple, CompiledCall] = {}
    keys_of_jaxprs: dict[int, str] = {}
    with _explicit_mesh(list(closed.consts) + list(arguments)):
        for k, eqn in enumerate(jaxpr.eqns):
            _call(k, eqn, shardings, names, calls, keys_of_jaxprs)
    return _distinctly_named(list(calls.values()), jaxpr)


def _call(k: int, eqn: "JaxprEqn", shardings: dict[Any, Any], names: dict[Any, str], calls: dict[tuple, CompiledCall],
          keys_of_jaxprs: dict[int, str]) -> None:
    """Equation ``k``: a call of a module already compiled, or a new one; its results' shardings."""
    from jax.extend.core import Literal

    operands = [None if isinstance(v, Literal) else shardings.get(v) for v in eqn.invars]
    key = _call_key(eqn, operands, keys_of_jaxprs)
    call = calls.get(key)
    if call is None:
        arg_names = [names.get(v, "") if not isinstance(v, Literal) else "" for v in eqn.invars]
        call = calls[key] = _compile_call(eqn, operands, arg_names)
    call.equations.append(k)
    outputs = _output_shardings(call.compiled, len(eqn.outvars))
    committed = any(s is not None for s in operands) or _specified(eqn.params.get("in_shardings", ()))
    for var, sharding in zip(eqn.outvars, outputs):
        shardings[var] = sharding if committed else None


def _explicit_mesh(values: Sequence[object]) -> "contextlib.AbstractContextManager":
    """``jax.set_mesh`` of the arguments' mesh when its axes are Explicit (the values an eager op
    makes are typed on it, as under the user's own ``jax.set_mesh``), else nothing."""
    import jax

    for value in values:
        mesh = getattr(getattr(value, "sharding", None), "mesh", None)
        types = getattr(mesh, "axis_types", ())
        if any(str(t).endswith("Explicit") for t in types) and not getattr(mesh, "empty", True):
            return jax.set_mesh(mesh)
    return contextlib.nullcontext()


def _distinctly_named(calls: list[CompiledCall], jaxpr: "Jaxpr") -> list[CompiledCall]:
    """Calls of one function on other shapes (two modules) named by their operands' types."""
    seen: dict[str, int] = {}
    for call in calls:
        seen[call.name] = seen.get(call.name, 0) + 1
    for call in calls:
        if call.jitted and seen[call.name] > 1:
            eqn = jaxpr.eqns[call.equations[0]]
            call.name = f"{call.name}({', '.join(v.aval.str_short() for v in eqn.invars)})"
    return calls


def _committed_sharding(value: object) -> "Sharding | None":
    """The sharding a call sees for ``value``: None for an uncommitted array or a shape without one."""
    if getattr(value, "committed", True) is False:
        return None
    return getattr(value, "sharding", None)


def _call_key(eqn: "JaxprEqn", operands: list, keys_of_jaxprs: dict[int, str]) -> tuple:
    """What makes two equations one module: the callee (or primitive and its parameters), the
    operands' types and shardings, and literal operands' values."""
    from jax.extend.core import Literal

    if eqn.primitive.name in JIT_PRIMITIVES:
        callee = eqn.params["jaxpr"]
        # the same callee on the same shapes is one cached jaxpr object; its text settles any doubt
        text = keys_of_jaxprs.setdefault(id(callee), str(callee))
        params: tuple = (eqn.params["name"], text, str(eqn.params.get("in_shardings")),
                         str(eqn.params.get("out_shardings")))
    else:
        params = tuple((name, str(value)) for name, value in sorted(eqn.params.items()))
    types = tuple(str(v.aval) if not isinstance(v, Literal) else f"literal {v.val!r}" for v in eqn.invars)
    return (eqn.primitive.name, params, types, tuple(str(s) for s in operands))


def _compile_call(eqn: "JaxprEqn", operands: list, arg_names: list[str]) -> CompiledCall:
    """The module one equation runs as: a jitted callee traced and compiled alone, an eager
    primitive bound under ``jax.jit`` as JAX dispatches it."""
    import jax
    from jax.extend.core import Literal

    dynamic = [k for k, v in enumerate(eqn.invars) if not isinstance(v, Literal)]
    jitted = eqn.primitive.name in JIT_PRIMITIVES
    name = str(eqn.params["name"]) if jitted else eqn.primitive.name
    if jitted and "transpose(" in str(eqn.source_info.name_stack):  # jax.grad of a jitted function, eagerly
        name = f"{name} (backward)"
    body = _callee_body(eqn) if jitted else _primitive_body(eqn)

    def module(*values: object) -> list:
        full = [v.val if isinstance(v, Literal) else None for v in eqn.invars]
        for k, value in zip(dynamic, values):
            full[k] = value
        return body(full)

    module.__name__ = module.__qualname__ = name
    names = [arg_names[k] for k in dynamic]
    if jitted:
        own = getattr(eqn.params["jaxpr"].jaxpr.debug_info, "arg_names", None)
        if own is not None and len(own) == len(eqn.invars):
            names = [own[k] or names[i] for i, k in enumerate(dynamic)]
    # JAX names the module's parameters after the function's (``values[0]`` for ``*values``): the
    # partitioner's collective of a parameter (an FSDP weight's all-gather) is named by them
    module.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(_identifier(n, i), inspect.Parameter.POSITIONAL_ONLY) for i, n in enumerate(names)])
    specs = []
    for k in dynamic:
        aval: Any = eqn.invars[k].aval  # a ShapedArray: the operands of a call are arrays
        specs.append(jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=_sharding_for(eqn, k, operands[k]),
                                          weak_type=getattr(aval, "weak_type", False)))
    kwargs = {"out_shardings": eqn.params["out_shardings"]} if jitted and _specified(eqn.params["out_shardings"]) else {}
    start = time.perf_counter()
    traced = jax.jit(module, **kwargs).trace(*specs)
    compiled = compile_traced(traced)  # the partitioner's log lines kept, as every compile's are
    seconds = time.perf_counter() - start
    outputs = tuple(f"{name} out[{k}]" if len(eqn.outvars) > 1 else f"{name} out" for k in range(len(eqn.outvars)))
    function = f"jit {name}" if jitted else f"eager {name}"
    return CompiledCall(name, jitted, [], traced, compiled, tuple(names), outputs, seconds, function)


def _identifier(name: str, position: int) -> str:
    """``name`` as a Python parameter name (``xs[0]`` -> ``xs_0``; ``arg1`` for none), distinct
    by ``position`` where it is not one already."""
    cleaned = re.sub(r"\W+", "_", name).strip("_")
    if not cleaned or not cleaned.isidentifier() or keyword.iskeyword(cleaned):
        return f"arg{position}"
    return cleaned


def _callee_body(eqn: "JaxprEqn") -> Callable[[list], list]:
    """A jitted callee's jaxpr evaluated as a function of its operands (its lines kept)."""
    import jax

    closed = eqn.params["jaxpr"]
    return lambda operands: jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *operands)


def _primitive_body(eqn: "JaxprEqn") -> Callable[[list], list]:
    """An eager operation bound with its own parameters, as JAX's dispatch binds it."""

    from jax._src import source_info_util  # jax exports no way to bind under an equation's own lines

    def body(operands: list) -> list:
        # under the equation's traceback, as jax.core.eval_jaxpr binds: the module's lines are
        # the user's line of the eager op, not this one
        with source_info_util.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack):
            out = eqn.primitive.bind(*operands, **eqn.params)
        return list(out) if eqn.primitive.multiple_results else [out]

    return body


def _sharding_for(eqn: "JaxprEqn", k: int, arriving: "Sharding | None") -> "Sharding | None":
    """The sharding operand ``k`` is compiled with: the callee's own ``in_shardings`` where it
    names one, else the one the value arrives with."""
    own = eqn.params.get("in_shardings")
    if own is not None and k < len(own) and _specified((own[k],)):
        return own[k]
    return arriving


def _specified(shardings: Sequence[object]) -> bool:
    """True when some entry is a sharding (not JAX's ``UnspecifiedValue``)."""
    return any(s is not None and type(s).__name__ != "UnspecifiedValue" for s in shardings)


def _output_shardings(compiled: "Compiled", count: int) -> list:
    """The compiled module's output shardings, flat, one per result."""
    import jax

    found = jax.tree.leaves(compiled.output_shardings)
    return list(found) if len(found) == count else [None] * count
