"""Run a traced program again, equation by equation, with some equations changed: a rewrite.

A rewrite of a traced program (the what-if's) is a closed jaxpr evaluated under ``jax.jit``
the way ``jax.core.eval_jaxpr`` does, except where :class:`Edits` say otherwise: an equation
replaced by other code, a loop's operands changed before it runs (the accumulator started
varying), its results after (one ``psum``). JAX types every value again as it goes, so a
change of type (a value that is now varying, or unreduced) flows on by JAX's own rules.

An equation is bound as it was when nothing about it changed. One that holds an edit, or
whose operands' types changed, is traced again: ``scan``, ``while``, ``cond`` and
``shard_map`` through ``lax.scan``, ``lax.while_loop``, ``lax.switch`` and ``jax.shard_map``
with bodies that are evaluated here in turn; a call (``pjit``, ``closed_call``,
``custom_jvp_call``, ``custom_vjp_call``, ``remat``) is evaluated inline; a first-order
primitive is bound again with its operands' varying axes made to agree (JAX's
``auto_insert_reshard``, what ``lax.add`` does before it binds). Each equation keeps its source
information, so the rewritten program's collectives and loops name the user's lines.

Equations are named as :mod:`shardscope.engine.jaxpr.model` names them
(``shard_map_0/scan_0/psum_invariant_0``), so that edits address the equations the findings
point at.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from shardscope.engine.jaxpr.model import CAST_PRIMITIVES, COLLECTIVE_PRIMITIVES, qualify, scan_operand_groups, sub_jaxprs

if TYPE_CHECKING:
    import jax
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
    from jax.sharding import AbstractMesh

Replacement = Callable[["JaxprEqn", list], list]
"""New results of an equation from its (new) operands."""

Rule = Callable[["JaxprEqn", str, list, Mapping[str, Any]], list]
"""How every equation of one primitive is bound: ``rule(eqn, eqn id, operands, params) -> results``."""

__all__ = ["CALLS", "Edits", "RetraceError", "Retracer", "Rule", "bind", "block_id_of", "equation_ids", "exception_text"]


class RetraceError(Exception):
    """A program the rewrite cannot run again (a primitive it cannot trace again, say)."""


@dataclass(frozen=True)
class Edits:
    """What changes, by equation id: ``replace`` gives an equation's results from its operands
    instead of binding it; ``before`` turns a loop's (or any equation's) operands into the
    ones it runs on; ``after`` its results into the ones the program goes on with."""

    replace: Mapping[str, Replacement] = field(default_factory=dict)
    before: Mapping[str, Replacement] = field(default_factory=dict)
    after: Mapping[str, Replacement] = field(default_factory=dict)

    @property
    def ids(self) -> frozenset[str]:
        """Every equation id an edit names."""
        return frozenset(self.replace) | frozenset(self.before) | frozenset(self.after)

    def touches(self, eqn_id: str) -> bool:
        """True when ``eqn_id`` or an equation inside it is edited."""
        return any(i == eqn_id or i.startswith(eqn_id + "/") or i.startswith(eqn_id + ".") for i in self.ids)


def block_id_of(eqn_id: str, role: str) -> str:
    """The id of the sub-jaxpr ``role`` of the equation ``eqn_id``, as ``engine.jaxpr.model`` gives it."""
    return eqn_id if role == "body" else f"{eqn_id}.{role}"


def equation_ids(jaxpr: "Jaxpr", block_id: str = "") -> list[str]:
    """The ids of the top-level equations of one block, in order."""
    counts: Counter[str] = Counter()
    ids = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ids.append(qualify(block_id, f"{name}_{counts[name]}"))
        counts[name] += 1
    return ids


CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
                   "custom_vjp_call_jaxpr", "remat", "checkpoint", "remat2"})
"""Calls with one body that run inline when they must be traced again."""


_COMBINED = frozenset({"scatter", "scatter-add", "scatter_add", "scatter-mul", "scatter_mul", "scatter-min",
                       "scatter_min", "scatter-max", "scatter_max"})
"""First-order primitives whose jaxpr parameter is only how two scalars combine: bound again as they are."""


class Retracer:
    """Evaluates closed jaxprs with :class:`Edits` applied (call inside a JAX trace: ``jax.jit``).

    ``mesh``: the abstract mesh every equation traced outside a ``shard_map`` runs under
    instead of the one it was traced under (the same mesh with Explicit axes, to trace an Auto
    program again as an Explicit one); ``rules`` bind every equation of a primitive (by name)
    their own way (the Explicit-axes ``dot_general``, which must say how a sum is sharded).
    """

    retrace_all = False
    """True: every equation is traced again (inside a ``shard_map`` that runs a jit program per
    device, where every shape may change), none bound as it was."""

    def __init__(self, edits: Edits, mesh: "AbstractMesh | None" = None,
                 rules: Mapping[str, Rule] | None = None) -> None:
        self.edits = edits
        self.mesh = mesh
        self.rules = dict(rules or {})

    def run(self, closed: "ClosedJaxpr", args: Sequence[Any]) -> list:
        """The outputs of ``closed`` on ``args`` (its flat inputs), with the edits applied."""
        return self.block(closed.jaxpr, closed.consts, args, "")

    # ------------------------------------------------------------------ blocks and equations

    def block(self, jaxpr: "Jaxpr", consts: Sequence[Any], args: Sequence[Any], block_id: str) -> list:
        """The outputs of one (open) jaxpr whose equations are named inside ``block_id``."""
        from jax.extend.core import Literal

        env: dict[Any, Any] = {}

        def read(atom: "Var | Literal") -> object:
            if not isinstance(atom, Literal):
                return env[atom]
            return atom.val if self.mesh is None else _unplaced(atom.val)

        for var, value in zip(list(jaxpr.constvars) + list(jaxpr.invars), list(consts) + list(args), strict=True):
            env[var] = value
        for eqn, eqn_id in zip(jaxpr.eqns, equation_ids(jaxpr, block_id)):
            outs = self.equation(eqn, eqn_id, [read(v) for v in eqn.invars])
            for var, value in zip(eqn.outvars, outs, strict=True):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """The results of one equation, edited, traced again or bound as it was."""
        from jax._src import source_info_util

        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        try:
            with source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack), eqn.ctx.manager, \
                    self._mesh_context(eqn):
                return self._equation(eqn, eqn_id, invals)
        except RetraceError:
            raise
        except Exception as exc:  # JAX refuses this equation: say which, at the user's line
            raise RetraceError(f"{exception_text(exc)} (the {eqn.primitive.name} at {_where(eqn)})") from exc

    def operands(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """The operands ``eqn`` runs on, before any edit (here: as they come)."""
        return invals

    def first_order(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """A first-order primitive traced again: by its rule, else bound again as it was."""
        if eqn.primitive.name in self.rules:
            return self.rules[eqn.primitive.name](eqn, eqn_id, invals, self._params(eqn))
        return bind(eqn, invals, self._params(eqn))

    def _equation(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        invals = self.operands(eqn, eqn_id, invals)
        before = self.edits.before.get(eqn_id)
        if before is not None:
            invals = before(eqn, invals)
        replace = self.edits.replace.get(eqn_id)
        scaled = _scaled_unreduced(eqn, invals) if replace is None else None
        if replace is not None:
            outs = replace(eqn, invals)
        elif scaled is not None:
            outs = scaled
        elif self.retrace_all or self.edits.touches(eqn_id) or _types_changed(eqn, invals):
            outs = self.retrace(eqn, eqn_id, invals)
        elif eqn.primitive.name in self.rules:
            outs = self.rules[eqn.primitive.name](eqn, eqn_id, invals, self._params(eqn))
        else:
            outs = bind(eqn, invals, self._params(eqn))
        after = self.edits.after.get(eqn_id)
        return list(after(eqn, outs)) if after is not None else list(outs)

    def _mesh_context(self, eqn: "JaxprEqn") -> "contextlib.AbstractContextManager":
        """The mesh ``eqn`` runs under: its own, or :attr:`mesh` in its place outside a shard_map
        (also where it was traced under none: a jit of Auto-placed arrays sets no mesh)."""
        import jax

        traced_under = eqn.ctx.cur_abstract_mesh
        if self.mesh is None or traced_under.manual_axes:
            return contextlib.nullcontext()
        return jax.sharding.use_abstract_mesh(self.mesh)

    def retrace(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """Trace ``eqn`` again on ``invals``: its sub-jaxprs are evaluated here, edits and all."""
        name = eqn.primitive.name
        if name == "scan":
            return self._scan(eqn, eqn_id, invals)
        if name == "while":
            return self._while(eqn, eqn_id, invals)
        if name == "cond":
            return self._cond(eqn, eqn_id, invals)
        if name == "shard_map":
            return self._shard_map(eqn, eqn_id, invals)
        subs = sub_jaxprs(eqn)
        if name in CALLS and len(subs) == 1:
            return self._inline(eqn, eqn_id, invals)
        if subs and name not in _COMBINED:
            raise RetraceError(f"the rewrite passes through a {name}, which shardscope cannot trace again")
        if name == "pvary":
            return _pvary(eqn, invals[0])
        return self.first_order(eqn, eqn_id, _agreeing(eqn, invals))

    def _params(self, eqn: "JaxprEqn") -> Mapping[str, Any]:
        """``eqn``'s parameters, its shardings on :attr:`mesh` when one is given: a sharding the
        program asked for (``with_sharding_constraint``, ``reshard``) moves there, one JAX
        inferred (the ``out_sharding`` of a ``dot_general``, which with Auto axes only says
        "unconstrained") is inferred again."""
        if self.mesh is None:
            return eqn.params
        inferred = _INFERRED_SHARDINGS - ({"sharding"} if eqn.primitive.name == "sharding_constraint" else set())
        return {k: (None if k in inferred else _on_mesh(v, self.mesh)) for k, v in eqn.params.items()}

    # ------------------------------------------------------------------ higher-order primitives

    def _scan(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        from jax import lax

        params = eqn.params
        groups = scan_operand_groups(params)
        if groups is None:
            raise RetraceError("a scan whose operands shardscope cannot tell apart (consts, carry, xs)")
        n_consts, n_carry = groups
        consts, init, xs = invals[:n_consts], invals[n_consts:n_consts + n_carry], invals[n_consts + n_carry:]
        body = params["jaxpr"]

        def step(carry: list, x: list) -> tuple[list, list]:
            outs = self.block(body.jaxpr, body.consts, [*consts, *carry, *x], block_id_of(eqn_id, "body"))
            return outs[:n_carry], outs[n_carry:]

        carry, ys = lax.scan(step, list(init), list(xs), length=params["length"], reverse=params["reverse"],
                             unroll=params["unroll"], _split_transpose=params.get("_split_transpose", False))
        return [*carry, *ys]

    def _while(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        from jax import lax

        params = eqn.params
        n_cond, n_body = params["cond_nconsts"], params["body_nconsts"]
        cond_consts, body_consts, init = invals[:n_cond], invals[n_cond:n_cond + n_body], invals[n_cond + n_body:]
        cond, body = params["cond_jaxpr"], params["body_jaxpr"]

        def test(carry: list) -> "jax.Array":
            return self.block(cond.jaxpr, cond.consts, [*cond_consts, *carry], block_id_of(eqn_id, "cond"))[0]

        def step(carry: list) -> list:
            return self.block(body.jaxpr, body.consts, [*body_consts, *carry], block_id_of(eqn_id, "body"))

        final: list = lax.while_loop(test, step, list(init))
        return final

    def _cond(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        from jax import lax

        index, operands = invals[0], invals[1:]

        def branch(k: int, closed: "ClosedJaxpr") -> Callable[..., list]:
            def run(*ops: object) -> list:
                return self.block(closed.jaxpr, closed.consts, ops, block_id_of(eqn_id, f"branch{k}"))
            return run

        branches = [branch(k, b) for k, b in enumerate(eqn.params["branches"])]
        return list(lax.switch(index, branches, *operands))

    def _shard_map(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        import jax

        params = eqn.params
        inner = params["jaxpr"]
        jaxpr, consts = (inner.jaxpr, inner.consts) if hasattr(inner, "consts") else (inner, ())

        def local(*args: object) -> list:
            return self.block(jaxpr, consts, args, block_id_of(eqn_id, "body"))

        mapped = jax.shard_map(local, mesh=params["mesh"], in_specs=tuple(params["in_specs"]),
                               out_specs=list(params["out_specs"]), axis_names=set(params["newly_manual_axes"]),
                               check_vma=params["check_vma"])
        return list(mapped(*invals))

    def _inline(self, eqn: "JaxprEqn", eqn_id: str, invals: list) -> list:
        """A call evaluated in place: its body's equations join the caller's trace (a custom
        derivative rule is dropped with it: the rewritten program is run, not differentiated)."""
        body = next(v for v in eqn.params.values() if _is_jaxpr(v))
        jaxpr, consts = (body.jaxpr, body.consts) if hasattr(body, "consts") else (body, ())
        return self.block(jaxpr, consts, invals, block_id_of(eqn_id, "body"))


# --------------------------------------------------------------------------- binding


def bind(eqn: "JaxprEqn", invals: list, params: Mapping[str, Any]) -> list:
    """``eqn``'s primitive bound on ``invals`` with ``params``, as ``eval_jaxpr`` binds it."""
    bind_params = eqn.primitive.get_bind_params(dict(params))
    out = eqn.primitive.bind(*invals, **bind_params)
    return list(out) if eqn.primitive.multiple_results else [out]


def _types_changed(eqn: "JaxprEqn", invals: list) -> bool:
    """True when some operand's type (varying axes, sharding) is not the one it was traced with."""
    from jax._src import core

    for var, value in zip(eqn.invars, invals):
        new = core.typeof(value)
        if not core.typematch(var.aval, new):
            return True
    return False


def _agreeing(eqn: "JaxprEqn", invals: list) -> list:
    """The operands of a first-order primitive with their varying axes made to agree, as the
    ``lax`` function that bound it did; collectives and casts take theirs as they are."""
    from jax._src import core


    name = eqn.primitive.name
    if name in COLLECTIVE_PRIMITIVES or name in CAST_PRIMITIVES or len(invals) < 2:
        return invals
    return list(core.auto_insert_reshard(*invals))


def _scaled_unreduced(eqn: "JaxprEqn", invals: list) -> list | None:
    """A sum left unreduced (for after the loop) times or over a value the same on every device
    (a mean's ``1/N``): JAX asks for that factor ``reduced`` over the same axes, so it is cast
    so; a quotient is bound as a product with the reciprocal (jax 0.10 has no unreduced rule
    for ``div``). None for any other equation."""
    import jax
    from jax import lax
    from jax._src import core
    from jax.sharding import PartitionSpec

    name = eqn.primitive.name
    if name not in ("mul", "div") or len(invals) != 2:
        return None
    found = [getattr(getattr(core.typeof(v), "sharding", None), "spec", None) for v in invals]
    specs = [PartitionSpec() if spec is None else spec for spec in found]  # P(unreduced=...) is falsy
    unreduced = [frozenset(spec.unreduced) for spec in specs]
    if not (unreduced[0] or unreduced[1]) or (unreduced[0] and unreduced[1]) or (name == "div" and not unreduced[0]):
        return None
    summed = 0 if unreduced[0] else 1
    factor, spec = invals[1 - summed], specs[1 - summed]
    if name == "div":
        factor = lax.div(lax.full_like(factor, 1), factor)
    if not unreduced[summed] <= frozenset(spec.reduced):
        factor = jax.sharding.reshard(factor, PartitionSpec(*spec.partitions, reduced=frozenset(spec.reduced) | unreduced[summed]))
    operands = [invals[0], factor] if summed == 0 else [factor, invals[1]]
    return [lax.mul_p.bind(*operands)]


_INFERRED_SHARDINGS = frozenset({"out_sharding", "sharding"})
"""Parameters that hold the sharding JAX inferred for a result (``broadcast_in_dim``'s, ``dot_general``'s)."""


def _unplaced(value: Any) -> Any:  # Any: a tracer, an array or a jaxpr Literal
    """A literal without the mesh it was traced on (a host array that carries a type: jax >= 0.10)."""
    aval = getattr(value, "aval", None)
    mesh = getattr(getattr(aval, "sharding", None), "mesh", None)
    if aval is None or mesh is None or mesh.empty or not hasattr(value, "val"):
        return value
    from jax._src import core

    return type(value)(value.val, core.ShapedArray(aval.shape, aval.dtype, weak_type=aval.weak_type))


def _on_mesh(value: object, mesh: "AbstractMesh") -> object:
    """A ``NamedSharding`` parameter moved to ``mesh`` (one with the same axes); anything else as is."""
    from jax.sharding import NamedSharding

    if isinstance(value, NamedSharding) and tuple(value.mesh.axis_names) == tuple(mesh.axis_names):
        return NamedSharding(mesh, value.spec)
    return value


def _pvary(eqn: "JaxprEqn", value: object) -> list:
    """``pvary`` of a value that may already vary over some of its axes: only the others are cast."""
    from jax._src import core

    varying = core.typeof(value).manual_axis_type.varying
    axes = tuple(a for a in eqn.params["axes"] if a not in varying)
    return [value] if not axes else bind(eqn, [value], {**eqn.params, "axes": axes})


def exception_text(exc: BaseException) -> str:
    """``ValueError: ...`` with the whole message on one line (its lines joined), without the
    notes JAX appends about its traceback: a reason cut at its first line stops mid-sentence."""
    lines = []
    for line in str(exc).strip().splitlines():
        if line.startswith("-----") or line.startswith("For simplicity, JAX has removed"):
            break
        if line.strip():
            lines.append(line.strip())
    text = " ".join(lines)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _where(eqn: "JaxprEqn") -> str:
    """``model.py:12 (loss)``: the user's line that made ``eqn`` (``an unknown line`` without one)."""
    from jax._src import source_info_util

    frame = next(iter(source_info_util.user_frames(eqn.source_info.traceback)), None)
    if frame is None:
        return "an unknown line"
    return f"{frame.file_name.rsplit('/', 1)[-1]}:{frame.start_line} ({frame.function_name})"


def _is_jaxpr(value: object) -> bool:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    return isinstance(value, (ClosedJaxpr, Jaxpr))
