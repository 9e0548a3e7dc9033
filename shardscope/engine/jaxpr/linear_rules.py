"""Which jaxpr primitives are linear in which operands: the one table both deferral analyses read.

A sum over devices moved out of a loop leaves its result unsummed on the way to the loop's
accumulator. Every operation on that way must commute with the sum over devices, which is
what each :class:`Linearity` says of its primitive: the operands it is linear in, the operands
that must be the same on every device (a factor, a selector, an offset), and whether it adds
its linear operands together (then every one of them that does not come from the sum must be
zero: another term would be summed once per device) or takes only one of them (a product:
the others are factors).

Read by :mod:`shardscope.engine.jaxpr.linearity` (the verdicts' deferrable search) and by
:mod:`shardscope.whatif.type_reach` (which values a rewrite leaves unsummed).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Linearity:
    """How one primitive is linear. ``linear`` and ``uniform`` are operand ranges ``(start,
    stop)`` (``stop`` None: to the last operand). ``adds``: linear in all its ``linear``
    operands together (a sum, a concatenation, a padding); else in one of them at a time, the
    others then factors that must be the same on every device (a product)."""

    linear: tuple[int, int | None] = (0, 1)
    uniform: tuple[int, int | None] = (0, 0)
    adds: bool = True

    def linear_in(self, operands: int) -> frozenset[int]:
        """The operand positions it is linear in."""
        return _positions(self.linear, operands)

    def factors(self, operands: int, position: int) -> frozenset[int]:
        """The positions that must be the same on every device when the value enters at ``position``."""
        others = frozenset() if self.adds else self.linear_in(operands) - {position}
        return _positions(self.uniform, operands) | others


def _positions(span: tuple[int, int | None], operands: int) -> frozenset[int]:
    start, stop = span
    return frozenset(range(start, operands if stop is None else min(stop, operands)))


_MOVES = Linearity()
_TERMS = Linearity(linear=(0, None))

LINEAR: dict[str, Linearity] = {
    # moves and casts of one value, element for element or summed over axes
    **{name: _MOVES for name in (
        "neg", "convert_element_type", "reshape", "squeeze", "expand_dims", "broadcast_in_dim", "transpose", "copy",
        "copy_p", "reduce_sum", "cumsum", "slice", "rev", "real", "imag", "conj", "pvary", "pcast", "reshard",
        "sharding_constraint", "reduced_vary_cast", "vary_unreduced_cast",
    )},
    # terms added together: each one not from the sum must be zero
    **{name: _TERMS for name in ("add", "add_any", "sub", "concatenate")},
    "pad": Linearity(linear=(0, 2)),  # the value and its padding: zeros around it
    "select_n": Linearity(linear=(1, None), uniform=(0, 1)),  # select_n(which, *cases)
    "dynamic_slice": Linearity(uniform=(1, None)),  # offsets the same on every device
    "dynamic_update_slice": Linearity(linear=(0, 2), uniform=(2, None)),  # the buffer and the update
    # products: linear in one operand, the other a factor
    "mul": Linearity(linear=(0, None), adds=False),
    "dot_general": Linearity(linear=(0, None), adds=False),
    "div": Linearity(linear=(0, 1), uniform=(1, 2)),
}
"""Primitive name -> how it is linear; a primitive not here is not linear in any operand."""
