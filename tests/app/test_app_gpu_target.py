"""The sidebar's target field with GPUs: every plan compiled for 8 H100s too (nothing runs there)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from app_support import DEMOS, SIZE, drain, make_app, press, run, settle
from textual.widgets import Input

from shardscope.app.views import HloView
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.targets import compile as targets, registry
from shardscope.plans.registry import build_plans
from shardscope.config.settings import Settings
from shardscope.sources.loading import load_demo_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _gpu_plugin import needs_gpu_plugin  # noqa: E402  (tests/, beside this folder)


pytestmark = needs_gpu_plugin

_BODIES = re.compile(r"body=%([\w.\-]+)")
_HEADER = re.compile(r"^(?:ENTRY )?%(\S+) .*\{$")


def _all_reduce_in_loop(text: str) -> list[bool]:
    """Whether each all-reduce of ``text`` is in a loop body, by the computation that holds it."""
    bodies, found, computation = set(_BODIES.findall(text)), [], ""
    for line in text.splitlines():
        if (header := _HEADER.match(line)):
            computation = header.group(1)
        elif re.search(r" all-reduce(?:-start)?\(", line):
            found.append(computation in bodies)
    return found


async def _type_target(pilot, text: str) -> None:
    app = pilot.app
    field = app.query_one("#target", Input)
    app.set_focus(field)
    await press(pilot, *(["ctrl+a", "ctrl+k"] if field.value else []), *text)
    await press(pilot, "escape")
    await press(pilot, "r")
    await settle(pilot)


def test_gpus_typed_in_the_sidebar_show_the_gpu_compilers_plans_in_the_compiled_tab():
    """linear.py on gpu:h100:8: the naive plan's all-reduce leaves the chunk loop on the GPU
    (counted in the module compiled here), and the Compiled tab says so, naming the GPU compiler."""
    settings = Settings(path=DEMOS / "linear.py", devices=8)
    built = build_plans(load_demo_file(settings.path).functions["linear"], settings)
    gpus = registry.load_target(registry.parse_target("gpu:h100:8"))
    naive = targets.compile_for_target(built.functions["naive"].trace(*built.args), gpus).hlo_text
    assert _all_reduce_in_loop(naive) == [False]

    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await _type_target(pilot, "gpu:h100:8")
            assert not app.query_one(ErrorPanel).shown
            assert app.analysis.settings.targets == ("gpu:h100:8",) and app.analysis.settings.mesh.text() == "s=8"
            await press(pilot, "5")
            await drain(pilot)
            view = app.query_one(HloView)
            assert view.body.scroll_offset.y == 0
            assert view.plain.lstrip().startswith("on gpu:h100:8:")  # the picked target's plans lead
            await press(pilot, "t")  # to them: already on top
            assert view.body.scroll_offset.y == 0
            text = " ".join(view.plain.split())
            assert "on gpu:h100:8: 8 x NVIDIA H100 80GB HBM3, compiled for the GPUs, never run there" in text
            assert ("naive: on h100:8 the naive plan's all-reduce of grad(params) leaves the loop: "
                    "the compiler already does the deferral here.") in text
            assert "The GPU compiler's plans for gpu:h100:8 are at the top: compiled for the GPUs" in text

    run(scenario())
