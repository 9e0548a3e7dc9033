"""One key table (bindings -> help -> README), one vocabulary, colours that mean one thing."""

from __future__ import annotations

import re

from app_support import DEMOS, ROOT, SIZE, make_app, run, settle
from textual.widgets import Markdown

from shardscope.app import ShardscopeApp
from shardscope.app.help_screen import HelpScreen, help_text
from shardscope.app.keys import DIFF_BINDINGS, help_rows, markdown_table
from shardscope.app.plan_labels import LabelStyles
from shardscope.app.plans_view import PlansView
from shardscope.app.status import StatusLine
from shardscope.app.summaries import IN_LOOP, ONCE
from shardscope.app.views.diff import fold

APP_SOURCES = sorted((ROOT / "shardscope" / "app").rglob("*.py"))
RETIRED_WORDS = ("collective(s)", "executed/call", "run(s)", "collectives executed", "runs per call)", "B each")
"""Names VOCAB.md retired: runs per call is "runs/call", equations are "collective equations"."""


def readme_key_table() -> str:
    """The README's key table: from its ``| key | action |`` header to the first line that is not a row."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| key | action |")
    end = next(k for k in range(start, len(lines)) if not lines[k].startswith("|"))
    return "\n".join(lines[start:end])


def test_the_readme_key_table_is_the_one_made_from_the_bindings():
    assert readme_key_table() == markdown_table(help_rows(ShardscopeApp.BINDINGS))


def test_every_binding_is_in_the_help_and_the_palette_including_the_diff_tab_s():
    rows = dict(help_rows(ShardscopeApp.BINDINGS))
    for binding in [*ShardscopeApp.BINDINGS, *DIFF_BINDINGS]:
        if not binding.id.startswith("tab_"):
            assert f"`{binding.key_display or binding.key}`" in rows, binding.key
    assert rows["`s`"].startswith("In the Diff tab") and "`1`-`5`" in rows and "`b`" in rows and "`ctrl+p`" in rows

    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            assert app.screen.query_one(Markdown).source == help_text(ShardscopeApp.BINDINGS)
            await pilot.press("escape")
            commands = {c.title: c for c in app.get_system_commands(app.screen)}
            assert "Side by side" in commands and "Sidebar" in commands
            commands["Side by side"].callback()  # from the Plans tab: opens the diff, side by side
            await pilot.pause()
            await pilot.pause()
            assert app.query_one("#tabs").active == "diff" and app.query_one("#diff-view").side_by_side

    run(scenario())


def test_app_sources_use_the_team_vocabulary():
    for path in APP_SOURCES:
        text = path.read_text()
        for word in RETIRED_WORDS:
            assert word not in text, f"{path.name}: {word!r}"


def test_every_tab_and_the_status_line_use_the_team_vocabulary():
    async def scenario():
        app = make_app(DEMOS / "rnn.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            shown = [app.query_one(StatusLine).plain, str(app.query_one("#naive-header").content)]
            for key, tab in zip("2345", ("graph", "diff", "timings", "hlo")):
                await pilot.press(key)
                await pilot.pause()
                if tab != "diff":
                    shown.append(app.query_one(f"#{tab}-view").plain)
            text = "\n".join(shown)
            assert "runs/call" in text and "collective equations" in text
            for word in RETIRED_WORDS:
                assert word not in text, word

    run(scenario())


def test_badges_are_red_inside_a_loop_and_green_once_per_call_in_every_place():
    """rnn: naive's x16/call (in the time loop) and deferred's x1/call (after the loop) differ."""

    async def scenario():
        app = make_app(DEMOS / "rnn.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            plans = app.query_one(PlansView)
            await pilot.press("n")
            naive, deferred = (plans.tree(name).cursor_node.label for name in ("naive", "deferred"))
            styles = plans.tree("naive").label_styles()
            assert naive.plain.startswith(" x16/call ") and deferred.plain.startswith(" x1/call ")
            assert _style_at(naive, 1) == styles.badge_in_loop and _style_at(deferred, 1) == styles.badge_once
            assert styles.badge_in_loop.bgcolor != styles.badge_once.bgcolor
            # the status line: naive's runs are in loops (red), deferred's once per call (green)
            done = app.query_one(StatusLine).state_text
            assert _style_of(done, "naive 20 runs/call") == IN_LOOP and _style_of(done, "deferred 3 runs/call") == ONCE

    run(scenario())


def test_the_graph_tab_colours_collectives_by_where_they_run(analysis_of):
    from shardscope.app.views.graph import STYLES, collective_line

    plans = analysis_of("rnn.py").plans
    in_loop = max(plans["naive"].collectives, key=lambda c: c.executions)
    once = plans["deferred"].collectives[0]
    assert in_loop.executions == 16 and once.executions == 1 and not once.in_loop
    line_in_loop, line_once = collective_line(plans["naive"], in_loop), collective_line(plans["deferred"], once)
    assert _style_of(line_in_loop, " x16/call ") == STYLES.badge_in_loop
    assert _style_of(line_once, " x1/call ") == STYLES.badge_once
    assert LabelStyles().badge(True) != LabelStyles().badge(False)


def test_the_side_by_side_diff_folds_between_tokens(analysis_of):
    """No piece of a folded jaxpr line ends inside a word (``frozens`` / ``et({'s'})`` was the bug)."""
    text = analysis_of("linear.py").plans["naive"].canonical_text
    for width in (30, 36, 48, 64):
        for line in text.splitlines():
            pieces = fold(line, width)
            assert all(len(piece) <= width for piece in pieces)
            assert re.sub(r"\s+", "", "".join(pieces)) == re.sub(r"\s+", "", line), "nothing lost or added"
            at = 0
            for k, piece in enumerate(pieces):
                content = piece.lstrip() if k else piece
                at = line.index(content, at) + len(content)
                if at < len(line):  # a break: at a space, or after a comma, = or bracket
                    assert line[at].isspace() or line[at - 1] in ",=([{", (width, piece, line[at:at + 10])


def _style_at(text, offset: int):
    return next(span.style for span in text.spans if span.start <= offset < span.end)


def _style_of(text, fragment: str):
    return _style_at(text, text.plain.index(fragment) + 1)
