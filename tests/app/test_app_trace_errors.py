"""The error panel quotes JAX's message (the lines to act on), and names a directory as one."""

from __future__ import annotations

from _support import CARRY_FROM_ZEROS, write_demo
from app_support import SIZE, make_app, run, settle

from shardscope.app.widgets.error_panel import ErrorPanel


def test_the_error_panel_quotes_the_carry_type_line(tmp_path):
    path = write_demo(tmp_path, "carry.py", CARRY_FROM_ZEROS)

    async def scenario():
        app = make_app(path, chunk_size=8)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and app.analysis is None
            assert "The input carry h has type float32[8,4] but" in panel.message
            assert "float32[8,4]{V:s}" in panel.message
            assert panel.hint.startswith("derive the initial carry from x")

    run(scenario())


def test_a_directory_is_named_in_the_error_panel(tmp_path):
    (tmp_path / "model.py").write_text("")

    async def scenario():
        app = make_app(tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown
            assert panel.message == f"{tmp_path} is a directory, not a demo file."
            assert "model.py" in panel.hint

    run(scenario())
