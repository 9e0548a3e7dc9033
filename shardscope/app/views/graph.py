"""The Graph tab: for each block with collectives, the dataflow that feeds them, drawn as a graph.

For a collective inside a loop that block is the loop body: the drawing shows what the loop
computes every iteration only to all-reduce it. For the deferred plan the same drawing shows
the single all-reduce after the loop, fed by the loop itself, and the loop list says the loop
is free of collectives. The compared plans are stacked, baseline first, in one scrollable pane.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.binding import BindingType
from textual.worker import get_current_worker

from shardscope.app.base.bindings import GRAPH_BINDINGS
from shardscope.app.views.lines import lay_out, worker_console

from shardscope.app.views.plans.plan_labels import LabelStyles, badge
from shardscope.app.base.summaries import plan_line
from shardscope.app.views import layered
from shardscope.app.views.graph_folding import Folded, fold
from shardscope.engine.counts import count_text
from shardscope.app.views.pane import RenderedPane
from shardscope.engine.jaxpr.dataflow import feeding_subgraph

if TYPE_CHECKING:
    from rich.segment import Segment

    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis, PlanResult
    from shardscope.pipeline.comparison import Comparison

MAX_BLOCKS = 6
"""Blocks with collectives drawn per plan; the rest are listed by name."""
MAX_NODES = 36
"""Nodes drawn per block; the ones nearest the collectives are kept."""
MAX_PER_LAYER = 6
"""Nodes drawn side by side in one layer, which bounds the drawing's width."""
FOLD_ABOVE = 12
"""A block's drawing is folded (:func:`~shardscope.app.views.graph_folding.fold`) when more nodes
than this feed its collectives: a small one is clearer whole."""
MAX_LABEL = 30
"""Characters of a type line in a box before it is cut with an ellipsis."""

STYLES = LabelStyles()
"""The plan trees' colours, so a loop, a collective or ``{V:s}`` looks the same in every tab."""

_KIND_ORDER = {"collective": 0, "loop": 1, "op": 2, "call": 2, "cond": 2, "cast": 3, "input": 4}
_VARYING = re.compile(r"\{[VRU]:[^}]*\}")


def short(node: str) -> str:
    """A node's name inside its block: ``shard_map_0/scan_0/add_0`` -> ``add_0``."""
    return node.rsplit("/", 1)[-1]


def relative(node: str, ancestor: str) -> str:
    """``node``'s id as seen from inside ``ancestor``: names are only unique within a block."""
    prefix = ancestor + "/"
    return node[len(prefix):] if node.startswith(prefix) else short(node)


def loop_path(plan: "PlanResult", loop_ids: tuple[str, ...]) -> Text:
    """``scan_0 [2 trips] › scan_1 [8 trips]``: the loops around something, outermost first."""
    trips = {loop.equation_id: loop.trip_count for loop in plan.loops}
    text = Text()
    for k, loop_id in enumerate(loop_ids):
        if k:
            text.append(" › ", "dim")
        trip = trips.get(loop_id)
        text.append(short(loop_id), STYLES.loop)
        text.append(f" [{'?' if trip is None else trip} trips]", STYLES.loop)
    return text


def plan_summary(plan: "PlanResult") -> Text:
    """The plan's headline: runs per call, collective equations in loops, bytes per call."""
    text = Text.assemble((plan.title, "bold underline"), "  ")
    text.append_text(plan_line(plan))
    if plan.jaxpr_runs.upper_bound:
        text.append("  (collectives in cond branches: the largest branch counted)", "dim")
    return text


def loop_lines(plan: "PlanResult") -> list[Text]:
    """One line per loop, indented by nesting: its name with the loops around it (``scan_0/scan_1``:
    two loops in two bodies are both ``scan_0`` on their own), its trip count, the line that wrote
    it and the collectives inside it."""
    lines = []
    for loop in plan.loops:
        text = Text("  " * (len(loop.enclosing_ids) + 1) + "⟳ ")
        text.append(f"{loop.path} [{'?' if loop.trip_count is None else loop.trip_count} trips]", STYLES.loop)
        text.append(f" {loop.words.removeprefix('the ')}", "dim")
        if loop.collectives:
            names = ", ".join(f"{c.value or relative(c.equation_id, loop.equation_id)} {c.runs.badge()}"
                              for c in loop.collectives[:4])
            more = f", +{len(loop.collectives) - 4} more" if len(loop.collectives) > 4 else ""
            count = len(loop.collectives)
            text.append("  ")
            text.append_text(badge(loop.executed.badge(), True, STYLES))
            text.append(f" {count} collective equation{'s' if count > 1 else ''} inside: ", "bold red")
            text.append(names + more, "red")
        else:
            text.append("  free of collectives", "bold green")
        lines.append(text)
    return lines or [Text("  no loops", "dim")]


def collective_name(collective) -> str:
    """What a collective is called here, as in every other tab: the value it carries
    (``grad(p['W1'])``, the same in every plan), else its equation (``psum_invariant_0``)."""
    return collective.value or short(collective.equation_id)


def collective_line(plan: "PlanResult", collective) -> Text:
    """``● grad(params) x2/call psum_invariant_0 over s · 40 B/call (20 B/run)  inside scan_0 [2 trips]``:
    the value it carries first (as the Plans tab names it), then its cost and its equation.

    Red when the collective runs inside a loop, green when it runs once per call.
    """
    style = STYLES.collective(collective.in_loop)
    text = Text("  ● ", style)
    text.append(collective_name(collective), "bold")
    text.append_text(badge(collective.runs.badge(), collective.in_loop, STYLES))
    text.append(" ")
    text.append(short(collective.equation_id), style)
    text.append(f" over {','.join(collective.axes) or '?'}")
    text.append(f" · {count_text(collective.bytes_per_call)} B/call ({collective.bytes_per_execution:,} B/run)  ")
    if collective.in_loop:
        text.append("inside ")
        text.append_text(loop_path(plan, collective.loop_ids))
    else:
        text.append("once per call, outside every loop", STYLES.collective_once)
    if collective.in_conditional:
        text.append("  (in a cond branch: only when that branch runs)", "dim")
    return text


def type_text(types: tuple[str, ...]) -> Text:
    """Output types, with the varying-axes annotations in their own colour, cut to fit a box."""
    raw = ", ".join(types) or "()"
    if len(raw) > MAX_LABEL:
        raw = raw[: MAX_LABEL - 1] + "…"
    text = Text(raw)
    text.highlight_regex(_VARYING, STYLES.varying)
    return text


def node_box(plan: "PlanResult", node: str, elided_inputs: int, folded: Folded = Folded()) -> layered.Box:
    """The box of one graph node: name, output types, and what kind of node it is; a collective
    is named by the value it carries, its equation under it (``folded``: what was folded away on
    the paths into it)."""
    attrs = plan.graph.nodes[node]
    kind = attrs.get("kind", "op")
    lines = [Text(short(node), "bold" if kind in ("collective", "loop") else "")]
    style = ""
    if kind == "collective":
        collective = next(c for c in plan.collectives if c.equation_id == node)
        lines = [Text(_cut(collective_name(collective)), "bold"), Text(short(node), "dim")]
    lines.append(type_text(attrs.get("types", ())))
    if kind == "collective":
        lines.append(Text.assemble(badge(collective.runs.badge(), collective.in_loop, STYLES),
                                   f" {count_text(collective.bytes_per_call)} B/call"))
        style = "bold red" if collective.in_loop else "bold green"
    elif kind == "loop":
        loop = next(loop for loop in plan.loops if loop.equation_id == node)
        lines[0].append(f" ⟳ {'?' if loop.trip_count is None else loop.trip_count} trips", STYLES.loop)
        if loop.collectives:
            count = len(loop.collectives)
            lines.append(Text(f"{count} collective equation{'s' if count > 1 else ''} inside", "red"))
        else:
            lines.append(Text("no collectives inside", "green"))
        style = "cyan"
    elif kind == "cast":
        lines[0].append(" cast", STYLES.cast)  # moves no data (the Plans tab says so in full)
        style = "green"
    elif kind == "input":
        lines[0].stylize("dim")
        style = "dim"
    if folded.text():
        lines.insert(0, Text(folded.text(), "dim italic"))
    if elided_inputs:
        lines.append(Text(f"+{elided_inputs} input(s) not drawn", "dim italic"))
    return layered.Box(tuple(lines), style)


def _cut(text: str) -> str:
    """``text`` cut to a box's width (:data:`MAX_LABEL`) with an ellipsis."""
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def block_drawing(plan: "PlanResult", sinks: list[str], folded: bool = True) -> list[RenderableType]:
    """The feeding sub-graph of ``sinks`` (collectives of one block), pruned and drawn; ``folded``:
    only the collectives and the paths into them (:func:`~shardscope.app.views.graph_folding.fold`)."""
    graph = feeding_subgraph(plan.graph, *sinks)
    hidden: dict[str, Folded] = {}
    if folded and graph.number_of_nodes() > FOLD_ABOVE:
        graph, hidden = fold(graph, sinks)
    order = {node: k for k, node in enumerate(sinks)}

    def priority(node: str) -> tuple:
        return (order.get(node, len(order)), _KIND_ORDER.get(graph.nodes[node].get("kind"), 2))

    kept, elided = layered.prune(graph, MAX_NODES, MAX_PER_LAYER, priority)
    boxes = {
        node: node_box(plan, node, sum(1 for p in graph.predecessors(node) if p not in kept), hidden.get(node, Folded()))
        for node in kept.nodes
    }
    parts: list[RenderableType] = [layered.draw(kept, boxes)]
    if elided:
        names = ", ".join(_node_name(plan, n) for n in elided[:12]) + (
            f", … ({len(elided) - 12} more)" if len(elided) > 12 else "")
        parts.append(Text(f"  not drawn ({len(elided)} of {graph.number_of_nodes()} nodes): {names}", "dim italic"))
    return parts


def _node_name(plan: "PlanResult", node: str) -> str:
    """A node as the lists name it: a collective by its value, any other by its equation."""
    collective = next((c for c in plan.collectives if c.equation_id == node), None)
    return short(node) if collective is None else f"{collective_name(collective)} ({short(node)})"


def blocks_with_collectives(plan: "PlanResult") -> dict[str, list]:
    """The plan's collectives grouped by the block they sit in, in program order."""
    blocks: dict[str, list] = {}
    for collective in plan.collectives:
        blocks.setdefault(plan.graph.nodes[collective.equation_id]["block"], []).append(collective)
    return blocks


def block_heading(plan: "PlanResult", block: str, collectives: list) -> Text:
    """What a block drawing shows: a loop body (with its nesting) or the level outside loops."""
    loop_ids = collectives[0].loop_ids
    if loop_ids:
        text = Text("  body of ", "bold")
        text.append_text(loop_path(plan, loop_ids))
        executions = collectives[0].executions
        text.append(f"  (runs {count_text(executions)}x per call): what feeds its collective(s)", "bold")
    else:
        text = Text(f"  {short(block) or 'top level'} (outside every loop): what feeds its collective(s)", "bold")
    return text


def overview(*plans: "PlanResult") -> Text:
    """A line per plan above the drawings: where its collectives run, and how often."""
    text = Text()
    width = max((len(p.name) for p in plans), default=0) + 1
    for plan in plans:
        text.append(f"{plan.name:<{width}}", "bold")
        text.append_text(plan_line(plan))
        text.append("\n")
    text.rstrip()
    return text


def plan_graph(plan: "PlanResult", folded: bool = True) -> Group:
    """Everything the Graph tab shows for one plan (``folded``: see :func:`block_drawing`)."""
    parts: list[RenderableType] = [plan_summary(plan), Text("  loops:", "bold"), *loop_lines(plan)]
    if not plan.collectives:
        parts.append(Text("  no collectives: nothing to draw", "dim"))
    blocks = list(blocks_with_collectives(plan).items())
    for block, collectives in blocks[:MAX_BLOCKS]:
        parts.append(Text())
        parts.append(block_heading(plan, block, collectives))
        parts.extend(collective_line(plan, c) for c in collectives[:8])
        if len(collectives) > 8:
            parts.append(Text(f"  … and {len(collectives) - 8} more collectives in this block", "dim"))
        parts.extend(block_drawing(plan, [c.equation_id for c in collectives], folded))
    if len(blocks) > MAX_BLOCKS:
        rest = ", ".join(short(b) for b, _ in blocks[MAX_BLOCKS:])
        parts.append(Text(f"  {len(blocks) - MAX_BLOCKS} more block(s) with collectives not drawn: {rest}", "dim"))
    return Group(*parts)


FOLDED_NOTE = Text(f"drawings of more than {FOLD_ABOVE} nodes folded to the collectives and the paths into them "
                   "(what lies between counted): f shows every op", "dim")
UNFOLDED_NOTE = Text("every op that feeds a collective drawn: f folds them away again", "dim")


def comparison_graph(analysis: "Analysis", comparison: "Comparison", folded: bool = True) -> Group:
    """The comparison's two plans, baseline first, under an overview line per plan and a line
    saying whether the drawings are folded."""
    baseline, candidate = analysis.plans[comparison.baseline], analysis.plans[comparison.candidate]
    return Group(overview(baseline, candidate), FOLDED_NOTE if folded else UNFOLDED_NOTE, Text(),
                 plan_graph(baseline, folded), Text(), plan_graph(candidate, folded))


class GraphView(RenderedPane):
    """The Graph tab: the compared plans' dataflow drawings, stacked, in one scrollable pane;
    folded to the collectives and the paths into them until ``f`` shows every op."""

    NAME = "graph"
    BINDINGS: ClassVar[list[BindingType]] = [*GRAPH_BINDINGS]
    """The tab's keys, for the view on its own; in the app they are app bindings too."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.unfolded = False
        """True while every op shows (``f``); the worker lays out the folded drawing."""
        self._shown: tuple[Analysis, Comparison] | None = None

    def render_analysis(self, analysis: "Analysis") -> RenderableType:
        """The default comparison's two plans of ``analysis``, baseline first."""
        return comparison_graph(analysis, analysis.comparison, folded=not self.unfolded)

    def prepared_lines(self, prepared: PreparedViews) -> list[list[Segment]] | None:
        """The drawing the worker laid out (for the comparison picked in the app), folded; None
        while every op is to show (laid out here, :meth:`show_analysis`)."""
        return None if self.unfolded else prepared.graph_lines

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Show the comparison's drawing: the worker's when folded, else laid out in a thread worker."""
        comparison = analysis.comparison if prepared is None else prepared.comparison
        self._shown = (analysis, comparison)
        if self.unfolded and analysis.plans[comparison.baseline].graph is not None:
            self.remove_class("-empty")
            self._lay_out(analysis, comparison, folded=False)
            return
        super().show_analysis(analysis, prepared)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``f`` is greyed out until there is a drawing to fold or unfold."""
        if action == "toggle_fold":
            return None if self._shown is None else True
        return True

    def action_toggle_fold(self) -> None:
        """Show every op that feeds the collectives, or fold them away again (laid out in a thread)."""
        if self._shown is None:
            return
        self.unfolded = not self.unfolded
        self._lay_out(*self._shown, folded=not self.unfolded)

    @work(thread=True, exclusive=True, group="graph-layout", exit_on_error=False)
    def _lay_out(self, analysis: "Analysis", comparison: "Comparison", folded: bool) -> None:
        """Thread worker: lay the drawing out (a long program's takes a second), then show it."""
        lines = lay_out(worker_console(), comparison_graph(analysis, comparison, folded=folded))
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._show_laid_out, lines, (analysis, comparison))

    def _show_laid_out(self, lines: list[list[Segment]], shown: tuple["Analysis", "Comparison"]) -> None:
        if self._shown is not None and shown[0] is self._shown[0] and shown[1] is self._shown[1]:
            self.body.show_segments(lines)
