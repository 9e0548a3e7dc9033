"""Move a loop-invariant collective before its loop: run it once and keep its result.

A collective whose operands do not change inside a loop moves the same data on every
iteration. The rewrite computes its operands before the loop from the loop's own operands
(the equations inside that make them come along), runs the collective there once, and the
loop reads the result instead: what a user writes as ``w = lax.all_gather(w_shard, 'data',
tiled=True)`` before the ``lax.scan``. The result then stays alive for the whole loop: its
per-device bytes are the rewrite's memory cost.

The collective may sit deeper than the loop's body (in a ``lax.cond`` branch, an inner loop):
its operands are followed out through the blocks around it (a branch's input is the cond's
operand, an inner loop's constant its operand) to the loop's constants. A value that comes
from a carry or from ``xs`` is not invariant: the rewrite is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, Callable

from shardscope.engine.jaxpr.model import scan_operand_groups, sub_jaxprs
from shardscope.whatif.deferral import EquationIndex, Refused, block_of, Unsupported
from shardscope.whatif.retrace import Edits, Retracer, block_id_of, equation_ids

if TYPE_CHECKING:
    from jax.extend.core import Literal, Var
    from jax.extend.core import Jaxpr, JaxprEqn


@dataclass(frozen=True)
class Hoist:
    """Collectives (by equation id) moved before the loop ``loop``; ``memory_bytes`` is what
    their results keep alive through the loop, per device."""

    collectives: tuple[str, ...]
    loop: str
    memory_bytes: int

    def edits(self, index: EquationIndex) -> Edits:
        """The :class:`Edits` that make this rewrite. They hold the values hoisted while one
        trace runs: the loop's hook computes them before the loop, the collectives inside read
        them (the loop's body closes over them, so JAX makes them its constants)."""
        blocks = _Blocks(index)
        hoisted: dict[str, list] = {}

        def before(eqn: "JaxprEqn", invals: list) -> list:
            outside = _Outside(blocks, self.loop, invals)
            for c in self.collectives:
                hoisted[c] = outside.results(c)
            return invals

        def read_hoisted(c: str) -> Callable[["JaxprEqn", list], list]:
            return lambda eqn, invals: hoisted[c]

        return Edits(replace={c: read_hoisted(c) for c in self.collectives}, before={self.loop: before})


def plan_hoist(index: EquationIndex, collectives: tuple[str, ...], loop: str) -> Hoist:
    """The :class:`Hoist` of ``collectives`` out of ``loop``; raises :class:`Refused` when an
    operand changes inside the loop."""
    blocks = _Blocks(index)
    for c in collectives:
        if not (c.startswith(loop + "/") or c.startswith(loop + ".")):
            raise Unsupported("the collective is not inside the loop it would leave.")
        for var in index.equation(c).invars:
            reason = blocks.invariant(block_of(c), var, loop)
            if reason:
                raise Refused(reason)
    cost = sum(_nbytes(v.aval) for c in collectives for v in index.equation(c).outvars)
    return Hoist(tuple(collectives), loop, cost)


def _nbytes(aval: Any) -> int:  # Any: jax types an eqn's aval AbstractValue; these are arrays
    import numpy as np

    return int(prod(aval.shape)) * np.dtype(aval.dtype).itemsize


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class _Block:
    """One block: its jaxpr, the equation that owns it and its role there, and who makes each value."""

    jaxpr: "Jaxpr"
    owner: str
    role: str
    producers: dict


class _Blocks:
    """Every block of a program by id, as :mod:`shardscope.engine.jaxpr.model` names them."""

    def __init__(self, index: EquationIndex) -> None:
        self.index = index
        self.blocks: dict[str, _Block] = {}
        self._add(index.jaxpr, "", "", "program")

    def _add(self, jaxpr: "Jaxpr", block_id: str, owner: str, role: str) -> None:
        producers = {}
        for eqn, eqn_id in zip(jaxpr.eqns, equation_ids(jaxpr, block_id)):
            for k, var in enumerate(eqn.outvars):
                producers[var] = (eqn, eqn_id, k)
            for sub_role, sub in sub_jaxprs(eqn):
                self._add(sub, block_id_of(eqn_id, sub_role), eqn_id, sub_role)
        self.blocks[block_id] = _Block(jaxpr, owner, role, producers)

    def operand_position(self, block_id: str, var: Var) -> int:
        """Which operand of the equation owning ``block_id`` its input ``var`` receives."""
        block = self.blocks[block_id]
        eqn = self.index.equation(block.owner)
        k = list(block.jaxpr.invars).index(var)
        if eqn.primitive.name == "while":
            return k + (eqn.params["cond_nconsts"] if block.role == "body" else 0)
        if eqn.primitive.name == "cond":
            return k + 1
        return k

    def operand_of(self, block_id: str, var: Var, loop: str) -> tuple[str, Var | Literal] | str:
        """The value outside ``block_id`` that its input ``var`` receives, as ``(block id,
        var)``; or why it changes inside ``loop`` (a carry or ``xs`` of a loop)."""
        block = self.blocks[block_id]
        eqn = self.index.equation(block.owner)
        outer = block_of(block.owner)
        position = list(block.jaxpr.constvars).index(var) if var in block.jaxpr.constvars else None
        if position is not None:
            return "a constant of the jaxpr"  # closed-over constants are not operands
        k = list(block.jaxpr.invars).index(var)
        name = eqn.primitive.name
        if name == "scan":
            consts, _ = scan_operand_groups(eqn.params) or (0, 0)
            if k >= consts:
                return f"it changes inside {'the loop' if block.owner == loop else 'an inner loop'} (a carry or xs)"
            return outer, eqn.invars[k]
        if name == "while":
            nconsts = eqn.params["body_nconsts"] if block.role == "body" else eqn.params["cond_nconsts"]
            if k >= nconsts:
                return "it changes inside the loop (a carry of a while loop)"
            offset = eqn.params["cond_nconsts"] if block.role == "body" else 0
            return outer, eqn.invars[offset + k]
        if name == "cond":
            return outer, eqn.invars[k + 1]
        if name == "shard_map":
            return "it comes into a shard_map inside the loop"
        return outer, eqn.invars[k]

    def invariant(self, block_id: str, var: Var | Literal, loop: str) -> str:
        """Why ``var`` (in ``block_id``, inside ``loop``) changes inside ``loop`` ("" when it does not)."""
        from jax.extend.core import Literal

        if isinstance(var, Literal):
            return ""
        block = self.blocks[block_id]
        if var in block.producers:
            eqn, eqn_id, _ = block.producers[var]
            if eqn.effects:
                return f"it is made by a {eqn.primitive.name} with side effects"
            reasons = [self.invariant(block_id, v, loop) for v in eqn.invars]
            return next((r for r in reasons if r), "")
        if block_id == loop:
            operand = self.operand_of(block_id, var, loop)
            return operand if isinstance(operand, str) else ""
        operand = self.operand_of(block_id, var, loop)
        if isinstance(operand, str):
            return operand
        return self.invariant(operand[0], operand[1], loop)


class _Outside:
    """Evaluates invariant values of a loop before it, from the loop's own operands."""

    def __init__(self, blocks: _Blocks, loop: str, operands: list) -> None:
        self.blocks = blocks
        self.loop = loop
        self.operands = operands
        self.retracer = Retracer(Edits())  # the equations it evaluates are not edited
        self.values: dict[tuple[str, Var | Literal], object] = {}

    def results(self, collective: str) -> list:
        """The collective's results, computed before the loop."""
        eqn = self.blocks.index.equation(collective)
        block_id = block_of(collective)
        invals = [self.value(block_id, v) for v in eqn.invars]
        return self.retracer.equation(eqn, collective, invals)

    def value(self, block_id: str, var: Var | Literal) -> object:  # a constant's, an array's or a tracer's
        from jax.extend.core import Literal

        if isinstance(var, Literal):
            return var.val
        key = (block_id, var)
        if key not in self.values:
            self.values[key] = self._value(block_id, var)
        return self.values[key]

    def _value(self, block_id: str, var: Var) -> object:
        block = self.blocks.blocks[block_id]
        if var in block.producers:
            eqn, eqn_id, k = block.producers[var]
            outs = self.retracer.equation(eqn, eqn_id, [self.value(block_id, v) for v in eqn.invars])
            for j, out_var in enumerate(eqn.outvars):
                self.values[(block_id, out_var)] = outs[j]
            return outs[k]
        if block_id == self.loop:
            return self.operands[self.blocks.operand_position(block_id, var)]
        operand = self.blocks.operand_of(block_id, var, self.loop)
        assert not isinstance(operand, str), operand
        return self.value(*operand)
