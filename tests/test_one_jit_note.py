"""A step that is not jitted and calls jitted functions is analysed as ``jax.jit`` of it: said.

What runs is each jitted call dispatched as its own module; shardscope reads the one program
``jax.jit(step)`` would be. Until the dispatches are analysed one by one, ``check`` (text and
JSON), ``inspect()`` and the pipeline's program results carry a note that says so. A jitted
step, or a wrapper around one jitted call, runs one module: no note.
"""

from __future__ import annotations

import functools
import json
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope
from shardscope.pipeline.run import analyze
from shardscope.plans.settings import Settings

STEP = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:4]), ("dp",))
    params = jax.device_put({"w": jnp.ones((16, 4)) * 0.1}, NamedSharding(mesh, P()))
    optimizer = optax.sgd(1e-2)
    opt_state = optimizer.init(params)
    xs = jax.device_put(jnp.ones((4, 32, 16)), NamedSharding(mesh, P(None, "dp")))


    @jax.jit
    def grad_fn(params, x):
        return jax.grad(lambda p: jnp.mean((x @ p["w"]) ** 2))(params)


    @jax.jit
    def apply(params, opt_state, grads):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


    @shardscope.program(args=(params, opt_state, xs))
    def train_step(params, opt_state, xs):
        grads = jax.tree.map(jnp.zeros_like, params)
        for k in range(xs.shape[0]):
            grads = jax.tree.map(jnp.add, grads, grad_fn(params, xs[k]))
        return apply(params, opt_state, grads)


    @shardscope.program(args=(params, opt_state, xs))
    @jax.jit
    def jitted_step(params, opt_state, xs):
        return train_step(params, opt_state, xs)
''')


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "dispatch_step.py"
    path.write_text(STEP)
    return path


def test_check_says_a_step_of_dispatches_is_analysed_as_one_jit(tmp_path, shardscope_cli):
    path = _file(tmp_path)
    text = " ".join(shardscope_cli("check", path, "--function", "train_step").stdout.split())
    assert ("note: train_step is not jitted and calls jitted functions (grad_fn, apply): it is analysed as "
            "jax.jit(train_step), one program") in text
    assert "not counted per dispatch" in text
    data = json.loads(shardscope_cli("check", path, "--json").stdout)
    notes = {p["function"]: p["notes"] for p in data["programs"]}
    assert notes["jitted_step"] == [] and len(notes["train_step"]) == 1 and "grad_fn" in notes["train_step"][0]


def test_the_pipeline_keeps_the_note_with_the_program(tmp_path):
    analysis = analyze(Settings(path=_file(tmp_path), repeats=1), measure=False)
    assert analysis.plans["jitted_step"].notes == ()
    (note,) = analysis.plans["train_step"].notes
    assert "analysed as jax.jit(train_step)" in note and note in analysis.warnings


def test_inspect_notes_only_a_step_of_dispatches():
    mesh = Mesh(np.array(jax.devices()[:2]), ("dp",))
    w = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P()))
    x = jax.device_put(jnp.ones((4, 8)), NamedSharding(mesh, P("dp")))

    @jax.jit
    def layer(w, x):
        return jnp.tanh(x @ w)

    def two_layers(w, x):
        return layer(w, layer(w, x)).sum()

    def eager(w, x):  # jnp's own jitted helpers are JAX's, not a user's dispatches
        return jnp.clip(x @ w, -1, 1).sum()

    assert "two_layers is not jitted" in shardscope.inspect(two_layers, w, x).notes[0]
    assert shardscope.inspect(jax.jit(two_layers), w, x).notes == ()
    assert shardscope.inspect(functools.partial(layer, w), x).notes == ()
    assert shardscope.inspect(eager, w, x).notes == ()
