"""Errors a user can cause become one ShardscopeError with a message and a hint (core level)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _support import CARRY_FROM_ZEROS, DEMOS, write_demo
from shardscope.sources.loading import load_demo_file
from shardscope.errors import QUOTED_LINES, DemoFileError, SettingsError, ShardscopeError, TraceError, quote_error
from shardscope.config.settings import Settings, default_chunk_size, divisors

def analyze(path: Path, **settings):
    from shardscope.pipeline.run import analyze

    return analyze(Settings(path=path, repeats=1, **settings))


def test_missing_file(tmp_path):
    with pytest.raises(DemoFileError, match="No such file") as info:
        load_demo_file(tmp_path / "nope.py")
    assert info.value.hint


def test_syntax_error_names_the_line(tmp_path):
    path = write_demo(tmp_path, "bad.py", "def f(:\n    pass\n")
    with pytest.raises(DemoFileError, match=r"Syntax error in .*bad.py line 7"):
        load_demo_file(path)


def test_syntax_error_in_an_imported_module_names_that_module(tmp_path):
    (tmp_path / "helper_mod_syntax.py").write_text("x = 1\ndef model(W, x:\n    return x @ W\n")
    path = write_demo(tmp_path, "uses_helper.py", "from helper_mod_syntax import model\n")
    with pytest.raises(DemoFileError) as info:
        load_demo_file(path)
    message = info.value.message
    assert message.startswith(f"Syntax error in {tmp_path / 'helper_mod_syntax.py'} line 2 (imported by uses_helper.py)")
    assert "helper_mod_syntax.py" in info.value.hint


def test_a_directory_is_named_as_a_directory(tmp_path):
    (tmp_path / "model.py").write_text("")
    with pytest.raises(DemoFileError, match="is a directory, not a demo file") as info:
        load_demo_file(tmp_path)
    assert "model.py" in info.value.hint
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DemoFileError, match="is a directory") as info:
        load_demo_file(empty)
    assert "path to a Python file" in info.value.hint


def test_import_error_points_at_the_line(tmp_path):
    path = write_demo(tmp_path, "imp.py", "import not_a_module_shardscope_test\n")
    with pytest.raises(DemoFileError, match="ModuleNotFoundError") as info:
        load_demo_file(path)
    assert "line 7" in info.value.hint and "not_a_module_shardscope_test" in info.value.hint


def test_import_error_points_at_the_line_for_a_relative_path(tmp_path, monkeypatch):
    write_demo(tmp_path, "imp.py", "x = 1\nraise RuntimeError('boom')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DemoFileError, match="RuntimeError: boom") as info:
        load_demo_file("imp.py")
    assert "line 8" in info.value.hint


def test_file_without_demo(tmp_path):
    path = write_demo(tmp_path, "plain.py", "def f(W, x):\n    return x @ W\n")
    with pytest.raises(DemoFileError, match="has no demo function"):
        load_demo_file(path)


def test_unknown_function_lists_the_available_ones():
    demo_file = load_demo_file(DEMOS / "linear.py")
    assert demo_file.names == ["linear"]
    with pytest.raises(SettingsError, match="no demo function 'nope'") as info:
        demo_file.get("nope")
    assert "linear" in info.value.hint


def test_functions_in_file_order(tmp_path):
    body = "".join(
        f"@shardscope.demo(params=jax.ShapeDtypeStruct((2,), jnp.float32), x=jax.ShapeDtypeStruct((8, 2), jnp.float32))\n"
        f"def {name}(W, x):\n    return x @ W\n\n"
        for name in ("zeta", "alpha", "mid")
    )
    demo_file = load_demo_file(write_demo(tmp_path, "three.py", body))
    assert demo_file.names == ["zeta", "alpha", "mid"]
    assert demo_file.get(None).name == "zeta"


def test_chunk_size_that_does_not_divide_suggests_valid_sizes():
    with pytest.raises(SettingsError, match="Chunk size 5 does not divide the per-device batch 32") as info:
        analyze(DEMOS / "linear.py", devices=2, chunk_size=5)
    assert "1, 2, 4, 8, 16, 32" in info.value.hint


def test_chunk_size_zero_is_rejected_not_defaulted():
    with pytest.raises(SettingsError, match="Chunk size 0"):
        analyze(DEMOS / "linear.py", devices=2, chunk_size=0)


def test_devices_that_do_not_divide_the_batch():
    with pytest.raises(SettingsError, match="N=64 does not split over 3 devices") as info:
        analyze(DEMOS / "linear.py", devices=3)
    assert "1, 2, 4, 8" in info.value.hint


def test_more_devices_than_available():
    with pytest.raises(SettingsError, match="16 devices asked for"):
        analyze(DEMOS / "linear.py", devices=16)


def test_carry_from_zeros_hints_at_pcast(tmp_path):
    path = write_demo(tmp_path, "carry.py", CARRY_FROM_ZEROS)
    with pytest.raises(TraceError) as info:
        analyze(path, devices=2)
    assert info.value.hint.startswith("derive the initial carry from x, e.g. jnp.zeros_like(x[:, 0])")
    assert "Traceback" not in str(info.value)
    # the line of JAX's message that says which carry and which types: without --debug
    lines = info.value.message.splitlines()
    assert any(
        re.search(r"input carry h has type float32\[8,4\] but .* float32\[8,4\]\{V:s\}", line) for line in lines
    ), info.value.message
    assert len(lines) <= 1 + QUOTED_LINES


def test_model_broken_on_its_own_inputs(tmp_path):
    path = write_demo(tmp_path, "shapes.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32),
                         x=jax.ShapeDtypeStruct((16, 4), jnp.float32))
        def wrong(W, x):
            return x @ W
    """)
    with pytest.raises(TraceError, match="fails on its example inputs"):
        analyze(path, devices=2)


def test_output_without_batch_axis(tmp_path):
    path = write_demo(tmp_path, "scalar.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32),
                         x=jax.ShapeDtypeStruct((16, 5), jnp.float32))
        def total(W, x):
            return jnp.sum(x @ W)
    """)
    with pytest.raises(SettingsError, match="first axis"):
        analyze(path, devices=2)


def test_integer_params_are_rejected(tmp_path):
    path = write_demo(tmp_path, "ints.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.int32),
                         x=jax.ShapeDtypeStruct((16, 5), jnp.float32))
        def ints(W, x):
            return x @ W
    """)
    with pytest.raises(SettingsError, match="int32"):
        analyze(path, devices=2)


def test_every_user_error_is_a_shardscope_error():
    for cls in (DemoFileError, SettingsError, TraceError):
        assert issubclass(cls, ShardscopeError)
    err = SettingsError("what went wrong", "what to do")
    assert str(err) == "what went wrong\nhint: what to do"


def test_settings_helpers():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert default_chunk_size(32) == 16
    assert default_chunk_size(12) == 6
    assert default_chunk_size(1) == 1  # one example per device: one chunk is all there is
    assert default_chunk_size(7) == 1


def test_model_that_only_works_on_the_whole_batch(tmp_path):
    path = write_demo(tmp_path, "fixed.py", """
        @shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32),
                         x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
        def fixed(W, x):
            return x.reshape(32, 2, 2).reshape(32, 4) @ W  # the batch size is hard-coded
    """)
    with pytest.raises(TraceError, match="fails to trace under jax.shard_map") as info:
        analyze(path, devices=2)
    first, *quoted = info.value.message.splitlines()
    assert "cannot reshape array of shape (8, 4) (size 32) into shape (32, 2, 2)" in first  # a chunk of 8, not N=32
    assert info.value.hint and len(quoted) < QUOTED_LINES


def test_quoted_errors_keep_the_lines_to_act_on_and_drop_jax_internals():
    message = "\n".join([
        "first line ends in:",
        "",
        "  the line that matters",
        '  File "/x/site-packages/jax/_src/core.py", line 1, in bind',
        *[f"more {i}" for i in range(10)],
    ])
    text = quote_error(TypeError(message), lines=4)
    assert text.splitlines() == [
        "TypeError: first line ends in:",
        "    the line that matters",  # indentation of JAX's text kept, under two spaces
        "  more 0",
        "  more 1",
        "  ... 8 more line(s): --debug shows the whole error",
    ]
    assert quote_error(ValueError("")) == "ValueError"


def test_a_very_long_line_loses_its_middle_not_its_end():
    """A 20,000-character repr between JAX's words and the types it ends with: the 600 characters
    before and the 300 after are kept, the 19,119 between are counted."""
    line = "bad value: [" + "1, " * 6_660 + "] of type float32[4,8@data]"
    assert len(line) == 20_019
    quoted = quote_error(ValueError(line))
    assert quoted == f"ValueError: {line[:600]} ... (19,119 characters left out) ... {line[-300:]}"
    assert quoted.endswith("of type float32[4,8@data]") and len(quoted) < 1_000


REDUCED_CLASH = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
w = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
b = jax.ShapeDtypeStruct((32,), jnp.bfloat16, sharding=NamedSharding(mesh, P("model")))
x = jax.ShapeDtypeStruct((32, 16), jnp.float32, sharding=NamedSharding(mesh, P("data")))


@shardscope.program(args=(w, b, x))
@jax.jit
def layer(w, b, x):
    w = jax.reshard(w, NamedSharding(mesh, P(None, "model", reduced={"data"})))
    b = jax.reshard(b, NamedSharding(mesh, P("model", reduced={"data"})))
    return jnp.tanh(x @ w + b.astype(jnp.float32))
'''


def test_jax_s_message_keeps_the_types_its_hint_points_to(tmp_path, shardscope_cli):
    """JAX's ShardingTypeError is one 291-character line that ends in the types that clash (x @ w
    is float32[32@data,32@model], b is reduced over data): a cut at 240 characters ended the
    quote at 'Got input type: float32[3...', the very part the hint says to read."""
    path = tmp_path / "reduced.py"
    path.write_text(REDUCED_CLASH)
    result = shardscope_cli("check", path)
    assert result.returncode == 2
    error = next(line for line in result.stderr.splitlines() if line.startswith("shardscope: error:"))
    assert error.endswith("ShardingTypeError: Inputs cannot be sharded/varying on the same axes that another input "
                          "is reduced on. Reshard the input which is reduced to be sharded on the mesh axes it is "
                          "reduced on via `jax.sharding.reshard(inp, jax.P(...))`. Got input type: "
                          "float32[32@data,32@model] and reduced spec: frozenset({'data'})")
    assert "which types disagree" in result.stderr


def test_the_carry_fix_the_hint_gives_works(tmp_path):
    """The hint's fix: derive the initial carry from x, and the model traces and matches the reference."""
    fixed = CARRY_FROM_ZEROS.replace("jnp.zeros((x.shape[0], 4))", "jnp.zeros_like(x[:, 0])")
    assert fixed != CARRY_FROM_ZEROS
    a = analyze(write_demo(tmp_path, "carry_fixed.py", fixed), devices=2, chunk_size=8)
    assert a.plans["naive"].jaxpr_runs_per_call == 2 * 3  # W's all-reduce in 2 chunks x 3 steps
    assert a.plans["naive"].max_abs_err < 1e-5 and a.plans["deferred"].max_abs_err < 1e-5
