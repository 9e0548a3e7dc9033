"""Number formatting and verdicts shared by the sections of ``BENCHMARKS.md``."""

from __future__ import annotations

from typing import Any

CLAIM = {"M": 10**6, "chunks": 16, "ratio": 1.7}
"""The earlier measurement to reproduce or refute: deferred ~1.7x faster at M=1e6, 16 chunks/device."""


def find(cells: list[dict], **match: Any) -> dict | None:
    """The first cell whose fields equal ``match``."""
    for c in cells:
        if all(c.get(k) == v for k, v in match.items()):
            return c
    return None


def claim_verdict(ratio: float, low: float | None = None, high: float | None = None) -> str:
    """Reproduced when within 20% of the claimed ratio (or inside the range measured); else by how much it differs."""
    claimed = CLAIM["ratio"]
    if abs(ratio / claimed - 1) <= 0.2:
        return "reproduced (within 20%)"
    text = f"not reproduced: the median is {ratio / claimed:.2f}x the claim"
    if low is not None and high is not None and low <= claimed <= high:
        text += f", though {claimed}x lies inside the range measured ({low:.2f}-{high:.2f}x)"
    return text


def verdict(met: bool, fraction_of_target: float) -> str:
    """``met``, or by how many percent the target was missed."""
    return "met" if met else f"**missed** by {(fraction_of_target - 1) * 100:.0f}%"


def missing(failure: str | None) -> str:
    """What a section says when its benchmark has no result."""
    if failure:
        return f"Not measured in this run: {failure}"
    return "Not measured in this run."


def rnn_params(data: dict) -> int:
    """Parameter count of the RNN (Wx, Wh, b)."""
    d, h = data["rnn_dims"]["D"], data["rnn_dims"]["H"]
    return d * h + h * h + h


def spread(cell: dict) -> str:
    """`` (p25-p75)`` of the per-round naive/deferred ratios, when recorded."""
    rounds = cell.get("naive_over_deferred_rounds")
    return f" ({rounds['p25']:.2f}-{rounds['p75']:.2f})" if rounds else ""


def opt(seconds: float | None) -> str:
    """Seconds, or nothing."""
    return "" if seconds is None else f"{seconds:.3f}"


def size(m: int) -> str:
    """``1e6`` for powers of ten, else the number with separators."""
    exponent = len(str(m)) - 1
    return f"1e{exponent}" if m == 10**exponent else f"{m:,}"


def ms(t: dict) -> str:
    """The median in milliseconds."""
    return f"{t['median'] * 1e3:.2f}"


def ms_range(t: dict) -> str:
    """Median (min-max) in milliseconds."""
    return f"{t['median'] * 1e3:.2f} ({t['min'] * 1e3:.2f}-{t['max'] * 1e3:.2f})"


def s_range(t: dict) -> str:
    """Median (min-max) in seconds."""
    return f"{t['median']:.2f} ({t['min']:.2f}-{t['max']:.2f})"


def paint_ms(press: dict) -> str:
    """Median key-to-paint milliseconds of a key, or ``no repaint``."""
    return f"{press['paint_s']['median'] * 1e3:.1f}" if press.get("paint_s") else "no repaint"


def gc_ms(press: dict) -> str:
    """Median (max) milliseconds of garbage collection during a key."""
    if "gc_pause_s" not in press:
        return ""
    pause = press["gc_pause_s"]
    return f"{pause['median'] * 1e3:.1f} (max {pause['max'] * 1e3:.0f})"
