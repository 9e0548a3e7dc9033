"""The CLI imports a demo file once: what it prints at import appears once (real CLI, fresh interpreter)."""

from __future__ import annotations

import json

import pytest

from _support import run_cli, write_demo

ANNOUNCING = """
print("IMPORTING-THE-DEMO")


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def announcing(W, x):
    return x @ W
"""


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("report", ("--json", "-r", "1")),
        ("report", ("--mesh", "a=2,b=1", "--json", "-r", "1")),  # a multi-axis mesh skips the batch check
        ("diff", ()),
        ("sweep", ("--chunk-sizes", "8,16", "--json", "-r", "1")),
    ],
)
def test_a_demo_that_prints_at_import_prints_once(tmp_path, command, options):
    demo = write_demo(tmp_path, "announcing.py", ANNOUNCING)
    result = run_cli(command, demo, "--devices", "2", *options, timeout=300)
    assert result.returncode == 0, result.stderr
    # the demo's own output goes to stderr, so stdout stays the report, the JSON or the diff
    assert result.stderr.count("IMPORTING-THE-DEMO") == 1, result.stderr
    assert "IMPORTING-THE-DEMO" not in result.stdout
    if "--json" in options:
        assert json.loads(result.stdout)
    else:
        assert "\n--- " in result.stdout and "\n+++ " in result.stdout  # the unified diff
