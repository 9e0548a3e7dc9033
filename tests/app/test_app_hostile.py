"""Hostile inputs in the app (issue 8): error panels with one short message, the app keeps running."""

from __future__ import annotations

from app_support import SIZE, drain, make_app, press, run, settle, write_demo
from textual.widgets import Input

from shardscope.app.widgets.error_panel import ErrorPanel


def test_a_function_renamed_on_disk_is_followed_by_r(tmp_path):
    async def scenario():
        path = write_demo(tmp_path / "model.py", name="rnn")
        app = make_app(path, function="rnn")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.function == "rnn"
            write_demo(path, name="recurrent")  # renamed in the editor
            await press(pilot, "r")
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert not panel.shown, panel.message
            assert app.analysis.function == "recurrent"
            sidebar = app.query_one("#sidebar")
            assert sidebar.functions == ["recurrent"] and sidebar.function == "recurrent"

    run(scenario())


EXIT_AT_IMPORT = """
import sys

sys.exit(3)
"""

EXIT_IN_MODEL = """

import sys


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
def exits(W, x):
    sys.exit(3)
"""

RAISING_CALLBACK = """

def boom(value):
    raise ValueError("the callback failed on purpose")


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
def calls_back(W, x):
    jax.debug.callback(boom, x)
    return x @ W
"""

HEADER = "import jax\nimport jax.numpy as jnp\n\nimport shardscope\n"


def _panel_after_run(tmp_path, source, **settings):
    path = tmp_path / "demo.py"
    path.write_text(HEADER + source)

    async def scenario():
        app = make_app(path, **settings)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and app.is_running
            return panel.message, panel.hint

    return run(scenario())


def test_sys_exit_at_import_is_an_error_panel(tmp_path):
    message, hint = _panel_after_run(tmp_path, EXIT_AT_IMPORT)
    assert message == "The demo called sys.exit(3) while importing, line 8." and "__main__" in hint


def test_sys_exit_inside_the_model_is_an_error_panel(tmp_path):
    message, _ = _panel_after_run(tmp_path, EXIT_IN_MODEL)
    assert message == "The demo called sys.exit(3) inside exits, demo.py line 12."


def test_a_raising_callback_is_a_short_message(tmp_path):
    message, _ = _panel_after_run(tmp_path, RAISING_CALLBACK)
    assert message == "The naive plan failed while running: ValueError: the callback failed on purpose (demo.py line 8)."
    assert "Traceback" not in message and "\n" not in message


def test_the_export_key_writes_with_the_umask_like_the_cli(tmp_path):
    """``e`` writes with the umask; then, on the same app, a non-ASCII axis name is refused in the
    sidebar before any run (that was a test of its own, on its own app)."""
    import os
    import stat

    from shardscope.render.exports import current_umask

    async def scenario():
        app = make_app(write_demo(tmp_path / "model.py"), export_dir=tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "e")
            await drain(pilot)
            path = app.last_export
            assert path is not None and path.parent == tmp_path
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~current_umask()  # not mkstemp's 0600

            # a non-ASCII axis name is refused in the sidebar
            runs = app.run_id
            axis = app.query_one("#axis", Input)
            axis.value = "ñ"  # an identifier to Python; XLA aborts the process on it
            await drain(pilot)
            assert axis.has_class("-invalid")
            await press(pilot, "r")
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "'ñ'" in panel.message and "ASCII" in panel.hint
            assert app.run_id == runs  # refused before any run started
            assert app.is_running

    run(scenario())
