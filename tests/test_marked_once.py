"""A function the file binds to two names is one program (or demo), checked and shown once: under
its first name that is not private, with its other names accepted by ``--function``
(:mod:`shardscope.sources.marks`). Expected lists come from the file's own text: two marked
function objects, ``double`` (also bound to ``twice``) and ``plus_one`` (defined as ``_plus_one``)."""

from __future__ import annotations

import textwrap

from _support import write_demo

from shardscope.config.settings import Settings
from shardscope.pipeline.check import check_file
from shardscope.pipeline.run import analyze
from shardscope.sources.loading import load_demo_file

PROGRAMS = textwrap.dedent('''
    import jax
    import jax.numpy as jnp

    import shardscope

    X = jax.ShapeDtypeStruct((4,), jnp.float32)


    @shardscope.program(args=(X,))
    def double(x):
        return x * 2


    twice = double  # an alias: the same function


    def _plus_one(x):
        return x + 1


    plus_one = shardscope.program(args=(X,))(_plus_one)
''')


def test_a_program_bound_to_two_names_is_checked_once_under_its_first_public_name(tmp_path):
    path = tmp_path / "aliases.py"
    path.write_text(PROGRAMS)
    assert [ins.function for ins in check_file(path).inspections] == ["double", "plus_one"]
    assert [ins.function for ins in check_file(path, "twice").inspections] == ["double"]
    assert [ins.function for ins in check_file(path, "_plus_one").inspections] == ["plus_one"]
    analysis = analyze(Settings(path=path, devices=8), measure=False, graphs=False)
    assert list(analysis.plans) == ["double", "plus_one"]
    chosen = analyze(Settings(path=path, devices=8, function="twice"), measure=False, graphs=False)
    assert chosen.settings.function == "double" and chosen.comparison.candidate == "double"


def test_a_demo_bound_to_two_names_is_one_demo(tmp_path):
    path = write_demo(tmp_path, "aliased_demo.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((4, 4), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
        def linear(W, x):
            return x @ W


        model = linear
        """)
    demos = load_demo_file(path)
    assert demos.names == ["linear"] and demos.functions["linear"].aliases == ("model",)
    assert demos.get("model").name == "linear"
    checked = [ins.function for ins in check_file(path, devices=2).inspections]  # one demo's plans, once each
    assert checked and all(name.startswith("linear[") for name in checked) and len(set(checked)) == len(checked)
