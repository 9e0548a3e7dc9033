"""The command reference, rendered from shardscope's own argparse parser at build time.

An mkdocs hook (``hooks:`` in mkdocs.yml): a page holding the line ``<!-- cli-reference -->``
gets, in its place, one section per command of :func:`shardscope.cli.command_line` (its usage,
what it does, and a table of its options with their values, defaults and help), so the reference
cannot drift from the parser. An option whose help is ``argparse.SUPPRESS`` (the spawner's
internal ``--worker``) is left out, as ``--help`` leaves it out.
"""

from __future__ import annotations

import argparse
import functools
import re

from shardscope.cli import command_line
from shardscope.cli.parsing import CommandParser

MARKER = "<!-- cli-reference -->"
USAGE_WIDTH = 88
"""The width usage lines wrap at (argparse would take the terminal's)."""

_MARKDOWN_SPECIAL = re.compile(r"([\\*_\[\]|])")
"""What Markdown would read as markup in a help text; its backticks stay, as code."""


def on_page_markdown(markdown: str, page: object, config: object, files: object) -> str:
    """mkdocs' hook: the marker replaced by the rendered reference."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown


def render() -> str:
    """The whole reference: the ``shardscope`` command, then each subcommand in ``--help``'s order."""
    line = command_line()
    sections = [_section("shardscope", line.parser, line.parser.description or "", top_level=True)]
    for command in line.commands:
        sections.append(_section(command.prog, command, command.description or ""))
    return "\n\n".join(sections) + "\n"


def _section(prog: str, parser: CommandParser, summary: str, top_level: bool = False) -> str:
    heading = "## `shardscope`" if top_level else f"## `{prog}`"
    parts = [heading, "", _escaped(_sentence(summary)), "", "```", _usage(parser), "```"]
    if parser.epilog:
        parts += ["", _escaped(parser.epilog)]
    rows = [_row(action) for action in parser.options if action.help is not argparse.SUPPRESS]
    parts += ["", "| option | value | default | what it does |", "| --- | --- | --- | --- |", *rows]
    return "\n".join(parts)


def _usage(parser: argparse.ArgumentParser) -> str:
    """``parser.format_usage()`` at :data:`USAGE_WIDTH` columns, whatever the terminal."""
    formatter_class = parser.formatter_class
    parser.formatter_class = functools.partial(formatter_class, width=USAGE_WIDTH)  # type: ignore[assignment]
    try:
        return parser.format_usage().strip()
    finally:
        parser.formatter_class = formatter_class


def _row(action: argparse.Action) -> str:
    names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar or action.dest.upper()}`"
    return f"| {names} | {_value(action)} | {_default(action)} | {_escaped(_help(action))} |"


def _value(action: argparse.Action) -> str:
    """What the option takes: its metavar, its choices, or nothing for a flag."""
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action.choices, dict):
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    if not action.option_strings:
        return "positional" + (" (optional)" if action.nargs == "?" else "")
    metavar = action.metavar or action.dest.upper()
    value = f"`{metavar}`"
    return f"{value} (repeatable)" if isinstance(action.default, list) else value  # action="append", default=[]


def _default(action: argparse.Action) -> str:
    default = action.default
    if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 or default == []:
        return ""
    return f"`{default}`"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:  # argparse's own expansion: %(default)s and its kin
        params = {**vars(action), "prog": "shardscope"}
        params = {key: (value.__name__ if hasattr(value, "__name__") else value) for key, value in params.items()}
        text = text % params
    return _sentence(text)


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] if text else text


def _escaped(text: str) -> str:
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    return text.replace("<", "&lt;").replace(">", "&gt;")
