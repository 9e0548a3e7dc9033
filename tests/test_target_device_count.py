"""A program whose file takes fewer devices than its target has: the hint names the file's line
that takes them (found here in the program's own text) and the target's devices as what they
are, and never suggests the ``--devices`` count that was given."""

from __future__ import annotations

import textwrap

import pytest
from _gpu_plugin import gpu_plugin_installed
from _support import in_one_process

from test_targets import LIBTPU_SHIPS, without_cuda_plugin_lines

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


_TARGETS = [(target, noun) for target, noun, here in (("tpu:v5e:4x4", "chips", LIBTPU_SHIPS),
                                                      ("gpu:b200:2x8", "GPUs", gpu_plugin_installed())) if here]
"""Each kind of target installed here: its 16 devices, and what the hint calls them."""


@pytest.mark.skipif(not _TARGETS, reason="neither libtpu nor JAX's CUDA plugin is installed here")
def test_a_file_that_takes_eight_of_sixteen_devices_is_told_its_line(tmp_path):
    """Checked for a TPU slice and for GPUs of 16 devices each, one after the other in one fresh
    process of 16 CPU devices (a test, and a process, each before: the second command finds JAX
    started with the count the first asked for, the same 16)."""
    path = tmp_path / "step.py"
    path.write_text(_PROGRAM)
    (line,) = [n for n, text in enumerate(_PROGRAM.splitlines(), 1) if "# THE COUNT" in text]
    results = in_one_process(*(("check", path, "--target", target, "--devices", "16") for target, _ in _TARGETS))
    assert len(results) == len(_TARGETS)
    for (target, noun), result in zip(_TARGETS, results):
        assert result.returncode == 2, result.stdout
        error, hint = without_cuda_plugin_lines(result.stderr).strip().splitlines()[-2:]
        assert error == f"shardscope: error: step runs on 8 devices; {target} has 16."
        assert hint == (f"hint: pick a topology with 8 {noun}, or take 16 devices where step.py line {line} takes 8 "
                        f"(jax.devices()[:8])")
