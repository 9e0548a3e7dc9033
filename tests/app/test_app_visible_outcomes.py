"""What the explorer shows when an action has nothing to put on screen: each says so in a line.

``w`` with every rewrite refused (weight decay added into the accumulator: the sum cannot leave
the loop), a target one program of the file does not fit, ``w`` on a demo file (greyed out) and
``t`` in the Compiled tab without a target. Real JAX on 8 simulated CPU devices and real Textual (``App.run_test`` + Pilot).
"""

from __future__ import annotations

import platform
import sys
import textwrap

import pytest
from app_support import DEMOS, SIZE, make_app, press, run, settle
from rich.console import Console

from shardscope.app.views.hlo import NO_TARGET
from shardscope.app.views.timings import timings_renderable
from shardscope.app.widgets.error_panel import ErrorPanel
from shardscope.app.widgets.status import StatusLine

needs_libtpu = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")

DECAYED = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    W = jax.ShapeDtypeStruct((8, 4), jnp.float32)
    xs = jax.ShapeDtypeStruct((4, 32, 8), jnp.float32)
    ys = jax.ShapeDtypeStruct((4, 32, 4), jnp.float32)


    def loss(W, x, y):
        return jnp.mean((jnp.tanh(x @ W) - y) ** 2)


    @shardscope.program(args=(W, xs, ys))
    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P())
    def decayed(W, xs, ys):
        """Weight decay added into the accumulator in every micro-batch."""
        def body(acc, batch):
            return acc + jax.grad(loss)(W, *batch) + 0.01 * W, None

        acc, _ = lax.scan(body, jnp.zeros_like(W), (xs, ys))
        return acc
''')


def _text(renderable) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return " ".join(console.export_text().split())


def test_w_with_every_rewrite_refused_says_so_on_the_status_line_and_in_timings(tmp_path):
    path = tmp_path / "decayed.py"
    path.write_text(DECAYED)

    async def scenario():
        app = make_app(path)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            before = app.query_one(StatusLine).plain
            assert "what-if" not in before
            await press(pilot, "w")
            await settle(pilot)
            assert tuple(app.analysis.plans) == ("decayed",)  # the refused rewrite is no program
            status = app.query_one(StatusLine).plain
            assert "what-if: no rewrite verified, 1 rewrite left out (see Timings)" in status
            (note,) = app.analysis.what_if_notes
            assert note.startswith("decayed: the sum of ") and "not rewritten: " in note
            timings = _text(timings_renderable(app.analysis, False))
            assert f"what-if, left out: {' '.join(note.split())}" in timings
            await press(pilot, "w")
            await settle(pilot)
            assert "what-if" not in app.query_one(StatusLine).plain

    run(scenario())


TWO_MESHES = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    import shardscope

    four = Mesh(np.array(jax.devices()[:4]), ("data",))
    eight = Mesh(np.array(jax.devices()[:8]), ("data",))
    x = jax.ShapeDtypeStruct((32, 4), jnp.float32)


    @shardscope.program(args=(x,))
    @jax.jit
    @jax.shard_map(mesh=four, in_specs=P("data"), out_specs=P())
    def small(x):
        return lax.psum(x.sum(0), "data")


    @shardscope.program(args=(x,))
    @jax.jit
    @jax.shard_map(mesh=eight, in_specs=P("data"), out_specs=P())
    def wide(x):
        return lax.psum(x.sum(0), "data")
''')


@needs_libtpu
def test_a_program_that_does_not_fit_the_target_leaves_the_others_on_screen(tmp_path):
    """On a 4-chip slice the 8-device program cannot be compiled; the 4-device one is shown, as
    `check --target` shows it, and the error panel names the other with the reason."""
    path = tmp_path / "meshes.py"
    path.write_text(TWO_MESHES)

    async def scenario():
        app = make_app(path, targets=("tpu:v5e:2x2",))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis is not None and tuple(app.analysis.plans) == ("small",)
            (small_on_target,) = app.analysis.plans["small"].targets
            assert small_on_target.target == "tpu:v5e:2x2" and small_on_target.devices == 4
            panel = app.query_one(ErrorPanel)
            said = " ".join(f"{panel.message} {panel.hint}".split())
            assert panel.shown and "wide: program wide runs on 8 devices; tpu:v5e:2x2 has 4." in said
            assert "the other programs are shown" in said

    run(scenario())


def test_on_a_demo_file_w_is_greyed_out_and_t_without_a_target_says_how_to_set_one():
    """One app on linear.py: ``w`` is greyed out for a demo file and changes nothing
    (test_app_what_if.py::test_w_is_greyed_out_for_a_demo_file, on its own app before), then ``t``
    in the Compiled tab without a target says how to set one
    (test_t_in_the_compiled_tab_without_a_target_says_how_to_set_one)."""
    async def scenario():
        app = make_app(DEMOS / "linear.py")
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            # w is greyed out for a demo file, and pressed it changes nothing
            assert app.check_action("what_if", ()) is None
            before = tuple(app.analysis.plans)
            await press(pilot, "w")
            await settle(pilot)
            assert tuple(app.analysis.plans) == before and not app.settings.what_if

            # t in the Compiled tab without a target says how to set one
            await press(pilot, "5")  # the Compiled tab
            assert app.query_one("#tabs").active == "hlo"
            told = []
            notify = app.notify
            app.notify = lambda message, **options: (told.append((str(message), options.get("title"))),
                                                     notify(message, **options))[1]
            await press(pilot, "t")
            assert told == [(NO_TARGET, "No target")]
            # the sidebar's field is "Target (optional)" and takes a TPU slice or GPUs: the words say so
            assert NO_TARGET.startswith("These results were compiled for the CPU only: type a target in the sidebar's "
                                        "Target field (tpu:v5e:2x2, gpu:h100:8) and press Enter (Shift+Tab from the tab "
                                        "bar goes there, opening the sidebar), or open the app with --target")

    run(scenario())
