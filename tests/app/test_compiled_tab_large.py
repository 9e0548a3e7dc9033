"""The Compiled tab of an analysis with many collectives: laid out in a thread worker, the tab saying
so at once, the UI thread free for keys meanwhile (an analysis of 2,605 compiled collectives held
it for tens of seconds: ``q`` waited for the layout).

Real JAX on simulated CPU devices, real Textual. The count is the program's own: a chain of
``CHAIN`` psums, each summing the one before it, so no combiner can merge two of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from app_support import drain
from view_support import run_view

from shardscope.app.views import HloView
from shardscope.app.views.hlo import LAY_OUT_HERE

CHAIN = LAY_OUT_HERE + 16

PROGRAM = f'''
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:2]), ("data",))


@shardscope.program(args=(jax.ShapeDtypeStruct((8, 4), jnp.float32),))
@jax.jit
def chain(x):
    def body(x):
        for _ in range({CHAIN}):
            x = jax.lax.psum(jnp.tanh(x), "data")  # each sum feeds the next: {CHAIN} all-reduces
        return x
    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
'''


@pytest.fixture(scope="module")
def chain_analysis(tmp_path_factory):
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    path = Path(tmp_path_factory.mktemp("chain")) / "chain.py"
    path.write_text(PROGRAM)
    return analyze(Settings(path, repeats=1))


async def _laid_out(app, pilot) -> None:
    """Wait until the worker's layout shows (a resize meanwhile starts another)."""
    for _ in range(50):
        await app.workers.wait_for_complete()
        await drain(pilot)
        if not app.view.laying_out:
            return
    raise AssertionError(f"the Compiled tab never showed its layout: {[(w.name, w.state, w.error) for w in app.workers]}")


def test_a_large_analysis_shows_a_progress_line_at_once_and_its_plans_from_a_worker(chain_analysis):
    async def script(app, pilot):
        app.view.show_analysis(chain_analysis)
        # show_analysis returned without laying the plans out: the tab says what it is doing
        assert app.view.laying_out
        assert re.search(rf"Laying out the compiled plans: \d+ of {CHAIN} collectives", app.view.plain)
        await _laid_out(app, pilot)
        text = app.view.plain
        assert not app.view.laying_out
        assert f"chain: {CHAIN} compiled collectives from {CHAIN} collective equations" in text
        assert len(re.findall(r"^\s*▶?\s*chain #\d+ ", text, re.M)) == CHAIN  # every one's details
        assert "Laying out" not in text

    run_view(HloView(), script)


def test_a_key_during_the_layout_is_answered_and_n_goes_there_once_it_is_laid_out(chain_analysis):
    async def script(app, pilot):
        app.view.show_analysis(chain_analysis)
        assert app.view.laying_out
        # the UI thread is free: n is taken at once, and scrolls once the layout shows
        assert app.view.step_collective(-1) == ("chain", CHAIN - 1)
        await _laid_out(app, pilot)
        text = app.view.plain.splitlines()
        last = next(i for i, line in enumerate(text) if re.match(rf"\s*▶\s*chain #{CHAIN} ", line))
        for _ in range(50):  # the scroll lands once the body has its new height: a few screen updates on a busy machine
            if app.view.body.scroll_offset.y:
                break
            await drain(pilot)
        assert app.view.body.scroll_offset.y == min(last - 2, app.view.body.max_scroll_y) > 0

    run_view(HloView(), script)


def test_a_small_analysis_is_still_laid_out_at_once(analysis_of):
    analysis = analysis_of("linear.py")

    async def script(app, pilot):
        app.view.show_analysis(analysis)
        assert not app.view.laying_out  # laid out here, by the body once it has its width: no worker
        await drain(pilot)
        assert not app.view.laying_out
        assert "naive: 1 compiled collective" in app.view.plain

    run_view(HloView(), script)
