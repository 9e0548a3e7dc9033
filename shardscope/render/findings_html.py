"""An :class:`~shardscope.engine.joined.inspection.Inspection` as an HTML fragment for notebooks.

A notebook puts the fragment inside its own page, so it has one root element with an id of
its own and every style rule is scoped under that id: nothing restyles the page around it.
Text inherits the page's colour; the only colours set are the verdict badges', each with its
own background (:data:`shardscope.verdict_kinds.KINDS`' ``badge``), so the fragment reads the same
on a light and a dark theme.
"""

from __future__ import annotations

import html
import uuid
from typing import TYPE_CHECKING

from shardscope.render.findings import COLUMNS, RIGHT_ALIGNED, notes, summary, table_rows
from shardscope.render.targets import CPU_HEADING, plan_notes, plan_verdict, shown_plans, target_heading, target_view
from shardscope.verdict_kinds import DEFERRABLE, KINDS, NEEDED, OF_NAME

if TYPE_CHECKING:
    from shardscope.engine.joined.inspection import Inspection

FAILING_MARK, PASSING_MARK = OF_NAME[DEFERRABLE].badge[0], OF_NAME[NEEDED].badge[0]
"""The colour of the summary's mark: a finding's badge's, or a needed collective's."""

_RULES = """
{root} {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace;
  font-size: 13px; line-height: 1.4; color: inherit; background: transparent; margin: 0.5em 0; }}
{root} .summary {{ font-weight: bold; margin: 0 0 0.4em 0; padding-left: 0.5em; border-left: 4px solid {mark}; }}
{root} table {{ border-collapse: collapse; margin: 0 0 0.4em 0; color: inherit; }}
{root} th, {root} td {{ padding: 2px 10px; border-bottom: 1px solid rgba(127, 127, 127, 0.35);
  text-align: left; white-space: nowrap; color: inherit; background: transparent; }}
{root} th {{ font-weight: bold; border-bottom: 1px solid rgba(127, 127, 127, 0.8); }}
{root} .num {{ text-align: right; font-variant-numeric: tabular-nums; }}
{root} .badge {{ display: inline-block; padding: 0 6px; border-radius: 3px; font-weight: bold; }}
{badges}
{root} ol.notes {{ margin: 0; padding-left: 0; list-style: none; }}
{root} ol.notes li {{ margin: 0 0 0.3em 0; white-space: normal; max-width: 110ch; }}
"""


def inspection_html(inspection: "Inspection") -> str:
    """One ``<div>`` with its scoped ``<style>``: the summary, the table of the compiled collectives
    (with the jaxpr's that have no instruction), the notes with the pairing and the fixes."""
    root_id = f"shardscope-{uuid.uuid4().hex[:12]}"
    return (
        f'<div id="{root_id}" class="shardscope-inspection">'
        f"<style>{_style(f'#{root_id}', bool(inspection.flagged))}</style>"
        f"{_mesh_note(inspection)}"
        f'<p class="summary">{html.escape(summary(inspection))}</p>'
        f"{_table(inspection) if inspection.paired else ''}"
        f"{_notes(inspection)}"
        "</div>"
    )


def _mesh_note(inspection: "Inspection") -> str:
    """The note of a program over fewer devices than its source asks for, or over one device with
    collectives (nothing without one)."""
    note = inspection.mesh_note
    return f'<p class="summary"><b>{html.escape(note, quote=False)}</b></p>' if note else ""


def _style(root: str, flagged: bool) -> str:
    """The style rules, every selector under ``root``."""
    badges = "\n".join(f"{root} .badge.{kind.name} {{ background: {kind.badge[0]}; color: {kind.badge[1]}; }}"
                       for kind in KINDS)  # each verdict's badge, from the one table
    mark = FAILING_MARK if flagged else PASSING_MARK
    return _RULES.format(root=root, badges=badges, mark=mark)


def _table(inspection: "Inspection") -> str:
    """A real ``<table>``: the same cells as the text rendering (:func:`table_rows`)."""
    head = "".join(f'<th class="{_align(column)}">{html.escape(column)}</th>' for column in COLUMNS)
    body = []
    for row in table_rows(inspection.paired):
        *cells, kind = row
        tds = "".join(f'<td class="{_align(column)}">{html.escape(cell)}</td>' for column, cell in zip(COLUMNS, cells))
        verdict = f'<span class="badge {kind}">{html.escape(kind)}</span>' if kind in OF_NAME else html.escape(kind)
        body.append(f"<tr>{tds}<td>{verdict}</td></tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _align(column: str) -> str:
    return "num" if column in RIGHT_ALIGNED else "text"


def _notes(inspection: "Inspection") -> str:
    """Each finding's source, verdict and fix, one list item each (nothing without findings)."""
    lines = notes(inspection.paired)
    if not lines:
        return ""
    return '<ol class="notes">' + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ol>"


def inspection_page(inspection: "Inspection") -> str:
    """An inspection's HTML: a step's dispatches as their text, else the findings table; one
    made for a target (``inspect_on``) shows that target's plan first, then the CPU's, each
    under a heading that says whose it is (as its text does)."""
    if inspection.dispatches is not None:
        return f"<pre>{html.escape(str(inspection))}</pre>"
    plans = shown_plans(inspection)
    if not plans:
        return inspection_html(inspection)
    sections = [(f"<h4>{_words(target_heading(plan))}</h4>"
                 f"{inspection_html(target_view(inspection, plan))}"
                 f"<p><b>{_words(plan_verdict(f'the {inspection.function} program', plan))}</b></p>"
                 + "".join(f"<p>{_words(note)}</p>" for note, _ in plan_notes(plan)))
                for plan in plans]
    return "".join(sections) + f"<h4>{_words(CPU_HEADING)}</h4>{inspection_html(inspection)}"


def _words(text: str) -> str:
    """``text`` escaped for an element's content (quotes kept: ``XLA:TPU's plan`` reads as the text's)."""
    return html.escape(text, quote=False)

