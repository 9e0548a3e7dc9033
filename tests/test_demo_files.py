"""Demo files as users write them: next to their own modules."""

from __future__ import annotations

import textwrap

import pytest

from _support import DEMOS
from shardscope.pipeline.run import analyze
from shardscope.sources.loading import load_demo_file
from shardscope.errors import SettingsError
from shardscope.config.settings import Settings


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
    assert analysis.plans["naive"].jaxpr_runs_per_call == 2
    import sys

    assert str(tmp_path) not in sys.path  # the folder is on the path only while importing


def test_repeats_below_one_is_a_settings_error():
    with pytest.raises(SettingsError, match="repeats"):
        analyze(Settings(path=DEMOS / "linear.py", repeats=0))


def test_the_report_marks_per_call_totals_of_cond_branches_as_upper_bounds(tmp_path):
    from rich.console import Console

    from shardscope.render.report import render

    demo = tmp_path / "branchy.py"
    demo.write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp, shardscope
        from jax import lax

        @shardscope.demo(params={"W": jax.ShapeDtypeStruct((4, 4), jnp.float32), "c": jax.ShapeDtypeStruct((4,), jnp.float32)},
                         x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
        def branchy(p, x):
            h = jnp.tanh(x @ p["W"])
            return lax.cond(p["c"][0] > 0, lambda h: h * p["c"], lambda h: h - p["c"] @ p["W"], h)
    """))
    analysis = analyze(Settings(path=demo, chunk_size=8), measure=False)
    naive = analysis.plans["naive"]
    # per chunk: W's all-reduce after the cond (both branches' W cotangents meet there) and one
    # all-reduce of c's gradient in whichever branch ran: 2 chunks x 2, and 2 x (64 + 16) bytes
    branch_runs = sorted(c.in_conditional for c in naive.collectives)
    assert branch_runs == [False, True, True]
    assert naive.per_call_is_upper_bound and naive.jaxpr_runs_per_call == 4 and naive.jaxpr_bytes_per_call == 160
    console = Console(record=True, width=120)
    render(analysis, console)
    text = console.export_text()
    assert "≤ 4" in text and "≤ 160" in text and "naive: ≤ 4 runs/call (3 of 3 collective equations in loops)" in " ".join(text.split())


def test_a_file_rewritten_within_the_second_with_as_many_bytes_runs_its_new_code(tmp_path, monkeypatch):
    """Where Python writes bytecode (most machines; ``make`` too, under its prefix), the import
    system's cache trusts a ``.pyc`` while its source's size and whole-second mtime match: the
    explorer's ``r`` after ``jnp.ones((5, 5))`` became ``jnp.ones((4, 5))`` ran the old code (the
    clean-clone CI of this stop failed on it). The file is now compiled from the bytes read, and
    nothing is written beside it."""
    import os
    import sys

    from shardscope.sources.loading import import_file

    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as where PYTHONDONTWRITEBYTECODE is not set
    monkeypatch.setattr(sys, "pycache_prefix", None)
    path = tmp_path / "same_size.py"
    path.write_text("VALUE = 5\n")
    stamp = path.stat().st_mtime_ns
    assert import_file(path)[0].VALUE == 5
    path.write_text("VALUE = 4\n")  # as many bytes,
    os.utime(path, ns=(stamp, stamp))  # and the same mtime: within the same second
    assert import_file(path)[0].VALUE == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same_size.py"]  # no __pycache__ beside it
