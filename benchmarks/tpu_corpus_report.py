"""Replay the stored TPU corpus: each program's estimate against its measured time on the chip.

    python -m benchmarks.tpu_corpus_report [--write] [--markdown]

Reads ``tests/fixtures/tpu_corpus/v5e_run*.jsonl.gz`` (measured by ``benchmarks/tpu_corpus.py`` on
a real v5e chip), estimates every module as ``shardscope.estimate_module(text, "v5e")`` does,
and prints measured / estimate per program, waited on and back to back. ``--write`` stores the
summary in ``shardscope/costmodel/checked.json`` (what every v5e estimate then says about how
sure it is; ``tests/test_tpu_corpus.py`` fails when it differs from a fresh replay);
``--markdown`` prints the table BENCHMARKS.md keeps.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from shardscope.costmodel.checked import CHECKED_FILE
from shardscope.costmodel.corpus import BAND, Check, check, load, summary
from shardscope.costmodel.estimate import chip_named
from shardscope.costmodel.roofline import seconds_words

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "tpu_corpus"
CORPORA = {"v5e": "v5e_run*.jsonl.gz"}
"""Each measured chip's corpus files, by chip name."""


def corpus_files(chip: str) -> list[Path]:
    """The corpus files of ``chip``, in the order they were measured."""
    return sorted(CORPUS.glob(CORPORA[chip]))


def replay(chip: str) -> list[Check]:
    """Every stored program of ``chip`` estimated and compared with its measurement."""
    return check(load(corpus_files(chip)), chip_named(chip))


def stored_summary(chip: str, checks: list[Check]) -> dict[str, object]:
    """What ``checked.json`` keeps for ``chip``: the summary, the programs out of their band, the corpus."""
    found = summary(checks)
    found["misses"] = sorted(c.program.name for c in checks if not c.holds)
    found["corpus"] = f"tests/fixtures/tpu_corpus, {found['programs']} programs"
    return found


def markdown(checks: list[Check]) -> str:
    """The per-program table: measured, estimate and their ratio, both ways."""
    lines = ["| program | kind | held out | waited on: measured / estimate | ratio | back to back: measured / "
             "estimate | ratio | |", "|---|---|---|---:|---:|---:|---:|---|"]
    for c in checks:
        e, p = c.estimate, c.program
        note = f"lower bound: {e.unmodelled_words()} not modelled" if e.lower_bound else ""
        note = note + ("; " if note and not c.holds else "") + ("**out of band**" if not c.holds else "")
        lines.append(f"| {p.name} | {p.kind} | {'yes' if p.held_out else ''} | {seconds_words(p.waited_s)} / "
                     f"{seconds_words(e.seconds)} | {c.waited_ratio:.2f}x | {seconds_words(p.dispatched_s)} / "
                     f"{seconds_words(e.dispatched_seconds)} | {c.dispatched_ratio:.2f}x | {note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the summaries in " + str(CHECKED_FILE.name))
    parser.add_argument("--markdown", action="store_true", help="print the table BENCHMARKS.md keeps")
    args = parser.parse_args(argv)
    summaries = {}
    for chip in CORPORA:
        checks = replay(chip)
        summaries[chip] = stored_summary(chip, checks)
        if args.markdown:
            print(markdown(checks))
        else:
            for c in checks:
                flag = "" if c.holds else "  out of band"
                print(f"{c.program.name:30} waited {c.waited_ratio:5.2f}x  back to back {c.dispatched_ratio:5.2f}x"
                      f"{'  lower bound' if c.estimate.lower_bound else ''}{flag}")
        print(json.dumps(summaries[chip]), file=sys.stderr)
    if args.write:
        CHECKED_FILE.write_text(json.dumps(summaries, indent=1, sort_keys=True) + "\n")
    low, high = BAND
    print(f"band {low}-{high}x", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
