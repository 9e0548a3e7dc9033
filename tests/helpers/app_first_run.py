"""The explorer in a fresh process, as ``shardscope open ARGS...`` starts it, driven by a Pilot.

``python app_first_run.py [--sweep] ARGS...`` parses ARGS as the command line does, waits for
the first analysis (and with ``--sweep``, for the Sweep tab's sweep started with ``6`` and
``s``) and prints one JSON object: the plans' collective runs per call and gradient errors,
the devices JAX started, the sweep's plans and what the error panel says.
"""

import asyncio
import json
import sys
import time

from shardscope.app import make_app
from shardscope.cli import open_options

SIZE = (160, 48)
DEADLINE_S = 600


async def _until(pilot, predicate) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("the app never got there")
        await pilot.pause(0.05)


def _error(app) -> str:
    from shardscope.app.widgets.error_panel import ErrorPanel

    return str(app.query_one(ErrorPanel).message or "")


async def main(argv: list[str]) -> dict:
    sweep = argv[:1] == ["--sweep"]
    settings, options = open_options(argv[1:] if sweep else argv)
    app = make_app(settings, **options)
    async with app.run_test(size=SIZE) as pilot:
        await _until(pilot, lambda: app.analysis is not None or _error(app))
        out = {"error": _error(app)}
        if app.analysis is not None:
            import jax

            out["devices_started"] = jax.device_count()
            out["mesh"] = app.analysis.settings.mesh.text()
            out["plans"] = {name: {"runs": plan.jaxpr_runs_per_call, "max_abs_err": plan.max_abs_err}
                            for name, plan in app.analysis.plans.items()}
            out["unavailable"] = app.analysis.unavailable
        if sweep and app.analysis is not None:
            from shardscope.app.views.sweep import SweepView

            await pilot.press("6")
            await _until(pilot, lambda: app.query(SweepView))
            view = app.query_one(SweepView)
            view.action_sweep()  # as s does (the tab's key is another part's work)
            await _until(pilot, lambda: view.sweep is not None or not view.running)
            status = view.query_one("#sweep-status")
            out["sweep_status"] = str(status.render())
            out["sweep_plans"] = view.sweep.plan_names if view.sweep is not None else None
            out["sweep_unavailable"] = getattr(view.sweep, "unavailable", None) if view.sweep is not None else None
        return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
