"""Training steps that are not jitted themselves: Python loops of jitted calls, as users write them.

Each step runs eagerly as written (the tests run them on placed arrays) and is what
``shardscope.inspect`` reads as a sequence of dispatches. The data-parallel mesh is the first
4 CPU devices over ``data``; parameters are replicated, batches split over ``data``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MICRO_BATCHES, BATCH, D = 4, 32, 16
RNG = np.random.default_rng(29)

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
REPLICATED, BATCHED = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))


def placed(shape: tuple[int, ...], sharding: NamedSharding) -> jax.Array:
    """A normal random array placed with ``sharding``."""
    return jax.device_put((RNG.normal(size=shape) * 0.3).astype(np.float32), sharding)


def loss(w, x):
    """One layer's mean squared activation on one micro-batch."""
    return jnp.mean(jnp.tanh(x @ w) ** 2)


@jax.jit
def grad_fn(w, x):
    """One micro-batch's gradient: the partitioner all-reduces it over 'data'."""
    return jax.grad(loss)(w, x)


@jax.jit
def apply(w, g):
    """One SGD update."""
    return w - 0.1 * g


def step(w, xs):
    """The issue's step: a dispatch of grad_fn per micro-batch, summed eagerly, then apply."""
    acc = jnp.zeros_like(w)
    for x in xs:
        acc = acc + grad_fn(w, x)
    return apply(w, acc / len(xs))


@jax.jit
def local_grad_fn(w, x):
    """Each device's own share of the micro-batch's gradient, stacked over 'data', not summed."""

    def per_device(w, x):
        w = lax.pcast(w, "data", to="varying")
        return (jax.grad(loss)(w, x) / mesh.shape["data"])[None]

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P("data")), out_specs=P("data"))(w, x)


@jax.jit
def apply_fixed(w, parts):
    """The update from the summed shares: the step's one all-reduce."""
    return w - 0.1 * parts.sum(axis=0)


def step_fixed(w, xs):
    """The fix: local gradients added across the calls, reduced once in the update."""
    acc = local_grad_fn(w, xs[0])
    for x in xs[1:]:
        acc = acc + local_grad_fn(w, x)
    return apply_fixed(w, acc / len(xs))


# --------------------------------------------------------------------------- a MaxText-engine-like step


class MLP(nnx.Module):
    """Two dense layers."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(D, 32, rngs=rngs)
        self.l2 = nnx.Linear(32, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(jnp.tanh(self.l1(x)))


@functools.cache
def model() -> tuple[nnx.GraphDef, nnx.State]:
    """The model's graph and its initial state, built on first use: its initializers run eagerly
    (1.8 s of CPU), and every xdist worker imports this module to collect the tests."""
    return nnx.split(MLP(nnx.Rngs(0)))


TX = optax.adam(1e-3)
ENGINE_MICRO_BATCHES = 8


def engine_inputs():
    """The model's state and the optimizer's, replicated, and 8 micro-batches split over 'data'."""
    state = jax.device_put(model()[1], REPLICATED)
    opt_state = jax.device_put(TX.init(state), REPLICATED)
    xs = [placed((BATCH, D), BATCHED) for _ in range(ENGINE_MICRO_BATCHES)]
    ys = [placed((BATCH, 1), BATCHED) for _ in range(ENGINE_MICRO_BATCHES)]
    return state, opt_state, xs, ys


@jax.jit
def engine_grad(state, x, y):
    """The gradient function of the engine: the model merged from its state, one micro-batch."""

    def model_loss(state):
        merged = nnx.merge(model()[0], state)
        return jnp.mean((merged(x) - y) ** 2)

    return jax.grad(model_loss)(state)


@jax.jit
def engine_update(state, grads, opt_state):
    """The optax update in its own jit."""
    updates, opt_state = TX.update(grads, opt_state, state)
    return optax.apply_updates(state, updates), opt_state


def engine_step(state, opt_state, xs, ys):
    """Gradients per micro-batch, summed eagerly over the tree, one update."""
    acc = jax.tree.map(jnp.zeros_like, state)
    for x, y in zip(xs, ys):
        acc = jax.tree.map(jnp.add, acc, engine_grad(state, x, y))
    grads = jax.tree.map(lambda g: g / len(xs), acc)
    return engine_update(state, grads, opt_state)


# --------------------------------------------------------------------------- scans, nesting, grad, shapes

SCAN_LENGTH, CHUNKS = 2, 3


@jax.jit
def scan_grad(w, xs):
    """A lax.scan accumulation inside one jit: the CPU all-reduces in every iteration."""

    def body(acc, x):
        return acc + jax.grad(loss)(w, x), None

    return lax.scan(body, jnp.zeros_like(w), xs)[0]


def mixed_step(w, chunks):
    """A Python loop over chunks, each chunk's micro-batches scanned inside scan_grad."""
    acc = jnp.zeros_like(w)
    for chunk in chunks:
        acc = acc + scan_grad(w, chunk)
    return apply(w, acc / len(chunks))


@jax.jit
def jitted_loss(w, x):
    """A jitted loss (called from a jitted gradient function, or differentiated eagerly)."""
    return loss(w, x)


@jax.jit
def outer_grad(w, x):
    """A jitted function that calls another one: one module holds both."""
    return jax.grad(jitted_loss)(w, x)


def nested_step(w, xs):
    """Nested jitted calls in a Python loop."""
    acc = outer_grad(w, xs[0])
    for x in xs[1:]:
        acc = acc + outer_grad(w, x)
    return apply(w, acc)


def grad_of_jitted(w, x):
    """jax.grad of a jitted function, eagerly: a forward and a backward dispatch."""
    return jax.grad(jitted_loss)(w, x)


def two_shapes_step(w, x_small, x_large):
    """grad_fn called on two batch sizes: two modules."""
    return apply(w, grad_fn(w, x_small) + grad_fn(w, x_large))


def eager_sum_step(w, xs):
    """An eager reduction of a sharded batch between the calls: its own module, with a collective."""
    acc = jnp.zeros_like(w)
    for x in xs:
        acc = acc + grad_fn(w, x)
    scale = jnp.sum(xs[0])
    return apply(w, acc * scale)


def used_each_step(w, xs):
    """Each call's gradient used on its own (a product, not a sum): every all-reduce is needed."""
    acc = jnp.ones_like(w)
    for x in xs:
        acc = acc * grad_fn(w, x)
    return apply(w, acc)


# --------------------------------------------------------------------------- Explicit axes

explicit_mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,), devices=jax.devices()[:4])


def explicit_inputs():
    """w replicated and 3 micro-batches split over 'data', on Explicit axes."""
    w = placed((D, D), NamedSharding(explicit_mesh, P()))
    return w, [placed((BATCH, D), NamedSharding(explicit_mesh, P("data"))) for _ in range(3)]


@jax.jit
def decayed_grad_fn(w, x):
    """The gradient plus weight decay: the all-reduced gradient has a local term added to it."""
    return jax.grad(loss)(w, x) + 0.01 * w


def decayed_step(w, xs):
    """Summed across calls as the issue's step: the all-reduce stays deferrable, the decay summed beside it."""
    acc = jnp.zeros_like(w)
    for x in xs:
        acc = acc + decayed_grad_fn(w, x)
    return apply(w, acc / len(xs))
