"""What prints an inspection does not depend on which rendering module was imported first: the
rendering package registers its three renderers in one place (:mod:`shardscope.render.inspections`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import importlib, json, sys
    import jax
    jax.config.update("jax_num_cpu_devices", 4)
    for name in sys.argv[1:]:
        importlib.import_module(name)
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P
    from shardscope.engine.extensions import EXTENSIONS
    from shardscope.pipeline.one_program import inspect

    mesh = jax.make_mesh((4,), ("x",))

    def step(w, xs):
        def body(i, acc):
            return acc + jax.lax.psum(xs[i] * w, "x")
        return jax.lax.fori_loop(0, xs.shape[0], body, jnp.zeros_like(w))

    f = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(None, "x")), out_specs=P())
    xs = jax.device_put(jnp.ones((3, 8)), jax.sharding.NamedSharding(mesh, P(None, "x")))
    inspection = inspect(jax.jit(f), jnp.ones(2), xs)
    print(json.dumps({"text": str(inspection), "html": inspection._repr_html_(),
                      "renderers": [getattr(getattr(EXTENSIONS, k), "__qualname__", None)
                                    for k in ("text", "rich", "html")]}))
""")

ORDERS = [
    ("shardscope.render.findings",),
    ("shardscope.render.dispatches", "shardscope.render.findings"),
    ("shardscope.render.findings", "shardscope.render.dispatches"),
    ("shardscope.render.findings_html",),
]


def _printed(order: tuple[str, ...]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROGRAM, *order], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    if printed["html"] is not None:  # each page's element id is random: the rest must match
        printed["html"] = re.sub(r"shardscope-[0-9a-f]{12}", "shardscope-ID", printed["html"])
    return printed


@pytest.mark.slow
def test_an_inspection_prints_the_same_whichever_rendering_module_was_imported_first():
    printed = [_printed(order) for order in ORDERS]
    first = printed[0]
    assert first["renderers"] == ["to_text", "rich_inspection", "inspection_page"]
    assert "psum" in first["text"] and "Inspection(" not in first["text"]
    assert first["html"] is not None and "<table" in first["html"]
    for order, other in zip(ORDERS[1:], printed[1:]):
        assert other == first, order
