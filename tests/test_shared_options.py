"""The options several commands share are declared once (a row of ``cli.options.SHARED``), read
by keyword into one value (``CommonOptions``), and a command starts the same way as the others
(``cli.startup``): an option shared by commands is added in two files, this table's module and
the one that reads its value (docs/contributing.md, "A shared CLI option")."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import fields
from pathlib import Path

import pytest

from shardscope import cli
from shardscope.cli import COMMANDS, command_line, options, parse
from shardscope.cli.check import CheckOptions
from shardscope.cli.parsing import CommandParser

CLI = Path(cli.__file__).parent


def _declared_at(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """The parser built afresh, with the source line of every ``add_argument`` call that adds an
    option: ``{(command, option word): {(file, line), ...}}``, the line in shardscope/cli/ that
    wrote the option's words (the caller of the helper that added it, when the words are a row's)."""
    declared: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    add_argument = CommandParser.add_argument

    def recording(self: CommandParser, *words: str, **keywords: object) -> argparse.Action:
        frame = sys._getframe(1)
        while frame.f_code.co_filename == __file__:
            frame = frame.f_back  # type: ignore[assignment]  # the test's own frames are not the declaration
        where = (Path(frame.f_code.co_filename).name, frame.f_code.co_name)
        if where == ("options.py", "add_shared"):  # the row's words: declared where SHARED is
            where = ("options.py", "SHARED")
        for word in words:
            declared[(self.command, word)].add(where)
        return add_argument(self, *words, **keywords)

    monkeypatch.setattr(CommandParser, "add_argument", recording)
    command_line.__wrapped__()  # type: ignore[attr-defined]  # functools.cache's function, built again
    return declared


def test_an_option_several_commands_share_is_declared_once(monkeypatch):
    """Every option word that two commands give the same meaning (the same help) is written in one
    place: the row of SHARED, or add_demo_options (the demo commands' FILE and mesh options)."""
    declared = _declared_at(monkeypatch)
    line = command_line()
    meaning: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    for parser in line.commands:
        for action in parser.options:
            for word in action.option_strings:
                meaning[(word, action.help)].add(parser.command)
    shared = {key: commands for key, commands in meaning.items() if len(commands) > 1 and key[0] not in ("-h", "--help")}
    assert {word for word, _ in shared} >= {"--target", "--on", "--json", "--no-cache", "--debug", "--processes",
                                            "--profile", "--profile-dir", "--devices", "--function"}
    for (word, _), commands in shared.items():
        places = set().union(*(declared[(command, word)] for command in commands))
        assert len(places) == 1, f"{word} is declared in {sorted(places)}: declare it once, as a row of SHARED"
        assert places <= {("options.py", "SHARED"), ("options.py", "add_demo_options")}, (word, places)


def test_every_row_names_real_commands_and_each_has_its_options():
    line = command_line()
    words = {parser.command: {w for action in parser.options for w in action.option_strings} for parser in line.commands}
    for row in options.SHARED:
        assert set(row.commands) <= set(COMMANDS), row.flags
        for command in COMMANDS:
            assert set(row.flags) <= words[command] if command in row.commands else True, (row.flags, command)
    fields_of = {f.name for f in fields(options.CommonOptions)}
    dests = {row.keywords.get("dest", row.flags[0].lstrip("-").replace("-", "_")) for row in options.SHARED}
    assert dests - {"timeout", "distributed", "worker"} <= fields_of  # the process options are one field


def test_a_new_row_reaches_each_of_its_commands_after_their_own_options(monkeypatch):
    """The recipe's first file: a row added to SHARED is an option of each command it names, listed
    after the command's own options, and of no other command."""
    row = options.SharedOption(("--example-shared",), ("check", "report"), {"action": "store_true", "help": "an example"})
    monkeypatch.setattr(options, "SHARED", (*options.SHARED, row))
    line = command_line.__wrapped__()  # type: ignore[attr-defined]  # functools.cache's function, built again
    for parser in line.commands:
        words = [w for action in parser.options for w in action.option_strings]
        if parser.command in ("check", "report"):
            assert words[-1] == "--example-shared" and "--example-shared" in parser.format_help()
        else:
            assert "--example-shared" not in words


def test_the_shared_options_are_read_by_keyword_into_one_value():
    args, words = parse(["check", "linear", "--target", "tpu:v5e:2x2", "--target", "gpu:h100:8", "--on", "cpu",
                         "--format", "json", "--profile", "--debug"])
    checked = CheckOptions.from_args(args)
    assert checked.common == options.CommonOptions(targets=("tpu:v5e:2x2", "gpu:h100:8"), on="cpu", json=True,
                                                   profile=True, debug=True)
    assert checked.file == Path("linear") and not checked.github and checked.common.processes == cli.launch.IN_PROCESS
    args, words = parse(["report", "linear", "--processes", "2", "--no-cache"])
    common = options.CommonOptions.from_args(args, words)
    assert common.no_cache and common.processes.processes == 2 and common.processes.worker_argv == (
        "report", "linear", "--no-cache")
    args, _ = parse(["diff", "linear"])  # a command without --target, --on, --json: their defaults
    assert options.CommonOptions.from_args(args) == options.CommonOptions()


def test_a_row_for_a_command_that_does_not_list_it_is_refused():
    parser = CommandParser(prog="shardscope diff")
    with pytest.raises(ValueError, match="--target is not an option of diff"):
        options.add_shared(parser, "--target")
