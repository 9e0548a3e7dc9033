"""A ``shard_map`` manual over ``data`` only (``axis_names={'data'}``) on a data x model mesh:
the jaxpr types its values whole along ``model``, the partitioner splits them over it.

Each device accumulates its gradients in a scan and sums them over ``data`` once after it; XLA's
combiner merges the three sums into one all-reduce whose operands are the gradients split over
``model`` (``V``'s ``f32[32,8]`` is ``f32[16,8]``, ``W``'s ``f32[16,32]`` is ``f32[16,16]``). ``V``'s
jaxpr bytes (1,024) equal ``W``'s operand's, so pairing by bytes alone pairs the wrong one and
leaves the others without an instruction.

Expected numbers come from the compiled text, parsed here: the combined all-reduce's operand
shapes, each one's bytes, and the while loop it is outside of; each operand's gradient is the
parameter whose shape it is a shard of over ``model`` (of 2 devices), found by hand below.
"""

from __future__ import annotations

import json
import re
from math import prod

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope
from _support import load_program_module, write_demo

SHAPES = {"W": (16, 32), "b": (32,), "V": (32, 8)}


PROGRAM = '''
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
S = lambda *s: NamedSharding(mesh, P(*s))
params = {"W": jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=S(None, "model")),
          "b": jax.ShapeDtypeStruct((32,), jnp.float32, sharding=S()),
          "V": jax.ShapeDtypeStruct((32, 8), jnp.float32, sharding=S())}
xs = jax.ShapeDtypeStruct((4, 16, 16), jnp.float32, sharding=S(None, "data"))


def loss_fn(p, x):
    return jnp.mean((jnp.tanh(x @ p["W"] + p["b"]) @ p["V"]) ** 2)


@shardscope.program(args=(params, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P(), axis_names={"data"})
def acc(params, xs):
    local = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)

    def micro(a, x):
        return jax.tree.map(jnp.add, a, jax.grad(loss_fn)(local, x)), None

    zeros = jax.tree.map(lambda p: lax.pcast(jnp.zeros_like(p), "data", to="varying"), params)
    grads, _ = lax.scan(micro, zeros, xs)
    return lax.psum(grads, "data")
'''
"""The program as a user's file holds it (SHAPES are its parameters' shapes); the API test imports
it, the command reads it."""


def _combined_sum(text: str) -> list[tuple[int, ...]]:
    """The operand shapes of the module's tuple-shaped all-reduce (all f32), checked to sit in
    the entry computation, outside the while loop."""
    entry = text[text.index("ENTRY"):]
    (line,) = [line for line in entry.splitlines() if re.search(r"= \(.*\) all-reduce\(", line)]
    result = re.search(r"= \((.*?)\) all-reduce\(", line).group(1)
    return [tuple(int(d) for d in dims.split(",") if d) for dims in re.findall(r"f32\[([\d,]*)\]", result)]


def _gradient_of(part: tuple[int, ...]) -> str:
    """The parameter whose shape ``part`` is one device's shard of, split over ``model`` (2)."""
    found = [name for name, whole in SHAPES.items() if len(whole) == len(part)
             and all(w % p == 0 for w, p in zip(whole, part)) and prod(whole) // prod(part) in (1, 2)]
    assert len(found) == 1, (part, found)
    return f"grad(params['{found[0]}'])"


def test_each_sum_of_a_partial_auto_shard_map_pairs_with_its_operand_of_the_combined_all_reduce(tmp_path):
    module = load_program_module(write_demo(tmp_path, "acc.py", PROGRAM))
    acc, args = module.acc, (module.params, module.xs)
    shapes = _combined_sum(acc.trace(*args).lower().compile().as_text())
    # by hand: V's gradient f32[16,8] (512 B), W's f32[16,16] (1,024 B), b's f32[16] (64 B), once
    assert sorted(shapes) == sorted([(16, 8), (16, 16), (16,)])
    expected = [_gradient_of(s) for s in shapes]

    ins = shardscope.inspect(acc, *args)
    assert not ins.compiled.unmatched_equations
    assert not [p for p in ins.paired if p.dead or p.unpaired]
    (c,) = [c for c in ins.compiled.collectives if c.combined]
    assert sorted(c.equations) == sorted(e.equation_id for e in ins.collectives)
    assert [op.value for op in c.operands] == expected
    assert [op.bytes for op in c.operands] == [prod(s) * 4 for s in shapes]
    assert c.executions == 1 and c.bytes_per_call == 1600


def test_check_text_and_json_agree_on_a_partial_auto_sum(shardscope_cli, tmp_path):
    """``check`` lists the combined sum once with its three gradients and no dead equation, and
    its JSON says the same: every jaxpr sum paired, run once."""
    path = write_demo(tmp_path, "acc.py", PROGRAM)
    text = shardscope_cli("check", path)
    assert text.returncode == 0, text.stderr
    assert "dead" not in text.stdout and "psum_invariant[data]" not in text.stdout, text.stdout
    result = shardscope_cli("check", path, "--json")
    (program,) = json.loads(result.stdout)["programs"]
    assert program["unpaired_equations"] == []
    summed = [c for c in program["compiled_collectives"] if c["operands"] == 3]
    assert [sorted(c["values"]) for c in summed] == [sorted(f"grad(params['{k}'])" for k in SHAPES)]
    assert summed[0]["bytes"] == 512 + 1024 + 64 and summed[0]["executions"] == 1
    assert len(summed[0]["equations"]) == 3
    for c in program["collectives"]:
        assert not c["dead"] and c["executions"] == 1


def test_jaxpr_bytes_in_a_partial_auto_shard_map_are_an_upper_bound(tmp_path):
    """The jaxpr types ``W``'s gradient ``f32[16,32]`` (2,048 B) where a device sums ``f32[16,16]``:
    the jaxpr view says at most that. A shard_map manual over its whole (1-D) mesh is typed per
    device: its bytes are what moves, as before."""
    module = load_program_module(write_demo(tmp_path, "acc.py", PROGRAM))
    acc, args = module.acc, (module.params, module.xs)
    ins = shardscope.inspect(acc, *args)
    assert sorted(c.bytes_per_execution for c in ins.collectives) == sorted(prod(s) * 4 for s in SHAPES.values())
    assert all(c.auto_axes == (("model", 2),) and c.bytes_count.upper_bound for c in ins.collectives)
    assert {c.bytes_count.text() for c in ins.collectives} == {"≤ 1,024", "≤ 2,048", "≤ 128"}

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    full = jax.jit(jax.shard_map(lambda x: lax.psum(x, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()))
    (c,) = shardscope.inspect(full, jax.ShapeDtypeStruct((8, 4), jnp.float32,
                                                         sharding=NamedSharding(mesh, P("data")))).collectives
    assert c.auto_axes == () and not c.bytes_count.upper_bound and c.bytes_per_execution == 2 * 4 * 4
