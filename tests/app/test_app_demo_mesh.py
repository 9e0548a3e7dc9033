"""A demo whose parameters name mesh axes opens on its own mesh when the user gave none.

fsdp's counts are derived by hand: on data=4 with 2 chunks per device, the naive plan gathers
w1 and w2 in every chunk's forward (all_gather) and scatters their gradients in its backward
(reduce_scatter), and all-reduces the two biases per chunk: 2 x 2 x 2 + 2 x 2 = 12 runs per call;
the deferred plan does each once: 2 + 2 + 2 = 6.
"""

from __future__ import annotations

from app_support import DEMOS, SIZE, eventually, press, run, settle
from textual.widgets import Input, OptionList, Select

from shardscope.app import make_app
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.status import StatusLine
from shardscope.config.settings import Settings

TWO_DEMOS = '''
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import shardscope


@shardscope.demo(params=jax.ShapeDtypeStruct((4, 8), jnp.float32), x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def plain(W, x):
    return x @ W


@shardscope.demo(params=jax.ShapeDtypeStruct((4, 8), jnp.float32), x=jax.ShapeDtypeStruct((32, 4), jnp.float32),
                 param_specs=P(None, "model"))
def sharded(W, x):
    """No mesh= given: its mesh comes from param_specs (model=2)."""
    return x @ W
'''


def _fields(app) -> tuple:
    return (app.query_one("#devices", Select).value, app.query_one("#axis", Input).value,
            app.query_one("#mesh", Input).value)


def test_fsdp_opens_on_its_own_mesh():
    async def scenario():
        app = make_app(Settings(DEMOS / "fsdp.py", repeats=1, demo_mesh=True))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown, app.query_one(ErrorPanel).message
            assert app.analysis.settings.mesh.text() == "data=4"
            runs = {name: plan.jaxpr_runs_per_call for name, plan in app.analysis.plans.items()}
            assert runs == {"naive": 12, "deferred": 6}
            assert _fields(app) == (4, "data", "")  # the sidebar shows the mesh that ran
            assert not app.stale
            assert "mesh data=4" in app.query_one(StatusLine).plain
            await press(pilot, "r")  # running the sidebar's settings again: the same mesh, no error
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown and app.analysis.settings.mesh.text() == "data=4"

    run(scenario())


def test_a_mesh_the_user_gave_wins_and_gets_the_clear_error():
    async def scenario():
        app = make_app(Settings(DEMOS / "fsdp.py", devices=2, repeats=1))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "param_specs names 'data', which the mesh s=2 does not have" in panel.message
            assert "--mesh data=2" in panel.hint
            assert _fields(app) == (2, "s", "")

    run(scenario())


def test_the_mesh_follows_the_demo_picked_until_the_user_edits_it(tmp_path):
    path = tmp_path / "two.py"
    path.write_text(TWO_DEMOS)

    async def scenario():
        app = make_app(Settings(path, repeats=1, demo_mesh=True))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.function == "plain" and app.analysis.settings.mesh.text() == "s=2"
            options = app.query_one("#functions", OptionList)
            options.focus()
            await press(pilot, "down", "enter")  # pick "sharded"
            await eventually(pilot, lambda: _fields(app) == (2, "model", ""), "the fields show model=2")
            await press(pilot, "r")
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown, app.query_one(ErrorPanel).message
            assert app.analysis.function == "sharded" and app.analysis.settings.mesh.text() == "model=2"
            # a mesh typed by the user is the user's: picking "plain" keeps it
            app.query_one("#mesh", Input).value = "model=4"
            await press(pilot, "shift+tab")  # leave the input
            options.focus()
            await press(pilot, "up", "enter")
            await press(pilot, "r")
            await settle(pilot)
            assert app.analysis.function == "plain" and app.analysis.settings.mesh.text() == "model=4"

    run(scenario())
