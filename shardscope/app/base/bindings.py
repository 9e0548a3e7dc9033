"""The key table, made from the bindings: the help screen shows it and the docs carry it.

The bindings are the one place a key is defined; :func:`key_rows` turns them into rows (the
six tab keys into one ``1``-``6`` row), and a test checks the table of docs/guides/explorer.md is
:func:`markdown_table` of the same rows.

A tab's own keys (``s`` in the Diff and in the Sweep tab, ``t`` in the Compiled tab) are its view's bindings and app
bindings too (:func:`tab_key_bindings`): the app runs them on the tab shown, wherever the focus
is, so they work as soon as the tab shows and the command palette offers them like any other key.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable

from textual.binding import Binding, BindingType

from shardscope.app.base.tabs import TABS

PALETTE_ROW = ("`ctrl+p`", "Open the command palette: every action, searchable")
"""Textual's own key for the command palette, which offers every binding's action."""

DIFF_BINDINGS = [
    Binding("s", "toggle_layout", "Side by side", id="diff.toggle_layout",
            tooltip="In the Diff tab: switch between the unified and the side-by-side layout"),
]
"""The Diff tab's own keys: actions of its view (here, so the app binds them without importing the view)."""

SWEEP_BINDINGS = [
    Binding("s", "sweep", "Run sweep", id="sweep",
            tooltip="In the Sweep tab: compile and time every plan at every chunk size of the current settings"),
]
"""The Sweep tab's own keys (here for the same reason)."""

HLO_BINDINGS = [
    Binding("t", "to_target", "Target", id="hlo.to_target", show=False,
            tooltip="In the Compiled tab: go to the plans compiled for the sidebar's target (a TPU slice or GPUs)"),
]
"""The Compiled tab's own keys (not in the footer, whose 80 columns are full: help and palette list it)."""

GRAPH_BINDINGS = [
    Binding("f", "toggle_fold", "Unfold", id="graph.toggle_fold",
            tooltip="In the Graph tab: show every op that feeds the collectives, or fold the drawings again to the "
                    "collectives and the paths into them"),
]
"""The Graph tab's own keys."""

LAYOUTS_BINDINGS = [
    Binding("s", "rank", "Rank layouts", id="layouts.rank",
            tooltip="In the Layouts tab: compile every layout of the file's @shardscope.layouts function for the "
                    "target and rank them"),
]
"""The Layouts tab's own keys."""

TAB_BINDINGS: dict[str, list[Binding]] = {"graph": GRAPH_BINDINGS, "diff": DIFF_BINDINGS, "sweep": SWEEP_BINDINGS,
                                          "hlo": HLO_BINDINGS, "layouts": LAYOUTS_BINDINGS}
"""Each tab's own keys, by tab id; each binding's action is an action of that tab's view."""


def tab_key_bindings() -> list[Binding]:
    """The tabs' own keys as app bindings: ``s`` runs ``in_tab('diff', 'toggle_layout')``.

    Bound on the app rather than on the views, they do not wait for the focus to be inside the
    tab (the Sweep tab's only focusable widgets are an input and a button); the app's
    ``check_action`` hides each one unless its tab is shown, so one key serves several tabs.
    """
    return [
        Binding(b.key, tab_action(tab, b.action), b.description, id=b.id, tooltip=b.tooltip, key_display=b.key_display,
                show=b.show)
        for tab, bindings in TAB_BINDINGS.items() for b in bindings
    ]


def tab_action(tab: str, action: str) -> str:
    """The app's action string that runs the view action ``action`` in ``tab``."""
    return f"in_tab({tab!r}, {action!r})"


TAB_ACTIONS: dict[str, tuple[str, str]] = {
    tab_action(tab, b.action): (tab, b.action) for tab, bindings in TAB_BINDINGS.items() for b in bindings
}
"""Each tab key's app action string -> (tab, view action)."""


COMPARE = Binding.Group("Compare")
COLLECTIVES = Binding.Group("Collective")
"""Footer groups: ``b c Compare`` and ``n N Collective`` take half the room of four keys (the
palette and the help list each key on its own)."""

APP_BINDINGS = [
    Binding("r", "run", "Run", id="run",
            tooltip="Analyse the current settings; reloads the demo file if it changed on disk"),
    # not in the footer: at 80 columns it pushed the footer's last groups off the line (help and
    # the palette list it)
    Binding("w", "what_if", "What-if", id="what_if", show=False,
            tooltip="Analyse each program with shardscope's verified rewrite of its findings beside it, "
                    "named 'NAME-what-if' and compared with it (a program file); press again to leave them out"),
    Binding("e", "export", "Export diff", id="export",
            tooltip="Write the compared plans' jaxpr diff to <file>-<function>-<baseline>-vs-<candidate>-<mesh>dev-c<chunk>.diff"),
    Binding("b", "pick_baseline", "Baseline", id="pick_baseline", group=COMPARE,
            tooltip="Compare against the next plan: the Diff and Graph tabs and the speedup follow"),
    Binding("c", "pick_candidate", "Candidate", id="pick_candidate", group=COMPARE,
            tooltip="Compare the next plan with the baseline: the Diff and Graph tabs and the speedup follow"),
    Binding("n", "next_collective", "Next coll.", id="next_collective", group=COLLECTIVES,
            tooltip="Move every plan tree to the next collective (paired by the value it carries); "
                    "in the Compiled tab, go to the next compiled collective"),
    Binding("N", "previous_collective", "Prev coll.", key_display="N", id="previous_collective", group=COLLECTIVES,
            tooltip="Move every plan tree to the previous collective (paired by the value it carries); "
                    "in the Compiled tab, go to the previous compiled collective"),
    *(
        Binding(str(i), f"show_tab('{tab}')", title, show=False, id=f"tab_{tab}",
                tooltip=f"Show the {title} tab")
        for i, (tab, title, _) in enumerate(TABS, 1)
    ),
    *tab_key_bindings(),
    Binding("f2", "toggle_sidebar", "Sidebar", id="toggle_sidebar",
            tooltip="Show or hide the settings sidebar (hidden by itself under 100 columns)"),
    Binding("tab", "focus_next", "Focus", id="focus_next", tooltip="Move the focus to the next widget"),
    Binding("question_mark", "help", "Help", key_display="?", id="help", tooltip="Show the keys and what the tabs show"),
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit shardscope"),
    Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="interrupt",
            tooltip="Quit shardscope (as q), even while typing in an input"),
    Binding("escape", "escape", "Leave input, hide error", show=False, id="escape",
            tooltip="Leave the input being typed in; else hide the error panel"),
]
"""The app's keys (``ShardscopeApp.BINDINGS``), each with its id and a tooltip the help and the palette show."""


NARROW_FOOTER_LEAVES_OUT: dict[str, tuple[str, ...] | None] = {
    "next_collective": ("diff", "sweep", "layouts"),
    "previous_collective": ("diff", "sweep", "layouts"),
    "graph.toggle_fold": None,
}
"""Keys the footer leaves out under 100 columns (by binding id; in every tab, or in the tabs named), where the
pinned keys and a tab's own key leave no room for them: at 80 columns the Diff tab's ``s`` pushed
the Compare group under the pinned keys. They still work; the help and the palette list them (and
the Graph tab says ``f`` on its first line)."""

NARROW_LABELS: dict[str, str] = {"export": "Export", "diff.toggle_layout": "Layout"}
"""Shorter words for keys under 100 columns (by binding id): with them ``e`` fits beside the
others in every tab at 80 columns."""

NARROW_COLLECTIVES = Binding.Group("Coll.")
"""The ``n N`` group's shorter name under 100 columns (one object: the footer groups keys by it)."""


def footer_shown(binding: Binding, narrow: bool, tab: str) -> bool:
    """Whether the footer shows ``binding`` (an app's or a tab view's binding) at this width in ``tab``."""
    if not narrow or binding.id not in NARROW_FOOTER_LEAVES_OUT:
        return binding.show
    tabs = NARROW_FOOTER_LEAVES_OUT[binding.id or ""]
    return binding.show and tabs is not None and tab not in tabs


def footer_binding(binding: Binding, narrow: bool, tab: str) -> Binding:
    """``binding`` (an app binding, as written) as the footer shows it at this width in ``tab``:
    whether at all (:func:`footer_shown`), and under 100 columns in fewer words."""
    shown = replace(binding, show=footer_shown(binding, narrow, tab))
    if not narrow:
        return shown
    if binding.group is COLLECTIVES:
        shown = replace(shown, group=NARROW_COLLECTIVES)
    return replace(shown, description=NARROW_LABELS.get(binding.id or "", binding.description))


def fit_footer(bindings: dict[str, list[Binding]], narrow: bool, tab: str,
               as_written: Iterable[BindingType] = APP_BINDINGS) -> None:
    """Set how the footer shows a node's bindings (``bindings``: its map's key -> bindings, changed
    in place) by :func:`footer_binding`, from the bindings ``as_written`` (the app's, or a tab
    view's own: the focused view's key is the one the footer shows)."""
    written = {b.id: b for b in as_written if isinstance(b, Binding)}
    for key, bound in bindings.items():
        bindings[key] = [footer_binding(written[b.id], narrow, tab) if b.id in written else b for b in bound]


def key_label(binding: Binding) -> str:
    """What the key is called on screen: ``?`` rather than ``question_mark``."""
    return binding.key_display or binding.key


def key_rows(bindings: Iterable[Binding]) -> list[tuple[str, str]]:
    """``(keys, what they do)`` per binding; the tab bindings (ids ``tab_*``) become one row."""
    rows: list[tuple[str, str]] = []
    tabs: list[Binding] = []
    for binding in bindings:
        if (binding.id or "").startswith("tab_"):
            if not tabs:
                rows.append(("", ""))  # the tabs' row, filled in below
            tabs.append(binding)
            continue
        rows.append((f"`{key_label(binding)}`", binding.tooltip or binding.description))
    if tabs:
        titles = ", ".join(b.description for b in tabs)
        at = rows.index(("", ""))
        rows[at] = (f"`{key_label(tabs[0])}`-`{key_label(tabs[-1])}`", f"Show a tab: {titles}")
    return rows


def help_rows(app_bindings: list[Binding]) -> list[tuple[str, str]]:
    """Every key the help and the docs list: the app's (the tabs' own among them), then ctrl+p after help."""
    rows = key_rows(app_bindings)
    keys = [key for key, _ in rows]
    rows.insert(keys.index("`?`") + 1 if "`?`" in keys else len(rows), PALETTE_ROW)  # after help
    return rows


def _code_placeholders(text: str) -> str:
    """``<function>-<mesh>dev.diff`` in backticks, so Markdown shows it rather than taking it for HTML."""
    return re.sub(r"(\S*<[^>\s]+>\S*)", r"`\1`", text)


def markdown_table(rows: list[tuple[str, str]]) -> str:
    """The rows as a Markdown table with a ``key | action`` header."""
    lines = ["| key | action |", "| --- | --- |"]
    lines += [f"| {keys} | {_code_placeholders(action)} |" for keys, action in rows]
    return "\n".join(lines)
