"""Hostile but realistic inputs (issue 8): each is one message and exit 2, never a hang or a crash."""

from __future__ import annotations

import json
import math
import os
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _support import DEMOS, PYTHON, ROOT, write_demo
from shardscope.pipeline.run import analyze
from shardscope.cli import main
from shardscope.errors import SettingsError, TraceError
from shardscope.sources.examples import batch_size, check_fits, human_bytes, materialize
from shardscope.measure.timing import max_abs_err
from shardscope.config.settings import MAX_DEVICES, Settings, check_axis_name

LINEAR = DEMOS / "linear.py"
F = jax.ShapeDtypeStruct


def one_error(capsys, argv, *needles):
    """Run the CLI in-process: exit 2, one error line, no traceback; returns stderr."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert sum(line.startswith("shardscope: error:") for line in lines) == 1 and "Traceback" not in err, err
    assert len(lines) == 2 and lines[1].startswith("hint: "), err  # the message and a hint, nothing else
    for needle in needles:
        assert needle in err, err
    return err


# -- device counts: checked against the batch and a cap before JAX starts -------------------------

BEFORE_JAX = """
import sys
from jax._src import xla_bridge
from shardscope.cli import main
codes = [main(argv) for argv in ({runs})]
print(codes, xla_bridge.backends_are_initialized())
"""


@pytest.mark.slow  # a fresh process: the backend not started
def test_device_counts_are_refused_before_the_backend_starts():
    runs = [
        ["report", str(LINEAR), "--devices", "20000"],
        ["report", str(LINEAR), "--devices", "100000"],
        ["diff", str(LINEAR), "--devices", "3"],
        ["open", str(LINEAR), "--max-devices", "5000"],
    ]
    script = BEFORE_JAX.format(runs=", ".join(map(repr, runs)))
    result = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.strip() == "[2, 2, 2, 2] False", result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("shardscope: error:")]
    hints = [line for line in result.stderr.splitlines() if line.startswith("hint:")]
    assert len(errors) == 4 and "Traceback" not in result.stderr
    assert f"20,000 devices asked for, but at most {MAX_DEVICES:,}" in errors[0]
    assert "100,000 devices" in errors[1]
    assert "N=64 does not split over 3 devices" in errors[2]
    assert "5,000 devices" in errors[3]
    every_divisor = "1, 2, 4, 8, 16, 32, 64"  # linear.py's batch is 64: every count that works
    assert hints[0].endswith(every_divisor) and hints[2].endswith(every_divisor), hints


# -- example inputs: shapes, batch axis, size -----------------------------------------------------


@pytest.mark.parametrize(
    ("x", "needle"),
    [
        ("hello", "x is 'hello' (a str): it has no batch axis"),
        (3.0, "x is 3.0 (a float): it has no batch axis"),
        (F((), jnp.float32), "x has shape (): it has no batch axis"),
        ({"a": F((8, 2), jnp.float32), "b": F((), jnp.float32)}, "x['b'] has shape (): it has no batch axis"),
        (F((0, 5), jnp.float32), "The batch is empty"),
        ({}, "x is empty"),
        ({"a": F((8,), jnp.float32), "b": F((4,), jnp.float32)}, "x['a']: 8, x['b']: 4"),
        (F((-5,), jnp.float32), "x has shape (-5,)"),
    ],
)
def test_x_without_a_usable_batch_axis_says_so(x, needle):
    with pytest.raises(SettingsError) as info:
        batch_size(x)
    assert needle in info.value.message


NEGATIVE_PARAMS = """
@shardscope.demo(params={"w": jax.ShapeDtypeStruct((-5,), jnp.float32)}, x=jax.ShapeDtypeStruct((8, 5), jnp.float32))
def negative(p, x):
    return x @ p["w"]
"""


def test_a_negative_dimension_names_the_leaf(tmp_path, capsys):
    one_error(capsys, ["report", write_demo(tmp_path, "neg.py", NEGATIVE_PARAMS)], "params['w'] has shape (-5,)")


HUGE_PARAMS = """
@shardscope.demo(params=jax.ShapeDtypeStruct((100000, 100000), jnp.float32), x=jax.ShapeDtypeStruct((8, 100000), jnp.float32))
def huge(W, x):
    return x @ W
"""


def test_params_that_cannot_fit_say_how_large_they_are(tmp_path, capsys):
    err = one_error(capsys, ["report", write_demo(tmp_path, "huge.py", HUGE_PARAMS)], "do not fit in memory")
    assert "params alone is (100000, 100000) float32 = 40.0 GB" in err and "80.0 GB" in err  # 2 devices


def test_check_fits_counts_params_on_every_device():
    params, x = {"w": F((1000,), jnp.float32)}, F((10, 3), jnp.float64)
    assert check_fits(params, x, devices=4) == 4000 + 240  # the host copy; 4 devices fit easily
    assert human_bytes(40e9) == "40.0 GB" and human_bytes(12) == "12 B"


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64, jnp.complex64, jnp.complex128, jnp.bfloat16, jnp.float16])
def test_materialize_draws_in_the_leaf_dtype_with_unit_variance(dtype):
    values = materialize(F((20000,), dtype), 3)
    assert values.dtype == np.dtype(dtype) and values.shape == (20000,)
    variance = float(np.mean(np.abs(values.astype(np.complex128)) ** 2))
    assert 0.95 < variance < 1.05  # complex: real and imaginary parts of variance 1/2 each
    if np.iscomplexobj(values):
        assert 0.45 < float(np.var(values.real)) < 0.55 and 0.45 < float(np.var(values.imag)) < 0.55
    assert materialize(F((), dtype), 3).shape == ()


# -- errors from inside the model -----------------------------------------------------------------

EXIT_AT_IMPORT = """
import sys

sys.exit(3)
"""

ARGPARSE_AT_IMPORT = """
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=4)
WIDTH = parser.parse_args().width  # as a script would; shardscope's own flags must not reach it


@shardscope.demo(params=jax.ShapeDtypeStruct((WIDTH,), jnp.float32), x=jax.ShapeDtypeStruct((8, WIDTH), jnp.float32))
def scripted(W, x):
    return x @ W
"""

REQUIRED_ARGUMENT_AT_IMPORT = """
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.parse_args()
"""

EXIT_IN_MODEL = """
import sys


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
def exits(W, x):
    sys.exit(3)
"""


def test_sys_exit_at_import_is_a_message_with_the_line(tmp_path, capsys):
    one_error(capsys, ["report", write_demo(tmp_path, "bye.py", EXIT_AT_IMPORT)],
              "The demo called sys.exit(3) while importing, line 10.")


def test_argparse_at_import_sees_the_demo_file_alone(tmp_path, capsys):
    path = write_demo(tmp_path, "scripted.py", ARGPARSE_AT_IMPORT)
    assert main(["diff", str(path), "--devices", "2", "--chunk-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "scripted.py::scripted" in out
    one_error(capsys, ["diff", write_demo(tmp_path, "needs.py", REQUIRED_ARGUMENT_AT_IMPORT)],
              "The demo called sys.exit(2) while importing, line 12 (it said: needs.py: error: the following arguments are required: data).")


def test_sys_exit_inside_the_model_is_a_message(tmp_path, capsys):
    one_error(capsys, ["diff", write_demo(tmp_path, "exits.py", EXIT_IN_MODEL)],
              "The demo called sys.exit(3) inside exits, exits.py line 13.")


RAISING_CALLBACK = """
def boom(value):
    raise ValueError("the callback failed on purpose")


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
def calls_back(W, x):
    jax.debug.callback(boom, x)
    return x @ W
"""


def test_a_callback_that_raises_at_run_time_is_one_message(tmp_path, capsys):
    err = one_error(capsys, ["report", write_demo(tmp_path, "cb.py", RAISING_CALLBACK), "-r", "1"],
                    "plan failed while running: ValueError: the callback failed on purpose (cb.py line 9).")
    assert "jax.debug.callback failed" not in err  # JAX's own log of it, with a traceback


MODEL_PSUM = """
@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((8, 4), jnp.float32))
def centred(W, x):
    y = x @ W
    return y - lax.psum(y, "s")
"""


def test_a_model_that_uses_the_mesh_axis_is_told_it_is_mapped_per_example(tmp_path):
    with pytest.raises(TraceError) as info:
        analyze(Settings(path=write_demo(tmp_path, "psum.py", MODEL_PSUM), repeats=1), measure=False)
    assert "uses a mesh axis itself" in info.value.message and "unbound axis name: s" in info.value.message
    assert "per example" in info.value.hint and "may not use the mesh axis" in info.value.hint


# -- axis names: ASCII identifiers only (XLA aborts the process otherwise) -----------------------


@pytest.mark.parametrize("axis", ["ñ", "s\u0301", "数据", "1s", "a-b", ""])
def test_non_ascii_or_invalid_axis_names_are_refused(axis, capsys):
    with pytest.raises(SettingsError):
        check_axis_name(axis)
    with pytest.raises(SettingsError):
        analyze(Settings(path=LINEAR, axis=axis, repeats=1), measure=False)
    with pytest.raises(SystemExit) as info:
        main(["report", str(LINEAR), "--axis", axis])
    assert info.value.code == 2 and "valid axis name" in capsys.readouterr().err


# -- a demo file name that is not UTF-8 -----------------------------------------------------------


def test_a_latin1_file_name_compiles_and_exports(tmp_path, shardscope_cli):
    """A file name that is not UTF-8 (Latin-1's bytes), as the command line hands it over:
    decoded with surrogate escapes (os.fsdecode)."""
    name = b"d\xe9mo.py"
    directory = bytes(tmp_path)
    with open(directory + b"/" + name, "wb") as handle:
        handle.write(LINEAR.read_bytes())
    out = bytes(tmp_path / "out.diff")
    path = os.fsdecode(directory + b"/" + name)
    diff = shardscope_cli("diff", path, "-o", os.fsdecode(out))
    assert diff.returncode == 0, diff.stderr
    result = shardscope_cli("report", path, "-r", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["variants"]["naive"]["max_abs_err"] < 1e-3
    with open(out, "rb") as handle:
        assert handle.readline() == b"# shardscope: " + name + b"::linear\n"  # the file's own bytes


# -- numbers: a NaN gradient is NaN, with a warning -----------------------------------------------


def test_max_abs_err_does_not_skip_nan():
    ok = np.ones(5, np.float32)
    assert max_abs_err([ok], [ok + 0.5]) == 0.5
    assert math.isnan(max_abs_err([np.array([np.nan, 1.0, 1.0], np.float32)], [np.ones(3, np.float32)]))
    assert math.isnan(max_abs_err([ok, ok], [ok, np.full(5, np.inf, np.float32)]))
    assert math.isnan(max_abs_err([np.full(3, np.nan)], [np.full(3, np.nan)]))


NAN_GRADIENT = """
@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def nan(W, x):
    return jnp.sqrt(x @ W)  # negative arguments: NaN outputs and gradients
"""


def test_a_nan_gradient_shows_as_nan_with_a_warning(tmp_path, capsys):
    path = write_demo(tmp_path, "nan.py", NAN_GRADIENT)
    assert main(["report", str(path), "-r", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    plans = len(data["variants"])
    assert plans >= 2 and [v["max_abs_err"] for v in data["variants"].values()] == [None] * plans
    assert len(data["warnings"]) == plans and all("not finite" in w for w in data["warnings"])
    assert main(["report", str(path), "-r", "1"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "max_abs_err" in line)
    assert row.count("nan") == plans, row
    assert out.count("warning: the ") == plans

