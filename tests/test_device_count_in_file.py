"""A program file that sets ``jax_num_cpu_devices`` itself, as a script run alone would.

shardscope starts JAX's CPU devices before it imports the file, so JAX refuses another count
(its RuntimeError). The message says so, and the hint names shardscope's option for the count;
following the hint, the same file is checked on the count it wanted.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from _support import in_one_process

_PROGRAM = textwrap.dedent("""
    import jax
    jax.config.update("jax_num_cpu_devices", 16)
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardscope

    mesh = jax.make_mesh((len(jax.devices()),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))


    @shardscope.program(args=(jax.ShapeDtypeStruct((32, 4), jnp.float32),))
    @jax.jit
    def step(x):
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("data")))
        return jnp.sum(x * 2.0)
""")


def test_a_file_that_sets_the_cpu_device_count_is_told_to_give_it_to_shardscope(tmp_path, shardscope_cli):
    path = tmp_path / "step.py"
    path.write_text(_PROGRAM)
    result = shardscope_cli("check", path)
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert lines == [
        "shardscope: error: step.py line 3 sets jax_num_cpu_devices, but shardscope starts JAX's CPU devices "
        "before it imports the file, and JAX cannot change their count after that.",
        "hint: give the count to shardscope instead: --devices 16 (check, report) or --max-devices 16 (the app)",
    ]


_SIXTEEN = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    import shardscope

    mesh = MESH
    x = jax.ShapeDtypeStruct((64, 8), jnp.float32)


    @shardscope.program(args=(x,))
    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P("d"),), out_specs=P())
    def total(x):
        return jax.lax.psum(x.sum(), "d")
""")
"""A program file that builds a mesh of 16 devices at import (MESH: how it lays them out)."""


@pytest.mark.parametrize("mesh", [
    'Mesh(np.array(jax.devices()[:16]).reshape(16), ("d",))',  # numpy: cannot reshape array of size 8 into (16,)
    'jax.make_mesh((16,), ("d",))',  # JAX: Number of devices 8 must be >= the product of mesh_shape (16,)
    'Mesh(np.array([jax.devices()[15]] + jax.devices()[:15]), ("d",))',  # an index past the 8 started
])
def test_a_file_that_needs_16_devices_is_told_how_to_start_them(tmp_path, shardscope_cli, mesh):
    path = tmp_path / "sixteen.py"
    path.write_text(_SIXTEEN.replace("MESH", mesh))
    result = shardscope_cli("check", path)
    assert result.returncode == 2, result.stdout
    message, hint = result.stderr.strip().splitlines()
    line = next(k for k, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("mesh = "))
    assert message.startswith(f"shardscope: error: sixteen.py line {line} lays out 16 devices, but shardscope "
                              "started 8 CPU devices before importing it (")
    assert hint == "hint: start 16: --max-devices 16 (the app) or --devices 16 (check, report)"
    assert "Traceback" not in result.stderr


def test_following_either_hint_checks_the_file_on_16_devices(tmp_path):
    """Each hint followed (``--devices 16``): the file that sets the count itself, and the file that
    lays out 16 devices at import, checked one after the other in one fresh process of 16 CPU
    devices (a test, and a process, each before; the second finds JAX started with the 16 the
    first asked for, as its own process would). In each, the sum over a batch sharded on 16
    devices: one all-reduce, outside any loop."""
    own_count = tmp_path / "step.py"
    own_count.write_text(_PROGRAM)
    sixteen = tmp_path / "sixteen.py"
    sixteen.write_text(_SIXTEEN.replace("MESH", 'Mesh(np.array(jax.devices()[:16]).reshape(16), ("d",))'))
    results = in_one_process(("check", own_count, "--devices", "16", "--json"),
                             ("check", sixteen, "--devices", "16", "--json"))
    for result in results:
        assert result.returncode == 0, result.stderr
        (program,) = json.loads(result.stdout)["programs"]
        assert [(c["kind"], c["loops"]) for c in program["compiled_collectives"]] == [("all-reduce", [])]
