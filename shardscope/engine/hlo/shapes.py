"""HLO shapes as printed: ``f32[16,32]{1,0}``, ``f32[16,16]{1,0:T(8,128)S(1)}``, tuples of them.

Bytes always come from the logical shape (element type and dimensions): a layout (``{1,0}``),
the TPU's tiles (``T(8,128)``), element packing (``(2,1)``) and memory spaces (``S(1)``) say
how a device stores the array, not how much data a collective moves.

A shape is read in one pass with a stack of the tuples open (no recursion), so a tuple nested
100,000 deep costs its length, not the interpreter's stack. :func:`parse_shape` reads any text
(what it cannot read becomes an array of no known type, as it always did for a type-less
shape); :func:`shape_error` says what is wrong with a shape that is not one XLA prints, for
the text a user hands shardscope (:mod:`shardscope.engine.hlo.well_formed`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from math import prod

from shardscope.engine.hlo.syntax import COMMENT, MAX_DIGITS, integer

DTYPE_BITS = {
    "pred": 8, "s1": 1, "u1": 1, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
    "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64,
    "c128": 128, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4, "token": 0, "opaque": 0,
}
"""Bits per element of each primitive type as HLO prints it."""

MAX_TUPLE_DEPTH = 64
"""How deep tuples may nest in a shape (XLA's compiled modules nest them a few levels)."""
MAX_ELEMENTS = 2**63 - 1
"""The most elements an array may hold: XLA counts them in an int64."""


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


_PIECE = re.compile(r"\s*+(?:([(),])|([a-z][a-z0-9]*+)(?:\[([^\]]*+)\])?+(\{[^{}]*+\})?+|(\S))")
"""One piece of a shape: a bracket or comma, an array (its type, its dimensions, its layout),
or a character that is none of these."""
_CACHED_UP_TO = 256
"""Shapes up to this long are cached (a module repeats a few hundred shapes); a longer text is
read each time, so that a hostile text's shapes are not kept after its parse."""


def parse_shape(text: str) -> Shape:
    """``f32[16,32]{1,0}``, ``f32[8]{0:T(128)S(1)}`` or ``(f32[4]{0}, (s32[], f32[]))`` as a :class:`Shape`.

    Any text gives a shape: a dimension that is not a number counts 0, tuples nested deeper than
    :data:`MAX_TUPLE_DEPTH` and text that is not a shape are an array of the type written (or
    ``opaque``); :func:`shape_error` says what is wrong with such a text."""
    if len(text) <= _CACHED_UP_TO:
        return _cached_shape(text)
    return _read(text)[0]


def shape_error(text: str) -> str | None:
    """What makes ``text`` a shape XLA would not print (None when it is one): an unknown element
    type, a dimension that is not a number of at most 19 digits, a negative or unbounded one,
    more elements than an int64 counts, a bracket left open, tuples nested too deep."""
    return _cached_shape_error(text) if len(text) <= _CACHED_UP_TO else _read(text)[1]


@functools.lru_cache(maxsize=4096)
def _cached_shape(text: str) -> Shape:
    return _read(text)[0]


@functools.lru_cache(maxsize=4096)
def _cached_shape_error(text: str) -> str | None:
    return _read(text)[1]


def _read(text: str) -> tuple[Shape, str | None]:
    """The shape of ``text`` and the first thing wrong with it (None when nothing is)."""
    text = COMMENT.sub("", text).strip() if "/*" in text else text.strip()
    opened: list[tuple[int, list[Shape]]] = []  # the tuples open: where each starts, its elements so far
    top: list[Shape] = []
    error: str | None = None
    position = 0
    while position < len(text):
        match = _PIECE.match(text, position)
        assert match is not None  # the last alternative takes any character
        position = match.end()
        bracket, dtype, dims, _, other = match.groups()
        held = opened[-1][1] if opened else top
        if bracket == "(":
            if len(opened) >= MAX_TUPLE_DEPTH:
                return _opaque(text), f"tuples nested more than {MAX_TUPLE_DEPTH} deep"
            opened.append((match.end() - 1, []))
        elif bracket == ")":
            if not opened:
                return _opaque(text), "a ')' that closes no tuple"
            start, elements = opened.pop()
            (opened[-1][1] if opened else top).append(Shape(text[start:match.end()], None, tuple(elements)))
        elif dtype is not None:
            array, problem = _array(dtype, dims)
            error = error or problem
            held.append(Shape(match.group().strip(), array))
        elif other is not None:
            error = error or f"{other!r} is not part of a shape"
    if opened:
        return _opaque(text), "a '(' that is never closed"
    if len(top) == 1 and not error:
        return top[0], None
    if len(top) == 1:
        return top[0], error
    return _opaque(text), error or ("no shape" if not top else "several shapes side by side")


def _opaque(text: str) -> Shape:
    """What a text that is no shape reads as: an array of the type written first, no dimensions."""
    head = text.split("[", 1)[0].strip()
    return Shape(text, ArrayShape(head if head.isidentifier() else "opaque", ()))


def _array(dtype: str, dims_text: str | None) -> tuple[ArrayShape, str | None]:
    """The array ``dtype[dims_text]`` and what is wrong with it (dimensions that are not numbers count 0)."""
    problem = None if dtype in DTYPE_BITS else f"{dtype[:40]} is not an element type XLA prints (f32, bf16, s32, pred, ...)"
    dims: list[int] = []
    for dim in (dims_text.split(",") if dims_text and dims_text.strip() else ()):
        written = dim.strip()
        bound = written[2:] if written.startswith("<=") else written  # a dynamic dimension, by its bound
        value = integer(bound) if bound[:1].isdigit() else None
        if value is None:
            problem = problem or _dimension_error(written)
            value = 0
        dims.append(value)
    if problem is None and prod(dims) > MAX_ELEMENTS:
        problem = f"{dtype}[{dims_text}] holds more elements than XLA counts (2**63)"
    return ArrayShape(dtype, tuple(dims)), problem


def _dimension_error(written: str) -> str:
    if not written:
        return "an empty dimension"
    if written == "?" or written == "<=?":
        return "an unbounded dynamic dimension (?): its bytes cannot be counted"
    if written.lstrip("<=").startswith("-"):
        return f"a negative dimension ({written[:40]})"
    if written.lstrip("<=").isdigit():
        return f"a dimension of more than {MAX_DIGITS} digits"
    return f"a dimension that is not a number ({written[:40]!r})"
