"""The candidates ``shardscope layouts`` tries: every assignment of a target's devices to the mesh
axes a layouts function names (sizes that multiply to the device count), times every combination
of its options. Pure Python (no JAX): the command counts them before JAX starts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod
from typing import Mapping, Sequence

from shardscope.errors import SettingsError


@dataclass(frozen=True)
class Candidate:
    """One layout: each axis with its size, in the function's order, and each option's value."""

    sizes: tuple[tuple[str, int], ...]
    options: tuple[tuple[str, object], ...] = ()

    @property
    def devices(self) -> int:
        """How many devices the mesh spans."""
        return prod(size for _, size in self.sizes)

    @property
    def mesh_words(self) -> str:
        """``fsdp=16 x tensor=16``: the axes of more than one device (``1 device`` when none is)."""
        split = [f"{name}={size}" for name, size in self.sizes if size > 1]
        return " x ".join(split) if split else "1 device"

    @property
    def option_words(self) -> str:
        """``per_device_batch=4``: the options' values (empty without options)."""
        return " ".join(f"{name}={value}" for name, value in self.options)

    @property
    def label(self) -> str:
        """``fsdp=16 x tensor=16, per_device_batch=4``: how the candidate is named everywhere."""
        return f"{self.mesh_words}, {self.option_words}" if self.options else self.mesh_words

    def size(self, axis: str) -> int:
        """The size of ``axis`` (1 for an axis the candidate does not name)."""
        return dict(self.sizes).get(axis, 1)

    def to_json(self) -> dict[str, object]:
        """The candidate's axes and options."""
        return {"mesh": dict(self.sizes), "options": {name: _json_value(v) for name, v in self.options},
                "label": self.label}


def _json_value(value: object) -> object:
    return value if isinstance(value, (int, float, str, bool)) or value is None else repr(value)


def divisors(count: int) -> list[int]:
    """The divisors of ``count``, smallest first."""
    return [d for d in range(1, count + 1) if count % d == 0]


def axis_assignments(devices: int, axes: Sequence[str],
                     allowed: Mapping[str, Sequence[int]] | None = None) -> list[tuple[int, ...]]:
    """Every tuple of axis sizes (one per axis, in order) whose product is ``devices``, each size
    among ``allowed[axis]`` where given; the assignments with the most devices on the first
    axes come last (lexicographic by size)."""
    allowed = allowed or {}
    choices = [sorted(set(allowed[axis]) & set(divisors(devices))) if axis in allowed else divisors(devices)
               for axis in axes]
    found = []
    for sizes in itertools.product(*choices[:-1]):
        rest, left = prod(sizes), choices[-1]
        if devices % rest == 0 and devices // rest in left:
            found.append((*sizes, devices // rest))
    return sorted(found)


def candidates(devices: int, axes: Sequence[str], options: Sequence[tuple[str, Sequence[object]]],
               allowed: Mapping[str, Sequence[int]] | None = None) -> list[Candidate]:
    """Every assignment of ``devices`` to ``axes`` times every combination of the options' values
    (:class:`SettingsError` when ``allowed`` names an axis the function has not, or leaves none)."""
    unknown = sorted(set(allowed or {}) - set(axes))
    if unknown:
        raise SettingsError(f"--axis {unknown[0]}=...: the function's mesh has no axis {unknown[0]!r}.",
                            f"its axes are {', '.join(axes)}")
    assignments = axis_assignments(devices, axes, allowed)
    if not assignments:
        said = "; ".join(f"{axis} in {{{', '.join(map(str, sizes))}}}" for axis, sizes in (allowed or {}).items())
        raise SettingsError(f"No assignment of {devices} devices to {', '.join(axes)} has {said}.",
                            f"each size must divide {devices}: {', '.join(map(str, divisors(devices)))}")
    names = [name for name, _ in options]
    combos = list(itertools.product(*(values for _, values in options)))
    return [Candidate(tuple(zip(axes, sizes)), tuple(zip(names, combo))) for combo in combos for sizes in assignments]


def parse_axis_choice(text: str) -> tuple[str, tuple[int, ...]]:
    """``tensor=1,4,8,16`` -> ``("tensor", (1, 4, 8, 16))`` (:class:`SettingsError` otherwise)."""
    name, sep, sizes = text.partition("=")
    hint = "write --axis NAME=SIZE[,SIZE...], e.g. --axis tensor=1,4,8,16"
    try:
        values = tuple(int(size) for size in sizes.split(",") if size.strip())
    except ValueError:
        values = ()
    if not sep or not name.strip() or not values or any(v < 1 for v in values):
        raise SettingsError(f"--axis {text!r} is not an axis with its sizes.", hint)
    return name.strip(), values
