"""The tab views, each mounted alone in a tiny app and fed a real analysis (real JAX, real Textual)."""

from __future__ import annotations

import asyncio
import re

from app_support import drain, press
from textual.app import App, ComposeResult
from textual.widget import Widget
from textual.widgets import Static
from view_support import DEMOS, SIZE, ViewHarness, run_view as run, shown

from shardscope.app.views import DiffView, GraphView, HloView, TimingsView
from shardscope.app.views.diff_lines import unified_lines
from shardscope.app.views.lines import LinesView
from shardscope.app.views.timings import seconds
from shardscope.render.diff import unified


def test_every_view_shows_a_placeholder_until_an_analysis_arrives(analysis_of):
    analysis = analysis_of("linear.py")
    for view_type, name in ((GraphView, "graph"), (DiffView, "diff"), (TimingsView, "timings"), (HloView, "hlo")):

        async def script(app, pilot, name=name):
            placeholder = app.view.query_one(f"#{name}-placeholder", Static)
            assert placeholder.display and "press r to run" in shown(placeholder)
            assert all(not c.display for c in app.view.query("LinesView, VerticalScroll"))
            app.view.show_analysis(analysis)
            await drain(pilot)
            assert not placeholder.display
            assert any(c.display and c.region.height > 0 for c in app.view.query("LinesView, VerticalScroll"))

        run(view_type(), script)


def test_graph_view_draws_the_naive_collective_in_its_loop_and_a_free_deferred_loop(analysis_of):
    analysis = analysis_of("linear.py")

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        naive, deferred = app.view.plain.split("deferred plan", 1)
        assert "2 runs/call, 1 of 1 collective equations in loops, 40 B/call" in naive
        # collectives are named by the value they carry, as in every other tab, their equation after
        assert re.search(r"⟳ scan_0 \[2 trips\] plan's chunk loop\s+x2/call\s+1 collective equation inside: grad\(params\) x2/call", naive)
        assert re.search(r"● grad\(params\) x2/call  psum_invariant_0 over s · 40 B/call \(20 B/run\)\s+inside scan_0 \[2 trips\]", naive)
        # the loop body's feeding graph: the chunk's inputs -> dot_general -> the all-reduce, in that order
        rows = {name: naive.index(name) for name in ("scan_0.xs0", "dot_general_1", "x2/call  40 B/call")}
        assert rows["scan_0.xs0"] < rows["dot_general_1"] < rows["x2/call  40 B/call"]
        assert "▼" in naive and "╭" in naive
        assert "1 run/call, all 1 collective equations once per call, 20 B/call" in deferred
        assert re.search(r"⟳ scan_0 \[2 trips\] plan's chunk loop\s+free of collectives", deferred)
        assert re.search(r"● grad\(params\) x1/call  psum_invariant_0 over s · 20 B/call \(20 B/run\)\s+once per call, outside every loop", deferred)
        # the single all-reduce sits after the loop, and the loop box says it has no collectives
        assert deferred.index("no collectives inside") < deferred.index("x1/call  20 B/call")
        assert "inside:" not in deferred and "equation inside" not in deferred

    run(GraphView(), script)


def test_graph_view_shows_nested_loops_of_the_rnn(analysis_of):
    analysis = analysis_of("rnn.py")
    naive_plan = analysis.plans["naive"]
    inner = next(c for c in naive_plan.collectives if len(c.loop_ids) == 2)

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        naive, deferred = app.view.plain.split("deferred plan", 1)
        chunks, steps = inner.loop_trip_counts
        assert (chunks, steps) == (2, 8)
        assert re.search(r"x16/call  psum_invariant_0 over s · 16,384 B/call \(1,024 B/run\)\s+inside scan_0 \[2 trips\] › \w+ \[8 trips\]", naive)
        assert "(runs 16x per call)" in naive
        assert f"{naive_plan.jaxpr_runs_per_call} runs/call" in naive
        assert deferred.count("free of collectives") == len(analysis.plans["deferred"].loops)
        # the two loops inside the chunk loop are both scan_0 and scan_1 of its body: named with
        # the loop around them, and by the line of rnn.py that wrote them
        scan_line = next(k for k, line in enumerate((DEMOS / "rnn.py").read_text().splitlines(), 1) if "lax.scan(step" in line)
        for path in ("scan_0/scan_0", "scan_0/scan_1"):
            assert re.search(rf"⟳ {path} \[8 trips\] lax.scan at rnn.py:{scan_line} \(rnn\)", naive), path
        assert len(re.findall(r"x1/call  psum_invariant_\d over s .* once per call, outside every loop", deferred)) == 3

    run(GraphView(), script)


def test_diff_view_colours_the_unified_diff_and_switches_to_side_by_side(analysis_of):
    analysis = analysis_of("linear.py")
    view = DiffView()

    async def script(app, pilot):
        assert view.check_action("toggle_layout", ()) is None  # greyed out: nothing to show yet
        view.show_analysis(analysis)
        await drain(pilot)
        text = view.query_one("#diff-unified", LinesView).plain
        removed = [line for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
        added = [line for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
        # naive all-reduces inside the loop body (indented); deferred casts before the loop
        assert any(re.match(r"-\s{6,}psum_invariant_0:f32\[5\] = psum_invariant", line) for line in removed)
        assert any("pvary" in line for line in added)
        assert any(line.startswith("@@") for line in text.splitlines())
        assert view.query_one("#diff-unified").display and not view.query_one("#diff-side-by-side").display
        view.query_one("#diff-unified").focus()
        await press(pilot, "s")
        await drain(pilot)
        assert view.side_by_side and view.query_one("#diff-side-by-side").has_focus
        assert view.query_one("#diff-side-by-side").display and not view.query_one("#diff-unified").display
        table = view.query_one("#diff-side-by-side", LinesView).plain.splitlines()
        assert re.match(r"\s+naive\s+│ deferred", table[0])
        column = table[0].index("│")
        # the naive all-reduce is a changed row: on the left only, marked, in the naive column
        row = next(line for line in table if "psum_invariant_0:f32[5] = psum_invariant" in line)
        assert row[0] in "-~" and row.index("psum_invariant_0") < column
        assert any("pvary" in line[column:] for line in table)
        assert all(len(line) <= SIZE[0] for line in table)  # folded to the view's width
        await press(pilot, "s")
        assert not view.side_by_side

    run(view, script)


def test_timings_view_shows_costs_ratio_and_error(analysis_of):
    analysis = analysis_of("linear.py")
    view = TimingsView()

    async def script(app, pilot):
        view.show_analysis(analysis)
        await drain(pilot)
        text = shown(view.query_one("#timings-body", Static))
        naive, deferred = analysis.plans["naive"], analysis.plans["deferred"]
        assert analysis.comparison.speedup_text() in text
        # naive, deferred, reduced: W's all-reduce once per chunk (2 chunks) in naive, once after the loop otherwise
        assert re.search(r"compiled runs per call\s+│\s+2\s+│\s+1\s+│\s+1\s+│", text)
        assert re.search(r"jaxpr runs per call\s+│\s+2\s+│\s+1\s+│\s+1\s+│", text)
        assert re.search(r"collective equations in loops\s+│\s+1 of 1\s+│\s+0 of 1\s+│", text)
        assert re.search(r"bytes moved \(per device\)\s+│\s+40 B\s+│\s+20 B", text)
        assert re.search(rf"max \|grad - reference\|\s+│\s+{naive.max_abs_err:.2e}\s+│\s+{deferred.max_abs_err:.2e}", text)
        temp = naive.memory["temp_size_in_bytes"]
        assert re.search(rf"memory: temporaries\s+│\s+{temp:,} B", text)
        for times in (naive.run_s, deferred.run_s, analysis.reference.run_s):
            assert seconds(times.median) in text and seconds(times.max) in text
        assert seconds(naive.compile_s) in text and seconds(analysis.reference.compile_s) in text
        assert "█" in text or "━" in text  # the bars

        view.measurements_hidden = True
        await drain(pilot)
        hidden = shown(view.query_one("#timings-body", Static))
        assert "···x" in hidden and "measured times hidden" in hidden
        assert seconds(naive.run_s.median) not in hidden and f"{analysis.speedup:.2f}x" not in hidden
        assert re.search(r"bytes moved \(per device\)\s+│\s+40 B\s+│\s+20 B", hidden)  # deterministic rows stay

    run(view, script)


def test_seconds_picks_a_readable_unit():
    assert seconds(0.000211) == "211 µs"
    assert seconds(0.00342) == "3.42 ms"
    assert seconds(1.25) == "1.25 s"


def test_unified_lines_colour_removed_added_and_hunk_lines(analysis_of):
    plans = analysis_of("linear.py").plans
    lines = unified_lines(unified(plans["naive"].canonical_text, plans["deferred"].canonical_text, "naive", "deferred"))
    style_of = {line.plain[:2]: str(line.style) for line in lines}
    assert style_of["--"] == style_of["++"] == "bold"
    assert {str(line.style) for line in lines if line.plain.startswith("@@")} == {"cyan"}
    assert {str(line.style) for line in lines if line.plain[:1] == "-" and line.plain[:3] != "---"} == {"red"}
    assert {str(line.style) for line in lines if line.plain[:1] == "+" and line.plain[:3] != "+++"} == {"green"}


def traced_only(demo: str, monkeypatch=None, **env):
    """An analysis of ``demo`` that was traced but not compiled or timed."""
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return analyze(Settings(DEMOS / demo, repeats=1), measure=False)


def test_views_of_a_traced_only_analysis_say_what_is_missing():
    analysis = traced_only("linear.py")
    assert not analysis.measured

    async def timings(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        text = shown(app.view.query_one("#timings-body", Static))
        assert "traced only" in text and re.search(r"collective runs per call\s+│\s+2\s+│\s+1", text)
        assert "ms" not in text

    async def hlo(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        assert "not compiled" in app.view.plain

    async def graph(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        assert "x2/call" in app.view.plain

    run(TimingsView(), timings)
    run(HloView(), hlo)
    run(GraphView(), graph)


def test_graph_view_caps_a_block_with_many_collectives_and_names_what_it_left_out(monkeypatch):
    from shardscope.app.views.graph import MAX_PER_LAYER

    analysis = traced_only("deep.py", monkeypatch, SHARDSCOPE_DEEP_DEPTH="6")
    naive = analysis.plans["naive"]
    assert len(naive.collectives) == 12 > MAX_PER_LAYER

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        naive_text = app.view.plain.split("deferred plan", 1)[0]
        boxes = [line for line in naive_text.splitlines() if "/call" in line and "│" in line]
        drawn = set(re.findall(r"│ (psum_invariant_\d+)", naive_text))
        assert len(drawn) == MAX_PER_LAYER and boxes
        not_drawn = re.search(r"not drawn \((\d+) of (\d+) nodes\): (.*)", naive_text)
        assert not_drawn and int(not_drawn.group(1)) > 0
        left_out = {f"psum_invariant_{k}" for k in range(12)} - drawn
        assert all(name in not_drawn.group(3) or "more)" in not_drawn.group(3) for name in left_out)
        # every collective is still listed with its cost, drawn or not
        assert len(re.findall(r"● .*/call  psum_invariant_\d+ over", naive_text)) == 8 and "and 4 more collectives in this block" in naive_text

    run(GraphView(), script)


def test_graph_view_opens_with_a_two_line_overview(analysis_of):
    analysis = analysis_of("rnn.py")

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        await drain(pilot)
        first, second = app.view.plain.splitlines()[:2]
        assert first == "naive    20 runs/call, 3 of 3 collective equations in loops, 17,024 B/call"
        assert second == "deferred 3 runs/call, all 3 collective equations once per call, 1,344 B/call"

    run(GraphView(), script)


def test_unknown_trip_counts_and_cond_branches_are_said_not_guessed(tmp_path):
    from _support import write_demo
    from test_cli import DYNAMIC_WHILE
    from test_custom_models import BRANCHY

    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    dynamic = analyze(Settings(write_demo(tmp_path, "dyn.py", DYNAMIC_WHILE), devices=4, chunk_size=2), measure=False)
    branchy = analyze(Settings(write_demo(tmp_path, "branchy.py", BRANCHY), devices=2, chunk_size=4), measure=False)

    async def graph_of_dynamic(app, pilot):
        app.view.show_analysis(dynamic)
        await drain(pilot)
        naive = app.view.plain.split("deferred plan", 1)[0]
        assert re.search(r"x\?/call  psum_invariant_\d+ over \w+ · \? B/call .*inside scan_0 \[4 trips\] › while_0 \[\? trips\]", naive)
        assert "? runs/call" in naive and "? B/call" in naive

    async def graph_of_branchy(app, pilot):
        app.view.show_analysis(branchy)
        await drain(pilot)
        assert "≤ 8 runs/call" in app.view.plain and "largest branch counted" in app.view.plain
        naive = app.view.plain.split("deferred plan", 1)[0]
        assert naive.count("(in a cond branch: only when that branch runs)") == 2  # two of the three

    async def timings_of_branchy(app, pilot):
        app.view.show_analysis(branchy)
        await drain(pilot)
        assert re.search(r"collective runs per call\s+│\s+≤ 8\s+│\s+2", shown(app.view.query_one("#timings-body", Static)))

    run(GraphView(), graph_of_dynamic)
    run(GraphView(), graph_of_branchy)
    run(TimingsView(), timings_of_branchy)


class TypingHarness(App):
    """A view next to an input, as the sidebar sits next to the tabs."""

    def __init__(self, view: Widget) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        from textual.widgets import Input

        yield Input(id="typing")
        yield self.view


def test_a_shown_view_takes_the_focus_unless_the_user_is_typing(analysis_of):
    analysis = analysis_of("linear.py")

    async def scenario(typing: bool):
        view = DiffView()
        app = TypingHarness(view) if typing else ViewHarness(view)
        async with app.run_test(size=SIZE) as pilot:
            if typing:
                app.query_one("#typing").focus()
            await drain(pilot)
            view.show_analysis(analysis)
            await drain(pilot)
            await drain(pilot)
            if typing:
                assert app.focused is app.query_one("#typing")
                return
            assert app.focused is view.query_one("#diff-unified")
            await press(pilot, "s")  # works at once: the diff has the focus
            await drain(pilot)
            assert view.side_by_side and app.focused is view.query_one("#diff-side-by-side")

    asyncio.run(scenario(typing=False))
    asyncio.run(scenario(typing=True))


def test_lines_view_draws_only_what_is_on_screen_and_scrolls():
    from rich.text import Text as RichText

    class Counting(LinesView):
        drawn: set[int] = set()

        def _strip(self, index):
            self.drawn.add(index)
            return super()._strip(index)

    view = Counting()

    async def script(app, pilot):
        view.show_lines([RichText(f"line {k}") for k in range(10_000)])
        await drain(pilot)
        assert view.virtual_size.height == 10_000 and max(view.drawn) < SIZE[1]
        view.scroll_end(animate=False)
        await drain(pilot)
        assert view.scroll_offset.y == 10_000 - view.size.height
        assert 9_999 in view.drawn and len(view.drawn) < 3 * SIZE[1]
        assert view.plain.splitlines()[1234] == "line 1234"

    run(view, script)
