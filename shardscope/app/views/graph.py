"""The Graph tab: for each block with collectives, the dataflow that feeds them, drawn as a graph.

For a collective inside a loop that block is the loop body: the drawing shows what the loop
computes every iteration only to all-reduce it. For the deferred plan the same drawing shows
the single all-reduce after the loop, fed by the loop itself, and the loop list says the loop
is free of collectives. The compared plans are stacked, baseline first, in one scrollable pane.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text

from shardscope.app.views.plans.plan_labels import LabelStyles, badge
from shardscope.app.summaries import plan_line
from shardscope.app.views import layered
from shardscope.engine.counts import count_text
from shardscope.app.views.pane import RenderedPane
from shardscope.engine.jaxpr.dataflow import feeding_subgraph

if TYPE_CHECKING:
    from rich.segment import Segment

    from shardscope.app.views.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis, PlanResult
    from shardscope.pipeline.comparison import Comparison

MAX_BLOCKS = 6
"""Blocks with collectives drawn per plan; the rest are listed by name."""
MAX_NODES = 36
"""Nodes drawn per block; the ones nearest the collectives are kept."""
MAX_PER_LAYER = 6
"""Nodes drawn side by side in one layer, which bounds the drawing's width."""
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
            names = ", ".join(
                f"{relative(c.equation_id, loop.equation_id)} {c.runs.badge()}" for c in loop.collectives[:4]
            )
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


def collective_line(plan: "PlanResult", collective) -> Text:
    """``● x2/call psum_invariant_0 over s · 40 B/call (20 B/run)  inside scan_0 [2 trips]``: cost first.

    Red when the collective runs inside a loop, green when it runs once per call.
    """
    style = STYLES.collective(collective.in_loop)
    text = Text("  ● ", style)
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


def node_box(plan: "PlanResult", node: str, elided_inputs: int) -> layered.Box:
    """The box of one graph node: name, output types, and what kind of node it is."""
    attrs = plan.graph.nodes[node]
    kind = attrs.get("kind", "op")
    lines = [Text(short(node), "bold" if kind in ("collective", "loop") else "")]
    lines.append(type_text(attrs.get("types", ())))
    style = ""
    if kind == "collective":
        collective = next(c for c in plan.collectives if c.equation_id == node)
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
        lines[0].append(" (cast, moves no data)", STYLES.cast)
        style = "green"
    elif kind == "input":
        lines[0].stylize("dim")
        style = "dim"
    if elided_inputs:
        lines.append(Text(f"+{elided_inputs} input(s) not drawn", "dim italic"))
    return layered.Box(tuple(lines), style)


def block_drawing(plan: "PlanResult", sinks: list[str]) -> list[RenderableType]:
    """The feeding sub-graph of ``sinks`` (collectives of one block), pruned and drawn."""
    graph = feeding_subgraph(plan.graph, *sinks)
    order = {node: k for k, node in enumerate(sinks)}

    def priority(node: str) -> tuple:
        return (order.get(node, len(order)), _KIND_ORDER.get(graph.nodes[node].get("kind"), 2))

    kept, elided = layered.prune(graph, MAX_NODES, MAX_PER_LAYER, priority)
    boxes = {
        node: node_box(plan, node, sum(1 for p in graph.predecessors(node) if p not in kept))
        for node in kept.nodes
    }
    parts: list[RenderableType] = [layered.draw(kept, boxes)]
    if elided:
        names = ", ".join(short(n) for n in elided[:12]) + (f", … ({len(elided) - 12} more)" if len(elided) > 12 else "")
        parts.append(Text(f"  not drawn ({len(elided)} of {graph.number_of_nodes()} nodes): {names}", "dim italic"))
    return parts


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


def plan_graph(plan: "PlanResult") -> Group:
    """Everything the Graph tab shows for one plan."""
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
        parts.extend(block_drawing(plan, [c.equation_id for c in collectives]))
    if len(blocks) > MAX_BLOCKS:
        rest = ", ".join(short(b) for b, _ in blocks[MAX_BLOCKS:])
        parts.append(Text(f"  {len(blocks) - MAX_BLOCKS} more block(s) with collectives not drawn: {rest}", "dim"))
    return Group(*parts)


def comparison_graph(analysis: "Analysis", comparison: "Comparison") -> Group:
    """The comparison's two plans, baseline first, under an overview line per plan."""
    baseline, candidate = analysis.plans[comparison.baseline], analysis.plans[comparison.candidate]
    return Group(overview(baseline, candidate), Text(), plan_graph(baseline), Text(), plan_graph(candidate))


class GraphView(RenderedPane):
    """The Graph tab: the compared plans' dataflow drawings, stacked, in one scrollable pane."""

    NAME = "graph"

    def render_analysis(self, analysis: "Analysis") -> RenderableType:
        """The default comparison's two plans of ``analysis``, baseline first."""
        return comparison_graph(analysis, analysis.comparison)

    def prepared_lines(self, prepared: PreparedViews) -> list[list[Segment]] | None:
        """The drawing the worker laid out (for the comparison picked in the app)."""
        return prepared.graph_lines
