"""Numbers with units from the command line and the app: sizes, bandwidths, latencies.

One reading for every option: a number (``512``, ``1.5``, ``2e9``; a sign is read so that a
negative value is refused as negative, not as a typo), then a unit. A value that is not a
finite number (``inf``, ``nan``, ``1e400``, which overflows to infinity) is refused everywhere;
so is a unit the option does not know, with the units it does.
"""

from __future__ import annotations

import math
import re

from shardscope.errors import SettingsError

_NUMBER = re.compile(r"^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(\S*)\s*$")
_NOT_FINITE = re.compile(r"^\s*[-+]?(inf|infinity|nan)\b", re.IGNORECASE)

SIZE_UNITS = {
    "B": 1,
    "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15, "EB": 1e18,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60,
}
"""Byte units, decimal (``kB`` = 1000 B) and binary (``KiB`` = 1024 B); matched ignoring case."""

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
"""Time units in seconds (``--link``'s latency, ``--min-saving``), matched ignoring case."""

SIZE_UNITS_TEXT = "B, kB, MB, GB, TB, PB, EB (powers of 1000) and KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024)"


def number_and_unit(text: str, what: str, hint: str) -> tuple[float, str] | None:
    """``(number, unit)`` of ``text`` (None when it does not start with a number).

    Raises :class:`SettingsError` for a number that is not finite: ``inf``, ``nan`` or one too
    large for a float (``1e400``).
    """
    if _NOT_FINITE.match(text):
        raise SettingsError(f"{what} {text.strip()!r} is not a finite number.", hint)
    match = _NUMBER.match(text)
    if not match:
        return None
    number = float(match.group(1))
    if not math.isfinite(number):
        raise SettingsError(f"{what} {text.strip()!r} is too large: {match.group(1)} overflows to infinity.", hint)
    return number, match.group(2)


def parse_size(text: str, option: str = "--memory-budget") -> int:
    """``512MiB``, ``1.5GB``, ``2PiB``, ``4096`` (bytes) as a whole number of bytes, at least 1."""
    hint = f"write e.g. {option} 512MiB, 2GB or 1048576; units: {SIZE_UNITS_TEXT}"
    found = number_and_unit(text, option, hint)
    if found is None:
        raise SettingsError(f"{option} {text.strip()!r} is not a memory size.", hint)
    number, unit = found
    scale = next((value for name, value in SIZE_UNITS.items() if name.lower() == (unit or "B").lower()), None)
    if scale is None:
        raise SettingsError(f"{option} {text.strip()!r}: {unit!r} is not a unit of size.", hint)
    if number < 0:
        raise SettingsError(f"{option} {text.strip()!r} is negative: a memory size is at least 1 byte.", hint)
    size = number * scale
    if not math.isfinite(size):
        raise SettingsError(f"{option} {text.strip()!r} is too large: it overflows to infinity.", hint)
    if size < 1:
        raise SettingsError(f"{option} {text.strip()!r} is less than 1 byte.", hint)
    return int(size)


def parse_rate(text: str, units: dict[str, float], default_unit: str, what: str, hint: str,
               allow_zero: bool = False) -> float:
    """A bandwidth or a latency: a number and one of ``units`` (``default_unit`` when none).

    ``B/s`` is bytes and ``b/s``, ``bps`` are bits: only the case of the ``b`` tells them apart.
    Refuses negative values, zero unless ``allow_zero``, and anything not finite.
    """
    found = number_and_unit(text, what, hint)
    if found is None:
        raise SettingsError(f"{what} {text.strip()!r} is not a number with a unit.", hint)
    number, unit = found
    if unit.endswith("B/s"):
        scale = units.get(unit[:-3].lower() + "b/s")
    elif unit.endswith("b/s"):
        scale = units.get(unit[:-3].lower() + "bps")
    else:
        scale = units.get(unit.lower() or default_unit)
    if scale is None:
        raise SettingsError(f"{what} {text.strip()!r}: {unit!r} is not a unit it knows.", hint)
    if number < 0:
        raise SettingsError(f"{what} {text.strip()!r} is negative.", hint)
    value = number * scale
    if not math.isfinite(value):
        raise SettingsError(f"{what} {text.strip()!r} is too large: it overflows to infinity.", hint)
    if value == 0 and not allow_zero:
        underflows = re.search(r"[1-9]", text.split("e")[0].split("E")[0]) is not None
        raise SettingsError(f"{what} {text.strip()!r} is " + ("so small it underflows to zero." if underflows
                                                               else "zero."), hint)
    return value
