"""What the layers above the engine add to an :class:`~shardscope.engine.inspection.Inspection`.

An Inspection is a value: its renderings (:mod:`shardscope.render.findings`, ``findings_html``)
and its what-if (:mod:`shardscope.whatif.what_if`) live above the engine and register here when
they are imported (``shardscope.inspect`` imports them). This module imports nothing, so a
rendering registers without loading the engine (``import shardscope.cli`` stays fast).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

Inspected = Any
"""An :class:`~shardscope.engine.inspection.Inspection`: named, not imported (inspection.py imports
this module, and the registry must load without the engine)."""


class Rewrites(Protocol):
    """What :meth:`Inspection.what_if` returns: :class:`shardscope.whatif.what_if.WhatIf` (the
    engine does not import the what-if, which sits above it)."""

    @property
    def verified(self) -> tuple[Any, ...]:
        """The rewrites that are checked savings."""


@dataclass
class Extensions:
    """What the layers above the engine add to an :class:`Inspection`, registered when they are
    imported: its renderings (:mod:`shardscope.render.findings` and ``findings_html``) and its
    what-if (:mod:`shardscope.whatif.what_if`). The engine names neither: an Inspection is a value,
    printed and rewritten by the layers that know how (``shardscope.inspect`` imports them)."""

    text: "Callable[[Inspected], str] | None" = None
    rich: "Callable[[Inspected], Any] | None" = None
    html: "Callable[[Inspected], str] | None" = None
    what_if: "Callable[[Inspected], Rewrites] | None" = None


EXTENSIONS = Extensions()
"""The one registry of :class:`Extensions` (filled at import of the layers above)."""
