"""Demo files as users write them: next to their own modules."""

from __future__ import annotations

import textwrap

import pytest

from shardscope.analysis import analyze
from shardscope.demos import load_demo_file
from shardscope.errors import SettingsError
from shardscope.settings import Settings


def test_a_demo_imports_the_module_next_to_it(tmp_path):
    (tmp_path / "sibling_model_xyz.py").write_text("def model(W, x):\n    return x @ W\n")
    demo = tmp_path / "demo.py"
    demo.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp, shardscope
        from sibling_model_xyz import model

        @shardscope.demo(params=jax.ShapeDtypeStruct((3,), jnp.float32), x=jax.ShapeDtypeStruct((8, 3), jnp.float32))
        def f(W, x):
            return model(W, x)
    """))
    assert load_demo_file(demo).names == ["f"]
    analysis = analyze(Settings(path=demo), measure=False)
    assert analysis.plans["naive"].executed_collectives == 2
    import sys

    assert str(tmp_path) not in sys.path  # the folder is on the path only while importing


def test_repeats_below_one_is_a_settings_error():
    from conftest import DEMOS

    with pytest.raises(SettingsError, match="repeats"):
        analyze(Settings(path=DEMOS / "linear.py", repeats=0))
