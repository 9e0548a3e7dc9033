"""``--profile-startup``: seconds from the process start to the first paint and first results."""

from __future__ import annotations

import json
import os
import time

_IMPORTED_AT = time.perf_counter()


def process_age() -> float:
    """Seconds since this process started (Linux ``/proc``; else since this module's import)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as uptime:
            up = float(uptime.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime in ticks
        return max(up - started, 0.0)
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED_AT


class StartupProfile:
    """Records the two moments once each; :meth:`json_line` is what goes to stderr on exit."""

    def __init__(self) -> None:
        self.first_paint_s: float | None = None
        self.results_s: float | None = None

    def mark_first_paint(self) -> float:
        """Record the first paint (once)."""
        if self.first_paint_s is None:
            self.first_paint_s = process_age()
        return self.first_paint_s

    def mark_results(self) -> float:
        """Record the first results on screen (once)."""
        if self.results_s is None:
            self.results_s = process_age()
        return self.results_s

    def json_line(self) -> str:
        """``{"first_paint_s": ..., "results_s": ...}`` (null for what did not happen)."""
        return json.dumps({"first_paint_s": _round(self.first_paint_s), "results_s": _round(self.results_s)})


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
