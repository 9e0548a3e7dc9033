"""HLO shapes as printed: ``f32[16,32]{1,0}``, ``f32[16,16]{1,0:T(8,128)S(1)}``, tuples of them.

Bytes always come from the logical shape (element type and dimensions): a layout (``{1,0}``),
the TPU's tiles (``T(8,128)``), element packing (``(2,1)``) and memory spaces (``S(1)``) say
how a device stores the array, not how much data a collective moves.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from math import prod

from shardscope.engine.hlo.syntax import COMMENT, matching, split_top

DTYPE_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
    "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64,
    "c128": 128, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4, "token": 0, "opaque": 0,
}
"""Bits per element of each primitive type as HLO prints it."""


@dataclass(frozen=True)
class ArrayShape:
    """One array: ``f32[16,32]`` (dims as printed; a dynamic ``<=8`` counts its bound)."""

    dtype: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        """How many elements it holds."""
        return prod(self.dims)

    @property
    def nbytes(self) -> int:
        """Bytes of one copy (sub-byte types packed, rounded up to whole bytes)."""
        return (self.elements * DTYPE_BITS.get(self.dtype, 0) + 7) // 8

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class Shape:
    """An instruction's shape: one array, or a tuple of shapes (``elements``)."""

    text: str
    array: ArrayShape | None
    elements: tuple["Shape", ...] = ()

    @property
    def is_tuple(self) -> bool:
        """True for a tuple shape (a while's carry, a combined collective)."""
        return self.array is None

    @functools.cached_property
    def arrays(self) -> tuple[ArrayShape, ...]:
        """Every array leaf, in order."""
        if self.array is not None:
            return (self.array,)
        return tuple(leaf for element in self.elements for leaf in element.arrays)

    @property
    def nbytes(self) -> int:
        """Bytes of every leaf together."""
        return sum(a.nbytes for a in self.arrays)

    def element(self, index: int) -> "Shape":
        """The tuple element ``index`` (the shape itself for an array and index 0)."""
        if self.array is not None:
            if index != 0:
                raise IndexError(f"{self.text} is not a tuple")
            return self
        return self.elements[index]

    def __str__(self) -> str:
        """The logical shape, without layouts: ``f32[16,16]``, ``(f32[4,16], f32[16])``."""
        if self.array is not None:
            return str(self.array)
        return "(" + ", ".join(str(e) for e in self.elements) + ")"


_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


@functools.lru_cache(maxsize=4096)
def parse_shape(text: str) -> Shape:
    """``f32[16,32]{1,0}``, ``f32[8]{0:T(128)S(1)}`` or ``(f32[4]{0}, (s32[], f32[]))`` as a :class:`Shape`."""
    text = COMMENT.sub("", text).strip()
    if text.startswith("("):
        inner = text[1 : matching(text, 0)]
        return Shape(text, None, tuple(parse_shape(part) for part in split_top(inner) if part.strip()))
    match = _ARRAY.match(text)
    if match is None:
        return Shape(text, ArrayShape(text.split("[", 1)[0] or "opaque", ()))
    dims = tuple(int(d.strip().lstrip("<=")) for d in match.group(2).split(",") if d.strip())
    return Shape(text, ArrayShape(match.group(1), dims))
