"""A program's example arguments that cannot fit in memory are never made, and the rest goes on.

The app times programs on materialised example arguments: a 32 TiB embedding given as a
``ShapeDtypeStruct`` (tracing and compiling never allocate it) was a MemoryError and "this looks
like a bug; run `shardscope report FILE --debug`", though report refuses program files. Then it
was one message naming the argument, its shape and bytes against what is available, and the
app opened nothing (a Llama-3-8B step over 256 devices, which ``check`` analyses). Now the
analysis goes on without running: every plan, compiled plan, target and memory, and the
timings marked as not run, saying why.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from shardscope.errors import SettingsError
from shardscope.sources.examples import available_memory
from shardscope.pipeline.run import analyze
from shardscope.config.settings import Settings

HUGE = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:2]), ("s",))
params = {"embedding": jax.ShapeDtypeStruct((2**22, 2**21), jnp.float32), "bias": jax.ShapeDtypeStruct((4,), jnp.float32)}
xs = jax.ShapeDtypeStruct((8, 4), jnp.float32)


@shardscope.program(args=(params, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P("s")), out_specs=P())
def step(params, xs):
    return lax.psum(jnp.sum(xs) + params["embedding"][0, 0], "s")
'''
EMBEDDING_BYTES = 2**22 * 2**21 * 4  # 32 TiB of float32


def huge_program(tmp_path: Path) -> Path:
    path = tmp_path / "huge.py"
    path.write_text(textwrap.dedent(HUGE))
    return path


def test_a_program_argument_too_big_for_memory_is_named_and_not_made(tmp_path):
    available = available_memory()
    assert available is not None and available < EMBEDDING_BYTES
    analysis = analyze(Settings(path=huge_program(tmp_path), repeats=2))  # asked to measure: nothing is made
    why = analysis.not_timed
    assert why is not None and not analysis.measured and analysis.timed_on is None
    assert why.message.startswith("The example arguments of the program step do not fit in memory: "
                                  "params['embedding'] alone is (4194304, 2097152) float32 = 35.2 TB")
    # filled on the host, then replicated on both devices of the mesh: 3 copies; the bias, which the
    # program does not use (jit prunes it), on the host and one device: 2 x 16 B; xs (128 B) on the
    # host and split over the two devices: 2 x 128 B
    needed = 3 * EMBEDDING_BYTES + 2 * 16 + 2 * 128
    assert f"need at least {needed / 1e12:.1f} TB" in why.message and "is available" in why.message
    assert "smaller example arguments" in why.hint and "report" not in why.hint
    step = analysis.plans["step"]
    assert step.compiled is not None and step.run_s is None  # compiled, never run
    # the compiled program's own memory, read without running it: the embedding replicated on each
    # device, the bias pruned, xs split: 8 x 4 float32 over 2 devices
    assert step.memory["argument_size_in_bytes"] == EMBEDDING_BYTES + 4 * 4 * 4


@pytest.mark.slow  # a fresh process: were the arguments made, 32 TiB would be asked of it, not of this one
def test_check_traces_it_without_making_the_arguments(tmp_path):
    from _support import run_cli

    result = run_cli("check", huge_program(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "all-reduce[s]" in result.stdout  # compiled too: a compile makes no argument either


def test_the_app_opens_it_with_the_timings_marked_not_run(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "app"))
    from app_support import SIZE, make_app, press, run, settle

    from shardscope.app.views import HloView
    from shardscope.app.views.projection import ProjectionPanel
    from shardscope.app.widgets.error_panel import ErrorPanel
    from shardscope.app.widgets.status import StatusLine

    async def scenario():
        app = make_app(huge_program(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert not app.query_one(ErrorPanel).shown and app.analysis is not None
            assert "not run or timed: the example arguments do not fit in memory here" in app.query_one(StatusLine).plain
            await press(pilot, "4")
            await settle(pilot)
            body = app.query_one("#timings-body")
            timings = "\n".join("".join(s.text for s in body.render_line(y)) for y in range(body.size.height))
            assert "Not run or timed: The example arguments of the program step do not fit in memory" in " ".join(
                timings.split())
            assert "run median" in timings and "not run" in timings
            # nothing timed, the groups read from the compiled module: its psum over both devices
            projection = " ".join(app.query_one(ProjectionPanel).plain.split())
            assert "with each collective over its own group of the 2-device mesh" in projection
            assert "step: 4 us per call (1 collective run)" in projection  # 2 x 2 us + 2 x 1/2 x 4 B / 450 GB/s
            await press(pilot, "5")
            await settle(pilot)
            assert "step: 1 compiled collective" in app.query_one(HloView).body.plain

    run(scenario())


def test_an_unexpected_error_in_a_program_file_points_at_check():
    from shardscope.app.base.runner import bug_hint
    from shardscope.sources.programs import ProgramFile

    assert "`shardscope check FILE --debug`" in bug_hint(ProgramFile(Path("p.py"), {}, ""))
    assert "`shardscope report FILE --debug`" in bug_hint(None)
