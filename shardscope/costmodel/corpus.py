"""The step estimate checked against a real chip: compiled modules and their measured times, replayed.

A corpus is the JSON lines ``benchmarks/tpu_corpus.py`` writes (kept gzipped) on a machine with the chip: per
program, its compiled module (``compiled.as_text()``) and its time per call, waited on (each call
blocked on) and dispatched back to back (as a training loop runs). Replayed here, each module is
estimated for the chip (:func:`shardscope.estimate_module`) and each figure compared with its
measurement:

- a program whose every instruction the model covers must be within :data:`BAND` of its measured
  time, both ways;
- one with instructions the model cannot time (a sort, a top-k, a loop of unknown trip count) is a
  lower bound: its measured time must be at least the estimate (within the band's low end).

:func:`summary` counts them; ``shardscope/hardware/checked.json`` keeps that summary per chip,
written by ``python -m benchmarks.tpu_corpus_report --write`` and compared with a fresh replay in
the tests, so what an estimate says about how sure it is comes from the stored corpus.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from shardscope.hardware.chips import Chip
from shardscope.engine.hlo.roofline import StepEstimate, estimate_step
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.work import module_work

BAND = (0.8, 1.25)
"""Measured over estimated: a covered program's figures must fall in it."""


@dataclass(frozen=True)
class Measured:
    """One program of a corpus: its kind, whether it was held out of the model's tuning, its
    compiled module and its measured seconds per call (waited on; back to back)."""

    name: str
    kind: str
    held_out: bool
    hlo: str
    waited_s: float
    dispatched_s: float


@dataclass(frozen=True)
class Check:
    """One program's estimate against its measurement."""

    program: Measured
    estimate: StepEstimate
    outside_band: tuple[tuple[str, int], ...] = ()
    """The module's instructions of the kinds :mod:`shardscope.engine.hlo.band` finds, counted."""

    @property
    def waited_ratio(self) -> float:
        """Measured over estimated, waited on."""
        return self.program.waited_s / self.estimate.seconds

    @property
    def dispatched_ratio(self) -> float:
        """Measured over estimated, back to back."""
        return self.program.dispatched_s / self.estimate.dispatched_seconds

    @property
    def holds(self) -> bool:
        """Within :data:`BAND` both ways; for a lower bound, measured at least the estimate (to
        the band's low end) both ways."""
        low, high = BAND
        ratios = (self.waited_ratio, self.dispatched_ratio)
        if self.estimate.lower_bound:
            return all(r >= low for r in ratios)
        return all(low <= r <= high for r in ratios)


def load(paths: Iterable[Path]) -> list[Measured]:
    """The programs of the corpus files ``paths``, in order: a program measured in more than
    one file keeps its first successful measurement (a later run re-measures what failed)."""
    found: dict[str, Measured] = {}
    for path in paths:
        for line in read_lines(Path(path)):
            row = json.loads(line)
            if "hlo" not in row or row.get("error") or row["name"] in found:
                continue
            found[row["name"]] = Measured(row["name"], row["kind"], bool(row.get("held_out")), row["hlo"],
                                          float(row["waited_s"]), float(row["dispatched_s"]))
    return list(found.values())


def read_lines(path: Path) -> list[str]:
    """The lines of a corpus file, gzipped (``.jsonl.gz``, as the repository keeps them) or not."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode().splitlines()


def check(programs: Sequence[Measured], chip: Chip) -> list[Check]:
    """Each program's estimate on ``chip`` against its measurement."""
    checks = []
    for program in programs:
        work = module_work(parse(program.hlo))
        estimate = estimate_step(work, chip)
        if estimate is not None:
            checks.append(Check(program, estimate, work.outside_band))
    return checks


def outside_band(checks: Sequence[Check]) -> dict[str, dict[str, object]]:
    """Per kind of :mod:`shardscope.engine.hlo.band` held by a corpus program out of its band:
    the lowest and highest measured / estimate ratio, waited on or back to back, of every
    program holding that kind (in band or not; lower bounds left out), how many they are and
    how many of them are out of band. What an estimate of a module holding the kind then says."""
    covered = [c for c in checks if not c.estimate.lower_bound]
    missed = {kind for c in covered if not c.holds for kind, _ in c.outside_band}
    found: dict[str, dict[str, object]] = {}
    for kind in sorted(missed):
        holding = [c for c in covered if kind in dict(c.outside_band)]
        ratios = [r for c in holding for r in (c.waited_ratio, c.dispatched_ratio)]
        found[kind] = {"measured": [min(ratios), max(ratios)], "programs": len(holding),
                       "out_of_band": sum(not c.holds for c in holding)}
    return found


def summary(checks: Sequence[Check]) -> dict[str, object]:
    """How many programs were checked, covered, within the band, and lower bounds that held."""
    covered = [c for c in checks if not c.estimate.lower_bound]
    bounds = [c for c in checks if c.estimate.lower_bound]
    return {
        "programs": len(checks), "covered": len(covered), "within": sum(c.holds for c in covered),
        "lower_bounds": len(bounds), "bounds_held": sum(c.holds for c in bounds),
        "held_out": sum(c.program.held_out for c in checks), "band": list(BAND),
        "kinds": sorted({c.program.kind for c in checks}),
    }
