"""One quoting of JAX's trace error for every command and the Python API.

The classic trap: a ``lax.scan`` inside ``shard_map`` whose carry starts from ``jnp.zeros`` (the
same on every device) and comes out per-device. JAX's first line ends in "but they differ:";
the lines after it name the carry, its two types and JAX's ``pcast`` fix. ``check``,
``shardscope.inspect``, the program analysis (the app) and ``report`` on a demo all quote them,
and none blames the example arguments.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from _support import CARRY_FROM_ZEROS, write_demo

import shardscope
from shardscope.errors import TraceError
from shardscope.pipeline.run import analyze
from shardscope.config.settings import Settings

CARRY_PROGRAM = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:2]), ("rows",))
xs = jax.ShapeDtypeStruct((8, 4), jnp.float32)


@shardscope.program(args=(xs,))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=P("rows"), out_specs=P("rows"))
def scan_from_zeros(xs):
    def step(h, x):
        h = jnp.tanh(h + x)
        return h, h

    _, hs = lax.scan(step, jnp.zeros((4,)), xs)
    return hs
'''

CARRY_LINE = re.compile(r"input carry h has type float32\[4\] but .* has type float32\[4\]\{V:rows\}")
JAX_FIX = "jax.lax.pcast(..., ('rows',), to='varying')"
PROGRAM_FIX = "lax.pcast(init, 'rows', to='varying')"


@pytest.fixture
def carry_program(tmp_path: Path) -> Path:
    path = tmp_path / "carry_program.py"
    path.write_text(textwrap.dedent(CARRY_PROGRAM))
    return path


def assert_quotes_the_carry(message: str, hint: str) -> None:
    """The carry, its two types and JAX's own fix are in the message; the hint casts the carry."""
    assert CARRY_LINE.search(message), message
    assert JAX_FIX in message, message
    assert "example arguments" not in hint, hint
    assert PROGRAM_FIX in hint and "the carry h" in hint, hint


def test_check_quotes_the_carry_and_its_types(carry_program, shardscope_cli):
    result = shardscope_cli("check", carry_program)
    assert result.returncode == 2, result.stdout
    message, _, hint = result.stderr.partition("\nhint: ")
    assert_quotes_the_carry(message, hint)
    assert "--debug" in hint and "Traceback" not in result.stderr


def test_inspect_raises_the_same_quoting(carry_program, monkeypatch):
    monkeypatch.syspath_prepend(str(carry_program.parent))
    module = __import__("carry_program")
    with pytest.raises(TraceError) as info:
        shardscope.inspect(module.scan_from_zeros, module.xs)
    assert_quotes_the_carry(info.value.message, info.value.hint)
    assert "__cause__" in info.value.hint  # the Python API has no --debug: JAX's error is chained
    assert isinstance(info.value.__cause__, TypeError)


def test_the_program_analysis_of_the_app_says_the_same_as_check(carry_program, shardscope_cli):
    with pytest.raises(TraceError) as info:
        analyze(Settings(path=carry_program), measure=False)
    assert_quotes_the_carry(info.value.message, info.value.hint)
    check = shardscope_cli("check", carry_program)
    assert f"shardscope: error: {info.value.message}\nhint: {info.value.hint}\n" == check.stderr


def test_report_on_a_demo_quotes_the_carry(tmp_path, shardscope_cli):
    path = write_demo(tmp_path, "carry_demo.py", CARRY_FROM_ZEROS)
    result = shardscope_cli("report", path, "--devices", "2", "--repeats", "1")
    assert result.returncode == 2, result.stdout
    message, _, hint = result.stderr.partition("\nhint: ")
    assert re.search(r"input carry h has type float32\[8,4\] but .* float32\[8,4\]\{V:s\}", message), message
    assert "jax.lax.pcast(..., ('s',), to='varying')" in message
    assert hint.startswith("derive the initial carry from x") and "example arguments" not in hint


def test_a_program_error_other_than_a_carry_does_not_blame_the_arguments(tmp_path):
    def matmul_of_mismatched(x):
        return x @ x

    with pytest.raises(TraceError) as info:
        shardscope.inspect(matmul_of_mismatched, jax_sds((2, 3)))
    assert info.value.message.startswith("matmul_of_mismatched fails to trace on its example arguments: TypeError:")
    assert "check the example arguments" not in info.value.hint


def jax_sds(shape: tuple[int, ...]):
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(shape, jnp.float32)
