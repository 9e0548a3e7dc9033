"""The one-line Rich labels of a plan tree: an equation, a sub-block, a loop with its trip count.

Colours come from the tree's component classes (so themes apply): mesh-axis type annotations
(``{V:s}`` varying, ``{R:s}`` reduced, ``{U:s}`` unreduced) in one, collectives and their ``x2/call`` badge in another, casts in a third.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text

from shardscope.counts import total_executions

MAX_VALUES = 3
"""How many outputs or operands a label lists before it says ``+N``."""


@dataclass(frozen=True)
class LabelStyles:
    """The styles labels are drawn with."""

    type: Style = Style(dim=True)
    varying: Style = Style(color="yellow")
    collective: Style = Style(color="red", bold=True)
    badge: Style = Style(color="white", bgcolor="red", bold=True)
    cast: Style = Style(color="green", italic=True)
    loop: Style = Style(color="cyan", bold=True)
    primitive: Style = Style(bold=True)


def equation_label(eqn: Any, collective: Any, inside: tuple[int, int | None], styles: LabelStyles) -> Text:
    """``psum_invariant_0[s]  x2/call  f32[5]  <- dot_general_1``: name, badge, types, operands.

    The name leads (it starts with the primitive) in the kind's colour. ``collective`` is the
    :class:`~shardscope.dataflow.Collective` when ``eqn`` is one; ``inside`` is (collectives
    inside this node, their executions per call) for loops and calls.
    """
    text = Text(no_wrap=True, overflow="ellipsis")
    name = eqn.id.rsplit("/", 1)[-1]
    kind = eqn.kind
    axes = f"[{','.join(map(str, eqn.axes))}]" if eqn.axes and kind in ("collective", "cast") else ""
    if kind == "collective":
        text.append(name + axes, styles.collective)
        runs = collective.runs.badge() if collective is not None else badge_text(None)
        text.append("  ")
        text.append(f" {runs} ", styles.badge)
    elif kind == "cast":
        text.append(name + axes, styles.cast)
        text.append("  cast, moves no data", styles.cast)
    elif kind == "loop":
        trips = "?" if eqn.trip_count is None else f"{eqn.trip_count:,}"
        text.append(name, styles.loop)
        text.append(f"  {eqn.primitive} x{trips}", styles.loop)
    else:
        text.append(name, styles.primitive)
        _named_params(text, eqn, styles)
    _inside(text, inside, styles)
    text.append("  ")
    _types(text, eqn.outputs, styles)
    if eqn.inputs:
        text.append("  <- ", styles.type)
        _names(text, eqn.inputs)
    if kind == "collective" and collective is not None:
        text.append(f"  {collective.bytes_per_execution:,} B each", styles.type)
    return text


def block_label(block: Any, inside: tuple[int, int | None], styles: LabelStyles) -> Text:
    """``body: 5 equations`` for one of several sub-jaxprs (a while's cond and body, branches)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(block.role, styles.loop)
    text.append(f": {len(block.equations)} equation(s)", styles.type)
    _inside(text, inside, styles)
    return text


def gap_label(hidden: int, page: int, collectives: list, styles: LabelStyles) -> Text:
    """``... 3,386 more equations (enter: show 200)`` and the collectives among them."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"... {hidden:,} more equation(s)", styles.loop)
    text.append(f"  enter: show {page:,}", styles.type)
    if collectives:
        _inside(text, (len(collectives), total_executions(collectives)), styles)
    return text


def badge_text(executions: int | None) -> str:
    """``x2/call``: how many times one call runs a collective (``x?/call`` when unknown)."""
    return f"x{'?' if executions is None else f'{executions:,}'}/call"


def _named_params(text: Text, eqn: Any, styles: LabelStyles) -> None:
    """Only the parameters that name a call (``name``, ``mesh``): the rest is in the Diff tab."""
    for key, value in eqn.params:
        if key in ("name", "mesh"):
            text.append(f" {key}={value}", styles.type)


def _types(text: Text, values: tuple, styles: LabelStyles) -> None:
    """``f32[16,5]{V:s} f32[5] +2``: the output types, varying axes in their own colour."""
    for i, value in enumerate(values[:MAX_VALUES]):
        if i:
            text.append(" ")
        text.append(value.type_str, styles.type)
        if value.vma_str:  # {V:..} varying, {R:..} reduced, {U:..} unreduced: one colour, JAX's letters
            text.append(value.vma_str, styles.varying)
    _more(text, values, styles)
    if not values:
        text.append("()", styles.type)


def _names(text: Text, values: tuple) -> None:
    text.append(" ".join(value.name for value in values[:MAX_VALUES]))
    if len(values) > MAX_VALUES:
        text.append(f" +{len(values) - MAX_VALUES}")


def _more(text: Text, values: tuple, styles: LabelStyles) -> None:
    if len(values) > MAX_VALUES:
        text.append(f" +{len(values) - MAX_VALUES}", styles.type)


def _inside(text: Text, inside: tuple[int, int | None], styles: LabelStyles) -> None:
    count, runs = inside
    if count:
        text.append(f"  {count} collective(s) inside ", styles.collective)
        text.append(f" {badge_text(runs)} ", styles.badge)
