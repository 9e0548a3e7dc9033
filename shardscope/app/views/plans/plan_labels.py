"""The one-line Rich labels of a plan tree: an equation, a sub-block, a loop with its trip count.

What matters comes first, so a narrow pane cuts the details, never the cost: a line that carries
a runs-per-call badge (``x16/call``) starts with it. The badge's colour says what it means: a
collective inside a loop (it runs once per iteration: red) or once per call (green). Colours
come from the tree's component classes (so themes apply): mesh-axis type annotations (``{V:s}``
varying, ``{R:s}`` reduced, ``{U:s}`` unreduced) in one colour; the Graph tab uses the same
:class:`LabelStyles`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.style import Style
from rich.text import Text

from shardscope.engine.jaxpr.loop_names import loop_words

if TYPE_CHECKING:
    from shardscope.engine.jaxpr.model import Block, Equation
    from shardscope.engine.jaxpr.dataflow import Collective

MAX_VALUES = 3
"""How many outputs or operands a label lists before it says ``+N``."""


@dataclass(frozen=True, slots=True)  # not a NamedTuple: its field ``count`` would hide tuple.count
class Inside:
    """The collectives below a tree node: how many, their runs per call, how many are in loops."""

    count: int = 0
    runs: int | None = 0
    in_loops: int = 0


@dataclass(frozen=True)
class LabelStyles:
    """The styles labels are drawn with (the defaults are what the Graph tab uses)."""

    type: Style = Style(dim=True)
    varying: Style = Style(color="yellow")
    collective_in_loop: Style = Style(color="red", bold=True)
    collective_once: Style = Style(color="green", bold=True)
    badge_in_loop: Style = Style(color="white", bgcolor="red", bold=True)
    badge_once: Style = Style(color="black", bgcolor="green", bold=True)
    cast: Style = Style(color="green", italic=True)
    loop: Style = Style(color="cyan", bold=True)
    primitive: Style = Style(bold=True)

    def collective(self, in_loop: bool) -> Style:
        """The colour of a collective's name: inside a loop, or once per call."""
        return self.collective_in_loop if in_loop else self.collective_once

    def badge(self, in_loop: bool) -> Style:
        """The colour of a runs-per-call badge: inside a loop, or once per call."""
        return self.badge_in_loop if in_loop else self.badge_once


def badge_text(executions: int | None) -> str:
    """``x2/call``: how many times one call runs a collective (``x?/call`` when unknown)."""
    return f"x{'?' if executions is None else f'{executions:,}'}/call"


def badge(text: str, in_loop: bool, styles: LabelStyles) -> Text:
    """The runs-per-call badge ``text`` (``x2/call``), padded, in the colour of what it means."""
    return Text(f" {text} ", styles.badge(in_loop))


def equation_label(eqn: Equation, collective: Collective | None, inside: Inside, styles: LabelStyles) -> Text:
    """``x2/call psum_invariant_0[s] f32[5] <- dot_general_1 · 20 B/run``: badge, name, types, operands.

    ``collective`` is the :class:`~shardscope.engine.jaxpr.dataflow.Collective` when ``eqn`` is one; ``inside``
    counts the collectives inside a loop or call.
    """
    text = Text(no_wrap=True, overflow="ellipsis")
    name = eqn.id.rsplit("/", 1)[-1]
    kind = eqn.kind
    axes = f"[{','.join(map(str, eqn.axes))}]" if eqn.axes and kind in ("collective", "cast") else ""
    if kind == "collective":
        in_loop = collective is not None and collective.in_loop
        text.append_text(badge(collective.runs.badge() if collective is not None else badge_text(None), in_loop, styles))
        text.append(" ")
        text.append(name + axes, styles.collective(in_loop))
    else:
        _inside(text, inside, styles)
        if kind == "cast":
            text.append(name + axes, styles.cast)
            text.append(" cast, moves no data", styles.cast)
        elif kind == "loop":
            trips = "?" if eqn.trip_count is None else f"{eqn.trip_count:,}"
            text.append(name, styles.loop)
            text.append(f" {eqn.primitive} x{trips}", styles.loop)
        else:
            text.append(name, styles.primitive)
            _named_params(text, eqn, styles)
    text.append("  ")
    _types(text, eqn.outputs, styles)
    if eqn.inputs:
        text.append("  <- ", styles.type)
        _names(text, eqn.inputs)
    if kind == "collective" and collective is not None:
        text.append(f"  {collective.bytes_per_execution:,} B/run", styles.type)
    if kind == "loop":  # which loop of the user's this is: nested loops' names repeat (scan_0 in scan_0)
        text.append(f"  {loop_words(eqn.primitive, eqn.written_as, eqn.source).removeprefix('the ')}", styles.type)
    return text


def block_label(block: Block, inside: Inside, styles: LabelStyles) -> Text:
    """``body: 5 equations`` for one of several sub-jaxprs (a while's cond and body, branches)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    _inside(text, inside, styles)
    text.append(block.role, styles.loop)
    text.append(f": {len(block.equations)} equation(s)", styles.type)
    return text


def gap_label(hidden: int, page: int, inside: Inside, styles: LabelStyles) -> Text:
    """``... 3,386 more equations (enter: show 200)``, after the badge of the collectives among them."""
    text = Text(no_wrap=True, overflow="ellipsis")
    _inside(text, inside, styles)
    text.append(f"... {hidden:,} more equation(s)", styles.loop)
    text.append(f"  enter: show {page:,}", styles.type)
    return text


def _named_params(text: Text, eqn: Equation, styles: LabelStyles) -> None:
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
    if len(values) > MAX_VALUES:
        text.append(f" +{len(values) - MAX_VALUES}", styles.type)
    if not values:
        text.append("()", styles.type)


def _names(text: Text, values: tuple) -> None:
    text.append(" ".join(value.name for value in values[:MAX_VALUES]))
    if len(values) > MAX_VALUES:
        text.append(f" +{len(values) - MAX_VALUES}")


def _inside(text: Text, inside: Inside, styles: LabelStyles) -> None:
    """``x20/call 3 collective equations in``: the badge of what runs below a node, then how many."""
    if not inside.count:
        return
    in_loop = inside.in_loops > 0
    text.append_text(badge(badge_text(inside.runs), in_loop, styles))
    noun = "collective equation" if inside.count == 1 else "collective equations"
    text.append(f" {inside.count} {noun} in ", styles.collective(in_loop))
