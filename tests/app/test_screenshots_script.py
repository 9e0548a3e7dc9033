"""``make screenshots`` is deterministic: a second run writes the same bytes and rewrites nothing."""

from __future__ import annotations

import asyncio

from app_support import DEMOS

from screenshots import make


def test_regenerating_the_screenshots_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(make, "REPEATS", 2)
    first = asyncio.run(make.shoot(DEMOS / "linear.py", tmp_path))
    contents = {path.name: path.read_bytes() for path in first}
    written = {path.name: path.stat().st_mtime_ns for path in first}
    assert sorted(contents) == sorted([*(f"linear-{tab}.svg" for _, tab in make.TABS), "linear-diff-side-by-side.svg"])
    timings = contents["linear-timings.svg"].decode()
    assert "···" in timings and " ms" not in timings.replace("···&#160;ms", "")  # no measured time on screen
    second = asyncio.run(make.shoot(DEMOS / "linear.py", tmp_path))
    assert {path.name: path.read_bytes() for path in second} == contents
    assert {path.name: path.stat().st_mtime_ns for path in second} == written, "unchanged files are not rewritten"
