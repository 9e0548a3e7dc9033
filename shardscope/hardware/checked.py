"""How sure a chip's step estimate is: the summary of its replayed corpus, in words.

``checked.json`` (beside this module) holds, per chip, what replaying the stored corpus of
modules measured on that chip gave (:func:`shardscope.costmodel.corpus.summary`): how many
programs, how many the model covers, how many of those within the band both ways, and how many
lower bounds held. ``python -m benchmarks.tpu_corpus_report --write`` writes it from the corpus
and ``tests/test_tpu_corpus.py`` fails when it differs from a fresh replay, so these words are
never typed by hand. A chip without an entry is unchecked.

``outside_band`` keeps, per kind of instruction the corpus measured outside the band
(:mod:`shardscope.engine.hlo.band`), the measured / estimate ratios of the corpus programs that
hold one: what an estimate of a module holding that kind says (:func:`measured_kinds`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CHECKED_FILE = Path(__file__).with_name("checked.json")


@lru_cache(maxsize=1)
def checked_summaries() -> dict[str, dict[str, object]]:
    """Each checked chip's corpus summary, by chip name (``v5e``)."""
    if not CHECKED_FILE.exists():
        return {}
    return dict(json.loads(CHECKED_FILE.read_text()))


def checked_words(chip: str) -> str:
    """``checked on a v5e chip: 55 of 67 programs it covers within 0.8-1.25x ...``, or empty
    when ``chip`` has no stored corpus."""
    found = checked_summaries().get(chip)
    if not found:
        return ""
    band = found["band"]
    low, high = band if isinstance(band, list) else (0.8, 1.25)
    return (f"checked on a {chip} chip: {found['within']} of {found['covered']} programs it covers within "
            f"{low}-{high}x waited on and back to back, {found['bounds_held']} of {found['lower_bounds']} lower "
            f"bounds held ({found['corpus']})")


@dataclass(frozen=True)
class MeasuredKind:
    """A kind of instruction the corpus measured outside the band: the lowest and highest
    measured / estimate ratio (waited on or back to back) of the ``programs`` corpus programs that
    hold one (lower bounds left out), ``out_of_band`` of them outside it."""

    kind: str
    low: float
    high: float
    programs: int
    out_of_band: int


def measured_kinds(chip: str) -> tuple[MeasuredKind, ...]:
    """The kinds ``chip``'s corpus measured outside the band (empty without a corpus)."""
    found = checked_summaries().get(chip) or {}
    kinds = found.get("outside_band") or {}
    assert isinstance(kinds, dict)
    return tuple(MeasuredKind(kind, float(k["measured"][0]), float(k["measured"][1]), int(k["programs"]),
                              int(k["out_of_band"])) for kind, k in sorted(kinds.items()))


def unchecked_words(chip: str) -> str:
    """``unchecked on h100: published peaks``."""
    return f"unchecked on {chip}: published peaks"
