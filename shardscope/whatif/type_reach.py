"""Which values of a traced program a deferral leaves unsummed, and whether that keeps its result.

Moving a sum out of its loop leaves its result unsummed (varying over the mesh axes, or
unreduced) where it was made; every value computed from it is unsummed too, up to the loop's
accumulator, which must then start unsummed, and the one sum after the loop. This follows
those values through a closed jaxpr before anything is traced again: which carries of which
loops start unsummed, which loop results the sum after the loop takes, and every place where
summing later would change the result (a "leak", said in words):

- an operation that is not linear in the value (``tanh`` of it, the product of two of them);
- a factor, branch index or selector that differs between the devices of the sum (varying
  over its axes, or sharded over them);
- another term added into the accumulator (``acc + psum(g) + w``): summed after the loop it
  would count once per device;
- the value kept per iteration by the loop it leaves (its stacked output), read by a while
  loop's condition, or reaching the program's outputs any other way than through the sum after
  the loop.

A value's mark is the set of mesh axes it is unsummed over; a reduction over those axes clears
them. Loops are followed to a fixed point of their carries' marks, and only the last pass's
leaks count (the first pass sees the accumulator unmarked, which is not yet the program).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeGuard, cast

from shardscope.engine.jaxpr.linear_rules import LINEAR
from shardscope.engine.jaxpr.model import qualify, scan_operand_groups
from shardscope.collective_kinds import SUMS
from shardscope.whatif.retrace import block_id_of

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr
    from jax.extend.core import Literal, Var
    from jax.extend.core import Jaxpr, JaxprEqn

Axes = frozenset[str]
_NONE: Axes = frozenset()

_SUMS = SUMS
ADDED_TERM = "something else is added into the accumulator"
_NOT_LINEAR_IN = {
    "div": "the loop divides by the sum's result",
    "select_n": "the loop chooses between values by the sum's result",
    "dynamic_slice": "the loop slices at offsets computed from the sum's result",
    "dynamic_update_slice": "the loop writes at offsets computed from the sum's result",
}
"""What it means when a linear primitive takes the unsummed value where it is not linear."""
_FACTOR_DIFFERS = {
    "select_n": "the loop chooses between values by a predicate that differs between the devices",
    "dynamic_slice": "the loop slices the sum's result at offsets that differ between the devices",
    "dynamic_update_slice": "the loop writes the sum's result at offsets that differ between the devices",
}
"""What it means when a factor, selector or offset differs between the devices."""
_OTHER_TERM = {
    "select_n": "the loop replaces the accumulator by another value in some iterations",
    "dynamic_update_slice": "the loop writes another value into the accumulator",
}
"""What it means when a term that is not the sum's is not zero (else: another term added in)."""
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
    ``leaks`` where summing later would change the result, in words."""

    carries: dict[str, tuple[Carry, ...]] = field(default_factory=dict)
    summed: dict[str, dict[int, Axes]] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)
    direct: set[str] = field(default_factory=set)  # leaks already in an iteration's own use of the sum

    @property
    def first_leak(self) -> str:
        """The leak that says most: the iteration's own non-linear use of the sum, then one the
        next iteration makes of it through the carry, then another term added in (an
        accumulator that is also read non-linearly shows all three; the read is the cause)."""
        if not self.leaks:
            return ""
        text = min(self.leaks, key=lambda t: (t.startswith(ADDED_TERM), t not in self.direct))
        if text in self.direct or text.startswith(ADDED_TERM) or not text.startswith("the loop "):
            return text
        return "through its carry, the next iteration " + text[len("the loop "):]


def type_reach(jaxpr: "Jaxpr", seeds: Mapping[str, Axes], sum_after: frozenset[str],
               split: Callable[[Any], Axes] | None = None) -> TypeReach:
    """Follow the change from ``seeds`` (equation id -> the axes its results are now unsummed
    over) through ``jaxpr``; the loops in ``sum_after`` sum their unsummed results again.
    ``split``: the mesh axes a variable is split over where its type does not say (a jit
    program with Auto axes read per device, :mod:`shardscope.whatif.per_device`): such a value
    differs between the devices, as a varying one does."""
    walker = _Walker(seeds, sum_after, split or _unsplit)
    outs = walker.block(jaxpr, [_NONE] * (len(jaxpr.constvars) + len(jaxpr.invars)), "")
    if any(outs):
        walker.result.leaks.append("the unsummed value reaches the program's outputs")
    return walker.result


class _Walker:
    def __init__(self, seeds: Mapping[str, Axes], sum_after: frozenset[str], split: Callable[[Any], Axes]) -> None:
        self.seeds = seeds
        self.sum_after = sum_after
        self.split = split
        self.result = TypeReach()

    def holds_seed(self, eqn_id: str) -> bool:
        """True when a seed sits inside ``eqn_id`` (a ``jax.checkpoint``'s body in a backward
        pass): its body is followed even when no operand is marked."""
        return any(s.startswith(eqn_id + "/") or s.startswith(eqn_id + ".") for s in self.seeds)

    def same_everywhere(self, atom: "Var | Literal", axes: Axes) -> bool:
        """True when ``atom`` is the same on every device of a sum over ``axes``."""
        return _same_everywhere(atom, axes) and (_is_literal(atom) or not axes & self.split(atom))

    def leak(self, text: str) -> None:
        if text not in self.result.leaks:
            self.result.leaks.append(text)

    def block(self, jaxpr: "Jaxpr", marks: list[Axes], block_id: str) -> list[Axes]:
        """The marks of ``jaxpr``'s outputs, given its inputs' (constvars first)."""
        env: dict[Any, Axes] = dict(zip(list(jaxpr.constvars) + list(jaxpr.invars), marks))
        producers: dict[Any, JaxprEqn] = {}
        counts: Counter[str] = Counter()
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            eqn_id = qualify(block_id, f"{name}_{counts[name]}")
            counts[name] += 1
            ins = [_NONE if _is_literal(v) else env.get(v, _NONE) for v in eqn.invars]
            outs = self.equation(eqn, eqn_id, ins, env, producers)
            for var, mark in zip(eqn.outvars, outs):
                env[var] = mark
                producers[var] = eqn
        return [_NONE if _is_literal(v) else env.get(v, _NONE) for v in jaxpr.outvars]

    def equation(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes], env: dict, producers: dict) -> list[Axes]:
        name = eqn.primitive.name
        n_out = len(eqn.outvars)
        if eqn_id in self.seeds:
            return [self.seeds[eqn_id] | _union(ins)] * n_out
        if name == "scan":
            outs = self._scan(eqn, eqn_id, ins, env, producers)
        elif name == "while":
            outs = self._while(eqn, eqn_id, ins, env, producers)
        elif name == "cond":
            outs = self._cond(eqn, eqn_id, ins)
        elif name == "shard_map":
            outs = self.block(_open(eqn.params["jaxpr"]), ins, block_id_of(eqn_id, "body"))
            if any(outs):
                self.leak("the unsummed value leaves the shard_map")
        elif not any(ins) and not self.holds_seed(eqn_id):
            outs = [_NONE] * n_out
        elif name in _SUMS:
            axes = frozenset(_axes(eqn))
            outs = [m - axes for m in ins][:n_out] if len(ins) == n_out else [_union(ins) - axes] * n_out
        elif _calls(eqn):
            sub = _open(_calls(eqn)[0])
            outs = self.block(sub, [_NONE] * len(sub.constvars) + ins, block_id_of(eqn_id, "body"))
        else:
            self._linear(eqn, ins, producers)
            outs = [_union(ins)] * n_out
        if eqn_id in self.sum_after:
            self.result.summed[eqn_id] = {k: m for k, m in enumerate(outs) if m}
            outs = [_NONE] * n_out
        return outs

    # ------------------------------------------------------------------ linearity

    def _linear(self, eqn: "JaxprEqn", ins: list[Axes], producers: dict) -> None:
        """Record a leak when ``eqn`` is not linear in its marked operands (the table of
        :mod:`shardscope.engine.jaxpr.linear_rules`, which the verdicts read too)."""
        name = eqn.primitive.name
        marked = [k for k, m in enumerate(ins) if m]
        axes = _union(ins)
        rule = LINEAR.get(name)
        count = len(eqn.invars)
        if rule is None:
            self.leak(f"the loop reads the sum's result with a {name}, which is not linear in it")
            return
        linear = rule.linear_in(count)
        if not set(marked) <= linear:
            self.leak(_NOT_LINEAR_IN.get(name, f"the loop reads the sum's result with a {name}, which is not linear in it"))
        elif not rule.adds and len(marked) > 1:
            self.leak(f"the loop multiplies the sum's result by another such value (a {name})")
        elif not all(self.same_everywhere(eqn.invars[k], axes) for m in marked for k in rule.factors(count, m)):
            self.leak(_FACTOR_DIFFERS.get(name, f"the loop scales the sum's result by a value that differs between the "
                                                f"devices (a {name})"))
        elif rule.adds and any(not ins[k] and not _is_zero(eqn.invars[k], producers) for k in sorted(linear)):
            self.leak(_OTHER_TERM.get(name, f"{ADDED_TERM} (a term that is not the sum's): summed over the devices after "
                                            "the loop, it would count once per device"))

    # ------------------------------------------------------------------ loops

    def _fixed_point(self, walk: Callable[[list[Axes]], list[Axes]], carry: list[Axes], n_carry: int) -> tuple[list[Axes], list[Axes]]:
        """Walk a loop body until its carries' marks settle; only the last walk's leaks stay (the
        first walk's non-linear uses are the iteration's own: marks only grow, so they stay)."""
        first = True
        while True:
            before = len(self.result.leaks)
            outs = walk(carry)
            if first:
                self.result.direct |= {t for t in self.result.leaks[before:] if not t.startswith(ADDED_TERM)}
                first = False
            grown = [c | o for c, o in zip(carry, outs[:n_carry])]
            if grown == carry:
                return carry, outs
            del self.result.leaks[before:]
            carry = grown

    def _scan(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes], env: dict, producers: dict) -> list[Axes]:
        groups = scan_operand_groups(eqn.params)
        if groups is None:
            self.leak("a scan whose operands shardscope cannot tell apart")
            return [_union(ins)] * len(eqn.outvars)
        n_consts, n_carry = groups
        body = eqn.params["jaxpr"]
        consts, xs = ins[:n_consts], ins[n_consts + n_carry:]
        inner = [_NONE] * len(body.jaxpr.constvars)
        carry, outs = self._fixed_point(
            lambda c: self.block(body.jaxpr, inner + consts + c + xs, block_id_of(eqn_id, "body")),
            ins[n_consts:n_consts + n_carry], n_carry)
        ys = outs[n_carry:]
        if any(ys) and eqn_id in self.sum_after:
            # an inner loop may stack it (each layer's gradient in a scan over layers), if the
            # stack then goes into the accumulator; the loop it leaves may not
            self.leak("the loop keeps every iteration's unsummed value in its stacked output")
        self._record(eqn_id, carry, ins[n_consts:n_consts + n_carry], eqn.invars[n_consts:n_consts + n_carry], producers)
        return carry + ys

    def _while(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes], env: dict, producers: dict) -> list[Axes]:
        n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond, body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
        cond_consts, body_consts = ins[:n_cond], ins[n_cond:n_cond + n_body]
        init = ins[n_cond + n_body:]
        carry, _ = self._fixed_point(
            lambda c: self.block(body.jaxpr, [_NONE] * len(body.jaxpr.constvars) + body_consts + c,
                                 block_id_of(eqn_id, "body")), init, len(init))
        test = self.block(cond.jaxpr, [_NONE] * len(cond.jaxpr.constvars) + cond_consts + carry,
                          block_id_of(eqn_id, "cond"))
        if any(test):
            self.leak("the while loop's condition reads the unsummed value")
        self._record(eqn_id, carry, init, eqn.invars[n_cond + n_body:], producers)
        return carry

    def _cond(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Axes]) -> list[Axes]:
        if ins[0]:
            self.leak("a branch index is computed from the unsummed value")
        elif any(ins[1:]) and not self.same_everywhere(eqn.invars[0], _union(ins[1:])):
            self.leak("a lax.cond whose branch differs between the devices takes the unsummed value")
        outs = [_NONE] * len(eqn.outvars)
        for k, branch in enumerate(eqn.params["branches"]):
            found = self.block(branch.jaxpr, [_NONE] * len(branch.jaxpr.constvars) + ins[1:],
                               block_id_of(eqn_id, f"branch{k}"))
            outs = [a | b for a, b in zip(outs, found)]
        return outs

    def _record(self, eqn_id: str, carry: list[Axes], init: list[Axes], atoms: list, producers: dict) -> None:
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


def _unsplit(atom: object) -> Axes:
    return _NONE


def _axes(eqn: "JaxprEqn") -> tuple[str, ...]:
    raw = eqn.params.get("axes", eqn.params.get("axis_name", ()))
    return tuple(raw) if isinstance(raw, (tuple, list, set, frozenset)) else (raw,)


def _same_everywhere(atom: Var | Literal, axes: Axes) -> bool:
    """True when ``atom`` is the same on every device of a sum over ``axes``: a literal, or a
    value neither varying over them (``shard_map``) nor sharded or unreduced over them."""
    if _is_literal(atom):
        return True
    aval = atom.aval
    mat = getattr(aval, "manual_axis_type", None)
    if axes & frozenset(getattr(mat, "varying", ()) or ()):
        return False
    spec = getattr(getattr(aval, "sharding", None), "spec", None)
    if spec is None:
        return True
    named: set[str] = set(getattr(spec, "unreduced", ()) or ())
    for entry in tuple(spec.partitions):
        if entry is not None:
            named |= set(entry) if isinstance(entry, (tuple, list)) else {entry}
    return not (axes & named)


def _calls(eqn: "JaxprEqn") -> list:
    """The one sub-jaxpr of a call whose inputs are its operands (``pjit``, ``custom_jvp_call``...)."""
    subs = [v for v in eqn.params.values() if _is_jaxpr(v)]
    return subs if len(subs) == 1 and len(_open(subs[0]).invars) == len(eqn.invars) else []


def _is_zero(atom: Var | Literal, producers: dict) -> bool:
    """True when ``atom`` is zeros made from a literal zero (``jnp.zeros_like``: a broadcast of 0.0)."""
    for _ in range(16):
        if _is_literal(atom):
            import numpy as np

            try:
                return bool(np.all(np.asarray(atom.val) == 0))
            except (TypeError, ValueError):
                return False
        eqn = producers.get(atom)
        if eqn is None or eqn.primitive.name not in _ZERO_MAKERS or not eqn.invars:
            return False
        atom = eqn.invars[0]
    return False


def _is_literal(atom: object) -> TypeGuard[Literal]:
    from jax.extend.core import Literal

    return isinstance(atom, Literal)


def _is_jaxpr(value: object) -> bool:
    from jax.extend.core import ClosedJaxpr, Jaxpr

    return isinstance(value, (ClosedJaxpr, Jaxpr))


def _open(jaxpr: ClosedJaxpr | Jaxpr) -> Jaxpr:
    return cast("Jaxpr", getattr(jaxpr, "jaxpr", jaxpr))  # a ClosedJaxpr's, or the Jaxpr given
