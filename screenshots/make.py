"""Drive the explorer on the demos and save an SVG screenshot of each tab into ``screenshots/``.

``make screenshots`` runs ``python -m screenshots.make``; ``--out DIR`` and ``--demo NAME``
(repeatable) change where and what; without ``--demo`` the Sweep tab and the rnn demo compiled
for a TPU slice and for 8 H100s (the target field, libtpu and JAX's CUDA plugin needed) are shot too. The app runs as a user starts it (the first analysis
starts by itself) except that measured times are hidden (``hide_measurements``: ``···`` in
place of every wall-clock number, gradient errors as the power of ten above them), so the
screenshots are the same on every run and every machine, and a regeneration changes a file only
when the screen changed (the SVG's class names come from what is drawn:
:func:`shardscope.app.screenshots.stable_svg`); a file whose content is unchanged is not
rewritten. The script waits for the app's worker, then presses the keys a user would.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ("linear.py", "rnn.py")
SIZE = (150, 46)
TABS = (("1", "plans"), ("2", "graph"), ("3", "diff"), ("4", "timings"), ("5", "hlo"))
REPEATS = 10


async def wait_for_analysis(pilot) -> None:
    """Wait on the app's workers (never on a clock) until an analysis is on screen."""
    app = pilot.app
    for _ in range(500):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if app.analysis is not None and not any(w.is_running for w in app.workers):
            return
    raise RuntimeError(f"no analysis of {app.settings.path.name}: is the demo broken?")


async def screen_settled(pilot) -> None:
    """Wait until the screen stops changing: the footer recomposes its keys after a focus change,
    a refresh or two after the key that caused it, and a screenshot must not catch it half done."""
    from textual.widgets import Footer

    footer = pilot.app.screen.query_one(Footer)
    previous = None
    for _ in range(50):
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        keys = tuple(str(key.render()) for key in footer.query("FooterKey"))  # in groups too
        if keys and keys == previous:
            return
        previous = keys
    raise RuntimeError("the screen never settled")


async def shoot(demo: Path, out: Path) -> list[Path]:
    """Screenshots of every tab (and the side-by-side diff) of the app on ``demo``."""
    from shardscope.app import make_app
    from shardscope.config.settings import Settings

    app = make_app(Settings(demo, repeats=REPEATS), hide_measurements=True)
    saved = []
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_analysis(pilot)
        for key, tab in TABS:
            await pilot.press(key)
            await screen_settled(pilot)
            saved.append(save(app, out, f"{demo.stem}-{tab}"))
        await pilot.press("3", "s")
        await screen_settled(pilot)
        saved.append(save(app, out, f"{demo.stem}-diff-side-by-side"))
    return saved


TARGET_DEMO = "rnn.py"
TARGET = "tpu:v5e:2x2"
GPU_TARGET = "gpu:h100:4"  # as many devices as the slice: one process, one CPU device count


async def shoot_target(out: Path, target: str = TARGET, stem: str = "") -> list[Path]:
    """The rnn demo compiled for a target too (the sidebar's target field: a v5e slice, or 8
    H100s): the Compiled tab at the target's plans, and the Timings tab with its memory per device."""
    from shardscope.app import make_app
    from shardscope.app.views import HloView
    from shardscope.config.settings import Settings

    app = make_app(Settings(ROOT / "demos" / TARGET_DEMO, repeats=REPEATS, targets=(target,)), hide_measurements=True)
    stem = stem or f"{Path(TARGET_DEMO).stem}-target"
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_analysis(pilot)
        app.query_one("#sidebar").scroll_end(animate=False)  # the target field, at the sidebar's foot
        await pilot.press("5")
        await screen_settled(pilot)
        if not app.query_one(HloView).scroll_to_targets():
            raise RuntimeError(f"no plans on {target}: is its compiler installed "
                               "(python -m shardscope.targets.compilers tpu gpu, as make does)?")
        await screen_settled(pilot)
        hlo = save(app, out, f"{stem}-hlo")
        await pilot.press("4")
        await screen_settled(pilot)
        return [hlo, save(app, out, f"{stem}-timings")]


SWEEP_DEMO = "mlp.py"
SWEEP_BUDGET = "20KiB"


async def shoot_sweep(out: Path) -> Path:
    """The Sweep tab on the MLP demo with a memory budget that excludes the largest chunks."""
    from textual.widgets import Input

    from shardscope.app import ShardscopeApp
    from shardscope.config.settings import Settings

    app = ShardscopeApp(Settings(ROOT / "demos" / SWEEP_DEMO, repeats=REPEATS), hide_measurements=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_analysis(pilot)
        await pilot.press("6")
        for _ in range(500):  # the tab's view is mounted after the first run
            await pilot.pause()
            if app.query("#sweep-view"):
                break
        view = app.query_one("#sweep-view")
        view.query_one("#sweep-budget", Input).value = SWEEP_BUDGET
        await pilot.press("s")
        for _ in range(500):
            await app.workers.wait_for_complete()
            await pilot.pause()
            if view.sweep is not None and not view.running:
                break
        await screen_settled(pilot)
        return save(app, out, f"{Path(SWEEP_DEMO).stem}-sweep")


def save(app, out: Path, stem: str) -> Path:
    """Write the current screen as ``out/<stem>.svg`` unless the file already holds exactly that."""
    path = out / f"{stem}.svg"
    svg = app.export_screenshot(title=f"shardscope {stem}")
    if not path.exists() or path.read_text(encoding="utf-8") != svg:
        path.write_text(svg, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Make the screenshots and list the files written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots", help="directory for the SVGs")
    parser.add_argument("--demo", action="append", help="demo file name in demos/ (default: linear.py, rnn.py)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = []
    for name in args.demo or DEMOS:
        saved += asyncio.run(shoot(ROOT / "demos" / name, args.out))
    if not args.demo:
        saved.append(asyncio.run(shoot_sweep(args.out)))
        saved += asyncio.run(shoot_target(args.out))
        saved += asyncio.run(shoot_target(args.out, GPU_TARGET, f"{Path(TARGET_DEMO).stem}-gpu"))
    for path in saved:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
