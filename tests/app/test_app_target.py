"""The sidebar's Target field with a TPU slice: every plan compiled for a TPU slice too, in the Compiled and
Timings tabs.

Real JAX on simulated CPU devices, real libtpu (compile-only devices: nothing runs on them),
real Textual (``App.run_test`` + Pilot). Where each all-reduce sits on the slice and the memory
per device there are recounted from the slice's compiled text here (``_tpu_text``: which while
bodies run each all-reduce, the entry layout's padded sizes), never read from shardscope; the
trip counts are derived by hand from the demos. libtpu ships for Linux x86-64 only: elsewhere
these skip.
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from app_support import DEMOS, GATE, SIZE, drain, eventually, make_app, press, run, settle, write_gated_demo
from rich.console import Console
from textual.widgets import Input, Select, Static

from shardscope.app.views import HloView
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.status import StatusLine
from shardscope.cli import parse
from shardscope.cli.explorer import ExplorerOptions
from shardscope.errors import SettingsError
from shardscope.targets import compile as targets, registry, tpu as tpu_target
from shardscope.plans.registry import build_plans
from shardscope.config.settings import Settings
from shardscope.sources.loading import load_demo_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _hidden_compilers import hide_compilers  # noqa: E402  (tests/, beside this folder)
from _tpu_text import all_reduces, entry_parameters, padded_bytes  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")

CHUNKS = 2
"""Chunks per device of the demos' default chunk size: the largest that gives two."""


def _tpu_texts(demo: str, function: str, topology: str, devices: int) -> dict[str, str]:
    """``{plan: the slice's compiled text}`` of the naive and deferred plans on a 1-D mesh ``s``."""
    settings = Settings(path=DEMOS / demo, devices=devices)
    built = build_plans(load_demo_file(settings.path).functions[function], settings)
    slice_ = registry.load_target(registry.parse_target(f"tpu:{topology}"))
    return {plan: targets.compile_for_target(built.functions[plan].trace(*built.args), slice_).hlo_text
            for plan in ("naive", "deferred")}


def _printed(renderable) -> str:
    """``renderable`` as a console prints it, without colours."""
    console = Console(width=140, color_system=None)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


def _section(text: str, start: str, end: str | None = None) -> str:
    """The Compiled tab's text from ``start`` to ``end`` (or to the end)."""
    tail = text[text.index(start):]
    return tail if end is None else tail[:tail.index(end, len(start))]


async def _type_target(pilot, text: str) -> None:
    """Type ``text`` into the target field from the keyboard, leave it (escape) and press r."""
    app = pilot.app
    field = app.query_one("#target", Input)
    app.set_focus(field)
    await press(pilot, *(["ctrl+a", "ctrl+k"] if field.value else []), *text)
    await press(pilot, "escape")
    await press(pilot, "r")
    await settle(pilot)


UNUSABLE_TARGETS = [
    ("tpu:v9:2x2", "libtpu does not know the topology 'v9:2x2'", "for example tpu:v5e:2x2"),
    ("tpu:v5e:4x4", "tpu:v5e:4x4 has 16 devices; the app started JAX with 8 CPU devices",
     "open the app with --target tpu:v5e:4x4"),
]


def test_a_target_typed_in_the_sidebar_compiles_the_seed_plans_for_the_slice_and_costs_them_on_its_ici():
    """linear.py on v5e:2x2 (4 chips): the mesh spans the slice; the naive plan's all-reduce
    leaves the chunk loop there (one run per call instead of 2), the deferred one stays outside.

    The Timings tab's projection, under the picked interconnect's, is the slice's own: its
    compiled collectives (what the TPU runs: 1 all-reduce of W's 20 bytes per call for each plan
    of the seed demo) on the v5e torus (the slice's one model: a 2x2 square, two lines of 2
    chips, 2 hops of ~1 us, 4.5e10 B/s one way per link), by the formula written out here.

    While the target is set the Devices picker shows the slice's chips (4); cleared, it shows the
    user's 2 again and the next run is on s=2, not on the slice's count (the seed demo: the
    picker, not the program, is what this shows). Before all that, a typo in the target is flagged
    as typed and refused before any run. Then each target that cannot be used, typed in
    turn after the same CPU results: its own error panel, never the one before, and the CPU results
    stay. (The typo, the clearing and the unusable targets were tests of their own, each on its own
    app.)
    """
    tpu = _tpu_texts("linear.py", "linear", "v5e:2x2", 4)
    assert [depth for _, depth in all_reduces(tpu["naive"])] == [0]  # hoisted out of the chunk loop
    assert [depth for _, depth in all_reduces(tpu["deferred"])] == [0]
    devices, payload, hop, link = 4, 5 * 4, 1e-6, 4.5e10  # W: 5 floats
    # all-reduce on the torus: max(2 alpha * hops, 2 (n-1)/n S / (one link each way per spanned axis))
    one_run = max(2 * 2 * hop, 2 * (devices - 1) / devices * payload / (2 * link))

    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # a typo in the target is flagged as typed and refused before any run
            field = app.query_one("#target", Input)
            app.set_focus(field)
            await press(pilot, *"tpu:v5e")
            assert not field.is_valid
            assert "not a target: tpu:TOPOLOGY" in str(app.query_one("#target-note").content)
            await press(pilot, "escape", "r")
            await settle(pilot)
            panel = _panel(app)
            assert "'v5e' is not a TPU topology name" in panel and "for example tpu:v5e:2x2" in panel
            assert app.analysis is None and app.run_id == 1 and app.is_running

            # the target typed whole: compiled for the slice and costed on its ICI
            picker = app.query_one("#devices", Select)
            assert picker.value == 2
            await _type_target(pilot, "tpu:v5e:2x2")
            analysis = app.analysis
            assert not app.query_one(ErrorPanel).shown
            assert analysis.settings.mesh.text() == "s=4" and analysis.settings.targets == ("tpu:v5e:2x2",)
            assert app.query_one("#devices", Select).value == 4 and app.query_one("#devices", Select).disabled
            assert "target tpu:v5e:2x2" in app.query_one(StatusLine).plain and not app.stale
            assert "compiled for tpu:v5e:2x2, never run there: the mesh spans its 4 devices" in str(
                app.query_one("#target-note").content)

            await press(pilot, "5")
            await drain(pilot)
            view = app.query_one(HloView)
            assert view.body.scroll_offset.y == 0
            assert view.plain.lstrip().startswith("on tpu:v5e:2x2:")  # the picked target's plans lead
            await press(pilot, "t")  # to them: already on top
            assert view.body.scroll_offset.y == 0
            text = " ".join(view.plain.split())
            section = _section(text, "on tpu:v5e:2x2:")
            assert section.startswith("on tpu:v5e:2x2: 4 x TPU v5 lite, compiled for the slice, never run there")
            naive = _section(section, "naive:", "deferred:")
            assert ("naive: on v5e:2x2 the naive plan's all-reduce of grad(params) leaves the loop: "
                    "the compiler already does the deferral here.") in naive
            # CPU: in the chunk loop, 2 runs; on the slice: outside every loop, 1 run. Both plans' slice
            # collectives are named by their kind and axes (one was its instruction's name, which the
            # compiler picks: `all-reduce` beside `psum_invariant.7`)
            # outside every loop the verdict cell is "-", as in the CPU's table (issue 45, item 12)
            assert re.search(rf"all-reduce\[s\] grad\(params\) - 1 - \S+ {CHUNKS} left loop", naive), naive
            deferred = _section(section, "deferred:", "reduced:")
            assert "the deferred plan runs no collective in a loop" in deferred
            # the instruction column may fold the name over two lines: its tail lands after "loops,"
            assert re.search(r"all-reduce\[s\] grad\(params\) - 1 - \S+ 1 outside loops, as on the CPU",
                             deferred), deferred
            assert "The TPU compiler's plans for tpu:v5e:2x2 are at the top" in text

            await press(pilot, "4")
            await drain(pilot)
            timings = " ".join(_printed(app.query_one("#timings-body", Static).content).split())
            arguments = {plan: sum(map(padded_bytes, entry_parameters(t))) for plan, t in tpu.items()}
            cells = re.search(r"v5e:2x2 memory: arguments │ ([\d,]+) B │ ([\d,]+) B │", timings).groups()
            assert [int(c.replace(",", "")) for c in cells] == [arguments["naive"], arguments["deferred"]]
            assert re.search(r"v5e:2x2 run │ not run │ not run │ not run │ —", timings)
            assert re.search(r"compiled runs per call │ 2 │ 1 │ 1 │ —", timings)  # the CPU keeps it in the 2 chunks
            assert re.search(r"v5e:2x2 compiled runs │ 1 │ 1 │ 1 │ —", timings)  # the slice runs it once
            assert "compiled for tpu:v5e:2x2 (4 x TPU v5 lite), never run there" in timings

            text = " ".join(_printed(app.query_one("#projection-body", Static).content).split())
            sentence = text[text.index("tpu:v5e:2x2's compiled collectives"):]
            assert "on its own interconnect (ICI of a v5e 2x2 slice (wraparound on no axis))" in sentence
            assert "projected onto" not in sentence  # one model of the slice's ICI, not a second ring
            expected = f"{one_run * 1e6:.4g} us/call"
            assert f"naive {expected}, deferred {expected}, reduced {expected}" in sentence, sentence

            # cleared, the picker gives the user's own count back
            await _type_target(pilot, "")
            assert picker.value == 2 and not picker.disabled
            assert app.analysis.settings.mesh.text() == "s=2" and app.analysis.settings.targets == ()
            assert not app.query_one(ErrorPanel).shown

            # a target that cannot be used is an error panel of its own, and the CPU results stay
            shown = app.analysis
            for k, (target, message, hint) in enumerate(UNUSABLE_TARGETS):
                await _type_target(pilot, target)
                panel = _panel(app)
                assert message in panel and hint in panel and "Traceback" not in panel, (target, panel)
                assert not any(other in panel for _, other, _ in UNUSABLE_TARGETS[:k]), (target, panel)
                # the CPU results stay, the app keeps running
                assert app.analysis is shown and app.is_running, target
                await press(pilot, "5")
                await drain(pilot)
                assert "on tpu:" not in app.query_one(HloView).plain, target

    run(scenario())


@dataclass(frozen=True)
class CompiledTabOnTheSlice:
    """What the Compiled tab shows of one app's results on a slice: its text, and its rows on
    screen once scrolled to the slice's plans. Tests that only read this finished screen share
    one app run (``rnn_on_the_slice``)."""

    target_field: str
    text: str  # the tab's whole text, whitespace folded
    scrolled_to_the_slice: bool
    rows: list[str]  # the tab's body on screen after scrolling to the slice's plans


@pytest.fixture(scope="module")
def rnn_on_the_slice() -> CompiledTabOnTheSlice:
    """rnn.py opened with the target (``shardscope rnn.py --target tpu:v5e:2x2``), on the Compiled tab."""
    from test_app_layout import screen_rows

    async def scenario() -> CompiledTabOnTheSlice:
        app = make_app(DEMOS / "rnn.py", targets=("tpu:v5e:2x2",))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            await drain(pilot)
            view = app.query_one(HloView)
            text = " ".join(view.plain.split())
            scrolled = view.scroll_to_targets()
            await drain(pilot)
            return CompiledTabOnTheSlice(app.query_one("#target", Input).value, text, scrolled, screen_rows(view.body))

    return run(scenario())


def test_the_rnn_naive_plans_recurrent_weight_stays_in_the_chunk_loop_on_the_slice(rnn_on_the_slice):
    """rnn.py opened with the target (``shardscope rnn.py --target tpu:v5e:2x2``): Wh's all-reduce
    leaves the time loop but stays in the chunk loop; the deferral is worth writing there."""
    tpu = _tpu_texts("rnn.py", "rnn", "v5e:2x2", 4)
    naive = all_reduces(tpu["naive"])
    (in_loop,) = [shape for shape, depth in naive if depth == 1]
    assert in_loop.startswith("f32[16,16]") and len(naive) == 2
    ((shape, depth),) = all_reduces(tpu["deferred"])
    assert depth == 0 and shape.count("f32[") == 3  # Wh, Wx and b in one all-reduce at the entry

    assert rnn_on_the_slice.target_field == "tpu:v5e:2x2"
    text = rnn_on_the_slice.text
    naive = _section(_section(text, "on tpu:v5e:2x2:"), "naive:", "deferred:")
    assert ("on v5e:2x2 the naive plan's all-reduce of grad(params['Wh']) stays in the plan's chunk loop "
            f"({CHUNKS} iterations): the deferral is worth writing") in naive
    # on the CPU: the chunk loop x the 8 time steps = 16 runs; on the slice: the chunk loop only
    assert re.search(rf"grad\(params\['Wh'\]\) {CHUNKS} {CHUNKS} deferrable \S+ {CHUNKS * 8} "
                     "left 1 of 2 loops", naive), naive
    deferred = _section(_section(text, "on tpu:v5e:2x2:"), "deferred:")
    assert "the deferred plan runs no collective in a loop" in deferred


def test_a_program_file_is_compiled_for_the_slice_too():
    """train_step.py's programs on v5e:2x4 (8 chips, as many as the CPU devices they build their
    mesh over): the partitioner's all-reduce in step's accumulation loop leaves it there."""
    async def scenario():
        app = make_app(DEMOS / "train_step.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await _type_target(pilot, "tpu:v5e:2x4")
            assert not app.query_one(ErrorPanel).shown
            assert "target tpu:v5e:2x4" in app.query_one(StatusLine).plain
            await press(pilot, "5")
            await drain(pilot)
            text = " ".join(app.query_one(HloView).plain.split())
            section = _section(text, "on tpu:v5e:2x4:")
            assert "8 x TPU v5 lite" in section
            assert ("step: on v5e:2x4 the step program's all-reduce of grad(params['W1']), grad(params['W2']) leaves the loop: "
                    "the compiler already does the deferral here.") in section
            # CPU: in the loop over 4 micro-batches, 4 runs; on the slice: outside it, 1 (the value cell folds)
            assert re.search(r"\S+ grad\(params\['W1'\]\), - 1 - \S+ 4 left loop grad\(params\['W2'\]\)", section), section
            app.query_one("#target", Input).value = ""
            await drain(pilot)
            assert app.stale  # the results are for a target the field no longer asks for

    run(scenario())


def _panel(app) -> str:
    """The error panel's message and hint, as one line."""
    panel = app.query_one(ErrorPanel)
    assert panel.shown, "no error panel"
    return " ".join(f"{panel.message} {panel.hint}".split())


def test_without_libtpu_the_error_panel_names_the_extra(monkeypatch, tmp_path):
    hide_compilers(monkeypatch, tmp_path, "tpu")
    tpu_target._load_topology.cache_clear()  # a slice loaded earlier in this process would not look again

    async def scenario():
        app = make_app(DEMOS / "linear.py", targets=("tpu:v5e:2x2",))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = _panel(app)
            assert "needs libtpu, which is not installed" in panel and "pip install 'shardscope[tpu]'" in panel
            assert app.query_one("#functions").option_count == 1  # the file still loaded: linear is offered
            assert app.is_running

    run(scenario())
    tpu_target._load_topology.cache_clear()


def test_while_a_run_traces_the_status_names_the_mesh_over_the_slice(tmp_path):
    """The sidebar asks for s=2; with v5e:2x2 the run traces over the slice's 4 chips, and the
    status line says so while it traces (it named s=2 until the results came). A slice of 8
    typed after the results: the next run names s=8 before it ends too."""
    async def scenario():
        app = make_app(write_gated_demo(tmp_path / "gated.py"), devices=2, targets=("tpu:v5e:2x2",))
        async with app.run_test(size=SIZE) as pilot:
            status = app.query_one(StatusLine)
            await eventually(pilot, lambda: "mesh s=4" in status.plain, "the slice's mesh named", seconds=30)
            assert app.running and app.analysis is None  # still inside gated's first trace
            assert status.plain.startswith("gated.py::gated  mesh s=4  chunk auto  target tpu:v5e:2x2"), status.plain
            GATE.set()
            await settle(pilot)
            assert app.analysis.settings.mesh.text() == "s=4" and "mesh s=4" in status.plain
            GATE.clear()
            field = app.query_one("#target", Input)
            app.set_focus(field)
            await press(pilot, "ctrl+a", "ctrl+k", *"tpu:v5e:2x4", "escape", "r")
            await eventually(pilot, lambda: "running gated.py::gated  mesh s=8" in status.plain,
                             "the second run naming the 8-chip mesh", seconds=30)
            assert app.running and "target tpu:v5e:2x4" in status.plain, status.plain
            GATE.set()
            await settle(pilot)
            assert app.analysis.settings.mesh.text() == "s=8"

    run(scenario())


def test_open_takes_a_target_checked_before_jax_starts():
    args, _ = parse([str(DEMOS / "linear.py"), "--target", "tpu:v5e:2x2"])
    settings, _ = ExplorerOptions.from_args(args).app_options()
    assert settings.targets == ("tpu:v5e:2x2",)
    args, _ = parse([str(DEMOS / "linear.py"), "--target", "v5e"])
    with pytest.raises(SettingsError, match="is not a target"):
        ExplorerOptions.from_args(args).app_options()


OPENED_WITH_A_LARGER_SLICE = '''
import asyncio, json, sys
sys.path.insert(0, {here!r})
from app_support import DEMOS, SIZE, make_app, settle
import jax

async def main():
    app = make_app(DEMOS / "linear.py", targets=("tpu:v5e:4x4",))  # the app's default: 8 CPU devices
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = app.query_one("#error")
        print(json.dumps({{"mesh": app.analysis.settings.mesh.text() if app.analysis else None,
                           "devices": len(jax.devices()), "error": panel.message if panel.shown else None}}))

asyncio.run(main())
'''


@pytest.mark.slow
def test_opened_with_a_slice_larger_than_max_devices_the_app_starts_as_many_cpu_devices():
    """``shardscope linear.py --target tpu:v5e:4x4``, in a fresh process (the test processes
    start JAX with 8 devices): libtpu describes the slice before JAX's CPU backend starts, so
    the first run starts its 16 devices and lays the mesh over them."""
    import json
    import subprocess

    here = str(Path(__file__).resolve().parent)
    script = OPENED_WITH_A_LARGER_SLICE.format(here=here)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=here)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    assert shown == {"mesh": "s=16", "devices": 16, "error": None}


def test_the_sweep_tab_sweeps_on_the_slice_the_analysis_was_compiled_for():
    """With a target, every sweep point is compiled for the slice too, and the budget and the
    memory chart read its memory there: the footprint (arguments + outputs + temporaries -
    aliases) of the slice's module, recomputed here from memory_analysis() of each plan compiled
    for it at that chunk size."""
    from textual_plotext import PlotextPlot

    from shardscope.app.views.sweep import SweepView

    view = SweepView()
    slice_ = registry.load_target(registry.parse_target("tpu:v5e:2x2"))
    settings = Settings(path=DEMOS / "linear.py", devices=4, repeats=1, targets=("tpu:v5e:2x2",))

    async def script(app, pilot):
        view.settings = settings
        view.query_one("#sweep-budget", Input).value = "10KiB"
        view.action_sweep()
        await app.workers.wait_for_complete()
        await drain(pilot)
        await drain(pilot)
        sweep = view.sweep
        assert sweep is not None and sweep.target == "tpu:v5e:2x2", _printed(view.query_one("#sweep-status", Static).content)
        built = build_plans(load_demo_file(settings.path).functions["linear"], settings.with_(chunk_size=16))
        memory = targets.compile_for_target(built.functions["naive"].trace(*built.args), slice_).memory
        expected = memory["peak_memory_in_bytes"]  # libtpu's peak: its temporaries' total is no peak
        (point,) = [p for p in sweep.points if p.plan == "naive" and p.chunk_size == 16]
        assert point.target_footprint_bytes == expected
        assert "mem/dev on tpu:v5e:2x2" in _printed(view.query_one("#sweep-table", Static).content)
        chart = view.query_one("#sweep-memory", PlotextPlot).plt.build()
        assert "memory per device on tpu:v5e:2x2 (KiB) vs chunk size" in chart

    from view_support import run_view

    run_view(view, script)


def test_a_named_mesh_is_kept_with_a_target_and_must_span_the_slice():
    """A typed named mesh is the user's: laid over the slice when its sizes multiply to the chip
    count (data=2,model=2 on v5e:2x2), an error panel when they do not (data=2), never stretched."""
    async def scenario():
        app = make_app(DEMOS / "mlp.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.query_one("#mesh", Input).value = "data=2"
            await _type_target(pilot, "tpu:v5e:2x2")
            panel = _panel(app)
            assert "The mesh data=2 has 2 devices; tpu:v5e:2x2 has 4." in panel and "multiply to 4" in panel
            assert app.analysis is None
            app.query_one("#mesh", Input).value = "data=2,model=2"
            app.set_focus(None)
            await press(pilot, "r")
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown
            assert app.analysis.settings.mesh.text() == "data=2,model=2"
            assert all(plan.targets[0].devices == 4 for plan in app.analysis.plans.values())

    run(scenario())


def test_clearing_a_target_larger_than_max_devices_runs_on_the_cpu_devices_it_started():
    """Opened with --max-devices 4, a v5e:2x4 target lays its 8 chips over 8 CPU devices (the
    test process has 8); the Devices picker then shows 8. Cleared, the picker gives back its
    own 2 but still offers 8, and picking 8 runs that mesh on the CPU only: the 8 devices are
    there, so no error panel saying only 4 are available."""
    from app_support import make_explorer

    async def scenario():
        app = make_explorer(Settings(DEMOS / "linear.py", repeats=2), max_devices=4, autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await _type_target(pilot, "tpu:v5e:2x4")
            assert not app.query_one(ErrorPanel).shown
            assert app.analysis.settings.mesh.text() == "s=8"
            assert app.query_one("#devices", Select).value == 8
            await _type_target(pilot, "")
            picker = app.query_one("#devices", Select)
            assert picker.value == 2 and app.analysis.settings.mesh.text() == "s=2"
            picker.value = 8
            await drain(pilot)
            app.set_focus(None)
            await press(pilot, "r")
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown, _panel(app)
            assert app.analysis.settings.targets == () and app.analysis.settings.mesh.text() == "s=8"
            assert not app.stale

    run(scenario())


def test_the_slice_verdicts_are_laid_out_within_the_compiled_tabs_visible_width(rnn_on_the_slice):
    """The Compiled tab's lines are laid out beside its vertical scrollbar, not under it: the
    rnn naive plan's verdict on the slice reads whole on screen, wrapped, with no line cut at
    the right edge (a line laid out at the width without the scrollbar lost its last 2 columns
    behind a cut mark)."""
    assert rnn_on_the_slice.scrolled_to_the_slice
    rows = rnn_on_the_slice.rows
    assert not [row for row in rows if row.rstrip().endswith("…")], "\n".join(rows)
    shown = " ".join(" ".join(rows).split())
    assert ("naive: on v5e:2x2 the naive plan's all-reduce of grad(params['Wh']) stays in the plan's chunk loop "
            "(2 iterations): the deferral is worth writing") in shown, shown


def test_at_80_columns_the_placements_keep_their_runs_and_placement_on_screen():
    """At 80x24 the sidebar folds away and the table keeps the CPU's and the slice's runs per call
    and the placement, each whole on the screen (the loops and instruction names make way)."""
    from app_support import screen_text

    async def scenario():
        app = make_app(DEMOS / "rnn.py", targets=("tpu:v5e:2x2",))
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot)
            await press(pilot, "5")
            await press(pilot, "t")
            for _ in range(3):  # the slice's naive table sits under its verdict and loops line
                if any("left 1 of 2 loops" in row for row in screen_text(app)):
                    break
                await press(pilot, "down", "down", "down")
            rows = screen_text(app)
            header = next(row for row in rows if "CPU runs" in row)
            assert "runs/call" in header and "CPU runs" in header and "placement" in header
            # Wh: the 2 chunks on the slice, 2 chunks x 8 time steps on the CPU (its value folds)
            assert any(re.search(rf"grad\(params\['W\S*\s+{CHUNKS}\s+{CHUNKS * 8}\s+left 1 of 2 loops", row) for row in rows), rows

    run(scenario())


def test_the_compiled_tab_says_whether_each_plan_fits_the_slice_and_estimates_its_step(rnn_on_the_slice):
    """Under each plan's verdict on the slice: its memory per device against a v5e chip's 15.75 GiB
    (what libtpu lets a program use) and the step estimate, collectives left out and said so."""
    for plan, end in (("naive:", "deferred:"), ("deferred:", None)):
        section = _section(_section(rnn_on_the_slice.text, "on tpu:v5e:2x2:"), plan, end)
        assert re.search(r"memory: [0-9.]+ (B|KiB|MiB) of 15\.75 GiB per device", section), section
        # v5e's ICI times the collectives: the estimate is a range, collectives hidden behind compute or not
        assert re.search(r"step estimate [0-9.]+ (us|ms) to [0-9.]+ (us|ms) per call waited on, [0-9.]+ (us|ms) to "
                         r"[0-9.]+ (us|ms) back to back, on v5e \(compute .*collectives [0-9.]+ (ns|us|ms), overlapped "
                         r"or not; checked on a v5e chip: \d+ of \d+ programs", section), section
