"""``make screenshots`` is deterministic: a second run writes the same bytes and rewrites nothing.

Each run is a fresh process, as ``make screenshots`` is (XLA numbers its computations per
process, and the HLO tab shows their names).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from screenshots import make


def make_screenshots(out) -> dict[str, tuple[bytes, int]]:
    """Run ``python -m screenshots.make`` on linear.py into ``out``: each file's bytes and mtime."""
    done = subprocess.run([sys.executable, "-m", "screenshots.make", "--out", str(out), "--demo", "linear.py"],
                          capture_output=True, text=True, cwd=make.ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in sorted(out.glob("*.svg"))}


@pytest.mark.slow  # runs the screenshots script
def test_regenerating_the_screenshots_changes_nothing(tmp_path):
    first = make_screenshots(tmp_path)
    assert sorted(first) == sorted([*(f"linear-{tab}.svg" for _, tab in make.TABS), "linear-diff-side-by-side.svg"])
    timings = first["linear-timings.svg"][0].decode()
    assert "···" in timings and " ms" not in timings.replace("···&#160;ms", "")  # no measured time on screen
    assert "Run&#160;" in timings, "the footer is drawn: the screenshot waited for the screen to settle"
    second = make_screenshots(tmp_path)
    assert second == first, "same bytes, and unchanged files are not rewritten (same mtimes)"
