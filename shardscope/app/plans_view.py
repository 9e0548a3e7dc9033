"""The Plans tab: the naive and deferred programs side by side, with next/previous collective."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Input, Static, Tree

from shardscope.app.plan_labels import LabelStyles, badge
from shardscope.app.plan_tree import PlanTree
from shardscope.app.summaries import hottest, plan_line

PLANS = ("naive", "deferred")
"""The plans shown, left to right (the names of ``Analysis.plans``)."""

DETAILS_HINT = Text("the full line of the node under the cursor shows here (arrows, n/N)", "dim italic")

PLAN_ROLES = {
    "naive": "params invariant in the loop: the gradient is all-reduced every chunk",
    "deferred": "params cast to varying before the loop: one all-reduce after it",
}


def pair_by_value(collectives: dict[str, tuple]) -> list[dict[str, int]]:
    """Steps of n/N: per step, each plan's position of the collective carrying one value.

    Values repeat (two collectives of one source line): the k-th of a value pairs with the k-th.
    """
    steps: list[dict[str, int]] = []
    where: dict[tuple[str, int], dict[str, int]] = {}
    for name, found in collectives.items():
        seen: dict[str, int] = {}
        for position, c in enumerate(found):
            key = (c.value, seen.get(c.value, 0))
            seen[c.value] = key[1] + 1
            if key not in where:
                where[key] = {}
                steps.append(where[key])
            where[key][name] = position
    return steps


class PlansView(Widget):
    """Two :class:`PlanTree` columns; ``n``/``N`` walk both trees' collectives in step."""

    DEFAULT_CSS = """
    PlansView { height: 1fr; }
    PlansView > Horizontal { height: 1fr; }
    PlansView .plan-column { width: 1fr; height: 1fr; }
    PlansView .plan-column:first-of-type { border-right: vkey $foreground 20%; }
    PlansView .plan-header { height: 3; padding: 0 1; background: $boost; text-wrap: nowrap; text-overflow: ellipsis; }
    PlansView .plan-details { height: 2; padding: 0 1; background: $boost; color: $text-muted; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.collective_index = -1  # the position n/N moved to; -1 before the first move
        self._plans: dict[str, Any] = {}
        self._pairs: list[dict[str, int]] | None = None  # pair_by_value of the plans shown
        self._details_key: dict[str, str | None] = {}  # plan -> the node whose details show

    def compose(self) -> ComposeResult:
        """A header and a tree per plan."""
        with Horizontal():
            for name in PLANS:
                with Vertical(classes="plan-column"):
                    yield Static(self._waiting_header(name), id=f"{name}-header", classes="plan-header")
                    yield PlanTree(name, id=f"{name}-tree")
                    yield Static(DETAILS_HINT, id=f"{name}-details", classes="plan-details")

    def show_analysis(self, analysis: Any) -> None:
        """Show both plans of ``analysis`` (an :class:`~shardscope.analysis.Analysis`)."""
        self.collective_index = -1
        self._plans = analysis.plans
        self._pairs = None
        for name in PLANS:
            plan = analysis.plans[name]
            self.query_one(f"#{name}-header", Static).update(self._header(name, plan, None))
            self.tree(name).show_plan(plan)

    def details(self, name: str) -> Static:
        """The line under a tree: the full label of the node under its cursor."""
        return self.query_one(f"#{name}-details", Static)

    @on(Tree.NodeHighlighted)
    def _show_details(self, event: Tree.NodeHighlighted) -> None:
        """Details on demand: the tree cuts long labels; the full one shows under it."""
        if isinstance(event.control, PlanTree):
            self._show_details_of(event.control)

    def _show_details_of(self, tree: PlanTree) -> None:
        """Show the full label of ``tree``'s cursor node, unless it already shows."""
        node = tree.cursor_node
        key = None if node is None or node.data is None else node.data.key
        if self._details_key.get(tree.plan_name, ...) == key:
            return  # a repaint that changes nothing still costs a compositor pass
        self._details_key[tree.plan_name] = key
        details = tree.cursor_details or DETAILS_HINT
        self.details(tree.plan_name).update(details, layout=False)  # fixed height: no relayout

    def tree(self, name: str) -> PlanTree:
        """The tree of the plan called ``name``."""
        return self.query_one(f"#{name}-tree", PlanTree)

    @property
    def collective_count(self) -> int:
        """How many steps the n/N cycle has: one per pair of collectives carrying the same value."""
        return len(self.pairs)

    @property
    def pairs(self) -> list[dict[str, int]]:
        """The plans' collectives paired by the value they carry (``params['Wh']``), naive order first.

        Each step maps a plan name to the position of its collective in ``plan.collectives``; a
        collective with no partner of the same value in the other plan is a step of its own.
        """
        if self._pairs is None:
            self._pairs = pair_by_value({name: self._plans[name].collectives for name in PLANS if name in self._plans})
        return self._pairs

    def step_collective(self, step: int) -> int | None:
        """Move both trees to the next (``step=1``) or previous (``-1``) pair of collectives.

        Both trees go to the collective that carries the same value (wrapping); a tree whose plan
        has no collective of that value stays where it is. Returns the new step, or None when
        neither plan has a collective.
        """
        pairs = self.pairs
        if not pairs:
            return None
        if self.collective_index < 0:
            self.collective_index = 0 if step > 0 else len(pairs) - 1
        else:
            self.collective_index = (self.collective_index + step) % len(pairs)
        for name in PLANS:
            tree = self.tree(name)
            at = pairs[self.collective_index].get(name)
            if at is not None:
                tree.reveal(tree.collective_ids[at])
                self._show_details_of(tree)  # now, in this key's repaint, not after its highlight message
            self.query_one(f"#{name}-header", Static).update(self._header(name, self._plans[name], at), layout=False)
        self._focus_a_tree()
        return self.collective_index

    def on_show(self) -> None:
        """Opening the tab puts the focus in a plan tree, so the arrow keys work at once."""
        self.call_after_refresh(self._focus_a_tree)

    def _focus_a_tree(self) -> None:
        """Focus the naive tree unless a tree already has it or the user is typing in an input."""
        focused = self.app.focused
        if self.is_on_screen and not isinstance(focused, (Input, PlanTree)):
            self.tree("naive").focus()

    @staticmethod
    def _waiting_header(name: str) -> Text:
        return Text.assemble((f"{name} plan", "bold"), ("  waiting for the first run", "dim"))

    @staticmethod
    def _header(name: str, plan: Any, at: int | None) -> Text:
        """Summary, role, and the collective that runs most (or, once n/N moved, the one at the cursor)."""
        text = Text.assemble((f"{name} plan", "bold"), "  ")
        text.append_text(plan_line(plan))
        text.append("\n")
        text.append(PLAN_ROLES.get(name, ""), "dim")
        collective = plan.collectives[at] if at is not None else hottest(plan)
        if collective is None:
            return text
        label = f"{at + 1} of {len(plan.collectives)}:" if at is not None else "most runs:"
        where = f"in {len(collective.loop_ids)} loop(s)" if collective.in_loop else "once per call, outside loops"
        text.append("\n")
        text.append_text(badge(collective.executions, collective.in_loop, LabelStyles()))
        text.append(f" {label} ", "dim")
        of_value = f" of {collective.value}" if collective.value else ""
        text.append(f"{collective.equation_id.rsplit('/', 1)[-1]}{of_value} {where}", "bold")
        return text
