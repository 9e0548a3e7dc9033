"""A training step that is not jitted itself: a Python loop of jitted calls, one per micro-batch.

``step`` calls the jitted ``grad_fn`` once per micro-batch and adds up the gradients eagerly,
then calls the jitted ``apply``. Each call is its own dispatch of its own module: ``grad_fn``'s
module all-reduces the gradient of the replicated ``w`` over ``data`` (the batch is split over
it) on every call, 4 all-reduces per step where the sum needs one. Compiled as one ``jax.jit``
XLA would merge them; run as written it cannot. ``step_fixed`` has ``local_grad_fn`` return
each device's own gradient (``jax.shard_map`` with ``w`` cast to varying, stacked over
``data``) and ``apply_fixed`` sum them once: 1 all-reduce per step, the same update.
``shardscope check demos/dispatch_step.py --function step`` exits 1 and names that fix;
``--function step_fixed`` exits 0.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO_BATCHES, BATCH, D = 4, 32, 16
LEARNING_RATE = 0.1

# shardscope sets the CPU device count before importing this file: a module-level mesh works.
mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
DEVICES = mesh.shape["data"]

W = jax.ShapeDtypeStruct((D, D), jnp.float32, sharding=NamedSharding(mesh, P()))
XS = [jax.ShapeDtypeStruct((BATCH, D), jnp.float32, sharding=NamedSharding(mesh, P("data")))
      for _ in range(MICRO_BATCHES)]


def loss(w, x):
    """A one-layer model's mean squared activation on one micro-batch."""
    return jnp.mean(jnp.tanh(x @ w) ** 2)


@jax.jit
def grad_fn(w, x):
    """The gradient of one micro-batch: the partitioner all-reduces it over 'data'."""
    return jax.grad(loss)(w, x)


@jax.jit
def apply(w, g):
    """One SGD update."""
    return w - LEARNING_RATE * g


@shardscope.program(args=(W, XS))
def step(w, xs):
    """4 dispatches of grad_fn per step, each with its own all-reduce, then apply."""
    acc = jnp.zeros_like(w)
    for x in xs:
        acc = acc + grad_fn(w, x)
    return apply(w, acc / len(xs))


@jax.jit
def local_grad_fn(w, x):
    """Each device's own share of the micro-batch's gradient, not summed: stacked over 'data'."""

    def per_device(w, x):
        w = lax.pcast(w, "data", to="varying")  # its gradient stays on each device
        return (jax.grad(loss)(w, x) / DEVICES)[None]

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P("data")), out_specs=P("data"))(w, x)


@jax.jit
def apply_fixed(w, parts):
    """The SGD update from the devices' summed shares: the one all-reduce of the step."""
    return w - LEARNING_RATE * parts.sum(axis=0)


@shardscope.program(args=(W, XS))
def step_fixed(w, xs):
    """4 dispatches of local_grad_fn with no collective, then one all-reduce in apply_fixed."""
    acc = local_grad_fn(w, xs[0])
    for x in xs[1:]:
        acc = acc + local_grad_fn(w, x)
    return apply_fixed(w, acc / len(xs))
