"""A jit program read as each device runs it: which dimensions of every value are split over
which mesh axes, and where the program sums over devices.

Under ``jax.jit`` a program is written for the whole arrays and the partitioner decides what
each device holds and where it must sum. Inside ``jax.shard_map`` each device runs the same
program on its own block. :func:`per_device` follows a jit program's jaxpr from the shardings
its compiled program takes its arguments in (the batch split over ``data``, the parameters
whole) and says, equation by equation, how the program runs on blocks (a :class:`Step`):

- which dimensions of each result are split (a ``tanh`` of the rows of a batch is split as
  they are; a ``broadcast_in_dim`` or a ``reshape`` carries the split to the dimension that
  holds it, with the local sizes in its parameters);
- which operands must first be cut to the device's block (a whole value added to a split one)
  or gathered whole;
- which results are partial sums over devices: a ``reduce_sum`` over a split dimension, a
  ``dot_general`` that contracts one (the gradient of a replicated weight over a batch split
  over ``data``): the sums the partitioner writes, which the program as each device runs it
  must write itself (or defer: each device accumulates its own part, one ``psum`` after the
  loop); a ``reduce_max`` over a split dimension is a ``pmax``.

Sums keep their meaning: a mean is a ``reduce_sum`` divided by the whole batch's count (a
literal of the jaxpr), so each device's part of it, summed over the devices, is the mean.

A ``reshape`` that splits a dimension split over devices (``[B] -> [MICRO, B/MICRO]``) is
written as a user writes it inside ``shard_map`` (``x.reshape(MICRO, -1, ...)`` on each device's
rows): the split goes to the innermost part that the devices divide, so every device runs every
micro-batch on its own rows. The rows a micro-batch holds then differ from the original's; a
sum over all micro-batches of a loss that is a sum over rows does not change, and the rewrite's
output check says whether it did. Anything this does not know how to split raises
:class:`~shardscope.whatif.deferral.Unsupported` with the equation's line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from shardscope.engine.jaxpr.model import open_jaxpr, scan_operand_groups
from shardscope.whatif.retrace import CALLS, block_id_of, equation_ids
from shardscope.whatif.split_rules import (ELEMENTWISE, RULES, WHOLE, Axes, Layout, NotSplit, Step, axes_text, converted,
                                           elementwise, is_split, is_zeros, join, not_split, whole)

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var
    from jax.sharding import PartitionSpec

__all__ = ["PerDevice", "per_device", "spec_of_layout"]


@dataclass
class PerDevice:
    """A program as each device runs it: every equation's :class:`Step` by id (as
    :mod:`shardscope.engine.jaxpr.model` names them), the layouts of its inputs and outputs,
    and the sizes of the mesh axes."""

    steps: dict[str, Step]
    inputs: tuple[Layout, ...]
    outputs: tuple[Layout, ...]
    sizes: Mapping[str, int]
    split_vars: dict["Var", Axes] = field(default_factory=dict)

    def split(self, var: "Var") -> Axes:
        """The mesh axes ``var`` is split over somewhere in the program (where a jaxpr is called
        from several places, over any of them): its value differs between those devices."""
        return self.split_vars.get(var, WHOLE)

    def sums(self) -> dict[str, Axes]:
        """The equations whose results are each device's part of a sum over devices: ``{id: axes}``."""
        return {eqn_id: s.summed for eqn_id, s in self.steps.items() if s.summed and s.combiner == "add"}


def per_device(closed: "ClosedJaxpr", inputs: Sequence[Layout], sizes: Mapping[str, int]) -> PerDevice:
    """The :class:`PerDevice` reading of ``closed`` whose flat inputs come split as ``inputs``
    say, on a mesh of axes of ``sizes``; raises :class:`Unsupported` with the line of what it
    cannot split."""
    walker = _Walker(sizes)
    consts = [whole(v.aval) for v in closed.jaxpr.constvars]
    outs = walker.block(closed.jaxpr, consts + list(inputs), "")
    return PerDevice(walker.steps, tuple(inputs), tuple(outs), dict(sizes), walker.split_vars)


def spec_of_layout(layout: Layout, order: Iterable[str]) -> "PartitionSpec":
    """The ``PartitionSpec`` of a layout; the axes of one dimension in ``order`` (the mesh's)."""
    from jax.sharding import PartitionSpec

    entries: list = []
    for axes in layout:
        named = tuple(a for a in order if a in axes)
        entries.append(None if not named else (named[0] if len(named) == 1 else named))
    while entries and entries[-1] is None:
        entries.pop()
    return PartitionSpec(*entries)


# --------------------------------------------------------------------------- the walk


class _Walker:
    def __init__(self, sizes: Mapping[str, int]) -> None:
        self.sizes = sizes
        self.steps: dict[str, Step] = {}
        self.split_vars: dict[Var, Axes] = {}
        self.zeros: set[Var] = set()  # values broadcast from a literal zero (a scatter-add's start)

    def block(self, jaxpr: "Jaxpr", layouts: list[Layout], block_id: str) -> list[Layout]:
        """The layouts of ``jaxpr``'s outputs from its inputs' (constvars first)."""
        from jax.extend.core import Literal

        env: dict[Var, Layout] = {}

        def write(var: "Var", layout: Layout) -> None:
            env[var] = layout
            self.split_vars[var] = self.split_vars.get(var, WHOLE).union(*layout)

        def read(atom: "Var | Literal") -> Layout:
            return whole(atom.aval) if isinstance(atom, Literal) else env[atom]

        for var, layout in zip(list(jaxpr.constvars) + list(jaxpr.invars), layouts, strict=True):
            write(var, layout)
        for eqn, eqn_id in zip(jaxpr.eqns, equation_ids(jaxpr, block_id)):
            step = self.equation(eqn, eqn_id, [read(v) for v in eqn.invars])
            self.steps[eqn_id] = step
            if is_zeros(eqn):
                self.zeros.add(eqn.outvars[0])
            for var, layout in zip(eqn.outvars, step.results, strict=True):
                write(var, layout)
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        name = eqn.primitive.name
        if name == "scan":
            return self._scan(eqn, eqn_id, ins)
        if name == "while":
            return self._while(eqn, eqn_id, ins)
        if name == "cond":
            return self._cond(eqn, eqn_id, ins)
        if name in CALLS:
            body = _only_jaxpr(eqn)
            if body is not None:
                return self._call(eqn, eqn_id, open_jaxpr(body), ins)
        if not any(is_split(layout) for layout in ins):
            return Step(tuple(whole(v.aval) for v in eqn.outvars))
        rule = RULES.get(name) or (elementwise if name in ELEMENTWISE else None)
        if rule is None:
            raise not_split(eqn, f"a {name} takes a value split over {axes_text(ins)}, which shardscope does not "
                                    "split per device")
        return rule(self, eqn, ins)

    def _call(self, eqn: "JaxprEqn", eqn_id: str, body: "Jaxpr", ins: list[Layout]) -> Step:
        """A call walked inline; what it cannot split is placed at the call's line when its own
        equations have none (``jnp.flip`` is a jitted function of JAX's)."""
        try:
            return Step(tuple(self.block(body, [whole(v.aval) for v in body.constvars] + ins, block_id_of(eqn_id, "body"))))
        except NotSplit as exc:
            if exc.where:
                raise
            called = eqn.params.get("name")
            raise not_split(eqn, f"{exc.what} (in {called})" if isinstance(called, str) else exc.what) from exc

    # ------------------------------------------------------------------ loops

    def _fixed_point(self, walk: Callable[[list[Layout]], list[Layout]], carry: list[Layout],
                     eqn: "JaxprEqn") -> tuple[list[Layout], list[Layout]]:
        """Walk a loop body until its carries' layouts settle (a whole accumulator that adds a
        split value is split from the start)."""
        for _ in range(8):
            outs = walk(carry)
            grown = [join(eqn, [c, o]) for c, o in zip(carry, outs)]
            if grown == carry:
                return carry, outs
            carry = grown
        raise not_split(eqn, "the loop's carries do not settle on one split")

    def _scan(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        groups = scan_operand_groups(eqn.params)
        if groups is None:
            raise not_split(eqn, "a scan whose operands shardscope cannot tell apart")
        n_consts, n_carry = groups
        consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
        if any(layout and layout[0] for layout in xs):
            raise not_split(eqn, f"the scan runs over a dimension split over {axes_text(xs)}: each device would "
                                    "run its own number of iterations")
        body = eqn.params["jaxpr"]
        inner = [whole(v.aval) for v in body.jaxpr.constvars]
        slices = [layout[1:] for layout in xs]
        carry, outs = self._fixed_point(
            lambda c: self.block(body.jaxpr, inner + consts + c + slices, block_id_of(eqn_id, "body")), list(init), eqn)
        ys = [(WHOLE,) + layout for layout in outs[n_carry:]]
        return Step(tuple(carry + ys), converted(init, carry, n_consts))

    def _while(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond, body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
        cond_consts, body_consts, init = ins[:n_cond], ins[n_cond:n_cond + n_body], ins[n_cond + n_body:]
        carry, _ = self._fixed_point(
            lambda c: self.block(body.jaxpr, [whole(v.aval) for v in body.jaxpr.constvars] + body_consts + c,
                                 block_id_of(eqn_id, "body")), list(init), eqn)
        test = self.block(cond.jaxpr, [whole(v.aval) for v in cond.jaxpr.constvars] + cond_consts + carry,
                          block_id_of(eqn_id, "cond"))
        if any(is_split(layout) for layout in test):
            raise not_split(eqn, "the while loop's condition reads a value split over devices")
        return Step(tuple(carry), converted(init, carry, n_cond + n_body))

    def _cond(self, eqn: "JaxprEqn", eqn_id: str, ins: list[Layout]) -> Step:
        if is_split(ins[0]):
            raise not_split(eqn, "the lax.cond's branch index is split over devices")
        found = []
        for k, branch in enumerate(eqn.params["branches"]):
            found.append(self.block(branch.jaxpr, [whole(v.aval) for v in branch.jaxpr.constvars] + ins[1:],
                                    block_id_of(eqn_id, f"branch{k}")))
        if any(outs != found[0] for outs in found[1:]):
            raise not_split(eqn, "the lax.cond's branches split their results differently")
        return Step(tuple(found[0]))



# --------------------------------------------------------------------------- helpers


def _only_jaxpr(eqn: "JaxprEqn") -> "ClosedJaxpr | Jaxpr | None":
    from jax.extend.core import ClosedJaxpr, Jaxpr

    found = [v for v in eqn.params.values() if isinstance(v, (ClosedJaxpr, Jaxpr))]
    if len(found) == 1 and len(open_jaxpr(found[0]).invars) == len(eqn.invars):
        return found[0]
    return None


