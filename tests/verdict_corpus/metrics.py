"""Metric dicts merged per micro-batch, beside the gradients.

A training step accumulates the gradients of its micro-batches and a dict of metrics: the
summed loss, the number of correct predictions, the examples seen. All are sums, so every
value could be summed over the devices once after the loop (``metric_dict``). A running
maximum of the loss (``jnp.maximum(worst, loss)``) is not a sum: the loop reads the summed loss
to take the maximum, so the instruction that carries it stays; the values beside it could be
split out (``running_max``, with the gradients; ``eval_max``, an evaluation loop with no
gradient: the loss's total and its maximum).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO, BATCH, IN, CLASSES = 4, 64, 32, 8

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
replicated = NamedSharding(mesh, P())
split = NamedSharding(mesh, P(None, "data"))

params = {"dense": jax.ShapeDtypeStruct((IN, CLASSES), jnp.float32, sharding=replicated),
          "bias": jax.ShapeDtypeStruct((CLASSES,), jnp.float32, sharding=replicated)}
images = jax.ShapeDtypeStruct((MICRO, BATCH, IN), jnp.float32, sharding=split)
labels = jax.ShapeDtypeStruct((MICRO, BATCH), jnp.int32, sharding=split)


def cross_entropy(params, x, y):
    logits = x @ params["dense"] + params["bias"]
    loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
    correct = jnp.sum(jnp.argmax(logits, axis=1) == y)
    return loss, correct


@shardscope.program(args=(params, images, labels))
@jax.jit
def metric_dict(params, images, labels):
    """Gradients and a dict of metrics (loss, correct, seen), all summed over the micro-batches."""

    def micro(carry, batch):
        grads, metrics = carry
        (loss, correct), g = jax.value_and_grad(cross_entropy, has_aux=True)(params, *batch)
        update = {"loss": loss, "correct": correct, "seen": jnp.int32(batch[1].shape[0])}
        return (jax.tree.map(jnp.add, grads, g), jax.tree.map(jnp.add, metrics, update)), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    metrics = {"loss": jnp.float32(0), "correct": jnp.int32(0), "seen": jnp.int32(0)}
    (grads, metrics), _ = lax.scan(micro, (zeros, metrics), (images, labels))
    return grads, metrics


@shardscope.program(args=(params, images, labels))
@jax.jit
def running_max(params, images, labels):
    """Gradients and the summed loss accumulate; the worst micro-batch loss is a running maximum."""

    def micro(carry, batch):
        grads, total, worst = carry
        (loss, _), g = jax.value_and_grad(cross_entropy, has_aux=True)(params, *batch)
        return (jax.tree.map(jnp.add, grads, g), total + loss, jnp.maximum(worst, loss)), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    (grads, total, worst), _ = lax.scan(micro, (zeros, jnp.float32(0), jnp.float32(-jnp.inf)), (images, labels))
    return grads, total, worst


@shardscope.program(args=(params, images, labels))
@jax.jit
def eval_max(params, images, labels):
    """An evaluation loop: the loss summed over the micro-batches and its running maximum."""

    def micro(carry, batch):
        total, worst = carry
        loss, _ = cross_entropy(params, *batch)
        return (total + loss, jnp.maximum(worst, loss)), None

    (total, worst), _ = lax.scan(micro, (jnp.float32(0), jnp.float32(-jnp.inf)), (images, labels))
    return total, worst
