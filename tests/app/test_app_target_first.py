"""The explorer opened with a target (``shardscope linear.py --target gpu:h100:8``) leads with that
target's plan: its runs per call and verdict come first, the CPU's after them, and the speedup,
timed on this machine's simulated CPU devices, says so.

Real JAX on simulated CPU devices, JAX's CUDA plugin's compile-only GPUs, real Textual
(``App.run_test`` + Pilot). The runs per call are counted here in each plan's module (the GPUs'
and the CPU's: which computations hold each all-reduce, how often the chunk loop runs), never
read from shardscope.
"""

from __future__ import annotations

import re

from app_support import DEMOS, SIZE, drain, make_app, press, run, settle
from test_app_target import _printed
from textual.widgets import Static
from test_app_gpu_target import _all_reduce_in_loop, pytestmark  # noqa: F401  (the plugin's skip)

from shardscope.app.views import HloView
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.status import StatusLine
from shardscope.plans.registry import build_plans
from shardscope.config.settings import Settings
from shardscope.sources.loading import load_demo_file
from shardscope.targets import compile as targets, registry

TARGET = "gpu:h100:8"
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _runs(text: str) -> int:
    """All-reduce runs per call of a module: one outside loops, the loop's trip count inside it."""
    trips = {int(n) for n in _TRIPS.findall(text)}
    return sum((max(trips) if in_loop else 1) for in_loop in _all_reduce_in_loop(text))


def test_the_explorer_opened_for_gpus_leads_with_their_plan_and_says_where_it_timed():
    settings = Settings(path=DEMOS / "linear.py", devices=8)
    built = build_plans(load_demo_file(settings.path).functions["linear"], settings)
    gpus = registry.load_target(registry.parse_target(TARGET))
    naive = built.functions["naive"].trace(*built.args)
    on_gpus, on_cpu = _runs(targets.compile_for_target(naive, gpus).hlo_text), _runs(naive.lower().compile().as_text())
    assert (on_gpus, on_cpu) == (1, 2)  # the GPUs move the naive plan's all-reduce out of the 2 chunks

    async def scenario():
        app = make_app(DEMOS / "linear.py", targets=(TARGET,))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown
            status = " ".join(app.query_one(StatusLine).plain.split())
            assert f"compiled runs/call on {TARGET}: naive {on_gpus}," in status
            assert f"(on the CPU: naive {on_cpu}," in status
            assert status.index(TARGET) < status.index("on the CPU")
            timing = status.split("; timed on simulated CPU devices here: ", 1)[1]  # the speedup says where it ran
            assert "naive" in timing and "deferred" in timing

            await press(pilot, "5")
            await drain(pilot)
            view = app.query_one(HloView)
            text = " ".join(view.plain.split())
            assert view.body.scroll_offset.y == 0 and text.startswith(f"on {TARGET}: 8 x NVIDIA H100")
            verdict = ("naive: on h100:8 the naive plan's all-reduce of grad(params) leaves the loop: "
                       "the compiler already does the deferral here.")
            assert verdict in text and text.index(verdict) < text.index("backend: cpu")

            await press(pilot, "4")
            await drain(pilot)
            timings = " ".join(_printed(app.query_one("#timings-body", Static).content).split())
            assert "timed on simulated CPU devices here: " in timings

    run(scenario())
