"""Long lines in the side-by-side diff fold between tokens; lines views mark where a line goes on."""

from __future__ import annotations

import asyncio

from app_support import drain
from rich.text import Text
from textual.app import App, ComposeResult

from shardscope.app.views.diff_lines import fold
from shardscope.app.views.lines import LinesView
from shardscope.render.text import diff_text

CAST = "    pvary_0:f32[8,5]{V:s} = pvary[axes=('s',) newly_manual_axes=frozenset({'s'})] scan_0.carry0"


def _tokens(line: str) -> list[str]:
    return line.split()


def test_a_jaxpr_line_folds_between_its_tokens_and_loses_nothing():
    pieces = fold(CAST, 48)
    assert len(pieces) > 1 and all(len(piece) <= 48 for piece in pieces)
    # every whitespace-separated token of the line is whole in exactly one piece
    assert [t for piece in pieces for t in _tokens(piece)] == _tokens(CAST)
    # continuation pieces are indented two more than the line, so they read as one
    assert all(piece.startswith(" " * 6) for piece in pieces[1:])
    assert "newly_manual_axes=frozenset({'s'})]" in [t for piece in pieces for t in _tokens(piece)]


def test_a_token_longer_than_the_column_breaks_after_punctuation_not_mid_word():
    line = "f(" + ",".join(f"argument{k}" for k in range(8)) + ")"
    pieces = fold(line, 24)
    assert "".join(p.strip() for p in pieces) == line
    assert all(len(p) <= 24 for p in pieces)
    assert all(p.rstrip().endswith((",", "(")) for p in pieces[:-1])  # the breaks fall after punctuation
    # with no punctuation at all the only choice left is to cut, still within the width
    word = "x" * 50
    pieces = fold(word, 20)
    assert len(pieces) == 3 and "".join(p.strip() for p in pieces) == word and all(len(p) <= 20 for p in pieces)


def test_every_line_of_a_real_diff_folds_without_splitting_a_token(analysis_of):
    analysis = analysis_of("rnn.py")
    lines = diff_text(analysis, analysis.comparison).splitlines()
    for width in (30, 57, 78):
        for line in lines:
            pieces = fold(line, width)
            assert all(len(p) <= width for p in pieces), (width, line)
            folded = [t for p in pieces for t in _tokens(p)]
            if all(len(t) <= width // 2 for t in _tokens(line)):  # short tokens are never cut
                assert folded == _tokens(line), (width, line)
            else:
                assert "".join(folded) == "".join(_tokens(line)), (width, line)


class _Lines(App):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        yield LinesView(id="lines")


def test_a_lines_view_marks_cut_lines_with_an_ellipsis_at_the_edge_they_continue_past():
    lines = ["short line", "a long line " + "that goes on " * 10 + "END", "   "]

    async def main() -> None:
        app = _Lines(lines)
        async with app.run_test(size=(40, 8)) as pilot:
            view = app.query_one(LinesView)
            view.show_lines([Text(line) for line in lines])
            await drain(pilot)
            width = view.size.width
            row = [view.render_line(y).text for y in range(3)]
            assert row[0].rstrip() == "short line" and "…" not in row[0]
            assert row[1].endswith("…") and row[1].startswith("a long line") and len(row[1]) == width
            assert "…" not in row[2]  # a line of spaces shows nothing to cut
            view.scroll_to(x=20, animate=False)
            await drain(pilot)
            row = [view.render_line(y).text for y in range(3)]
            assert row[1].startswith("…") and row[1].endswith("…")
            assert row[0].startswith("…") and row[0][1:].strip() == ""  # all of it is left of the view
            view.scroll_to(x=view.max_scroll_x, animate=False)
            await drain(pilot)
            last = view.render_line(1).text
            assert last.startswith("…") and last.rstrip().endswith("END")

    asyncio.run(main())


class _Rows(App):
    def compose(self) -> ComposeResult:
        from shardscope.app.widgets.text_rows import TextRows

        yield TextRows(Text("first line\n" + "second " * 20), id="cut")
        yield TextRows(Text("word " * 40), wrap=True, id="wrapped", classes="two")

    CSS = "#cut { width: 30; } #wrapped { width: 30; height: 2; }"


def test_text_rows_cut_each_line_or_wrap_into_their_height_and_say_what_was_left_out():
    from shardscope.app.widgets.text_rows import TextRows

    async def main() -> None:
        app = _Rows()
        async with app.run_test(size=(60, 10)) as pilot:
            await drain(pilot)
            cut, wrapped = app.query_one("#cut", TextRows), app.query_one("#wrapped", TextRows)
            assert cut.size.height == 2  # one row per line of the text
            rows = [cut.render_line(y).text for y in range(2)]
            assert rows[0].rstrip() == "first line" and rows[1].endswith("…") and len(rows[1]) == 30
            rows = [wrapped.render_line(y).text for y in range(2)]
            assert rows[0].startswith("word word") and "…" not in rows[0]
            assert rows[1].rstrip().endswith("…")  # 40 words do not fit in two rows of 30
            cut.update(Text("new"))
            await drain(pilot)
            assert cut.render_line(0).text.rstrip() == "new" and str(cut.content) == "new"

    asyncio.run(main())


def test_the_right_edge_mark_shows_left_of_the_scrollbar():
    lines = [f"line {k} " + "goes on " * 10 for k in range(30)]  # more lines than rows: a scrollbar

    async def main() -> None:
        app = _Lines(lines)
        async with app.run_test(size=(40, 8)) as pilot:
            view = app.query_one(LinesView)
            view.show_lines([Text(line) for line in lines])
            await drain(pilot)
            shown = view.scrollable_content_region.width
            assert shown < view.size.width  # the vertical scrollbar takes the last column(s)
            row = view.render_line(0).text
            assert row[shown - 1] == "…" and row.startswith("line 0 goes on")

    asyncio.run(main())
