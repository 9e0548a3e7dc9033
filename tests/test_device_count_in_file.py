"""A program file that sets ``jax_num_cpu_devices`` itself, as a script run alone would.

shardscope starts JAX's CPU devices before it imports the file, so JAX refuses another count
(its RuntimeError). The message says so, and the hint names shardscope's option for the count;
following the hint, the same file is checked on the count it wanted.
"""

from __future__ import annotations

import json
import textwrap

from _support import run_cli

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


def test_following_the_hint_checks_the_file_on_its_own_count(tmp_path):
    path = tmp_path / "step.py"
    path.write_text(_PROGRAM)
    result = run_cli("check", path, "--devices", "16", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    # the sum over a batch sharded on 16 devices: one all-reduce, outside any loop
    assert [(c["kind"], c["loops"]) for c in program["compiled_collectives"]] == [("all-reduce", [])]
