"""The Plans tab: every plan's program side by side (one column per plan), with next/previous collective.

The columns follow the analysis: one per plan it holds, in registry order, so a plan added to
the registry shows here without a change to this file.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Input, Static, Tree

from shardscope.app.base import gc_policy
from shardscope.app.views.plans.plan_columns import left_out_note, shown_plans
from shardscope.app.views.plans.plan_labels import LabelStyles, badge
from shardscope.app.views.plans.plan_tree import PlanTree
from shardscope.app.widgets.text_rows import TextRows
from shardscope.engine.counts import runs_per_call
from shardscope.engine.pytree_paths import labelled_argument
from shardscope.render.text import structure_summary

if TYPE_CHECKING:
    from shardscope.pipeline.analysis import PlanResult
    from shardscope.app.base.analysis_view import PreparedViews
    from shardscope.pipeline.analysis import Analysis

DETAILS_HINT = Text("the full line of the node under the cursor shows here (arrows, n/N)", "dim italic")

def pair_by_value(collectives: dict[str, tuple]) -> list[dict[str, int]]:
    """Steps of n/N: per step, each plan's position of the collective carrying one value.

    A gradient's label pairs as its parameter (``grad(W)`` with ``W``). Values repeat (two
    collectives of one source line): the k-th of a value pairs with the k-th.
    A collective left without a partner then pairs with one of another plan that carries the
    same leaf under another root (``grad(params['W2'])``, the gradient an all-reduce in a loop
    sums, and ``out['W2']``, the same sum after the loop in a program that returns it).
    """
    steps: list[dict[str, int]] = []
    values: list[str] = []
    where: dict[tuple[str, int], dict[str, int]] = {}
    for name, found in collectives.items():
        seen: dict[str, int] = {}
        for position, c in enumerate(found):
            value = labelled_argument(c.value)  # a gradient in a loop, its sum after it: one parameter's
            key = (value, seen.get(value, 0))
            seen[value] = key[1] + 1
            if key not in where:
                where[key] = {}
                steps.append(where[key])
                values.append(value)
            where[key][name] = position
    return _pair_leaves(steps, values, len(collectives))


def _pair_leaves(steps: list[dict[str, int]], values: list[str], plans: int) -> list[dict[str, int]]:
    """Merge steps that lack a plan with later ones of the same leaf path and other plans."""
    merged: list[dict[str, int]] = []
    open_steps: dict[str, list[dict[str, int]]] = {}  # leaf path -> merged steps still missing a plan
    for step, value in zip(steps, values):
        leaf = _LEAF.sub("", value) if _LEAF.match(value) else None
        partner = next((s for s in open_steps.get(leaf, []) if not s.keys() & step.keys()), None) if leaf else None
        if partner is not None and leaf:  # a partner is found under a leaf only
            partner.update(step)
            if len(partner) == plans:
                open_steps[leaf].remove(partner)
            continue
        merged.append(dict(step))
        if leaf and len(step) < plans:
            open_steps.setdefault(leaf, []).append(merged[-1])
    return merged


_LEAF = re.compile(r"^[A-Za-z_]\w*(?=\[)")
"""The root of a pytree path (``params`` of ``params['W2']``), when a leaf path follows it."""


class PlansView(Widget):
    """A :class:`PlanTree` column per plan; ``n``/``N`` walk every tree's collectives in step."""

    DEFAULT_CSS = """
    PlansView { height: 1fr; }
    PlansView > Horizontal { height: 1fr; }
    PlansView .plan-column { width: 1fr; height: 1fr; }
    PlansView .plan-column { border-left: vkey $foreground 20%; }
    PlansView .plan-column:first-of-type { border-left: none; }
    PlansView #plans-waiting { padding: 1 2; color: $text-muted; }
    PlansView #plans-left-out { height: 1; padding: 0 1; display: none; }
    PlansView.-left-out #plans-left-out { display: block; }
    PlansView .plan-header { height: 3; padding: 0 1; background: $boost; }
    PlansView .plan-details { height: 3; padding: 0 1; background: $boost; color: $text-muted; }
    """

    def __init__(self, collector: gc_policy.Collector,
                 **kwargs: Any) -> None:  # Textual's widget keywords, passed on
        """``collector``: the app's (:mod:`shardscope.app.base.gc_policy`), which freezes the trees once drawn."""
        super().__init__(**kwargs)
        self._collector = collector
        self.collective_index = -1  # the position n/N moved to; -1 before the first move
        self._plans: dict[str, Any] = {}
        self._names: tuple[str, ...] = ()  # the plans the columns show, left to right
        self._details_key: dict[str, str | None] = {}  # plan -> the node whose details show
        self._pairs: list[dict[str, int]] | None = None  # the n/N steps of the plans shown
        self._summaries: dict[str, tuple[Any, Text]] = {}  # plan name -> (plan, its header's first lines)
        self._first_moves_drawn = False
        self._focus_pending = False  # a tree is to take the focus after the next refresh (_focus_later)
        self._compared: tuple[str, str] = ("", "")  # the (baseline, candidate) the other tabs compare

    def compose(self) -> ComposeResult:
        """The row of plan columns, empty until the first analysis says which plans there are,
        under a line naming the plans a narrow tab leaves out (:mod:`plan_columns`)."""
        yield Static(id="plans-left-out")
        with Horizontal(id="plan-columns"):
            yield Static("Waiting for the first run: one column per plan will show here.", id="plans-waiting")

    @property
    def names(self) -> tuple[str, ...]:
        """The plans shown, left to right."""
        return self._names

    def show_analysis(self, analysis: Analysis, prepared: PreparedViews | None = None) -> None:
        """Show every plan of ``analysis``.

        The same plans again (another mesh, another chunk size): the cursors stay on the step of
        collectives ``n``/``N`` had moved to, and everything tied to them (headers, details) is
        redrawn from the new results. Other plans start afresh.
        """
        step = self.collective_index
        self.collective_index = -1
        self._plans = dict(analysis.plans)
        self._pairs = None
        comparison = analysis.comparison if prepared is None else prepared.comparison
        self._compared = (comparison.baseline, comparison.candidate)
        names = tuple(analysis.plans)
        if names == self._names:
            self._fill(step)
        else:
            self.call_later(self._rebuild, names)

    async def _rebuild(self, names: tuple[str, ...]) -> None:
        """Replace the columns with one per plan in ``names``, then fill them."""
        row = self.query_one("#plan-columns", Horizontal)
        await row.remove_children()
        await row.mount_all(self._column(name) for name in names)
        first = not self._names
        self._names = names
        self._details_key = {}
        self._pairs = None
        try:
            self._fill()
        except NoMatches:  # the app closed while the columns were mounting: nothing left to fill
            return
        if first:  # the tab was shown before its trees existed: give them the focus it offered then
            self._focus_later()

    def _column(self, name: str) -> Vertical:
        return Vertical(
            TextRows(PlansView._waiting_header(name), id=f"{name}-header", classes="plan-header"),
            PlanTree(name, id=f"{name}-tree", cursor_moved=self._show_details_of),
            TextRows(DETAILS_HINT, wrap=True, id=f"{name}-details", classes="plan-details"),
            id=f"{name}-column", classes="plan-column",
        )

    def _fill(self, step: int = -1) -> None:
        """Show each plan, open where the first ``n`` and the first ``N`` go, and draw those when idle.

        ``step``: the step of collectives the cursors were on (``n``/``N``), where they go back to
        when the new plans have it; every header and details line shows what its cursor is on now.

        The trees open the paths to the collectives of the first and the last step now (besides the
        loops that hold collectives, where to look first), so the first ``n`` or ``N`` only moves
        the cursors; what it scrolls into view is drawn while the app is idle
        (:meth:`_draw_first_moves`). Pairing the plans' collectives (thousands in a large program)
        happens here too, once per analysis.
        """
        self._first_moves_drawn = False
        self._fit_columns()
        self._details_key = {}  # a node of the same key is another result now
        ends = self._first_moves()
        back_to = self.pairs[step] if 0 <= step < len(self.pairs) else None
        self.collective_index = step if back_to is not None else -1
        for name in self._names:
            plan = self._plans[name]
            tree = self.tree(name)
            tree.show_plan(plan)
            for end in ends:
                if name in end:
                    tree.open_path(tree.collective_ids[end[name]])
            at = None if back_to is None else back_to.get(name)
            if at is not None:
                tree.reveal(tree.collective_ids[at])
            self._show_header(name, self._header(plan, at))
            self._show_details_of(tree)
        self.call_after_refresh(self._draw_first_moves, self._plans)

    def _first_moves(self) -> list[dict[str, int]]:
        """The steps the first ``n`` and the first ``N`` go to (one when there is one step, none without)."""
        steps = self.pairs
        return steps[:1] + steps[1:][-1:]

    def _draw_first_moves(self, plans: dict[str, Any], names: tuple[str, ...] | None = None) -> None:
        """Draw ahead what the first ``n`` and the first ``N`` show: one tree per idle turn.

        A screenful of lines never drawn, in every tree, was most of the first ``n`` or ``N``; drawn
        here, that key press costs what a later ``n`` does. The drawing waits for the focus a tree
        takes when the plans first show (``_rebuild``, ``on_show``): lines are drawn for the focus
        they will have (a change of focus makes every kept line of every tree stale). That focus
        may come several refreshes late: a callback "after refresh" also runs while a batch update
        (the footer recomposing its keys) holds the screen's layout back, the trees not placed
        yet. The drawing never moves the focus itself (a re-run must leave it in the sidebar); a
        key that moves it finds no line kept and draws afresh. Stops when another analysis shows
        or ``n``/``N`` came first.
        """
        if plans is not self._plans or not plans or self.collective_index >= 0:
            return
        if self._focus_pending:
            self.call_after_refresh(self._draw_first_moves, plans, names)
            return
        ends = self._first_moves()
        if names is None:
            if ends:
                self.call_after_refresh(self._draw_first_moves, plans, self._names)
            return
        if not names:
            return
        name, rest = names[0], names[1:]
        try:
            tree = self.tree(name)
        except NoMatches:  # the columns are being replaced (a new analysis)
            return
        for step in ends:
            if name in step:
                tree.draw_ahead(tree.collective_ids[step[name]])
        if rest:
            self.call_after_refresh(self._draw_first_moves, plans, rest)
        else:  # drawn, unless the tab was hidden (then on_show draws them when it opens)
            self._first_moves_drawn = all(self.tree(each).is_on_screen for each in self.shown)
            self._collector.freeze_what_lives()  # the trees and their lines live until the next run too

    def on_resize(self) -> None:
        """A narrow tab shows the compared plans only (:func:`shown_plans`)."""
        self._fit_columns()

    def _fit_columns(self) -> None:
        """Show the columns there is room for, and say which plans are left out."""
        shown = shown_plans(self._names, self._compared, self.size.width)
        for name in self._names:
            try:
                self.query_one(f"#{name}-column", Vertical).display = name in shown
            except NoMatches:  # the columns are being replaced (a new analysis)
                return
        self.query_one("#plans-left-out", Static).update(left_out_note(self._names, shown))
        self.set_class(shown != self._names, "-left-out")

    @property
    def shown(self) -> tuple[str, ...]:
        """The plans whose columns show (all, or the compared two on a narrow tab)."""
        return shown_plans(self._names, self._compared, self.size.width)

    def show_compared(self, baseline: str, candidate: str) -> None:
        """Mark the plans the other tabs compare (``b``, ``c``) in their headers: ``B``, ``C``;
        on a narrow tab those two are the columns shown."""
        self._compared = (baseline, candidate)
        self._fit_columns()
        at = self.pairs[self.collective_index] if 0 <= self.collective_index < len(self.pairs) else {}
        for name in self._names:
            if name in self._plans:
                self._show_header(name, self._header(self._plans[name], at.get(name)))

    @property
    def compared(self) -> tuple[str, str]:
        """The (baseline, candidate) the headers mark."""
        return self._compared

    @property
    def first_moves_drawn(self) -> bool:
        """Whether the lines the first ``n`` and the first ``N`` scroll into view were drawn ahead."""
        return self._first_moves_drawn

    def _show_header(self, name: str, text: Text) -> None:
        """Update a header in place: its height is fixed (three lines), so no layout of the screen.
        A header not mounted yet (its column is being replaced by a new analysis's, whose rebuild
        draws its headers) is left alone."""
        try:
            header = self.query_one(f"#{name}-header", TextRows)
        except NoMatches:
            return
        header.update(text)

    def details(self, name: str) -> TextRows:
        """The line under a tree: the full label of the node under its cursor."""
        return self.query_one(f"#{name}-details", TextRows)

    @on(Tree.NodeHighlighted)
    def _show_details(self, event: Tree.NodeHighlighted) -> None:
        """Details on demand: the tree cuts long labels; the full one shows under it."""
        if isinstance(event.control, PlanTree):
            event.stop()  # nothing above the view wants it: n moves three cursors, ten hops each
            self._show_details_of(event.control)

    def _show_details_of(self, tree: PlanTree) -> None:
        """Show the full label of ``tree``'s cursor node, unless it already shows."""
        node = tree.cursor_node
        key = None if node is None or node.data is None else node.data.key
        if self._details_key.get(tree.plan_name, ...) == key:
            return  # a repaint that changes nothing still costs a compositor pass
        try:
            row = self.details(tree.plan_name)
        except NoMatches:  # the tree's column is being replaced (a new analysis)
            return
        self._details_key[tree.plan_name] = key
        row.update(tree.cursor_details or DETAILS_HINT)  # fixed height: no relayout

    # it shadows DOMNode.tree (a debugging view of the DOM), which this widget does not use
    def tree(self, name: str) -> PlanTree:  # type: ignore[override]
        """The tree of the plan called ``name``."""
        return self.query_one(f"#{name}-tree", PlanTree)

    @property
    def collective_count(self) -> int:
        """How many steps the n/N cycle has: one per pair of collectives carrying the same value."""
        return len(self.pairs)

    @property
    def pairs(self) -> list[dict[str, int]]:
        """The plans' collectives paired by the value they carry (``params['Wh']``), first plan's order first.

        Each step maps a plan name to the position of its collective in ``plan.collectives``; a
        collective with no partner of the same value in another plan is a step of its own.
        """
        if self._pairs is None:
            self._pairs = pair_by_value({name: self._plans[name].collectives for name in self._names if name in self._plans})
        return self._pairs

    def step_collective(self, step: int) -> int | None:
        """Move every tree to the next (``step=1``) or previous (``-1``) group of collectives.

        Every tree goes to the collective that carries the same value (wrapping); a tree whose
        plan has no collective of that value stays where it is. Returns the new step, or None
        when no plan has a collective.
        """
        pairs = self.pairs
        if not pairs:
            return None
        if self.collective_index < 0:
            self.collective_index = 0 if step > 0 else len(pairs) - 1
        else:
            self.collective_index = (self.collective_index + step) % len(pairs)
        for name in self._names:
            tree = self.tree(name)
            at = pairs[self.collective_index].get(name)
            if at is not None:
                tree.reveal(tree.collective_ids[at])
                self._show_details_of(tree)  # now, in this key's repaint, not after its highlight message
            self._show_header(name, self._header(self._plans[name], at))
        self._focus_a_tree()
        return self.collective_index

    def on_show(self) -> None:
        """Opening the tab puts the focus in a plan tree, so the arrow keys work at once.

        The trees had no size while the tab was hidden: draw ahead for the first ``n`` and ``N`` again.
        """
        self._focus_later()
        self.call_after_refresh(self._draw_first_moves, self._plans)

    def _focus_later(self) -> None:
        """Focus a tree after the next refresh (:meth:`_focus_a_tree`); the drawing ahead waits for it."""
        self._focus_pending = True
        self.call_after_refresh(self._focus_a_tree)

    def _focus_a_tree(self, retries: int = 5) -> None:
        """Focus the first plan's tree unless a tree already has it or the user is typing in an input.

        Right after its columns are mounted the screen may not have placed them yet (a busy
        machine, a batch update holding the layout back): then try again after the next
        refreshes, while the tab is still the one shown.
        """
        focused = self.app.focused
        shown = self.shown
        if shown and not isinstance(focused, (Input, PlanTree)):
            if self.is_on_screen and self.tree(shown[0]).is_on_screen:
                self.screen.set_focus(self.tree(shown[0]))  # now, not after the messages queued (``focus``)
            elif retries and self.parent is not None and self.parent.display:
                self.call_after_refresh(self._focus_a_tree, retries - 1)
                return
        self._focus_pending = False

    @staticmethod
    def _waiting_header(name: str) -> Text:
        return Text.assemble((f"{name} plan", "bold"), ("  waiting for the first run", "dim"))

    def _header(self, plan: PlanResult, at: int | None) -> Text:
        """Description, summary and, once n/N moved, which collective the cursor is on.

        The first two lines are made once per analysis: ``n`` only changes the third, and the
        summary counts every collective of the plan (thousands in a large program).
        """
        summary = self._summaries.get(plan.name)
        if summary is None or summary[0] is not plan:
            summary = self._summaries[plan.name] = (plan, _summary(plan))
        text = Text.assemble(compared_mark(plan.name, *self._compared), summary[1])
        if at is not None:  # the value first: a narrow column cuts the end of the line, and a
            # gradient's label (grad(params['b2'])) fills a third of 80 columns by itself
            collective = plan.collectives[at]
            where = f"in {len(collective.loop_ids)} loop(s)" if collective.in_loop else "outside loops"
            text.append(collective.value, "bold")
            text.append_text(badge(collective.runs.badge(), collective.in_loop, LabelStyles()))
            text.append(f"collective {at + 1} of {len(plan.collectives)}, {collective.equation_id.rsplit('/', 1)[-1]} {where}")
        elif plan.collectives:
            text.append("n/N: next collective, paired across plans by value", "dim")
        return text  # one row per line, each cut to the column by TextRows


def compared_mark(name: str, baseline: str, candidate: str) -> Text:
    """``B `` for the baseline, ``C `` for the candidate, reversed so the eye finds them; nothing
    for the others, nor for a lone program (compared with nothing)."""
    mark = "" if baseline == candidate else "B" if name == baseline else "C" if name == candidate else ""
    return Text.assemble((mark, "bold reverse"), " ") if mark else Text()


def _summary(plan: PlanResult) -> Text:
    """The header's first two lines: the plan's title and description, then its collectives."""
    text = Text.assemble((plan.title, "bold"))
    if plan.mesh is not None:  # a program's own mesh (a plan's is in the status line)
        text.append(f"  mesh {plan.mesh}")
    text.append_text(Text.assemble("  ", (plan.description, "dim"), "\n"))
    if plan.compiled is None:  # traced only: the jaxpr is all there is
        text.append(structure_summary(plan), "bold red" if plan.collectives_in_loops else "bold green")
    else:  # what runs first (a jit with shardings has no collective in its jaxpr), coloured by it
        in_loops = len(plan.compiled.findings)
        assert plan.compiled_runs is not None  # counted whenever compiled
        text.append(f"compiled: {runs_per_call(plan.compiled_runs.text())}, {in_loops} in while loops",
                    "bold red" if in_loops else "bold green")
        text.append(f" · jaxpr: {structure_summary(plan)}", "dim")
    text.append("\n")
    return text
