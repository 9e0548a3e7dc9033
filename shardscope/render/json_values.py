"""JSON values as every ``--json`` output writes them: strict JSON, never a bare NaN."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> Any:  # Any: a JSON value, nested
    """``value`` with every NaN or infinite float (in dicts and lists) replaced by None: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
