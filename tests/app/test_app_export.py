"""``e`` writes the diff export next to earlier ones, never over them; the palette's Screenshot too."""

from __future__ import annotations

from app_support import DEMOS, SIZE, drain, eventually, make_app, press, run, settle, write_demo

from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.screenshots import stable_svg
from shardscope.app.widgets.status import StatusLine
from shardscope.render.text import diff_text


def test_export_writes_the_diff_and_never_overwrites(tmp_path):
    """One app on linear.py whose export directory does not exist yet, one user's path (three
    tests, each on its own app, before):

    - ``e`` where the directory cannot be made (a file stands in its path) is an error panel that
      names it, and the app keeps running; escape gives the status line back to the results
      (test_escape_after_a_failed_export_gives_the_status_line_back_to_the_results).
    - ``e`` then makes the directory, as the palette's Screenshot does, and writes the diff there;
      a second ``e`` writes beside it, never over it; the user is told where each went.
    - The palette's Screenshot writes there too, a second one beside the first
      (test_the_palettes_screenshot_goes_into_the_export_directory_made_if_needed).
    """
    async def scenario():
        blocker = tmp_path / "shots"
        blocker.write_text("a file where the directory would go")
        export_dir = blocker / "today"  # cannot be made while the file is there
        app = make_app(DEMOS / "linear.py", export_dir=export_dir)
        told: list[str] = []
        notify = app.notify
        app.notify = lambda message, **options: (told.append(str(message)), notify(message, **options))[1]
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # an export where the directory cannot be made: an error panel; escape gives the status line back
            done = app.query_one(StatusLine).plain
            await press(pilot, "e")
            panel = app.query_one("#error")
            assert panel.shown and f"Could not write the diff in {export_dir}" in panel.message
            assert app.is_running
            status = app.query_one(StatusLine)
            assert status.state == "failed" and "the export failed: see the error panel" in status.plain
            assert app.query_one(ErrorPanel).shown
            await press(pilot, "escape")
            assert not app.query_one(ErrorPanel).shown
            assert status.state == "" and status.plain == done, "the analysis on screen is fine"
            assert blocker.read_text() == "a file where the directory would go"

            # the file gone, e makes the directory and writes the diff there, never over an earlier one
            blocker.unlink()
            told_before = len(told)
            await press(pilot, "e")
            first = export_dir / "linear-naive-vs-deferred-2dev-c16.diff"
            assert app.last_export == first
            assert first.read_text() == diff_text(app.analysis)
            await press(pilot, "e")
            second = export_dir / "linear-naive-vs-deferred-2dev-c16-1.diff"
            assert app.last_export == second
            assert second.read_text() == first.read_text()
            assert sorted(p.name for p in export_dir.iterdir()) == [
                "linear-naive-vs-deferred-2dev-c16-1.diff", "linear-naive-vs-deferred-2dev-c16.diff"]
            assert told[told_before:] == [str(first), str(second)]  # the user is told where each went

            # the palette's Screenshot writes there too
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            commands["Screenshot"].callback()  # what the palette's Screenshot runs (after a 0.1 s timer)
            first = export_dir / "linear-plans.svg"
            await eventually(pilot, first.exists, "the screenshot is written")
            assert first.read_text(encoding="utf-8") == app.export_screenshot(title="shardscope linear-plans")
            assert told[-1] == str(first) and first.is_absolute()
            commands["Screenshot"].callback()
            second = export_dir / "linear-plans-1.svg"
            await eventually(pilot, second.exists, "a second screenshot beside the first")
            assert sorted(p.name for p in export_dir.iterdir() if p.suffix == ".svg") == [
                "linear-plans-1.svg", "linear-plans.svg"]

    run(scenario())


def test_export_before_any_result_does_nothing(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path, autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            assert list(tmp_path.iterdir()) == [] and app.last_export is None

    run(scenario())


def test_export_name_follows_the_settings(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path, devices=4, chunk_size=8)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            assert app.last_export == tmp_path / "linear-naive-vs-deferred-4dev-c8.diff"
            await press(pilot, "b")  # the baseline steps to the next plan: the name says which two
            await eventually(pilot, lambda: app.comparison.baseline != "naive", "b picked another baseline")
            await settle(pilot)
            await press(pilot, "e")
            baseline, candidate = app.comparison.baseline, app.comparison.candidate
            assert app.last_export == tmp_path / f"linear-{baseline}-vs-{candidate}-4dev-c8.diff"

    run(scenario())


def test_escape_after_a_failed_run_keeps_saying_it_failed(tmp_path):
    async def scenario():
        path = write_demo(tmp_path / "demo.py")
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            path.write_text("def broken(:\n")
            await press(pilot, "r")
            await settle(pilot)
            status = app.query_one(StatusLine)
            assert status.state == "failed"
            await press(pilot, "escape")
            assert status.state == "failed", "the run did fail: the results on screen are an older file's"

    run(scenario())


def test_a_screenshot_that_cannot_be_saved_is_an_error_panel(tmp_path):
    async def scenario():
        blocker = tmp_path / "file"
        blocker.write_text("a file where the directory would go")
        app = make_app(DEMOS / "linear.py", export_dir=blocker / "shots", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.deliver_screenshot() is None
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "Could not save the screenshot" in panel.message and str(blocker) in panel.message
            assert "the screenshot failed" in app.query_one(StatusLine).plain
            assert blocker.read_text() == "a file where the directory would go"

    run(scenario())
def test_the_same_screen_gives_the_same_svg_bytes(tmp_path):
    async def scenario():
        svgs = []
        for _ in range(2):
            app = make_app(DEMOS / "linear.py", hide_measurements=True)
            async with app.run_test(size=SIZE) as pilot:
                await settle(pilot)
                await press(pilot, "n")
                await drain(pilot)
                svgs.append(app.export_screenshot(title="same"))
        assert svgs[0] == svgs[1]

    run(scenario())




def test_stable_svg_names_the_classes_after_the_drawing_alone():
    drawing = '<style>.terminal-{n}-r1 {{ fill: #fff }}</style><text class="terminal-{n}-r1">{text}</text>'
    one, other = stable_svg(drawing.format(n=111, text="x")), stable_svg(drawing.format(n=222, text="x"))
    assert one == other and "terminal-111" not in one
    assert stable_svg(drawing.format(n=111, text="y")) != one
