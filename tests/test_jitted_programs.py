"""``check``, ``shardscope.inspect`` and ``shardscope.testing`` on real-style programs of both styles.

jit with shardings (Auto and Explicit axes: the partitioner writes the collectives, the jaxpr has
none) and ``shard_map`` (the program writes them), on this JAX, Shardy on and off where the flag
exists. The programs are ``_compiled_programs``' cases; every expected count is recounted from
the compiled text here (``_compiled_programs.recount``). ``check`` runs in a fresh process with
each partitioner set by its environment variable, once; the other checks run in this process.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from _support import DEMOS, PYTHON, ROOT, load_program_module

import _compiled_programs as programs
import shardscope
from shardscope.testing import assert_no_collectives_in_loops, collective_counts, jaxpr_collective_counts

TESTS = Path(__file__).resolve().parent
CASES = {
    "gspmd_accumulate": (programs.gspmd_accumulate, ()),
    "fsdp_accumulate": (programs.fsdp_accumulate, ()),
    "tp_constraint": (programs.tp_constraint, ()),
    "explicit_accumulate": (programs.explicit_accumulate, (False,)),
    "explicit_accumulate_fixed": (programs.explicit_accumulate, (True,)),
    "shard_map_accumulate": (programs.shard_map_accumulate, (False,)),
    "shard_map_accumulate_fixed": (programs.shard_map_accumulate, (True,)),
    "shard_map_dead_collectives": (programs.shard_map_dead_collectives, ()),
    "tp_shard_map_outside_sum": (programs.tp_shard_map_outside_sum, ()),
    "equinox_step": (programs.equinox_step, ()),
}
FLAGGED = {"gspmd_accumulate", "explicit_accumulate", "shard_map_accumulate", "equinox_step"}
"""Accumulations that sum each micro-batch's gradient in the loop: work the loop need not do."""
CLEAN = {"tp_constraint", "explicit_accumulate_fixed", "shard_map_accumulate_fixed", "shard_map_dead_collectives",
         "tp_shard_map_outside_sum"}
"""No loop, or one sum after the loop."""


def _unreduced_needs_shardy(name: str, shardy: bool | None) -> bool:
    """Explicit axes' unreduced accumulator compiles with Shardy only (GSPMD's lowering asserts)."""
    return name == "explicit_accumulate_fixed" and shardy is False


def _recount(name: str, shardy: bool | None) -> dict:
    builder, key = CASES[name]
    try:
        text = programs.compiled_text(builder, *key, shardy=shardy)
    except Exception as exc:
        if _unreduced_needs_shardy(name, shardy) and "sdy.sharding_constraint" in str(exc):
            pytest.skip("Explicit axes' unreduced reshard compiles with Shardy only")
        raise
    return programs.recount(text)


@pytest.mark.parametrize("shardy", programs.shardy_modes())
@pytest.mark.parametrize("name", list(CASES))
def test_inspect_and_testing_count_what_the_compiled_text_holds(name, shardy):
    recount = _recount(name, shardy)
    builder, key = CASES[name]
    case = programs.compile_case(builder, *key, shardy=shardy)[0]
    with programs.partitioner(shardy), case.context():
        inspection = shardscope.inspect(case.fn, *case.args)
        counts = collective_counts(case.fn, *case.args)
        jaxpr = jaxpr_collective_counts(case.fn, *case.args)
        if recount["in_while"]:
            with pytest.raises(AssertionError, match="inside loops"):
                assert_no_collectives_in_loops(case.fn, *case.args)
        else:
            assert_no_collectives_in_loops(case.fn, *case.args)
    assert inspection.counts() == counts == recount["runs"]
    assert len(inspection.compiled.findings) == sum(recount["in_while"].values())
    assert jaxpr == inspection.jaxpr_counts()
    if name in FLAGGED:
        assert inspection.flagged
    if name in CLEAN:
        assert not inspection.flagged
    if case.style != "shard_map":
        assert jaxpr == {} and all(c.written_by == "partitioner" for c in inspection.paired if not c.equations
                                   and c.compiled.op_name.rsplit("/", 1)[-1] != "reshard")


def test_the_dead_collectives_are_shown_and_never_counted():
    """The loss pmean under jax.grad, a discarded ppermute and all_to_all: dead in the jaxpr, absent
    from the compiled text, so they run 0 times; the gradient's all-reduce is the one that runs."""
    recount = _recount("shard_map_dead_collectives", None)
    case = programs.compile_case(programs.shard_map_dead_collectives)[0]
    inspection = shardscope.inspect(case.fn, *case.args)
    dead = [c for c in inspection.paired if c.dead]
    # the loss's pmean binds psum_invariant (of the invariant loss value: a scalar), then divides
    assert sorted((c.kind, c.bytes_per_execution) for c in dead) == [
        ("all_to_all", 8 * 16 * 4), ("ppermute", 8 * 16 * 4), ("psum_invariant", 4)]
    assert all(c.executions == 0 and c.bytes_per_call == 0 and c.verdict_kind == "dead" for c in dead)
    assert inspection.jaxpr_counts() == {"psum_invariant": 1}  # the gradient's sum alone
    assert inspection.counts() == recount["runs"] and set(recount["runs"]) == {"all-reduce"}
    text = str(inspection)
    assert "dead: the compiler removes it" in text and "jaxpr: " in text and "dead)" in text


def _program_file(tmp_path: Path, names: list[str]) -> Path:
    """A program file marking each case as a program, built as the case builds it."""
    lines = [f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n",
             "import jax\nimport shardscope\nimport _compiled_programs as programs\n"]
    for name in names:
        builder, key = CASES[name]
        lines.append(f"_{name} = programs.{builder.__name__}(*{key!r})")
        lines.append(f"{name} = shardscope.program(args=_{name}.args)(_{name}.fn)")
    path = tmp_path / "cases.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def _check(path: Path, shardy: bool | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if shardy is not None:
        env["JAX_USE_SHARDY_PARTITIONER"] = "true" if shardy else "false"
    return subprocess.run([PYTHON, "-m", "shardscope", "check", str(path), "--json", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=900)


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_check_in_a_fresh_process_counts_and_flags_every_program(tmp_path, shardy):
    """The Explicit-axes cases need the mesh set while tracing: they are checked through the
    shipped demo file (next test), which passes NamedShardings instead."""
    names = [n for n in CASES if not n.startswith("explicit")]
    result = _check(_program_file(tmp_path, names), shardy)
    assert result.returncode == 1, result.stderr  # the accumulations are flagged
    found = {p["function"]: p for p in json.loads(result.stdout)["programs"]}
    assert list(found) == names
    for name in names:
        recount = _recount(name, shardy)
        program = found[name]
        assert program["counts"] == recount["runs"], name
        compiled = program["compiled_collectives"]
        assert sorted(c["kind"] for c in compiled) == sorted(k for k, n in recount["collectives"].items() for _ in range(n))
        assert sum(1 for c in compiled if c["loop_trip_counts"]) == sum(recount["in_while"].values()), name
        for c in compiled:
            assert c["bytes_per_call"] == c["executions"] * c["bytes"] and c["written_by"] in ("program", "partitioner")
            assert set(c) >= {"kind", "operands", "loop_trip_counts", "executions", "bytes", "bytes_per_call", "axes",
                              "written_by", "source", "value", "verdict", "fix", "equations"}
        assert (program["flagged"] > 0) == (name in FLAGGED) or name not in FLAGGED | CLEAN, name


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_check_on_the_shipped_jitted_demos(shardy, shardscope_cli):
    """demos/gspmd_accumulate.py and demos/explicit_accumulate.py: the naive step exits 1 with its
    fix, the fixed one exits 0; counts recounted from the text of the same program."""
    for demo, fixed_compiles in (("gspmd_accumulate.py", True), ("explicit_accumulate.py", shardy is not False)):
        module = load_program_module(DEMOS / demo)
        args = module.__dict__.get("params", module.__dict__.get("W")), module.xs, module.ys
        with programs.partitioner(shardy):
            naive = shardscope_cli("check", DEMOS / demo, "--json", "--function", "step")
            text = module.step.trace(*args).lower().compile().as_text()
        assert naive.returncode == 1, naive.stderr
        data = json.loads(naive.stdout)
        recount = programs.recount(text)
        assert recount["runs"] == {"all-reduce": module.MICRO_BATCHES} and data["programs"][0]["counts"] == recount["runs"]
        (c,) = data["compiled_collectives"]
        assert (c["written_by"], c["verdict"], c["axes"]) == ("partitioner", "deferrable", ["data"])
        assert c["fix"] and "reduced={'data'}" in c["fix"]
        with programs.partitioner(shardy):
            fixed = shardscope_cli("check", DEMOS / demo, "--json", "--function", "step_fixed")
        if not fixed_compiles:  # GSPMD refuses the unreduced accumulator: one message, status 2
            assert fixed.returncode == 2 and "does not compile" in fixed.stderr and "Traceback" not in fixed.stderr
            continue
        assert fixed.returncode == 0, fixed.stderr
        (once,) = json.loads(fixed.stdout)["compiled_collectives"]
        assert once["loop_trip_counts"] == [] and once["executions"] == 1


def _concrete(tree, seed: int):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jax.device_put(rng.normal(size=s.shape).astype(s.dtype) * 0.3, s.sharding), tree)


@pytest.mark.parametrize("demo", ["gspmd_accumulate.py", "explicit_accumulate.py"])
def test_the_fixed_step_keeps_the_gradient(demo):
    """The fix the naive step's finding names, as the demo applies it: the same result."""
    module = load_program_module(DEMOS / demo)
    first = module.__dict__.get("params", module.__dict__.get("W"))
    args = (_concrete(first, 1), _concrete(module.xs, 2), _concrete(module.ys, 3))
    naive, fixed = (jax.tree.map(np.asarray, fn(*args)) for fn in (module.step, module.step_fixed))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), naive, fixed)


CALLABLES = '''
import functools
import jax
import jax.numpy as jnp
import numpy as np
import equinox as eqx
from flax import nnx
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
W = jax.device_put(jnp.ones((8, 4)) * 0.1, NamedSharding(mesh, P()))
xs = jax.device_put(jnp.ones((3, 16, 8)), NamedSharding(mesh, P(None, "data")))


def loss(W, x):
    return jnp.mean(jnp.tanh(x @ W) ** 2)


def accumulate(W, xs):
    def body(acc, x):
        return acc + jax.grad(loss)(W, x), None
    return lax.scan(body, jnp.zeros_like(W), xs)[0]


@shardscope.program(args=(W, xs))
@eqx.filter_jit
def above_filter_jit(W, xs):
    return accumulate(W, xs)


@eqx.filter_jit
@shardscope.program(args=(W, xs))
def below_filter_jit(W, xs):
    return accumulate(W, xs)


class Trainer:
    def __init__(self, scale):
        self.scale = scale

    def step(self, W, xs):
        return accumulate(W, xs) * self.scale


jitted = shardscope.program(args=(W, xs))(jax.jit(accumulate))
partial = shardscope.program(args=(xs,))(functools.partial(accumulate, W))
method = shardscope.program(args=(W, xs))(Trainer(2.0).step)
nnx_jitted = shardscope.program(args=(W, xs))(nnx.jit(accumulate))
'''


def test_the_program_mark_works_on_any_callable(tmp_path, shardscope_cli):
    """Above and below eqx.filter_jit (the frozen wrapper refused the mark), a jax.jit object, a
    functools.partial, a bound method and an nnx.jit function: each is checked, each finds the
    partitioner's all-reduce in the loop of 3 micro-batches (recounted from the plain jit's text)."""
    path = tmp_path / "callables.py"
    path.write_text(textwrap.dedent(CALLABLES))
    module = load_program_module(path)
    recount = programs.recount(jax.jit(module.accumulate).trace(module.W, module.xs).lower().compile().as_text())
    assert recount["runs"] == {"all-reduce": 3}
    result = shardscope_cli("check", path, "--json")
    assert result.returncode == 1, result.stderr
    found = {p["function"]: p["counts"] for p in json.loads(result.stdout)["programs"]}
    assert found == {name: recount["runs"] for name in
                     ("above_filter_jit", "below_filter_jit", "jitted", "partial", "method", "nnx_jitted")}


NON_ARRAY_OUTPUTS = CALLABLES + '''

@shardscope.program(args=(W, xs))
def with_activation(W, xs):
    return {"w": accumulate(W, xs), "act": jax.nn.relu}


@shardscope.program(args=(W, xs))
def with_tag(W, xs):
    return accumulate(W, xs), "sgd", len


model = eqx.nn.MLP(8, 2, 16, 1, key=jax.random.key(0))


@shardscope.program(args=(model, xs))
@eqx.filter_jit
def updated_model(model, xs):
    params, static = eqx.partition(model, eqx.is_array)

    def body(acc, x):
        grads = eqx.filter_grad(lambda p, x: jnp.mean(jax.vmap(eqx.combine(p, static))(x) ** 2))(params, x)
        return jax.tree.map(jnp.add, acc, grads), None

    grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), xs)
    return eqx.apply_updates(model, grads), jnp.float32(0.0)
'''


def test_a_program_returning_non_arrays_is_checked_on_its_arrays(tmp_path, shardscope_cli):
    """A returned activation function, string or builtin (and the returned equinox model's static
    fields under eqx.filter_jit) are not outputs of the program: each program is checked, with the
    counts of the compiled text (recounted from a plain jit returning the arrays alone, and from
    eqx.filter_jit's own compiled module)."""
    path = tmp_path / "outputs.py"
    path.write_text(textwrap.dedent(NON_ARRAY_OUTPUTS))
    module = load_program_module(path)
    accumulated = programs.recount(jax.jit(module.accumulate).trace(module.W, module.xs).lower().compile().as_text())
    updated = programs.recount(module.updated_model.lower(module.model, module.xs).compile().compiled.as_text())
    assert accumulated["runs"] == {"all-reduce": 3} and updated["runs"] == {"all-reduce": 3}
    result = shardscope_cli("check", path, "--json")
    assert result.returncode == 1, result.stderr
    found = {p["function"]: p["counts"] for p in json.loads(result.stdout)["programs"]}
    assert {name: found[name] for name in ("with_activation", "with_tag", "updated_model")} == {"with_activation": accumulated["runs"], "with_tag": accumulated["runs"],
                     "updated_model": updated["runs"]}
