"""Piped into a CI log, every table is readable at 120 columns (issue 45, item 15).

A target's table holds the target's collectives and the CPU's they carry: ten columns, 142 to
921 wide at their natural width. Piped, no line is wider than 120 columns (the table in two
halves, the target's and the CPU's), and nothing is cut: the value cell, read down the lines it
wraps onto, is whole, and no cell ends in ``…``.
"""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
from _support import PYTHON, ROOT

from test_targets import needs_libtpu


def at_80_columns() -> dict[str, str]:
    """The environment with ``COLUMNS=80``, as it is when the command starts: what the test's run set
    in it reaches the command too (the newest run's measurement names the test there)."""
    return {**os.environ, "COLUMNS": "80", "TERM": "xterm"}


# eight parameters with long names, summed by one combined all-reduce in a scan: its value
# names all eight (over 300 characters)
_PROGRAM = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardscope

    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    NAMES = [f"decoder_block_{i}_attention_projection_kernel" for i in range(8)]
    params = {name: jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P())) for name in NAMES}
    xs = jax.ShapeDtypeStruct((4, 64, 8), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))


    def loss(params, x):
        h = x
        for name in NAMES:
            h = jnp.tanh(h @ params[name])
        return jnp.sum(h ** 2)


    @shardscope.program(args=(params, xs))
    @jax.jit
    def accumulate(params, xs):
        def body(acc, x):
            return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, x)), None

        return lax.scan(body, jax.tree.map(jnp.zeros_like, params), xs)[0]
""")


def _piped(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "shardscope", *args], capture_output=True, text=True, cwd=ROOT,
                          env=at_80_columns(), timeout=600)


@pytest.mark.slow
@needs_libtpu
def test_a_targets_tables_fit_120_columns_with_every_value_whole(tmp_path):
    path = tmp_path / "long_values.py"
    path.write_text(_PROGRAM)
    result = _piped("check", str(path), "--target", "tpu:v5e:2x4")
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    assert "tpu:v5e:2x4: each collective the target runs" in result.stdout
    widest = max(lines, key=len)
    assert len(widest) <= 120, widest
    assert "…" not in result.stdout
    start = lines.index(next(line for line in lines if "each collective the target runs" in line))
    table = lines[start:start + next(i for i, line in enumerate(lines[start:]) if line.startswith("└"))]
    value = "".join(line.split("│")[3].strip() for line in table if line.startswith("│"))
    assert value == ("grad(params['decoder_block_0_attention_projection_kernel']),"
                     "grad(params['decoder_block_1_attention_projection_kernel'])and 6 more")  # read down its cell


def test_a_wide_table_piped_wraps_its_long_cells_and_keeps_short_ones_whole():
    from io import StringIO

    from rich.table import Table

    from shardscope.render.console import PipeConsole

    table = Table()
    table.add_column("collective", no_wrap=True)
    table.add_column("value", no_wrap=True)
    long_value = ", ".join(f"grad(params['layer_{i}']['attention_kernel'])" for i in range(6))
    table.add_row("all-reduce-start.12", long_value)
    buffer = StringIO()
    PipeConsole(wrap=80, file=buffer).print(table)
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 120
    assert "all-reduce-start.12" in lines[3]  # the short cell whole on the row's first line
    joined = " ".join(line.strip(" │┃").split("│")[-1].strip() for line in lines[3:-1])
    assert joined == long_value
