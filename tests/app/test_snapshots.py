"""SVG snapshots of the main tabs on demos/linear.py (pytest-textual-snapshot, Textual pinned).

Wall-clock numbers change from run to run, so the app runs in snapshot mode: the Timings tab
shows placeholders for measured times and the status line's speedup is masked
(``make_app(..., hide_measurements=True)``). Everything else
(collective counts, bytes, memory, gradient error, the jaxprs, the HLO) is the real analysis.
Update with ``pytest tests/app/test_snapshots.py --snapshot-update`` and look at the SVGs.
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest
from app_support import drain, press

from shardscope.app import make_app
from shardscope.app.views.timings import TimingsView
from shardscope.config.settings import Settings

DEMOS = Path(__file__).resolve().parents[2] / "demos"

SNAPSHOT_SIZE = (150, 46)
TEXTUAL_VERSION = "8.2.8"
"""The Textual version the snapshots were made with: another one may draw differently."""


def snapshot_app(demo: str = "linear.py"):
    """The explorer on ``demo`` with every measured time masked."""
    return make_app(Settings(DEMOS / demo, repeats=3), hide_measurements=True)


async def analysed(pilot) -> None:
    """Wait on the app's workers until the first analysis is shown, then hide measured times."""
    app = pilot.app
    for _ in range(500):
        await app.workers.wait_for_complete()
        await drain(pilot)
        if app.analysis is not None and not any(worker.is_running for worker in app.workers):
            break
    assert app.analysis is not None, "the analysis did not finish"
    # the Timings tab's view is built when the tab is first shown, told to hide measured times
    assert app.hide_measurements and all(view.measurements_hidden for view in app.query(TimingsView))
    await drain(pilot)


def test_snapshots_are_pinned_to_the_textual_version_they_were_made_with():
    assert version("textual") == TEXTUAL_VERSION


@pytest.mark.parametrize("key,tab", [("1", "plans"), ("2", "graph"), ("3", "diff"), ("4", "timings"), ("5", "hlo")])
def test_tab_snapshot(snap_compare, key, tab):
    assert snap_compare(snapshot_app(), press=[key], terminal_size=SNAPSHOT_SIZE, run_before=analysed)


def test_diff_side_by_side_snapshot(snap_compare):
    async def side_by_side(pilot):
        await analysed(pilot)
        await press(pilot, "3")
        pilot.app.query_one("#diff-unified").focus()
        await press(pilot, "s")

    assert snap_compare(snapshot_app(), terminal_size=SNAPSHOT_SIZE, run_before=side_by_side)


def test_plans_snapshot_at_80x24(snap_compare):
    """A small terminal: the sidebar folded away, badges leading every line that has one."""
    assert snap_compare(snapshot_app("rnn.py"), press=["1"], terminal_size=(80, 24), run_before=analysed)


def test_program_file_plans_snapshot(snap_compare):
    """A program file: a pane per program, the sidebar lists them marked B and C, no mesh or chunk settings."""
    assert snap_compare(snapshot_app("train_step.py"), press=["1"], terminal_size=SNAPSHOT_SIZE, run_before=analysed)
