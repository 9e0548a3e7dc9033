"""Rewrite the docs' command-output samples from real runs.

``make samples`` runs ``python -m screenshots.samples``: in README.md and every page under
docs/ (:func:`documents`), every fenced block after a marker

    <!-- sample: report demos/rnn.py -->
    <!-- sample: report demos/linear.py --project nvlink-h100:8 | from projected onto -->
    <!-- sample: check demos/train_step.py --function step | lines 12 | status ; check ... -->

is replaced by ``$ shardscope ARGS`` and what the command prints, piped at :data:`COLUMNS`
columns, from this checkout. ``from TEXT`` keeps the output from the first line holding TEXT,
``lines N`` its first N lines (``...`` marks what is left out), ``status`` writes the exit status
beside the command; ``;`` separates several commands in one block. A command that two pages
show runs once. ``--check`` rewrites nothing and exits 1 when a sample's structure
(:func:`structure`: rows, columns, counts and bytes, with times and ratios masked) differs from
a fresh run's; the tests run the same comparison. The samples are made in the reference
environment (``.venv``: jax 0.10.2), as the screenshots are.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shardscope.render.exports import write_atomic

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COLUMNS = 100
"""The width the samples are printed at (prose wraps there; tables keep their natural width)."""

_MARKER = re.compile(r"^<!-- sample: (?P<runs>.+?) -->\n```\n(?P<body>.*?)```\n", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Run:
    """One command of a sample and which part of its output the sample shows."""

    args: tuple[str, ...]
    start: str | None = None  # ``from TEXT``
    lines: int | None = None  # ``lines N``
    status: bool = False  # ``status``

    @classmethod
    def parse(cls, text: str) -> "Run":
        """``check demos/x.py --function f | lines 12 | status``."""
        command, *options = (part.strip() for part in text.split("|"))
        start = lines = None
        status = False
        for option in options:
            word, _, rest = option.partition(" ")
            if word == "from":
                start = rest
            elif word == "lines":
                lines = int(rest)
            elif word == "status":
                status = True
            else:
                raise ValueError(f"unknown sample option {option!r}")
        return cls(tuple(command.split()), start, lines, status)


def parse_runs(marker: str) -> list[Run]:
    """The runs of one marker (``;`` between commands)."""
    return [Run.parse(part) for part in marker.split(";") if part.strip()]


def run(command: Run) -> tuple[str, int]:
    """What ``shardscope ARGS`` prints on stdout through a pipe at :data:`COLUMNS`, and its status."""
    env = {**os.environ, "COLUMNS": str(COLUMNS)}
    result = subprocess.run([sys.executable, "-m", "shardscope", *command.args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"shardscope {' '.join(command.args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout, result.returncode


def sample_text(command: Run, output: str, status: int) -> str:
    """The lines a sample shows for one run: the command, then the part of its output chosen."""
    head = f"$ shardscope {' '.join(command.args)}"
    if command.status:
        head = f"{head:<63} # exit status {status}"
    lines = [line.rstrip() for line in output.rstrip("\n").splitlines()]
    shown, cut_before, cut_after = lines, False, False
    if command.start is not None:
        first = next(i for i, line in enumerate(lines) if command.start in line)
        shown, cut_before = lines[first:], first > 0
    if command.lines is not None:
        shown, cut_after = shown[: command.lines], len(shown) > command.lines
    return "\n".join([head, *(["..."] if cut_before else []), *shown, *(["..."] if cut_after else [])])


def fresh_sample(marker: str, run: Callable[[Run], tuple[str, int]] = run) -> str:
    """The body of the sample ``marker`` describes, from fresh runs (``run``: how a command is run,
    a process of its own unless a caller gives another way)."""
    parts = []
    for command in parse_runs(marker):
        output, status = run(command)
        parts.append(sample_text(command, output, status))
    return "\n".join(parts) + "\n"


def documents() -> list[Path]:
    """The files whose samples are made and checked: README.md, then docs/'s pages in order of
    their paths (the developer notes too; the hooks' folder holds code, not pages)."""
    pages = sorted(path for path in DOCS.rglob("*.md") if "hooks" not in path.relative_to(DOCS).parts)
    return [README, *pages]


def samples(text: str) -> list[tuple[str, str]]:
    """``(marker, body)`` of every sample in a document's text."""
    return [(match["runs"], match["body"]) for match in _MARKER.finditer(text)]


def rewrite(text: str, fresh: dict[str, str]) -> str:
    """``text`` with each sample's body replaced by ``fresh[marker]``."""
    return _MARKER.sub(lambda m: f"<!-- sample: {m['runs']} -->\n```\n{fresh[m['runs']]}```\n", text)


_BOX = re.compile(r"[┏┓┗┛┣┫┳┻╋━┃┡┩╇┢┪╈┠┨┯┷┿─│┌┐└┘├┤┬┴┼═║╔╗╚╝]")
_MASKS = (
    # the comparison sentence: which way it goes depends on the timings
    (re.compile(r"\b(\w+) is \d+(?:\.\d+)?x (?:faster|slower) than (\w+)"), r"<comparison of \2 and \1>"),
    (re.compile(r"\bno measurable difference between (\w+) and (\w+)"), r"<comparison of \1 and \2>"),
    (re.compile(r"\btoo few rounds to compare (\w+) and (\w+)"), r"<comparison of \1 and \2>"),
    (re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?\s?(?:s|ms|us|µs|ns)\b"), "<time>"),
    (re.compile(r"\b\d+\.\d{3} \(\d+\.\d\d-\d+\.\d\d\)"), "<time>"),  # the sweep's run ms (min-max) cells
    (re.compile(r"\d+(?:\.\d+)?-\d+(?:\.\d+)?x\b"), "<ratios>"),
    (re.compile(r"\d+(?:\.\d+)?x\b"), "<ratio>"),
    (re.compile(r",\s+median\s+<ratio>"), ""),  # a spread that contains 1 also says its median
    # how many rounds were timed (more while a comparison is unsettled), and the median that a
    # sentence without a winner states in its brackets
    (re.compile(r"\bmedian\s+of\s+\d+\s+per-round\s+ratios(?:\s+<ratio>)?"), "median of <rounds> per-round ratios"),
    (re.compile(r"\b\d+(?:\.\d+)?e[-+]\d+\b"), "<error>"),  # a gradient error: floating-point noise
    (re.compile(r"\bnan\b"), "<error>"),
    # whether a cache served a compile follows what ran before: its mark and the note that explains it
    (re.compile(r"\(cache\): a cache served the executable.*?compiles afresh\."), ""),
    (re.compile(r"\s*\(cache\)"), ""),
)


def structure(text: str) -> list[str]:
    """What a sample must share with a fresh run: one item per table row (its cells), and the
    words of everything else, with times, ratios, gradient errors and the direction of the
    speedup masked. Wrapping, column widths and box lines do not count."""
    items: list[str] = []
    prose: list[str] = []
    for line in text.splitlines():
        if "│" in line or "┃" in line:
            items += _masked(" ".join(prose)).split()
            prose = []
            cells = [_masked(cell.strip()) for cell in _BOX.split(line) if cell.strip()]
            items.append("| " + " | ".join(cells) + " |")
        elif _BOX.sub("", line).strip():
            prose.append(line.strip())
    items += _masked(" ".join(prose)).split()
    return items


def _masked(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def main(argv: list[str] | None = None) -> int:
    """Rewrite the documents' samples (or, with ``--check``, compare them with fresh runs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, rewrite nothing; exit 1 on a difference")
    args = parser.parse_args(argv)
    fresh: dict[str, str] = {}
    stale = []
    for path in documents():
        text = path.read_text()
        for marker, body in samples(text):
            if marker not in fresh:
                fresh[marker] = fresh_sample(marker)
            if structure(body) != structure(fresh[marker]):
                stale.append(f"{path.relative_to(ROOT)}: {marker}")
        if not args.check:
            _write(path, text, fresh)
    if args.check:
        for where in stale:
            print(f"sample differs from a fresh run: {where}", file=sys.stderr)
        return 1 if stale else 0
    return 0


def _write(path: Path, text: str, fresh: dict[str, str]) -> None:
    updated = rewrite(text, fresh)
    if updated != text:
        write_atomic(path, updated, overwrite=True)
        print(f"rewrote the samples of {path.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
