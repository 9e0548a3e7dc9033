"""``e`` writes the diff export next to earlier ones, never over them."""

from __future__ import annotations

from app_support import DEMOS, SIZE, make_app, press, run, settle
from shardscope.text import diff_text


def test_export_writes_the_diff_and_never_overwrites(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path)
        told: list[str] = []
        notify = app.notify
        app.notify = lambda message, **options: (told.append(str(message)), notify(message, **options))[1]
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            first = tmp_path / "linear-2dev-c16.diff"
            assert app.last_export == first
            assert first.read_text() == diff_text(app.analysis)
            await press(pilot, "e")
            second = tmp_path / "linear-2dev-c16-1.diff"
            assert app.last_export == second
            assert second.read_text() == first.read_text()
            assert sorted(p.name for p in tmp_path.iterdir()) == ["linear-2dev-c16-1.diff", "linear-2dev-c16.diff"]
            assert told == [str(first), str(second)]  # the user is told where each went

    run(scenario())


def test_export_before_any_result_does_nothing(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path, autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            assert list(tmp_path.iterdir()) == [] and app.last_export is None

    run(scenario())


def test_export_into_a_missing_directory_is_an_error_panel(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path / "missing")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            panel = app.query_one("#error")
            assert panel.shown and "No such directory" in panel.message
            assert app.is_running

    run(scenario())


def test_export_name_follows_the_settings(tmp_path):
    async def scenario():
        app = make_app(DEMOS / "linear.py", export_dir=tmp_path, devices=4, chunk_size=8)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            assert app.last_export == tmp_path / "linear-4dev-c8.diff"

    run(scenario())
