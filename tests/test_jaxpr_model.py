"""shardscope's jaxpr model: stable canonical text, per-primitive names, varying axes, loops."""

from __future__ import annotations

import re
from dataclasses import fields

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

from shardscope.engine.jaxpr.model import Equation, Program, Value, from_jaxpr


def mesh(n: int = 2) -> Mesh:
    return Mesh(np.array(jax.devices()[:n]), ("s",))


def shard_mapped(local, in_specs, out_specs, n: int = 2):
    return jax.jit(jax.shard_map(local, mesh=mesh(n), in_specs=in_specs, out_specs=out_specs, check_vma=True))


def sub_jaxprs(eqn):
    """JAX's own sub-jaxprs of an equation, in the order shardscope lists its blocks."""
    from jax.extend.core import jaxprs_in_params

    p = eqn.params
    if eqn.primitive.name == "scan":
        subs = [p["jaxpr"]]
    elif eqn.primitive.name == "while":
        subs = [p["cond_jaxpr"], p["body_jaxpr"]]
    elif eqn.primitive.name == "cond":
        subs = list(p["branches"])
    else:
        subs = list(jaxprs_in_params(p))
    return [getattr(s, "jaxpr", s) for s in subs]


def walk_pairs(jaxpr, block):
    """Yield (jax outvar, shardscope Value) for every definition, JAX's tree and ours side by side."""
    assert len(jaxpr.eqns) == len(block.equations)
    for eqn, ours in zip(jaxpr.eqns, block.equations, strict=True):
        assert eqn.primitive.name == ours.primitive
        yield from zip(eqn.outvars, ours.outputs, strict=True)
        for sub, our_sub in zip(sub_jaxprs(eqn), ours.blocks, strict=True):
            yield from zip(list(sub.constvars) + list(sub.invars), our_sub.inputs, strict=True)
            yield from walk_pairs(sub, our_sub)


@pytest.fixture(scope="module")
def linear_naive(analysis_of):
    return analysis_of("linear.py", devices=2, chunk_size=16).plans["naive"]


def test_same_program_twice_same_text(analysis_of):
    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans
    from shardscope.config.settings import Settings

    from _support import DEMOS

    for demo in ("linear.py", "rnn.py"):
        settings = Settings(path=DEMOS / demo, devices=2)
        texts = set()
        for _ in range(2):
            built = build_plans(load_demo_file(settings.path).get(None), settings)
            texts.add(from_jaxpr(built.functions["naive"].trace(*built.args).jaxpr).canonical_text())
        texts.add(analysis_of(demo).plans["naive"].canonical_text)
        assert len(texts) == 1, demo


def test_text_has_no_memory_addresses_or_jax_names(analysis_of):
    for demo in ("linear.py", "mlp.py", "rnn.py", "rbm.py"):
        for plan in analysis_of(demo).plans.values():
            text = plan.canonical_text
            assert not re.search(r"0x[0-9a-f]{6,}", text)
            assert " at 0x" not in text and "<function" not in text


def test_custom_jvp_and_vjp_programs_are_stable():
    @jax.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1, 1),))

    def f(w, x):
        return jnp.sum(jax.nn.relu(x @ w) + clip_grad(x @ w))

    texts = {from_jaxpr(jax.make_jaxpr(jax.grad(f))(jnp.ones(3), jnp.ones((4, 3)))).canonical_text() for _ in range(2)}
    texts |= {from_jaxpr(jax.make_jaxpr(f)(jnp.ones(3), jnp.ones((4, 3)))).canonical_text() for _ in range(1)}
    assert len(texts) == 2  # two distinct programs, each printed identically every time
    for text in texts:
        assert not re.search(r"0x[0-9a-f]{6,}", text)


def test_names_per_primitive(linear_naive):
    program = linear_naive.program
    names = [s.equation.name for s in program.sites()]
    for name in names:
        assert re.fullmatch(r"[a-z_]+_\d+", name), name
    (scan,) = [s for s in program.sites() if s.equation.primitive == "scan"]
    body = [e.name for e in scan.equation.blocks[0].equations]
    assert body == ["pvary_0", "dot_general_0", "dot_general_1", "psum_invariant_0", "add_0"]
    text = linear_naive.canonical_text
    assert "dot_general_1:f32[5]{V:s} = dot_general[" in text
    assert "psum_invariant_0:f32[5] = psum_invariant[axes=('s',)] dot_general_1" in text
    assert "add_0:f32[5] = add scan_0.carry0 psum_invariant_0" in text


def test_names_unique_within_a_block_and_ids_unique_in_the_program(analysis_of):
    for demo in ("linear.py", "mlp.py", "rnn.py", "rbm.py"):
        program = analysis_of(demo).plans["naive"].program
        ids = [s.equation.id for s in program.sites()]
        assert len(ids) == len(set(ids)), demo

        def check(block):
            defined = [v.name for v in block.inputs] + [v.name for e in block.equations for v in e.outputs if v.name != "_"]
            assert len(defined) == len(set(defined)), (demo, block.id)
            for e in block.equations:
                for sub in e.blocks:
                    check(sub)

        check(program.root)


def test_one_extra_equation_changes_one_line():
    """The point of stable names: a diff shows the change, not a renumbering of everything after it."""

    def before(w, x):
        return jnp.tanh(x @ w) * 2.0 + jnp.sin(x @ w)

    def after(w, x):
        return jnp.tanh(x @ w) * 2.0 + jnp.sin(jnp.exp(x @ w))

    args = (jnp.ones(3), jnp.ones((4, 3)))
    a = from_jaxpr(jax.make_jaxpr(before)(*args)).canonical_text().splitlines()
    b = from_jaxpr(jax.make_jaxpr(after)(*args)).canonical_text().splitlines()
    import difflib

    changed = [l for l in difflib.unified_diff(a, b, lineterm="", n=0) if l[:1] in "+-" and l[:3] not in ("---", "+++")]
    assert len([l for l in changed if l.startswith("+")]) == 2  # the new exp and the sin that now reads it
    assert len([l for l in changed if l.startswith("-")]) == 1


def test_varying_axes_match_jax(analysis_of):
    """Every value's varying axes (and its {V:..} mark) are exactly what JAX's aval says."""
    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans
    from shardscope.config.settings import Settings

    from _support import DEMOS

    settings = Settings(path=DEMOS / "rnn.py", devices=2)
    built = build_plans(load_demo_file(settings.path).get(None), settings)
    checked = varying_seen = 0
    for name in ("naive", "deferred"):
        jaxpr = built.functions[name].trace(*built.args).jaxpr.jaxpr
        program = from_jaxpr(jaxpr)
        for var, value in walk_pairs(jaxpr, program.root):
            expected = frozenset(var.aval.manual_axis_type.varying)
            assert value.varying == expected, (name, value)
            shown = re.search(r"\{V:[^}]*\}", var.aval.str_short())
            assert value.vma_str == (shown.group(0) if shown else ""), (name, value)
            assert value.declaration().endswith(value.vma_str)
            checked += 1
            varying_seen += bool(expected)
    assert checked > 50 and varying_seen > 10


def test_naive_params_invariant_in_loop_deferred_varying(linear_naive, analysis_of):
    deferred = analysis_of("linear.py", devices=2, chunk_size=16).plans["deferred"]

    def scan_of(program):
        (site,) = [s for s in program.sites() if s.equation.primitive == "scan"]
        return site.equation

    naive_scan, deferred_scan = scan_of(linear_naive.program), scan_of(deferred.program)
    assert naive_scan.blocks[0].inputs[0].name == "scan_0.const0"
    assert naive_scan.blocks[0].inputs[0].varying == frozenset()
    assert deferred_scan.blocks[0].inputs[0].varying == frozenset({"s"})
    assert [v.name for v in naive_scan.blocks[0].inputs] == ["scan_0.const0", "scan_0.carry0", "scan_0.xs0", "scan_0.xs1"]
    assert naive_scan.outputs[0].varying == frozenset() and deferred_scan.outputs[0].varying == frozenset({"s"})


def test_literals():
    def f(x):
        return (x + 1.5) * 2 - jnp.int32(3).astype(jnp.float32)

    program = from_jaxpr(jax.make_jaxpr(f)(jnp.ones(4)))
    lines = [e.line() for e in program.root.equations]
    assert "add_0:f32[4] = add in0 1.5" in lines
    assert any(line.startswith("mul_0:f32[4] = mul add_0 2.0") for line in lines)
    literal_inputs = [v for e in program.root.equations for v in e.inputs if v.name in ("1.5", "2.0")]
    assert literal_inputs and all(v.shape == () and v.dtype == "float32" for v in literal_inputs)


def test_loops_carry_trip_counts():
    def local(w, x):
        def body(i, acc):
            return acc + jnp.sin(x[i % 4] * w)

        inner = lax.fori_loop(0, 5, body, jnp.zeros_like(x[0]))  # static bounds: a scan
        return lax.psum(inner, "s")

    f = shard_mapped(local, (P(), P("s")), P())
    program = from_jaxpr(f.trace(jnp.ones(3), jnp.ones((8, 3))).jaxpr)
    (loop,) = [s.equation for s in program.sites() if s.equation.kind == "loop"]
    assert loop.primitive == "scan" and loop.trip_count == 5
    assert ("length", "5") in loop.params
    assert "scan[" in program.canonical_text() and "length=5" in program.canonical_text()


def test_while_with_dynamic_trip_count_has_none():
    def local(w, x):
        def cond(c):
            return c[0] < jnp.sum(w > 0)

        def body(c):
            return c[0] + 1, c[1] + lax.psum(x[0], "s")

        return lax.while_loop(cond, body, (0, jnp.zeros(3)))[1]

    f = shard_mapped(local, (P(), P("s")), P())
    program = from_jaxpr(f.trace(jnp.ones(3), jnp.ones((8, 3))).jaxpr)
    (loop,) = [s.equation for s in program.sites() if s.equation.kind == "loop"]
    assert loop.primitive == "while" and loop.trip_count is None
    assert [b.role for b in loop.blocks] == ["cond", "body"]
    (psum,) = [s for s in program.sites() if s.equation.kind == "collective"]
    assert psum.loops == (loop,)


def test_equation_kinds_and_axes(linear_naive):
    kinds = {s.equation.primitive: s.equation.kind for s in linear_naive.program.sites()}
    assert kinds["psum_invariant"] == "collective"
    assert kinds["pvary"] == "cast"
    assert kinds["scan"] == "loop"
    assert kinds["shard_map"] == "call"
    assert kinds["dot_general"] == "op"
    (psum,) = [s.equation for s in linear_naive.program.sites() if s.equation.kind == "collective"]
    assert psum.axes == ("s",)


def test_accepts_any_closed_jaxpr():
    """The model takes any jaxpr, not only the two plans: here all_gather, ppermute and a cond."""

    def local(x):
        g = lax.all_gather(x, "s")
        p = lax.ppermute(x, "s", [(0, 1), (1, 0)])
        c = lax.cond(x[0] > 0, lambda v: lax.psum(v, "s"), lambda v: lax.psum(-v, "s"), p)
        return g.sum(0) + c

    f = shard_mapped(local, (P("s"),), P("s"))
    program = from_jaxpr(f.trace(jnp.ones(8)).jaxpr)
    assert isinstance(program, Program)
    prims = [s.equation.primitive for s in program.sites() if s.equation.kind == "collective"]
    assert prims.count("all_gather") == 1 and prims.count("ppermute") == 1
    in_branch = [s for s in program.sites() if s.equation.kind == "collective" and s.in_conditional]
    assert len(in_branch) == 2
    assert all(s.equation.axes == ("s",) for s in program.sites() if s.equation.kind == "collective")


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_jaxpr_model_leaves_shardscope_program_the_decorator():
    """``shardscope.program`` is the decorator program files use, whatever submodules were imported.

    In a fresh interpreter: importing a submodule sets it as an attribute of its package, so a
    submodule called ``program`` would replace the decorator.
    """
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, types\n"
        "import shardscope.engine.jaxpr.model\n"
        "import shardscope\n"
        "from shardscope.sources.programs import program\n"
        "assert shardscope.program is program, shardscope.program\n"
        "for m in pkgutil.iter_modules(shardscope.__path__):\n"
        "    if m.name not in ('app', '__main__'):\n"
        "        importlib.import_module('shardscope.' + m.name)\n"
        "assert shardscope.program is program, shardscope.program\n"
        "assert not isinstance(shardscope.program, types.ModuleType)\n"
        "fn = shardscope.program(args=(1,))(lambda x: x)\n"
        "assert fn.__shardscope_program__.args == (1,)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_values_made_without_init_equal_values_made_with_it():
    """The converter writes a Value's and an Equation's fields directly (its __init__ is slow): each one must be what
    the dataclass's own constructor makes from the same fields, down to hash and repr."""
    def f(x, w):
        y = jnp.tanh(x @ w)
        return lax.fori_loop(0, 3, lambda i, c: c * 2.0 + 1, y).astype(jnp.int8)

    program = from_jaxpr(jax.make_jaxpr(f)(jnp.ones((4, 3)), jnp.ones((3, 2))))
    values = [v for site in program.sites() for v in site.equation.inputs + site.equation.outputs]
    assert values
    for value in values:
        rebuilt = Value(**{f.name: getattr(value, f.name) for f in fields(Value)})
        assert vars(value) == vars(rebuilt)
        assert (value == rebuilt, hash(value) == hash(rebuilt), repr(value)) == (True, True, repr(rebuilt))
    equations = [site.equation for site in program.sites()]
    for eqn in equations:
        rebuilt_eqn = Equation(**{f.name: getattr(eqn, f.name) for f in fields(Equation)})
        assert vars(eqn) == vars(rebuilt_eqn)
        assert (eqn == rebuilt_eqn, hash(eqn) == hash(rebuilt_eqn), repr(eqn)) == (True, True, repr(rebuilt_eqn))
