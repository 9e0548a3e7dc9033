"""Loops named as their user wrote them: the JAX function called, its line, the loops around it."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope
from shardscope.engine.jaxpr.dataflow import loops
from shardscope.engine.jaxpr.model import from_jaxpr
from shardscope.engine.jaxpr.loop_names import loop_path, loop_words

HERE = Path(__file__)
DEMOS = HERE.parent.parent / "demos"


def line_of(path: Path, needle: str) -> int:
    """The 1-based number of the only line of ``path`` that contains ``needle`` (counted here, not by
    shardscope). The markers below are ``# LOOP:`` plus a name, so this file's calls do not match them."""
    numbers = [k for k, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    assert len(numbers) == 1, (needle, numbers)
    return numbers[0]


MARK = "# LOOP" + ":"


def three_loops(x):
    y = lax.fori_loop(0, 4, lambda i, c: jnp.sin(c) + i, x)  # LOOP: fori-static
    y, _ = lax.scan(lambda c, t: (c * t, None), y, jnp.arange(1.0, 4.0))  # LOOP: scan
    return y + lax.map(jnp.cos, jnp.ones((3,)) * y).sum()  # LOOP: map


def dynamic_fori(x, n):
    return lax.fori_loop(0, n, lambda i, c: c * 0.5, x)  # LOOP: fori-dynamic


def named(program) -> list[tuple[str, str, int, str]]:
    """(primitive, JAX function, line, function) of each loop of ``program``."""
    out = []
    for loop in loops(program):
        file, rest = loop.source.rsplit(":", 1)
        assert file == str(HERE), loop.source
        line, function = rest.split(" ", 1)
        out.append((loop.primitive, loop.written_as, int(line), function))
    return out


def test_each_loop_knows_the_jax_function_and_the_line_that_wrote_it():
    forward = named(from_jaxpr(jax.make_jaxpr(three_loops)(1.0)))
    assert forward == [
        ("scan", "fori_loop", line_of(HERE, f"{MARK} fori-static"), "(three_loops)"),  # static bounds: a scan
        ("scan", "scan", line_of(HERE, f"{MARK} scan"), "(three_loops)"),
        ("scan", "map", line_of(HERE, f"{MARK} map"), "(three_loops)"),
    ]
    assert named(from_jaxpr(jax.make_jaxpr(dynamic_fori)(1.0, 3))) == [
        ("while", "fori_loop", line_of(HERE, f"{MARK} fori-dynamic"), "(dynamic_fori)"),
    ]


def test_the_gradients_transposed_loops_keep_the_forward_loops_function_and_line():
    backward = named(from_jaxpr(jax.make_jaxpr(jax.grad(three_loops))(1.0)))
    assert len(backward) == 6, backward  # each loop and its transpose
    assert sorted(set(backward)) == sorted(set(named(from_jaxpr(jax.make_jaxpr(three_loops)(1.0)))))


def test_loop_words_and_paths():
    user = f"{HERE}:12 (step)"
    assert loop_words("scan", "fori_loop", user) == "the lax.fori_loop at test_loop_names.py:12 (step)"
    assert loop_words("while", "", user) == "the loop at test_loop_names.py:12 (step)"
    assert loop_words("while", "", "") == "the while loop"
    own = f"{Path(shardscope.__file__).parent / 'bodies.py'}:82 (scan_vjp)"
    assert loop_words("scan", "scan", own) == "the plan's chunk loop"
    assert loop_path("shard_map_0/scan_0", ()) == "scan_0"
    assert loop_path("shard_map_0/scan_0/scan_1", ("shard_map_0/scan_0",)) == "scan_0/scan_1"
    assert loop_path("scan_2", ()) == "scan_2"


def step(w, xs):
    def body(i, acc):
        return acc + lax.psum(jnp.sin(w * xs[i]), "s")

    return lax.fori_loop(0, 4, body, jnp.zeros_like(w))  # LOOP: the-fori


def test_a_fori_loop_finding_names_the_fori_loop_and_its_line():
    mesh = Mesh(np.array(jax.devices()[:2]), ("s",))
    fn = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(None, "s")), out_specs=P())
    found = shardscope.inspect(fn, jax.ShapeDtypeStruct((8,), jnp.float32), jax.ShapeDtypeStruct((4, 16), jnp.float32))
    (collective,) = found.collectives
    where = f"the lax.fori_loop at test_loop_names.py:{line_of(HERE, f'{MARK} the-fori')} (step) (4 iterations)"
    assert collective.verdict.kind == "deferrable"
    # the program's own psum (no gradient): the fix moves it after the loop, not a cast before it
    assert where in collective.verdict.reason and f"after {where}" in collective.verdict.fix
    assert "scan loop" not in collective.verdict.fix


def test_the_rnn_plans_name_their_nested_loops_apart(analysis_of):
    naive = analysis_of("rnn.py", devices=2, chunk_size=16).plans["naive"]
    scan_line = line_of(DEMOS / "rnn.py", "lax.scan(step")
    named = [(loop.path, loop.words) for loop in naive.loops]
    assert named == [
        ("scan_0", "the plan's chunk loop"),
        ("scan_0/scan_0", f"the lax.scan at rnn.py:{scan_line} (rnn)"),
        ("scan_0/scan_1", f"the lax.scan at rnn.py:{scan_line} (rnn)"),
    ]
    wh = next(c for c in naive.collectives if c.value == "grad(params['Wh'])")
    assert f"the lax.scan at rnn.py:{scan_line} (rnn) inside the plan's chunk loop" in wh.verdict.fix


def test_a_program_shipped_in_the_package_is_named_as_the_users_code_not_as_a_plan(shardscope_cli):
    """The shipped demos live in shardscope's package folder (shardscope/demo_files) but are the
    user's code: train_step's scan is "the lax.scan at train_step.py:N", never "the plan's chunk loop"."""
    import shardscope.demo_files

    path = Path(shardscope.demo_files.__path__[0]) / "train_step.py"
    result = shardscope_cli("check", path, "--function", "step")
    assert result.returncode == 1, result.stderr
    text = " ".join(result.stdout.split())
    line = 56  # the first of the two scans: step's (step_fixed's is the second)
    assert "lax.scan(micro_batch" in path.read_text().splitlines()[line - 1]
    assert f"the lax.scan at train_step.py:{line} (step)" in text
    assert "plan's chunk loop" not in text
