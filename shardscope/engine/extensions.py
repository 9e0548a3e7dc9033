"""What the layers above the engine add to an :class:`~shardscope.engine.joined.inspection.Inspection`.

An Inspection is a value: its renderings (registered by :func:`shardscope.render.inspections.register`,
which the rendering package calls when any of its modules is imported) and its what-if
(:mod:`shardscope.whatif.what_if`, when imported) live above the engine and register here
(``shardscope.inspect`` imports both). This module imports nothing, so a
rendering registers without loading the engine (``import shardscope.cli`` stays fast).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

Inspected = Any
"""An :class:`~shardscope.engine.joined.inspection.Inspection`: named, not imported (inspection.py imports
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
    imported: its renderings (:mod:`shardscope.render.inspections`, the one place they are set) and its
    what-if (:mod:`shardscope.whatif.what_if`). The engine names neither: an Inspection is a value,
    printed and rewritten by the layers that know how (``shardscope.inspect`` imports them)."""

    text: "Callable[[Inspected], str] | None" = None
    rich: "Callable[[Inspected], Any] | None" = None
    html: "Callable[[Inspected], str] | None" = None
    what_if: "Callable[[Inspected], Rewrites] | None" = None


EXTENSIONS = Extensions()
"""The one registry of :class:`Extensions` (filled at import of the layers above)."""
