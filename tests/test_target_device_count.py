"""A program whose file takes fewer devices than its target has: the hint names the file's line
that takes them (found here in the program's own text) and the target's devices as what they
are, and never suggests the ``--devices`` count that was given."""

from __future__ import annotations

import textwrap

import pytest
from _support import run_cli

from test_gpu_targets import needs_plugin
from test_targets import needs_libtpu, without_cuda_plugin_lines

_PROGRAM = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))  # THE COUNT


    @shardscope.program(args=(jax.ShapeDtypeStruct((32, 4), jnp.float32, sharding=NamedSharding(mesh, P("data"))),))
    @jax.jit
    def step(x):
        return jnp.sum(x * 2.0)
""")


@pytest.mark.parametrize("target, noun", [
    pytest.param("tpu:v5e:4x4", "chips", marks=needs_libtpu),
    pytest.param("gpu:b200:2x8", "GPUs", marks=needs_plugin),
])
def test_a_file_that_takes_eight_of_sixteen_devices_is_told_its_line(tmp_path, target, noun):
    path = tmp_path / "step.py"
    path.write_text(_PROGRAM)
    (line,) = [n for n, text in enumerate(_PROGRAM.splitlines(), 1) if "# THE COUNT" in text]
    result = run_cli("check", path, "--target", target, "--devices", "16", timeout=300)
    assert result.returncode == 2, result.stdout
    error, hint = without_cuda_plugin_lines(result.stderr).strip().splitlines()[-2:]
    assert error == f"shardscope: error: step runs on 8 devices; {target} has 16."
    assert hint == (f"hint: pick a topology with 8 {noun}, or take 16 devices where step.py line {line} takes 8 "
                    f"(jax.devices()[:8])")
