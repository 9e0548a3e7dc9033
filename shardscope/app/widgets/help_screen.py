"""The help screen (``?``): the keys, what each tab shows, and how to time the start-up."""

from __future__ import annotations

from rich.markdown import Markdown
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from shardscope.app.base.bindings import help_rows, markdown_table

HELP = """\
# shardscope

{close}

Compare plans for a chunked VJP under `jax.shard_map` (one column per plan in the Plans tab):

- **naive**: params stay invariant inside the `lax.scan` over chunks, so every chunk's
  gradient is all-reduced (`psum_invariant` inside the loop: chunks x all-reduces per call);
- **deferred**: params are cast to varying (`lax.pcast`) before the loop, each device
  accumulates its own partial gradient, and one `psum` runs after the loop;
- **reduced**: JAX's reduced/unreduced types (`{R:s}` weight, `{U:s}` gradient): one
  `unreduced_psum` after the loop (listed as unavailable, with the reason, where JAX cannot build it).

Sharded parameters (`param_specs=`) are gathered every chunk by naive, once by deferred.

A **program file** (functions marked `@shardscope.program`) shows one column per program
instead; the sidebar marks the two compared (`B` baseline, `C` candidate), `b`/`c` pick the
next ones (with two programs they swap), and Enter on a program makes it the candidate. Each
program builds its own mesh, so there are no mesh or chunk settings, and no unchunked reference:
the Timings tab compares the programs' outputs instead.

## Keys

{keys}

Keys work whatever has the focus, except while typing in an input: there `Enter` commits the
value and `Escape` leaves the input. Outside an input `Escape` hides the error panel. A line
wider than its tab (the Compiled tab's table beside the sidebar at 80 columns) ends in a dim `…`:
`←`/`→` scroll the tab sideways to the rest.

## The Plans tab

One node per equation. Loops show their kind and trip count (`scan x2 loop`) and how many
collectives run inside them; expand them with `Enter` or a click. `{V:s}` marks a value that
varies over mesh axis `s`. Collectives carry a badge with how often one call runs them
(`psum_invariant[s]  x2/call`). `pvary`/`pcast` are casts: they change a value's type, they
move no data.

## Timings and Sweep

The Timings tab ends with a projection of each plan's communication onto a real interconnect:
pick a preset, and rings: *own groups* (the default, as `report --project PRESET`) costs each
compiled collective on its own replica group of the mesh, a device count (as `--project
PRESET:DEVICES`) puts every collective on one ring of that many devices; the projection's first
line says which (the ring formulas and sources are in the docs: Projections and cost). The Sweep
tab compiles and times every plan at every chunk size (in a worker: the app stays responsive)
and charts run time and memory per device against chunk size; type a memory budget and the
fastest point that fits is marked.

## Settings

The sidebar offers the demo functions of the file, device counts that divide the batch (up
to `--max-devices`), the mesh axis name and the chunk size (a divisor of the per-device
batch; empty means the largest giving at least two chunks per device). With the *run on
change* switch on, a committed change (Enter in an input, a pick in a list) starts a run.

The *Target* field at the sidebar's foot compiles every plan or program for a TPU slice
(`tpu:v5e:2x2`, any topology libtpu knows; `pip install 'shardscope[tpu]'`) or for GPUs
(`gpu:h100:8`, `gpu:h100:2x8` for two hosts of 8; h100, h200, b200, a100 or a description file;
`pip install 'shardscope[gpu]'`) too: nothing runs there. The 1-D mesh then spans the target's
devices. The Compiled tab (`t` goes to the target's part) gives each plan's verdict there (does
that compiler already move its all-reduce out of the loop?) and what it did with every CPU
collective; the Timings tab the target's compile time, compiled runs per call and memory per device.

## Timing the start-up

`shardscope FILE --profile-startup` writes one JSON line to stderr on exit,
`{"first_paint_s": ..., "results_s": ...}`: seconds from the process start to the first
paint and to the first results on screen (also in the Textual log).
"""


CLOSE_BINDING = Binding("escape,question_mark,q", "close", "Close help", id="close_help")
"""The keys that close the help; the help's first line and its frame name them."""


def close_keys() -> str:
    """``Escape, ? or q``: the keys of :data:`CLOSE_BINDING` as a reader calls them."""
    names = {"escape": "Escape", "question_mark": "?"}
    keys = [names.get(key, key) for key in CLOSE_BINDING.key.split(",")]
    return ", ".join(keys[:-1]) + " or " + keys[-1]


def help_text(app_bindings: list) -> str:
    """The help as Markdown, its key table made from ``app_bindings`` (see :mod:`shardscope.app.base.bindings`)."""
    close = f"**{close_keys()} closes this help**; the arrow keys and Page Up/Down scroll it."
    return HELP.replace("{close}", close).replace("{keys}", markdown_table(help_rows(app_bindings)))


class HelpText(Static):
    """The help's Markdown, drawn by Rich in one widget.

    Textual's ``Markdown`` widget mounts a widget per block (heading, paragraph, list item, table
    cell row): opening the help took 0.4-0.5 s of CPU here, the screen waiting for it."""

    def __init__(self, source: str) -> None:
        super().__init__(Markdown(source, code_theme="ansi_dark", inline_code_theme="ansi_dark"))
        self.source = source
        """The Markdown shown."""


class HelpScreen(ModalScreen[None]):
    """The keys and what the tabs show; any of ``escape``, ``?`` or ``q`` closes it."""

    AUTO_FOCUS = "VerticalScroll"
    """The text takes the focus, so the arrow keys scroll it (the app itself focuses nothing by DOM order)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 95%; height: 90%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """

    BINDINGS = [CLOSE_BINDING]

    def compose(self) -> ComposeResult:
        """The help text, scrollable, with the key table made from the app's bindings; the frame
        says how to close it too (the first line scrolls away)."""
        with VerticalScroll() as scroll:
            scroll.border_title = "help"
            scroll.border_subtitle = f"{close_keys()}: close"
            yield HelpText(help_text(self.app.BINDINGS))

    def action_close(self) -> None:
        """Close the help screen."""
        self.dismiss()
