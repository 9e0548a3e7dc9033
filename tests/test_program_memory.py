"""A program's example arguments that cannot fit in memory are refused before one is made.

The app times programs on materialised example arguments: a 32 TiB embedding given as a
``ShapeDtypeStruct`` (tracing and compiling never allocate it) was a MemoryError and "this looks
like a bug; run `shardscope report FILE --debug`", though report refuses program files. It is
now one message naming the argument, its shape and bytes against what is available, with a
hint that works (``shardscope check`` traces without allocating).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from shardscope.errors import SettingsError
from shardscope.sources.examples import available_memory
from shardscope.pipeline.run import analyze
from shardscope.plans.settings import Settings

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


def test_a_program_argument_too_big_for_memory_is_named_before_it_is_made(tmp_path):
    available = available_memory()
    assert available is not None and available < EMBEDDING_BYTES
    with pytest.raises(SettingsError) as info:
        analyze(Settings(path=huge_program(tmp_path), repeats=2))
    message = info.value.message
    assert message.startswith("The example arguments of the program step do not fit in memory: "
                              "params['embedding'] alone is (4194304, 2097152) float32 = 35.2 TB")
    # filled on the host, then replicated on both devices of the mesh: 3 copies; the bias, which the
    # program does not use (jit prunes it), on the host and one device: 2 x 16 B; xs (128 B) on the
    # host and split over the two devices: 2 x 128 B
    needed = 3 * EMBEDDING_BYTES + 2 * 16 + 2 * 128
    assert f"need at least {needed / 1e12:.1f} TB" in message and "is available" in message
    assert "shardscope check FILE" in info.value.hint and "report" not in info.value.hint


@pytest.mark.slow  # a fresh process: were the arguments made, 32 TiB would be asked of it, not of this one
def test_check_traces_it_without_making_the_arguments(tmp_path):
    from _support import run_cli

    result = run_cli("check", huge_program(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "all-reduce[s]" in result.stdout  # compiled too: a compile makes no argument either


def test_the_app_shows_it_in_the_error_panel(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "app"))
    from app_support import SIZE, make_app, run, settle

    from shardscope.app.widgets.error_panel import ErrorPanel

    async def scenario():
        app = make_app(huge_program(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            assert panel.shown and "params['embedding'] alone is (4194304, 2097152) float32" in panel.message
            assert "MemoryError" not in panel.message and "looks like a bug" not in panel.hint
            assert app.is_running

    run(scenario())


def test_an_unexpected_error_in_a_program_file_points_at_check():
    from shardscope.app.runner import bug_hint
    from shardscope.sources.programs import ProgramFile

    assert "`shardscope check FILE --debug`" in bug_hint(ProgramFile(Path("p.py"), {}, ""))
    assert "`shardscope report FILE --debug`" in bug_hint(None)
