"""The parser every command registers its subparser with, and the reading of ``--link -25GB/s,5us``.

argparse keeps the options a parser has in a private list; :class:`CommandParser` keeps its own
list of the options added to it (the ``Action`` objects ``add_argument`` returns, whose
``option_strings`` and ``nargs`` are public), which :func:`glue_dash_values` reads.
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable, Protocol, Sequence


class CommandParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that keeps the options added to it, in order."""

    def __init__(self, **kwargs: Any) -> None:  # argparse's keywords, passed on
        self.options: list[argparse.Action] = []  # before argparse's __init__ adds -h
        super().__init__(**kwargs)

    def add_argument(self, *names_or_flags: str, **kwargs: Any) -> argparse.Action:  # argparse's keywords, passed on
        """``ArgumentParser.add_argument``, remembering the option it adds."""
        action = super().add_argument(*names_or_flags, **kwargs)
        self.options.append(action)
        return action

    @property
    def command(self) -> str:
        """The command this parser is of (``check`` for ``shardscope check``'s)."""
        return self.prog.rsplit(" ", 1)[-1]


class AddParser(Protocol):
    """``add_parser(name, help=...)`` of the ``shardscope`` parser's subcommands: what a command's
    ``register`` is given to add its own subparser."""

    def __call__(self, name: str, help: str) -> CommandParser: ...  # noqa: A002 - argparse's keyword


class CommandRun(Protocol):
    """What a command's subparser sets as ``run``: runs the command and returns its exit status.

    ``argv`` is the command line as parsed (the command first), which ``--processes`` workers run again.
    """

    def __call__(self, args: argparse.Namespace, argv: tuple[str, ...]) -> int: ...


def glue_dash_values(argv: Sequence[str], parsers: Iterable[CommandParser]) -> list[str]:
    """``--link -25GB/s,5us`` as ``--link=-25GB/s,5us``.

    argparse reads a value that starts with ``-`` (and is not a plain negative number) as
    another option, and says "expected one argument"; glued to its option, the value reaches
    the option's own check, which says what is wrong with it (a negative bandwidth). A word that
    is one of shardscope's options is left alone: ``--link --json`` is a missing value.
    """
    takes_value: set[str] = set()
    known = {"--"}
    for parser in parsers:
        for action in parser.options:
            known.update(action.option_strings)
            if action.option_strings and action.nargs is None:
                takes_value.update(action.option_strings)
    glued, i = [], 0
    while i < len(argv):
        word = argv[i]
        following = argv[i + 1] if i + 1 < len(argv) else None
        if word in takes_value and following and following.startswith("-") and following != "-" \
                and following.split("=", 1)[0] not in known:
            glued.append(f"{word}={following}")
            i += 2
            continue
        glued.append(word)
        i += 1
    return glued
