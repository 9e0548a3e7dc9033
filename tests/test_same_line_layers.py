"""Two layers of one shape called on one line (``self.out(jnp.tanh(self.hidden(x)))``): their
gradients' sums, combined by XLA into one all-reduce, are each named as the gradient of their own
kernel and bias.

The instruction and the equation share their whole stack: the call's column tells the two
layers apart where file, line and op_name do not; a bias's gradient (the sum that transposes
``y += jnp.reshape(bias, ...)``'s broadcast) finds its forward equation by the same frames.
Expected names come from the model as written: the all-reduce's two 16x16 operands are the two
kernels' gradients and its two f32[16] ones the two biases' (read from the compiled text).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.hidden = nnx.Linear(16, 16, rngs=rngs)
        self.out = nnx.Linear(16, 16, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.hidden(x)))


def test_two_same_shaped_layers_on_one_line_are_named_apart():
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    nnx.update((model, optimizer), jax.device_put(nnx.state((model, optimizer)), NamedSharding(mesh, P())))
    xs = jax.device_put(jnp.ones((4, 32, 16)), NamedSharding(mesh, P(None, "data")))
    ys = jax.device_put(jnp.ones((4, 32, 16)), NamedSharding(mesh, P(None, "data")))

    @nnx.jit
    def train_step(model, optimizer, xs, ys):
        graph, params, rest = nnx.split(model, nnx.Param, ...)

        def loss(params, x, y):
            return jnp.mean((nnx.merge(graph, params, rest)(x) - y) ** 2)

        def body(acc, xy):
            return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, *xy)), None

        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        optimizer.update(model, grads)

    text = train_step.trace(model, optimizer, xs, ys).traced.lower().compile().as_text()
    shapes = re.search(r"^\s+%\S+ = \(([^)]*)\) all-reduce\(", text, re.M).group(1)
    assert shapes.count("f32[16,16]") == 2  # both kernels' gradients in the one combined sum
    assert shapes.count("f32[16]") == 2  # and both biases' 
    (c,) = shardscope.inspect(train_step, model, optimizer, xs, ys).compiled.collectives
    kernels = sorted(op.value for op in c.operands if op.shape == "f32[16,16]")
    assert kernels == ["grad(model.hidden.kernel.value)", "grad(model.out.kernel.value)"]
    biases = sorted(op.value for op in c.operands if op.shape == "f32[16]")
    assert biases == ["grad(model.hidden.bias.value)", "grad(model.out.bias.value)"]
