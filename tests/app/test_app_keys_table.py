"""One key table: the bindings make the help screen's table, and the explorer's guide carries the same one."""

from __future__ import annotations

from app_support import DEMOS, ROOT, SIZE, drain, make_app, press, run, settle

from shardscope.app import ShardscopeApp
from shardscope.app.widgets.help_screen import HelpScreen, HelpText, help_text
from shardscope.app.base.bindings import DIFF_BINDINGS, HLO_BINDINGS, SWEEP_BINDINGS, help_rows, markdown_table


def docs_key_table() -> str:
    """The key table of docs/guides/explorer.md: from its ``| key | action |`` header to the first
    line that is not a row."""
    lines = (ROOT / "docs" / "guides" / "explorer.md").read_text().splitlines()
    start = lines.index("| key | action |")
    end = next(k for k in range(start, len(lines)) if not lines[k].startswith("|"))
    return "\n".join(lines[start:end])


def test_the_docs_key_table_is_the_one_made_from_the_bindings():
    assert docs_key_table() == markdown_table(help_rows(ShardscopeApp.BINDINGS))


def test_every_binding_is_in_the_help_and_the_palette_including_the_diff_tab_s():
    keys = [keys for keys, _ in help_rows(ShardscopeApp.BINDINGS)]
    for binding in [*ShardscopeApp.BINDINGS, *DIFF_BINDINGS, *SWEEP_BINDINGS, *HLO_BINDINGS]:
        if not binding.id.startswith("tab_"):
            assert f"`{binding.key_display or binding.key}`" in keys, binding.key
    rows = help_rows(ShardscopeApp.BINDINGS)
    assert ("`s`", DIFF_BINDINGS[0].tooltip) in rows and "`ctrl+p`" in keys

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "question_mark")
            await drain(pilot)
            assert isinstance(app.screen, HelpScreen)
            assert app.screen.query_one(HelpText).source == help_text(ShardscopeApp.BINDINGS)
            await press(pilot, "escape")
            await drain(pilot)
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            assert "Side by side" in commands
            commands["Side by side"].callback()  # from the Plans tab: opens the diff, side by side
            for _ in range(5):
                await drain(pilot)
            assert app.query_one("#tabs").active == "diff" and app.query_one("#diff-view").side_by_side

    run(scenario())
