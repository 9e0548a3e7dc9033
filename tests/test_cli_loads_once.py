"""The CLI imports a demo file once: what it prints at import appears once (the CLI run in this process;
every import of a demo file is a fresh module, so a second import would print again)."""

from __future__ import annotations

import json

import pytest

from _support import write_demo

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
def test_a_demo_that_prints_at_import_prints_once(tmp_path, command, options, shardscope_cli):
    demo = write_demo(tmp_path, "announcing.py", ANNOUNCING)
    result = shardscope_cli(command, demo, "--devices", "2", *options)
    assert result.returncode == 0, result.stderr
    # the demo's own output goes to stderr, so stdout stays the report, the JSON or the diff
    assert result.stderr.count("IMPORTING-THE-DEMO") == 1, result.stderr
    assert "IMPORTING-THE-DEMO" not in result.stdout
    if "--json" in options:
        assert json.loads(result.stdout)
    else:
        assert "\n--- " in result.stdout and "\n+++ " in result.stdout  # the unified diff
