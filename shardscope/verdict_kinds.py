"""Every verdict a collective can get, in one table: its name, whether ``check`` fails on it, the
style the renderings draw it in, its badge in HTML, and what it says in one sentence.

The engine gives each collective one of these names (:mod:`shardscope.engine.jaxpr.verdicts`,
:mod:`shardscope.engine.hlo.verdicts`, a dead one :data:`DEAD`); the text, rich, HTML, JSON and
GitHub renderings and the explorer read its row here: which verdicts fail the check
(:data:`FLAGGED`), the named style of the theme (:data:`THEME`, which
:mod:`shardscope.render.theme` gives every console the package prints on), the badge, the sentence.
A new verdict is one row here and the rule that gives it in the engine (``docs/contributing.md``);
``tests/test_verdict_kinds.py`` fails on a verdict's name written as a literal anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFERRABLE, LOOP_INVARIANT, STACKABLE, SPLITTABLE, NEEDED, DEAD = (
    "deferrable", "loop_invariant", "stackable", "splittable", "needed", "dead")


@dataclass(frozen=True)
class VerdictKind:
    """One verdict and how every rendering shows it."""

    name: str
    """What the tables, the notes and the JSON call it."""
    flagged: bool
    """True when the loop does work it need not (``check`` exits 1 on it); a trade-off is not."""
    look: str
    """How the theme draws it (a rich style definition): the style named :attr:`style` on a console."""
    badge: tuple[str, str]
    """``(background, text colour)`` of its HTML badge: readable on a light and a dark page."""
    sentence: str
    """What it says of a collective, in one sentence (the docs' table, the explorer's help)."""
    there: str
    """What a target's summary says of a collective in a loop with this verdict (``needed there``)."""

    @property
    def style(self) -> str:
        """The theme's name for its look: ``verdict.deferrable``."""
        return f"verdict.{self.name}"


KINDS: tuple[VerdictKind, ...] = (
    VerdictKind(DEFERRABLE, True, "bold red", ("#b71c1c", "#ffffff"),
                "A sum whose result is only added into a loop's carry: one sum after the loop gives the same "
                "result.", "deferrable there"),
    VerdictKind(LOOP_INVARIANT, True, "bold yellow", ("#f9a825", "#000000"),
                "Its operand does not change inside the loop: it can run once before it, its result kept alive.",
                "loop-invariant there"),
    VerdictKind(STACKABLE, False, "yellow", ("#fff59d", "#000000"),
                "Each iteration writes its result into its own slot: one collective of the stacked buffer after the "
                "loop gives the same result, the same bytes in one run (a trade-off: check does not fail on it).",
                "stackable there (a trade-off)"),
    VerdictKind(SPLITTABLE, False, "yellow", ("#fff59d", "#000000"),
                "A combined sum some of whose values only accumulate: split out, they run once after the loop, "
                "the rest stays (a trade-off: check does not fail on it).", "splittable there (a trade-off)"),
    VerdictKind(NEEDED, False, "green", ("#1b5e20", "#ffffff"),
                "The loop reads its result (or it runs outside every loop): it must run where it is.", "needed there"),
    VerdictKind(DEAD, False, "dim", ("#616161", "#ffffff"),
                "Nothing uses its result: the compiler removes it and it never runs.", "removed"),
)
"""Every verdict, most urgent first (the order the docs list them in)."""

OF_NAME: dict[str, VerdictKind] = {kind.name: kind for kind in KINDS}
"""Each verdict's row by its name."""

NAMES: tuple[str, ...] = tuple(OF_NAME)
FLAGGED: frozenset[str] = frozenset(kind.name for kind in KINDS if kind.flagged)
"""The verdicts ``shardscope check`` fails on: work the loop does that it does not need to."""
JUDGED: tuple[str, ...] = tuple(kind.name for kind in KINDS if kind.name != DEAD)
"""The verdicts a collective that runs can get (a dead one runs nowhere)."""

OUTCOME_STYLES: dict[str, str] = {
    "check.failed": "bold red",  # a finding, a failed check, a target keeping a collective in a loop
    "check.passed": "bold green",  # a passed check, a plan without findings
    "check.moved": "bold green",  # what a target's compiler moved out of a loop itself
    "check.below": "yellow",  # a finding that saves less than --min-saving: not counted
    "note": "dim",  # what a line says about whose plan it judged
}
"""The theme's other named styles: how a check's outcome reads, whatever the rendering."""

THEME: dict[str, str] = {kind.style: kind.look for kind in KINDS} | OUTCOME_STYLES
"""Every named style the renderings use, by name: a rich ``Theme`` of it is on every console
shardscope prints on (:mod:`shardscope.render.theme`)."""


def style_of(name: str) -> str:
    """The theme's style of the verdict ``name`` (empty for a word that is no verdict, such as ``-``)."""
    kind = OF_NAME.get(name)
    return kind.style if kind is not None else ""


def is_flagged(name: str) -> bool:
    """True when ``check`` fails on the verdict ``name``."""
    return name in FLAGGED
