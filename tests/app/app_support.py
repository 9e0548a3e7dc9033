"""Helpers for the Pilot tests: an app on a demo file, waiting for its runs, demo files on disk."""

from __future__ import annotations

import asyncio
import html
import re
import textwrap
import threading
import time
from pathlib import Path

from shardscope.app import ShardscopeApp, make_app as make_explorer
from shardscope.config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent.parent
DEMOS = ROOT / "demos"
SIZE = (140, 45)

LONG_DEEP_DEPTH = "16"
"""``SHARDSCOPE_DEEP_DEPTH`` for the Plans tab's tests of long trees: deep.py at 16 layers has 450
equations per plan (over 4 pages of ``plan_tree.PAGE``), so its chunk loop's body opens with gaps
and its first and last collectives lie screens apart, as at 64 layers (1,794), for a third of the
run (the depth itself is no test's point)."""

LINEAR_DEMO = '''
import jax
import jax.numpy as jnp

import shardscope


@shardscope.demo(
    params=jax.ShapeDtypeStruct((5,), jnp.float32),
    x=jax.ShapeDtypeStruct(({batch}, 5), jnp.float32),
)
def {name}(W, x):
    """x @ W."""
    return x @ W
'''


GATED_DEMO = '''
import jax
import jax.numpy as jnp

import app_support
import shardscope


@shardscope.demo(
    params=jax.ShapeDtypeStruct((5,), jnp.float32),
    x=jax.ShapeDtypeStruct((64, 5), jnp.float32),
)
def gated(W, x):
    """x @ W, but tracing waits until the test opens the gate."""
    app_support.GATE.wait(timeout=60)
    return x @ W
'''

GATE = threading.Event()
"""Tracing the gated demo blocks until this is set: a run that lasts exactly as long as a test wants."""


def run(coro):
    """Run a Pilot test's coroutine (no pytest-asyncio needed)."""
    return asyncio.run(coro)


def make_app(path: Path, *, autorun: bool = True, export_dir: Path | None = None, hide_measurements: bool = False,
             **settings) -> ShardscopeApp:
    """The app on ``path`` with fast settings (2 timed repeats)."""
    settings.setdefault("repeats", 2)
    return make_explorer(Settings(Path(path), **settings), autorun=autorun, export_dir=export_dir,
                         hide_measurements=hide_measurements)


async def eventually(pilot, predicate, what: str, seconds: float = 60.0) -> None:
    """Pause until ``predicate()`` holds: a message that hops widget to widget (Input.Changed, then
    Sidebar.Edited, then the app) lands after an unknown number of turns on a loaded machine, and
    ``pilot.pause()`` only waits for the CPU to look idle. Fails with ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"never happened within {seconds:.0f} s: {what}"
        await pilot.pause(0.02)


async def drain(pilot, rounds: int = 50) -> None:
    """Let messages that hop widget to widget land, however loaded the machine is.

    A key typed into a sidebar Input travels app -> Input -> Input.Changed -> each container up to
    the Sidebar -> Sidebar.Edited -> ... -> app. One ``pilot.pause()`` lets every widget handle what
    was queued when it began (one hop), and its wait for an idle CPU returns early when the process
    is merely starved of a core (two pytest workers on two cores). So: pause round after round until
    a round ends with every queue on the screen empty, i.e. nothing handled posted anything more."""
    for _ in range(rounds):
        await pilot.pause(0)
        pumps = [pilot.app, *pilot.app.screen.walk_children(with_self=True)]
        if not any(pump.message_queue_size for pump in pumps):
            return
    raise AssertionError(f"messages were still being posted after {rounds} rounds")


async def press(pilot, *keys: str) -> None:
    """Press ``keys`` and :func:`drain` what they set off."""
    await pilot.press(*keys)
    await drain(pilot)


async def settle(pilot) -> None:
    """Wait until no run is in flight, every message it posted is handled, and the Plans tab (if
    shown) has its columns for the analysis (they are mounted on a later turn of the loop)."""
    app = pilot.app
    for _ in range(200):
        await app.workers.wait_for_complete()
        await drain(pilot)
        if not any(worker.is_running for worker in app.workers) and _plans_shown(app):
            return
    raise AssertionError("the app's workers never finished, or the Plans tab never showed the analysis")


def _plans_shown(app) -> bool:
    from shardscope.app.views.plans.plans_view import PlansView

    if app.analysis is None or app.query_one("#tabs").active != "plans":
        return True  # a hidden tab gets the analysis when it is shown
    return app.query_one(PlansView).names == tuple(app.analysis.plans)


def write_demo(path: Path, *, name: str = "linear", batch: int = 64, extra: str = "") -> Path:
    """Write a linear demo file (optionally with ``extra`` source appended) and return its path."""
    path.write_text(textwrap.dedent(LINEAR_DEMO.format(name=name, batch=batch)) + textwrap.dedent(extra))
    return path


def write_gated_demo(path: Path) -> Path:
    """A demo whose tracing blocks on :data:`GATE` (cleared here)."""
    GATE.clear()
    path.write_text(GATED_DEMO)
    return path


_SVG_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)" textLength="[\d.]+"[^>]*>(.*?)</text>')


def screen_text(app) -> list[str]:
    """The screen as the user sees it, one string per row, from the app's own SVG screenshot.

    Rich writes each run of text at ``x = column * 12.2`` and ``y = row * 24.4 + 20`` (a 20 px
    font, aspect 0.61, line height 1.22): the text is put back in its cells, so the gaps that
    margins make stay spaces."""
    width, height = app.size
    rows = [[" "] * width for _ in range(height)]
    for x, y, text in _SVG_TEXT.findall(app.export_screenshot()):
        column, row = round(float(x) / 12.2), round((float(y) - 20) / 24.4)
        for k, char in enumerate(html.unescape(text).replace("\xa0", " ")):
            if 0 <= row < height and column + k < width:
                rows[row][column + k] = char
    return ["".join(row) for row in rows]
