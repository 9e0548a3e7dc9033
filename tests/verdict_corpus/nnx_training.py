"""flax nnx training steps: gradient accumulation with ``optax.MultiSteps`` and with a scan.

``nnx_multisteps`` runs four optimizer steps of an ``nnx.Optimizer`` wrapping
``optax.MultiSteps(adamw, every_k_schedule=2)`` in a loop: MultiSteps adds each step's gradient
into its own accumulator and applies adamw every second step, so the weights the next step
reads change with the summed gradient: the sum is needed in the loop. ``nnx_scan_accumulate``
sums the gradients of four micro-batches in a ``lax.scan`` and applies the optimizer once after
it: the sum only accumulates.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

STEPS, BATCH, IN, HIDDEN, OUT = 4, 64, 16, 32, 4

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(IN, HIDDEN, rngs=rngs)
        self.out = nnx.Linear(HIDDEN, OUT, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.relu(self.hidden(x)))


def _abstract(tree):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated), tree)


model = MLP(nnx.Rngs(0))
graphdef, state = nnx.split(model)
tx = optax.MultiSteps(optax.adamw(1e-3), every_k_schedule=2)
opt_state = tx.init(state.filter(nnx.Param))
state, opt_state = _abstract(state), _abstract(opt_state)
xs = jax.ShapeDtypeStruct((STEPS, BATCH, IN), jnp.float32, sharding=split)
ys = jax.ShapeDtypeStruct((STEPS, BATCH, OUT), jnp.float32, sharding=split)


def loss_fn(model, x, y):
    return jnp.mean((model(x) - y) ** 2)


@shardscope.program(args=(state, opt_state, xs, ys))
@jax.jit
def nnx_multisteps(state, opt_state, xs, ys):
    """Four steps of optax.MultiSteps (every second one applies adamw) in a fori_loop."""

    def step(i, carry):
        state, opt_state = carry
        model = nnx.merge(graphdef, state)
        grads = nnx.grad(loss_fn)(model, xs[i], ys[i])
        params = state.filter(nnx.Param)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return nnx.merge_state(state, params), opt_state

    return lax.fori_loop(0, STEPS, step, (state, opt_state))


@shardscope.program(args=(state, xs, ys))
@jax.jit
def nnx_scan_accumulate(state, xs, ys):
    """The gradients of four micro-batches summed in a lax.scan, adamw applied once after it."""
    params, rest = state.split(nnx.Param, ...)

    def loss_of(params, x, y):
        return loss_fn(nnx.merge(graphdef, params, rest), x, y)

    def micro(acc, batch):
        grads = jax.grad(loss_of)(params, *batch)
        return jax.tree.map(jnp.add, acc, grads), None

    grads, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return grads
