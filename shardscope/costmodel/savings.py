"""``check --min-saving``: the threshold a finding's saving on a target must reach to fail the check,
read from its text (a time saved per step, or a share of the step).

The savings themselves are costed once, where a target's plan is judged
(:mod:`shardscope.engine.hlo.plan_costs`, :mod:`shardscope.engine.hlo.costing`); the threshold is
weighed there too (:func:`shardscope.pipeline.check.judged`).
"""

from __future__ import annotations

import re

from shardscope.costmodel.quantities import TIME_UNITS, number_and_unit
from shardscope.engine.hlo.plan_costs import MinSaving
from shardscope.errors import SettingsError

__all__ = ["MinSaving", "parse_min_saving"]

def parse_min_saving(text: str) -> MinSaving:
    """``1ms``, ``50us``, ``0.2s`` (a time saved per step) or ``1%`` (a share of the step)."""
    hint = "write a time saved per step, e.g. --min-saving 1ms or 50us (units s, ms, us, ns), or a share: 1%"
    stripped = text.strip()
    percent = re.fullmatch(r"(.*?)\s*%", stripped)
    found = number_and_unit(percent.group(1) if percent else stripped, "--min-saving", hint)
    if found is None or (percent and found[1]):
        raise SettingsError(f"--min-saving {stripped!r} is not a time or a percentage.", hint)
    number, unit = found
    if number < 0:
        raise SettingsError(f"--min-saving {stripped!r} is negative.", hint)
    if percent:
        if number > 100:
            raise SettingsError(f"--min-saving {stripped!r} is more than the whole step.", hint)
        return MinSaving(stripped, share=number / 100)
    if not unit:
        if number == 0:  # no time to name: every finding saves at least nothing
            return MinSaving(stripped, seconds=0.0)
        raise SettingsError(f"--min-saving {stripped!r} has no unit: a time saved per step needs one, a share a %.",
                            f"write --min-saving {stripped}ms, {stripped}us or {stripped}% (units s, ms, us, ns)")
    scale = TIME_UNITS.get(unit.lower())
    if scale is None:
        raise SettingsError(f"--min-saving {stripped!r}: {unit!r} is not a unit of time.", hint)
    return MinSaving(stripped, seconds=number * scale)
