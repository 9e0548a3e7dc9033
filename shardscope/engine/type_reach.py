"""Which values of a traced program a rewrite changes the type of, and where the change ends.

Moving a sum out of its loop leaves its result unsummed (varying over the mesh axes, or
unreduced) where it was made; every value computed from it is unsummed too, up to the loop's
accumulator, which must then start unsummed, and the one sum after the loop. This follows
those values through a closed jaxpr, as JAX's own typing would, before anything is traced
again: which carries of which loops must start unsummed, which loop results the sum after the
loop takes, and where the change would leak (a loop's stacked output, a condition or a branch
index, the program's outputs), which the rewrite refuses.

A value's mark is the set of mesh axes it is unsummed over. Reductions over those axes clear
them (a ``psum_invariant`` of a varying value is summed again); every other equation passes
the union of its operands' marks to all its results (at least as far as JAX would: a wrong
"unchanged" would make the traced-again loop fail, never compute something else).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from shardscope.engine.jaxpr_model import _scan_groups, qualify
from shardscope.engine.retrace import block_id_of

if TYPE_CHECKING:
    from jax.extend.core import Jaxpr, JaxprEqn

Axes = frozenset[str]
_NONE: Axes = frozenset()

_SUMS = frozenset({"psum", "psum_invariant", "unreduced_psum", "reduce_scatter", "psum_scatter",
                   "unreduced_reduce_scatter"})
_ZERO_MAKERS = frozenset({"broadcast_in_dim", "convert_element_type", "reshape", "pvary", "pcast", "copy", "copy_p",
                          "reshard", "sharding_constraint", "transpose", "squeeze", "expand_dims"})


@dataclass(frozen=True)
class Carry:
    """A loop carry the change reaches: its position among the carries, the axes it is
    unsummed over, and how the loop starts it (``zero``, ``unsummed``: from a value that is
    itself unsummed, or ``other``)."""

    index: int
    axes: Axes
    start: str


@dataclass
class TypeReach:
    """Where the change goes: ``carries[loop id]`` are the carries that must start unsummed,
    ``summed[loop id]`` the results the sum after that loop takes (by result position),
    ``leaks`` where it goes that the rewrite cannot follow, in words."""

    carries: dict[str, tuple[Carry, ...]] = field(default_factory=dict)
    summed: dict[str, dict[int, Axes]] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)
    reached: set[str] = field(default_factory=set)  # the ids of every equation a changed value enters


def type_reach(jaxpr: "Jaxpr", seeds: Mapping[str, Axes], sum_after: frozenset[str]) -> TypeReach:
    """Follow the change from ``seeds`` (equation id -> the axes its results are now unsummed
    over) through ``jaxpr``; the loops in ``sum_after`` sum their unsummed results again."""
    walker = _Walker(seeds, sum_after)
    outs = walker.block(jaxpr, [_NONE] * (len(jaxpr.constvars) + len(jaxpr.invars)), "")
    if any(outs):
        walker.result.leaks.append("the unsummed value reaches the program's outputs")
    return walker.result


class _Walker:
    def __init__(self, seeds: Mapping[str, Axes], sum_after: frozenset[str]) -> None:
        self.seeds = seeds
        self.sum_after = sum_after
        self.result = TypeReach()

    def block(self, jaxpr: "Jaxpr", marks: list[Axes], block_id: str) -> list[Axes]:
        """The marks of ``jaxpr``'s outputs, given its inputs' (constvars first)."""
        env: dict[Any, Axes] = dict(zip(list(jaxpr.constvars) + list(jaxpr.invars), marks))
        producers: dict[Any, JaxprEqn] = {}
        counts: Counter[str] = Counter()
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            eqn_id = qualify(block_id, f"{name}_{counts[name]}")
            counts[name] += 1
            ins = [env.get(v, _NONE) if not _is_literal(v) else _NONE for v in eqn.invars]
            if any(ins):
                self.result.reached.add(eqn_id)
            outs = self.equation(eqn, eqn_id, ins, env, producers)
            for var, mark in zip(eqn.outvars, outs):
                env[var] = mark
                producers[var] = eqn
        return [env.get(v, _NONE) if not _is_literal(v) else _NONE for v in jaxpr.outvars]

    def equation(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes], env: dict, producers: dict) -> list[Axes]:
        name = eqn.primitive.name
        n_out = len(eqn.outvars)
        if eqn_id in self.seeds:
            seed = self.seeds[eqn_id]
            return [seed | _union(ins)] * n_out
        if name == "scan":
            outs = self._scan(eqn, eqn_id, ins, env, producers)
        elif name == "while":
            outs = self._while(eqn, eqn_id, ins, env, producers)
        elif name == "cond":
            outs = self._cond(eqn, eqn_id, ins)
        elif name == "shard_map":
            outs = self.block(_open(eqn.params["jaxpr"]), ins, block_id_of(eqn_id, "body"))
            if any(outs):
                self.result.leaks.append("the unsummed value leaves the shard_map")
        elif name in _SUMS:
            axes = frozenset(_axes(eqn))
            outs = [m - axes for m in ins][:n_out] if len(ins) == n_out else [_union(ins) - axes] * n_out
        else:
            subs = [v for v in eqn.params.values() if _is_jaxpr(v)]
            if len(subs) == 1 and len(_open(subs[0]).invars) == len(ins):
                outs = self.block(_open(subs[0]), [_NONE] * len(_open(subs[0]).constvars) + ins,
                                  block_id_of(eqn_id, "body"))
            else:
                outs = [_union(ins)] * n_out
        if eqn_id in self.sum_after:
            self.result.summed[eqn_id] = {k: m for k, m in enumerate(outs) if m}
            outs = [_NONE] * n_out
        return outs

    # ------------------------------------------------------------------ loops

    def _scan(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes], env: dict, producers: dict) -> list[Axes]:
        groups = _scan_groups(eqn.params)
        if groups is None:
            self.result.leaks.append("a scan whose operands shardscope cannot tell apart")
            return [_union(ins)] * len(eqn.outvars)
        n_consts, n_carry = groups
        body = eqn.params["jaxpr"]
        consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
        inner = [_NONE] * len(body.jaxpr.constvars)
        while True:
            outs = self.block(body.jaxpr, inner + consts + carry + xs, block_id_of(eqn_id, "body"))
            grown = [c | o for c, o in zip(carry, outs[:n_carry])]
            if grown == carry:
                break
            carry = grown
        ys = outs[n_carry:]
        if any(ys):
            self.result.leaks.append("the unsummed value is stacked into a scan's output (every iteration's is kept)")
        self._record(eqn, eqn_id, carry, ins[n_consts:n_consts + n_carry], eqn.invars[n_consts:n_consts + n_carry],
                     env, producers)
        return carry + ys

    def _while(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes], env: dict, producers: dict) -> list[Axes]:
        n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond, body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
        cond_consts, body_consts, carry = ins[:n_cond], ins[n_cond:n_cond + n_body], ins[n_cond + n_body:]
        while True:
            outs = self.block(body.jaxpr, [_NONE] * len(body.jaxpr.constvars) + body_consts + carry,
                              block_id_of(eqn_id, "body"))
            grown = [c | o for c, o in zip(carry, outs)]
            if grown == carry:
                break
            carry = grown
        test = self.block(cond.jaxpr, [_NONE] * len(cond.jaxpr.constvars) + cond_consts + carry,
                          block_id_of(eqn_id, "cond"))
        if any(test):
            self.result.leaks.append("the while loop's condition reads the unsummed value")
        self._record(eqn, eqn_id, carry, ins[n_cond + n_body:], eqn.invars[n_cond + n_body:], env, producers)
        return carry

    def _cond(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes]) -> list[Axes]:
        if ins[0]:
            self.result.leaks.append("a branch index is computed from the unsummed value")
        outs = [_NONE] * len(eqn.outvars)
        for k, branch in enumerate(eqn.params["branches"]):
            found = self.block(branch.jaxpr, [_NONE] * len(branch.jaxpr.constvars) + ins[1:],
                               block_id_of(eqn_id, f"branch{k}"))
            outs = [a | b for a, b in zip(outs, found)]
        return outs

    def _record(self, eqn: "JaxprEqn", eqn_id: str, carry: list[Axes], init: list[Axes], atoms: list,
                env: dict, producers: dict) -> None:
        """The carries of a loop that must start unsummed, and how the program starts them."""
        found = []
        for k, (axes, start_mark, atom) in enumerate(zip(carry, init, atoms)):
            if not axes:
                continue
            start = "unsummed" if start_mark >= axes else ("zero" if _is_zero(atom, producers) else "other")
            found.append(Carry(k, axes, start))
        if found:
            self.result.carries[eqn_id] = tuple(found)


# --------------------------------------------------------------------------- helpers


def _union(marks: list[Axes]) -> Axes:
    return frozenset().union(*marks) if marks else _NONE


def _axes(eqn: "JaxprEqn") -> tuple[str, ...]:
    raw = eqn.params.get("axes", eqn.params.get("axis_name", ()))
    return tuple(raw) if isinstance(raw, (tuple, list, set, frozenset)) else (raw,)


def _is_zero(atom: Any, producers: dict) -> bool:
    """True when ``atom`` is zeros made from a literal zero (``jnp.zeros_like``: a broadcast of 0.0)."""
    for _ in range(16):
        if _is_literal(atom):
            try:
                import numpy as np

                return bool(np.all(np.asarray(atom.val) == 0))
            except (TypeError, ValueError):
                return False
        eqn = producers.get(atom)
        if eqn is None or eqn.primitive.name not in _ZERO_MAKERS or not eqn.invars:
            return False
        atom = eqn.invars[0]
    return False


def _is_literal(atom: Any) -> bool:
    from jax.extend.core import Literal

    return isinstance(atom, Literal)


def _is_jaxpr(value: Any) -> bool:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    return isinstance(value, (ClosedJaxpr, Jaxpr))


def _open(jaxpr: Any) -> Any:
    return getattr(jaxpr, "jaxpr", jaxpr)
