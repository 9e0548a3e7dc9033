"""How an :class:`~shardscope.engine.joined.inspection.Inspection` prints: the one place the rendering
layer puts its renderers on :data:`shardscope.engine.extensions.EXTENSIONS`.

The package (``shardscope/render/__init__.py``) calls :func:`register` when any of its modules is
first imported, so what ``print(inspection)``, its rich rendering and its notebook HTML show does
not depend on which rendering module was imported first, or whether one was imported at all.
"""

from __future__ import annotations

from shardscope.engine.extensions import EXTENSIONS
from shardscope.render.dispatches import rich_inspection
from shardscope.render.findings import to_text
from shardscope.render.findings_html import inspection_page


def register() -> None:
    """Put the three renderings of an inspection on :data:`EXTENSIONS`: its plain text
    (:func:`~shardscope.render.findings.to_text`), its rich rendering (a step's dispatches, a
    target's plan, or the findings table: :func:`~shardscope.render.dispatches.rich_inspection`)
    and its HTML (:func:`~shardscope.render.findings_html.inspection_page`)."""
    EXTENSIONS.text = to_text
    EXTENSIONS.rich = rich_inspection
    EXTENSIONS.html = inspection_page
