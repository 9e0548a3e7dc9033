"""The HLO tab: the collectives the compiler really emitted, and whether they sit in a while body.

The jaxpr says what the program asks for; the compiled module says what runs. On CPU the naive
plan's all-reduce stays inside the while loop; other backends may move or combine collectives,
so the backend is always named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shardscope.app.views.pane import RenderedPane

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import Analysis, PlanResult


def backend_note(backend: str) -> Text:
    """Whose compiler produced these results, and what other compilers may do differently."""
    text = Text(f"These are the {backend} compiler's results. ", "italic")
    text.append(
        "GPU and TPU compilers may hoist collectives out of loops or combine them differently: "
        "run shardscope on the target backend to see what it does.",
        "dim italic",
    )
    return text


def placement(trip_counts: tuple[int | None, ...]) -> Text:
    """``in while body [2 trips] › while body [8 trips]`` or ``outside loops``."""
    if not trip_counts:
        return Text("outside loops", "bold green")
    text = Text("in ", "bold red")
    for k, trip in enumerate(trip_counts):
        if k:
            text.append(" › ", "dim")
        text.append(f"while body [{'?' if trip is None else trip} trips]", "bold red")
    return text


def plan_table(plan: "PlanResult") -> Table:
    """The compiled collectives of one plan: opcode, shape, computation and placement."""
    hlo = plan.hlo
    title = (
        f"{plan.name}: {hlo.count} collective instruction(s) compiled, {hlo.in_loops} in while bodies "
        f"(the jaxpr has {len(plan.collectives)})"
    )
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold", expand=True)
    table.add_column("opcode", no_wrap=True)
    table.add_column("shape", overflow="fold")
    table.add_column("computation", overflow="fold")
    table.add_column("where", overflow="fold")
    for collective in hlo.collectives:
        table.add_row(Text(collective.opcode, "bold"), collective.shape, collective.computation,
                      placement(collective.while_trip_counts))
    if not hlo.collectives:
        table.add_row(Text("none", "dim"), "", "", "")
    return table


def hlo_renderable(analysis: "Analysis") -> Group:
    """Every plan's compiled collectives, the backend, and the note about other compilers."""
    plans = list(analysis.plans.values())
    if plans[0].hlo is None:
        return Group(Text(f"Traced only: the {analysis.origin.noun}s were not compiled, so there is no HLO to show.",
                          "dim"))
    backend = plans[0].hlo.backend
    parts = [Text.assemble(("backend: ", "bold"), (backend, "bold cyan")), Text()]
    for plan in plans:
        parts += [plan_table(plan), Text()]
    return Group(*parts, backend_note(backend))


class HloView(RenderedPane):
    """The HLO tab: compiled collectives per plan, with the backend that compiled them."""

    NAME = "hlo"
    FIT_WIDTH = True

    def render_analysis(self, analysis: "Analysis") -> RenderableType:
        """The compiled collectives of both plans of ``analysis``."""
        return hlo_renderable(analysis)
