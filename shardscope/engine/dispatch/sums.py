"""Which results of a dispatched module the step only sums across its calls, and which of the
module's reductions reach those results.

A sum over devices commutes with a sum over calls: when the step adds up one result of N calls
of the same module (``acc = acc + grad_fn(w, x)`` in a Python loop over micro-batches) and
nothing else reads the calls' results, an all-reduce that the module applies to that result
can run once, on the sum, instead of once per call. :func:`summed_results` reads the step's
top-level jaxpr for such sums (chains of eager ``add``s, the tree of a pytree's leaves each
its own chain, or a ``jnp.stack`` of the results summed over its axis); :func:`reduced_outputs` reads a compiled module for the results a summing
all-reduce reaches through operations that keep it a sum (copies, reshapes, scaling by a
value that is not itself reduced).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from shardscope.engine.hlo.sites import CollectiveSite
from shardscope.collective_kinds import ALL_REDUCE_DONE
from shardscope.engine.hlo.flow import FORWARDING, Flow
from shardscope.engine.hlo.text import HloModule, Instruction

if TYPE_CHECKING:
    from jax.extend.core import Jaxpr, JaxprEqn, Var

__all__ = ["ADDS", "is_sum", "reduced_outputs", "summed_results"]

ADDS = frozenset({"add", "add_any"})
"""The eager operations that accumulate results across calls."""

_KEEPS_SUM = FORWARDING | {"get-tuple-element", "negate", "add", "subtract", ALL_REDUCE_DONE, "async-done",
                           "copy-start", "copy-done"}
"""Opcodes through which a result stays affine in the sum (element for element): adding another
value (a tied weight's second gradient) keeps the reduction deferrable, the other part summed beside it."""

_SCALES = frozenset({"multiply", "divide"})
"""Opcodes that keep a sum a sum when the other operand is not the sum itself (a mean's 1/N)."""


def summed_results(jaxpr: "Jaxpr", function_of: dict[int, str]) -> dict[tuple[str, int], int]:
    """``{(function, result): calls summed}``: each result of a function that the step only adds
    up across at least two of its calls (the most calls one sum adds), whatever module each call
    runs (a last micro-batch of another size is another module of the same function).

    ``function_of`` maps each top-level equation that calls a module to its function. A
    result counts when its one use is an ``add`` whose result is used by nothing but the next
    ``add`` of the same chain (or is what the chain ends in): an accumulator.
    """
    from jax.extend.core import Literal  # the engine's modules import JAX where they use it

    users: dict["Var", list[int]] = defaultdict(list)
    for k, eqn in enumerate(jaxpr.eqns):
        for var in eqn.invars:
            if not isinstance(var, Literal):
                users[var].append(k)
    outputs = {v for v in jaxpr.outvars if not isinstance(v, Literal)}

    def chain_end(k: int) -> int:
        """The last add of the accumulator chain the add ``k`` is part of."""
        seen = {k}
        while True:
            out = jaxpr.eqns[k].outvars[0]
            nxt = users.get(out, [])
            if out in outputs or len(nxt) != 1 or jaxpr.eqns[nxt[0]].primitive.name not in ADDS or nxt[0] in seen:
                return k
            k = nxt[0]
            seen.add(k)

    def scaled(var: "Var") -> "Var":
        """``var``, or what it becomes through eager scalings by a constant (``jnp.mean``'s
        division by the count): each keeps a sum over calls a sum."""
        for _ in range(len(jaxpr.eqns)):
            use = users.get(var, [])
            if var in outputs or len(use) != 1 or not _scales_by_a_constant(jaxpr.eqns[use[0]], var):
                return var
            var = jaxpr.eqns[use[0]].outvars[0]
        return var

    def summed_stack(k: int) -> bool:
        """True when the stack (or concatenation) ``k`` is only summed over the axis it stacks
        along (``jnp.stack(losses).mean()``): a sum of its operands, each its own part."""
        eqn = jaxpr.eqns[k]
        axis = dict(eqn.params).get("axis", dict(eqn.params).get("dimension"))
        var = scaled(eqn.outvars[0])
        use = users.get(var, [])
        if var in outputs or len(use) != 1 or not isinstance(axis, int):
            return False
        total = jaxpr.eqns[use[0]]
        return total.primitive.name == "reduce_sum" and axis in tuple(dict(total.params).get("axes", ()))

    parts: dict[int, dict[tuple[str, int], int]] = defaultdict(lambda: defaultdict(int))
    for k, function in function_of.items():
        for index, made in enumerate(jaxpr.eqns[k].outvars):
            var = scaled(made)
            use = users.get(var, [])
            if var in outputs or len(use) != 1:
                continue
            if jaxpr.eqns[use[0]].primitive.name in _STACKS and summed_stack(use[0]):
                parts[use[0]][(function, index)] += 1
            elif jaxpr.eqns[use[0]].primitive.name in ADDS:
                parts[chain_end(use[0])][(function, index)] += 1
    summed: dict[tuple[str, int], int] = {}
    for chain in parts.values():
        for result, calls in chain.items():
            if calls >= 2:
                summed[result] = max(summed.get(result, 0), calls)
    return summed


_STACKS = frozenset({"stack", "concatenate"})
"""Eager operations that gather the calls' results into one array, which a ``reduce_sum`` over
that axis then adds up (``jnp.stack(losses).mean()``)."""

_EAGER_SCALES = frozenset({"mul", "div", "convert_element_type"})
"""Eager operations between a call's result and the add that accumulates it that keep the sum a
sum when their other operand is a constant (``jnp.mean``: a ``reduce_sum``, then a ``div``)."""


def _scales_by_a_constant(eqn: "JaxprEqn", var: "Var") -> bool:
    """True when ``eqn`` multiplies ``var`` by a literal, divides it by one, or converts it."""
    from jax.extend.core import Literal

    if eqn.primitive.name not in _EAGER_SCALES or len(eqn.outvars) != 1:
        return False
    others = [v for k, v in enumerate(eqn.invars) if not (v is var and (k == 0 or eqn.primitive.name == "mul"))]
    return len(others) == len(eqn.invars) - 1 and all(isinstance(v, Literal) for v in others)


def is_sum(module: HloModule, inst: Instruction) -> bool:
    """True for an all-reduce (or its ``-start``) whose combiner adds."""
    combiner = module.computations.get((inst.attribute("to_apply") or "").lstrip("%"))
    root = combiner.root if combiner is not None else None
    return root is not None and root.opcode == "add"


def reduced_outputs(module: HloModule, site: CollectiveSite) -> frozenset[int] | None:
    """The entry's results the collective at ``site`` reaches as a sum, or None when its value
    goes anywhere else on the way (combined with itself, into a loop, compared)."""
    flow = Flow(module)
    entry = module.entry
    if entry is None:
        return None
    root = entry.root
    reached: set[int] = set()
    visited: set[str] = {site.result.name}
    frontier = [site.result]
    while frontier:
        inst = frontier.pop()
        if _outermost(flow, inst) is root:  # the entry's one result (a fused root counts as its fusion)
            reached.add(0)
            continue
        for user, position in flow.uses(inst):
            if user is root and user.opcode == "tuple":
                reached.add(position)
                continue
            if user.opcode in _SCALES and not _scaled_by_itself(user, visited):
                pass
            elif user.opcode not in _KEEPS_SUM:
                return None
            if user.name not in visited:
                visited.add(user.name)
                frontier.append(user)
    return frozenset(reached)


def _outermost(flow: Flow, inst: Instruction) -> Instruction:
    """``inst``, or the fusion (or call) whose result it is, as far out as that goes."""
    while True:
        caller = flow.inlined_by.get(inst.computation)
        if caller is None or inst is not flow.computation(inst).root:
            return inst
        inst = caller


def _scaled_by_itself(user: Instruction, visited: set[str]) -> bool:
    """True when both operands of a multiply or divide come from the walked sum (a square)."""
    return sum(operand in visited for operand in user.operands) > 1
