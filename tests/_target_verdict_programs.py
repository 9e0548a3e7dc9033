"""Training steps written as JAX users write them, for the verdicts on a target's plan.

Each builder takes a ``jax.sharding.Mesh`` (one axis ``data``; :func:`megatron_step` two,
``data`` and ``model``) and returns a :class:`_target_programs.Built`: the jitted step and its
example arguments (``jax.ShapeDtypeStruct`` with shardings over that mesh). Built over CPU
devices they are what a program file makes; built over a target's devices, the program written
for the target directly, whose compiled text a test reads for itself.

``PROGRAM_FILE`` is a program file that builds one of them over the first CPU devices, as
``shardscope check`` reads it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from _target_programs import Built

MICRO_BATCHES = 4
LAYERS, MICRO_STEPS = 4, 3  # the Megatron step: 4 stacked layers, 3 micro-batches


def _mlp_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


def _adamw_arguments(mesh: Mesh):
    """Replicated MLP parameters, adamw's state, and 4 micro-batches sharded over ``data``."""
    replicated = NamedSharding(mesh, P())
    params = {"w1": jax.ShapeDtypeStruct((32, 64), jnp.float32, sharding=replicated),
              "b1": jax.ShapeDtypeStruct((64,), jnp.float32, sharding=replicated),
              "w2": jax.ShapeDtypeStruct((64, 16), jnp.float32, sharding=replicated)}
    state = jax.eval_shape(optax.adamw(1e-3).init, params)
    state = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated), state)
    batch = 8 * mesh.size
    xs = jax.ShapeDtypeStruct((MICRO_BATCHES, batch, 32), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))
    ys = jax.ShapeDtypeStruct((MICRO_BATCHES, batch, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))
    return params, state, xs, ys


def worst_loss_adamw(mesh: Mesh) -> Built:
    """jit + shardings, optax adamw, a scan over 4 micro-batches whose carry holds the gradients
    and the worst loss so far (``jnp.maximum(worst, loss)``: the loop reads the loss's sum)."""
    optimizer = optax.adamw(1e-3)

    @jax.jit
    def train_step(params, opt_state, xs, ys):
        def micro(carry, batch):
            grads, worst = carry
            loss, g = jax.value_and_grad(_mlp_loss)(params, *batch)
            return (jax.tree.map(jnp.add, grads, g), jnp.maximum(worst, loss)), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (grads, worst), _ = lax.scan(micro, (zeros, jnp.float32(0.0)), (xs, ys))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, worst

    return Built(train_step, _adamw_arguments(mesh))


def total_loss_adamw(mesh: Mesh) -> Built:
    """The same step with the mean loss summed over the micro-batches (``total + loss``): the
    loss's sum only accumulates, so the loop need not run it."""
    optimizer = optax.adamw(1e-3)

    @jax.jit
    def train_step(params, opt_state, xs, ys):
        def micro(carry, batch):
            grads, total = carry
            loss, g = jax.value_and_grad(_mlp_loss)(params, *batch)
            return (jax.tree.map(jnp.add, grads, g), total + loss), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (grads, total), _ = lax.scan(micro, (zeros, jnp.float32(0.0)), (xs, ys))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, total / MICRO_BATCHES

    return Built(train_step, _adamw_arguments(mesh))


def bf16_gradients_sgd(mesh: Mesh) -> Built:
    """bfloat16 parameters and batches, their gradients summed over 4 micro-batches in a scan
    and one SGD update: the CPU sums the bfloat16 gradients in float32, a TPU in bfloat16."""
    replicated = NamedSharding(mesh, P())
    params = {"w1": jax.ShapeDtypeStruct((32, 64), jnp.bfloat16, sharding=replicated),
              "w2": jax.ShapeDtypeStruct((64, 16), jnp.bfloat16, sharding=replicated)}
    batch = 8 * mesh.size
    xs = jax.ShapeDtypeStruct((MICRO_BATCHES, batch, 32), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "data")))

    def loss(params, x):
        return jnp.sum(jnp.tanh(x @ params["w1"]) @ params["w2"])

    @jax.jit
    def train_step(params, xs):
        def micro(grads, x):
            return jax.tree.map(jnp.add, grads, jax.grad(loss)(params, x)), None

        grads, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, params), xs)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    return Built(train_step, (params, xs))


def _rmsnorm(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def _transformer_block(p, x):
    h = _rmsnorm(x, p["ln"])
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    a = jax.nn.softmax(jnp.einsum("btd,bsd->bts", q, k) / 8.0, axis=-1)
    x = x + jnp.einsum("bts,bsd->btd", a, v) @ p["wo"]
    h = _rmsnorm(x, p["ln"])
    return x + jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"]


def transformer_adam(mesh: Mesh) -> Built:
    """A 2-layer transformer on a ``data`` x ``model`` mesh (attention and MLP weights split over
    ``model``, a tied embedding), its loss and gradients summed over 4 micro-batches in a scan,
    and a hand-written Adam update: the CPU sums the loss with the gradients in one all-reduce in
    the loop, the TPU keeps part of that sum in the loop and moves the rest out."""
    vocab, d, f, t, batch = 256, 64, 256, 8, 16

    def sds(shape, spec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))

    def layer():
        return {"wq": sds((d, d), P(None, "model")), "wk": sds((d, d), P(None, "model")),
                "wv": sds((d, d), P(None, "model")), "wo": sds((d, d), P("model", None)),
                "w1": sds((d, f), P(None, "model")), "b1": sds((f,), P("model")),
                "w2": sds((f, d), P("model", None)), "ln": sds((d,), P())}

    params = {"embed": sds((vocab, d), P(None, "model")), "layers": [layer(), layer()], "final_ln": sds((d,), P())}
    state = {"m": params, "v": params, "count": sds((), P(), jnp.int32)}
    tokens = sds((MICRO_BATCHES, batch, t), P(None, "data", None), jnp.int32)

    def loss_fn(p, tok, tgt):
        x = p["embed"][tok]
        for layer_params in p["layers"]:
            x = _transformer_block(layer_params, x)
        logp = jax.nn.log_softmax(_rmsnorm(x, p["final_ln"]) @ p["embed"].T)
        return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], -1))

    @jax.jit
    def train_step(params, state, tokens, targets):
        def micro(carry, batch):
            loss_acc, g_acc = carry
            loss, g = jax.value_and_grad(loss_fn)(params, *batch)
            return (loss_acc + loss, jax.tree.map(jnp.add, g_acc, g)), None

        zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
        (loss, grads), _ = lax.scan(micro, zero, (tokens, targets))
        count = state["count"] + 1
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, state["v"], grads)
        c1, c2 = 1 - 0.9 ** count, 1 - 0.999 ** count
        params = jax.tree.map(lambda p, m, v: p - 1e-3 * (m / c1) / (jnp.sqrt(v / c2) + 1e-8), params, m, v)
        return params, {"m": m, "v": v, "count": count}, loss / MICRO_BATCHES

    return Built(train_step, (params, state, tokens, tokens))


def _layer(h, weights, ln):
    """A pre-norm MLP block split Megatron-style: ``w_in``'s columns and ``w_out``'s rows over ``model``."""
    w_in, w_out = weights
    mu = jnp.mean(h, axis=-1, keepdims=True)
    var = jnp.var(h, axis=-1, keepdims=True)
    normed = (h - mu) * lax.rsqrt(var + 1e-5) * ln
    return h + jax.nn.gelu(normed @ w_in) @ w_out


def _megatron_loss(params, x):
    def body(h, weights):
        return _layer(h, weights, params["ln"]), None

    h, _ = lax.scan(body, x, (params["w_in"], params["w_out"]))
    return jnp.mean(h ** 2)


def megatron_step(mesh: Mesh) -> Built:
    """A 2-D mesh (``data`` x ``model``): 4 column/row-split layers stacked in a ``lax.scan``
    inside a scan over 3 micro-batches, one norm scale ``ln`` shared by the layers, the
    gradients and the loss accumulated, one SGD update."""
    d, f = 32, 64
    params = {
        "w_in": jax.ShapeDtypeStruct((LAYERS, d, f), jnp.float32, sharding=NamedSharding(mesh, P(None, None, "model"))),
        "w_out": jax.ShapeDtypeStruct((LAYERS, f, d), jnp.float32, sharding=NamedSharding(mesh, P(None, "model", None))),
        "ln": jax.ShapeDtypeStruct((d,), jnp.float32, sharding=NamedSharding(mesh, P())),
    }
    xs = jax.ShapeDtypeStruct((MICRO_STEPS, 16 * mesh.shape["data"], d), jnp.float32,
                              sharding=NamedSharding(mesh, P(None, "data")))

    @jax.jit
    def train_step(params, xs):
        def micro(carry, x):
            grads, total = carry
            loss, g = jax.value_and_grad(_megatron_loss)(params, x)
            return (jax.tree.map(jnp.add, grads, g), total + loss), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (grads, total), _ = lax.scan(micro, (zeros, jnp.float32(0.0)), xs)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), total / MICRO_STEPS

    return Built(train_step, (params, xs))


VOCAB, WIDTH, TOKENS = 256, 64, 8  # the tied embedding's vocabulary, width and tokens per row


def _tied_loss(params, tokens):
    """A tied embedding's next-token loss: rows gathered from ``embed`` (a scatter-add in the
    backward pass), scaled, and scored against ``embed`` again."""
    embed = params["embed"]
    logits = (embed[tokens] * params["scale"]) @ embed.T
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1))


def _tied_arguments(mesh: Mesh):
    """Replicated ``{"embed", "scale"}`` and 4 micro-batches of token rows sharded over ``data``."""
    replicated = NamedSharding(mesh, P())
    params = {"embed": jax.ShapeDtypeStruct((VOCAB, WIDTH), jnp.float32, sharding=replicated),
              "scale": jax.ShapeDtypeStruct((WIDTH,), jnp.float32, sharding=replicated)}
    tokens = jax.ShapeDtypeStruct((MICRO_BATCHES, 4 * mesh.size, TOKENS), jnp.int32,
                                  sharding=NamedSharding(mesh, P(None, "data")))
    return params, tokens


def tied_embedding_accumulation(mesh: Mesh) -> Built:
    """jit + shardings, the tied embedding's gradients accumulated over 4 micro-batches with
    ``lax.scan``, one SGD update. The partitioner writes the gathered rows' gradient as a
    scatter-add into the replicated accumulator (kept on one device, summed over all)."""

    @jax.jit
    def train_step(params, tokens):
        def micro(grads, batch):
            return jax.tree.map(jnp.add, grads, jax.grad(_tied_loss)(params, batch)), None

        grads, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, params), tokens)
        return jax.tree.map(lambda p, g: p - 0.1 * g / MICRO_BATCHES, params, grads)

    return Built(train_step, _tied_arguments(mesh))


def tied_embedding_accumulation_fixed(mesh: Mesh) -> Built:
    """:func:`tied_embedding_accumulation` with check's fix: the loop inside ``jax.shard_map``,
    the parameters cast to varying over ``data``, one ``lax.pmean`` of the gradients after it."""

    def local_grads(params, tokens):
        varying = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)

        def micro(grads, batch):
            return jax.tree.map(jnp.add, grads, jax.grad(_tied_loss)(varying, batch)), None

        grads, _ = lax.scan(micro, jax.tree.map(jnp.zeros_like, varying), tokens)
        return jax.tree.map(lambda g: lax.pmean(g, "data"), grads)

    @jax.jit
    def train_step(params, tokens):
        grads = jax.shard_map(local_grads, mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P())(params, tokens)
        return jax.tree.map(lambda p, g: p - 0.1 * g / MICRO_BATCHES, params, grads)

    return Built(train_step, _tied_arguments(mesh))


PROGRAM_FILE = '''
import jax
import numpy as np
from jax.sharding import Mesh

import shardscope
import _target_verdict_programs as programs

mesh = Mesh(np.array(jax.devices()[:{devices}]).reshape({shape}), {names})
built = programs.{builder}(mesh)
train_step = shardscope.program(args=built.args)(built.fn)
'''
"""A program file building ``builder`` over the first CPU devices (``format`` it)."""
