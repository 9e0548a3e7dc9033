"""``shardscope demos``: the shipped demos, with what each shows and where they are."""

from __future__ import annotations

import argparse

from shardscope.cli.parsing import AddParser
from shardscope.sources.bundled import listing

NAME = "demos"


def register(add_parser: AddParser) -> None:
    """Add ``demos`` to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="list the shipped demos, with what each shows and where they are")
    parser.set_defaults(run=run)  # then --debug, shared


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """Print the list (reading it imports no demo and no JAX)."""
    print(listing())
    return 0
