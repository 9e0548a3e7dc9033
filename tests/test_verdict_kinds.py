"""Every verdict is one row of :data:`shardscope.verdict_kinds.KINDS`: its name is written nowhere
else as a literal, and every rendering (rich text, HTML badges, the explorer, JSON's ``flagged``)
takes the verdict's look and whether it fails the check from that row."""

from __future__ import annotations

import ast
import io
from pathlib import Path

from rich.console import Console
from rich.text import Text

import shardscope
from shardscope import verdict_kinds as verdicts
from shardscope.render.theme import THEME, Themed

PACKAGE = Path(shardscope.__file__).parent
HOME = PACKAGE / "verdict_kinds.py"


def _verdict_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each string literal in ``tree`` that is exactly a verdict's name, its
    row's words (``needed there``) or starts with its name as a label (``dead: ...``); prose that
    holds the word (``it is needed where it is``) and the docstrings are not."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and (node.value in verdicts.NAMES or node.value in THERE or node.value.startswith(LABELS))]


THERE = frozenset(kind.there for kind in verdicts.KINDS if " there" in kind.there)
"""What a target's summary says of each verdict (``needed there``; a dead one's ``removed`` is a
word of other tables too): the row's words, read from it."""
LABELS = tuple(f"{name}: " for name in verdicts.NAMES)
"""A text that starts with a verdict's name as its label (``dead: the compiler removes it``)."""


def test_no_module_but_the_table_writes_a_verdicts_name():
    written = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        for line, name in _verdict_literals(ast.parse(path.read_text(), str(path))):
            written[f"{path.relative_to(PACKAGE)}:{line}"] = name
    assert written == {}, "write the verdict's name as shardscope.verdict_kinds' constant (DEFERRABLE, DEAD, ...)"


def test_the_scan_finds_a_verdict_written_as_a_literal():
    tree = ast.parse('STYLES = {"deferrable": "red"}\nif kind == "dead": pass\nWORDS = "needed there"\n'
                     'WHY = "dead: removed"\nPROSE = "it is needed where it is"\n')
    assert sorted(_verdict_literals(tree)) == [(1, "deferrable"), (2, "dead"), (3, "needed there"), (4, "dead: removed")]


def test_the_engine_fails_the_check_on_the_tables_flagged_verdicts():
    from shardscope.engine.jaxpr import verdicts as engine
    from shardscope.engine.jaxpr.verdicts import Verdict

    assert engine.FLAGGED == verdicts.FLAGGED == {verdicts.DEFERRABLE, verdicts.LOOP_INVARIANT}
    assert set(engine.VERDICTS) == set(verdicts.NAMES) - {verdicts.DEAD}
    assert [Verdict(name, "").flagged for name in verdicts.NAMES] == [kind.flagged for kind in verdicts.KINDS]


def test_every_verdict_has_a_style_of_the_theme_and_a_badge():
    for kind in verdicts.KINDS:
        assert THEME.styles[kind.style] == Console().get_style(kind.look)  # a named style the theme defines
        assert all(colour.startswith("#") and len(colour) == 7 for colour in kind.badge)
        assert kind.sentence.endswith(".") and kind.there


def test_a_named_style_draws_its_look_on_a_console_that_never_heard_of_the_theme():
    """``rich.print(inspection)`` in a user's terminal: the renderable carries its theme."""
    plain = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=40)
    plain.print(Themed(Text(verdicts.DEFERRABLE, verdicts.OF_NAME[verdicts.DEFERRABLE].style)))
    themed = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=40, theme=THEME)
    themed.print(Text(verdicts.DEFERRABLE, style="bold red"))
    assert plain.file.getvalue() == themed.file.getvalue() and "\x1b[1;31m" in plain.file.getvalue()


def test_the_html_badges_are_the_tables():
    from shardscope.render.findings_html import _style

    rules = _style("#x", flagged=True)
    for kind in verdicts.KINDS:
        assert f"#x .badge.{kind.name} {{ background: {kind.badge[0]}; color: {kind.badge[1]}; }}" in rules
