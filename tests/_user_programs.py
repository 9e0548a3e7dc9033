"""Training steps written as users of flax, optax and MaxText-style code write them.

Each builder returns a :class:`_compiled_programs.Case` over the 4x2 ``data``/``model`` mesh
(or a 1-D one): a flax nnx model trained with ``nnx.jit`` and an optax optimizer, accumulating
gradients over micro-batches; a stack of transformer blocks scanned over layers with
``jax.checkpoint`` under jit with shardings (data parallel and FSDP); a ``lax.fori_loop``
accumulation; an accumulation whose scan carries the gradient in bfloat16; a complex-valued
parameter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from _compiled_programs import MICRO, Case, mesh_2d

_RNG = np.random.default_rng(40)


def _normal(shape: tuple[int, ...], scale: float = 0.3, dtype=np.float32) -> np.ndarray:
    return (_RNG.normal(size=shape) * scale).astype(dtype)


def _batches(mesh, micro: int = MICRO, batch: int = 32, features: int = 16, out: int = 8):
    xs = jax.device_put(_normal((micro, batch, features)), NamedSharding(mesh, P(None, "data")))
    ys = jax.device_put(_normal((micro, batch, out)), NamedSharding(mesh, P(None, "data")))
    return xs, ys


# --------------------------------------------------------------------------- flax nnx + optax


def nnx_train_step() -> Case:
    """An ``nnx.Module`` of two ``nnx.Linear`` layers, an ``nnx.Optimizer`` over optax's adamw,
    and an ``nnx.jit`` step that adds ``nnx.grad`` of 4 micro-batches in a ``lax.scan`` before one
    update; the model replicated, the batch sharded over ``data``."""
    import optax
    from flax import nnx

    mesh = mesh_2d()

    class MLP(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.hidden = nnx.Linear(16, 32, rngs=rngs)
            self.out = nnx.Linear(32, 8, rngs=rngs)

        def __call__(self, x):
            return self.out(jnp.tanh(self.hidden(x)))

    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, xs, ys):
        graph, params, rest = nnx.split(model, nnx.Param, ...)

        def loss(params, x, y):
            return jnp.mean((nnx.merge(graph, params, rest)(x) - y) ** 2)

        def body(acc, xy):
            return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, *xy)), None

        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        optimizer.update(model, grads) if _update_takes_model(optimizer) else optimizer.update(grads)
        return grads

    state = nnx.state((model, optimizer))
    nnx.update((model, optimizer), jax.device_put(state, NamedSharding(mesh, P())))
    return Case("nnx_train_step", train_step, (model, optimizer, *_batches(mesh)), mesh, "auto")


def _update_takes_model(optimizer) -> bool:
    """flax >= 0.11 passes the model to ``Optimizer.update``; older versions take the grads alone."""
    import inspect

    return "model" in inspect.signature(optimizer.update).parameters


# --------------------------------------------------------------------------- MaxText-style layers


LAYERS, WIDTH, HEADS, TOKENS = 3, 16, 2, 8


def _block(x, layer):
    """One transformer block: attention and an MLP, with residuals and RMS norms."""
    def norm(v, g):
        return g * v * lax.rsqrt(jnp.mean(v * v, -1, keepdims=True) + 1e-6)

    h = norm(x, layer["ln1"])
    q, k, v = (h @ layer[name] for name in ("wq", "wk", "wv"))
    split = lambda a: a.reshape(a.shape[0], TOKENS, HEADS, WIDTH // HEADS)
    att = jax.nn.softmax(jnp.einsum("bthd,bshd->bhts", split(q), split(k)) / np.sqrt(WIDTH // HEADS), -1)
    x = x + jnp.einsum("bhts,bshd->bthd", att, split(v)).reshape(x.shape) @ layer["wo"]
    return x + jax.nn.gelu(norm(x, layer["ln2"]) @ layer["w1"]) @ layer["w2"]


def _stacked_layers() -> dict:
    names = {"wq": (WIDTH, WIDTH), "wk": (WIDTH, WIDTH), "wv": (WIDTH, WIDTH), "wo": (WIDTH, WIDTH),
             "w1": (WIDTH, 2 * WIDTH), "w2": (2 * WIDTH, WIDTH)}
    layers = {name: _normal((LAYERS, *shape), 0.2) for name, shape in names.items()}
    layers |= {"ln1": np.ones((LAYERS, WIDTH), np.float32), "ln2": np.ones((LAYERS, WIDTH), np.float32)}
    return layers


def scanned_transformer(fsdp: bool) -> Case:
    """Layers stacked on a leading axis and run by ``lax.scan`` over a ``jax.checkpoint``-ed block
    (MaxText's scan_layers with remat), under jit with shardings: the batch over ``data``, the
    weights replicated (data parallel) or sharded over ``data`` on their first feature axis
    (FSDP); 4 micro-batches accumulated in an outer scan."""
    mesh = mesh_2d()

    def loss(params, tokens):
        x = params["embed"][tokens]
        x, _ = lax.scan(lambda h, layer: (jax.checkpoint(_block)(h, layer), None), x, params["layers"])
        return jnp.mean((x @ params["embed"].T) ** 2)

    @jax.jit
    def step(params, batches):
        def body(acc, tokens):
            return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, tokens)), None

        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), batches)
        return grads

    params = {"embed": _normal((32, WIDTH), 0.2), "layers": _stacked_layers()}
    shard = (lambda a: P(None, "data") if a.ndim == 3 else P()) if fsdp else (lambda a: P())
    placed = jax.tree.map(lambda a: jax.device_put(a, NamedSharding(mesh, shard(a))), params)
    tokens = jax.device_put(np.asarray(_RNG.integers(0, 32, (MICRO, 8, TOKENS)), np.int32),
                            NamedSharding(mesh, P(None, "data")))
    return Case(f"scanned_transformer{'_fsdp' if fsdp else ''}", step, (placed, tokens), mesh, "auto",
                {"layers": LAYERS})


# --------------------------------------------------------------------------- loops and dtypes


def _mlp(params, x, y):
    return jnp.mean((jnp.tanh(x @ params["W"]) @ params["V"] - y) ** 2)


def _replicated_params(mesh, dtype=np.float32) -> dict:
    return jax.device_put({"W": _normal((16, 32)).astype(dtype), "V": _normal((32, 8)).astype(dtype)},
                          NamedSharding(mesh, P()))


def fori_accumulate() -> Case:
    """``lax.fori_loop`` over the micro-batches (static bounds: a scan in the jaxpr, a while loop
    with a known trip count in the module), indexing them with ``xs[i]``."""
    mesh = mesh_2d()

    @jax.jit
    def step(params, xs, ys):
        def body(i, acc):
            return jax.tree.map(jnp.add, acc, jax.grad(_mlp)(params, xs[i], ys[i]))

        return lax.fori_loop(0, xs.shape[0], body, jax.tree.map(jnp.zeros_like, params))

    return Case("fori_accumulate", step, (_replicated_params(mesh), *_batches(mesh)), mesh, "auto")


def bf16_carry_accumulate() -> Case:
    """The scan carries the accumulated gradient in bfloat16 (to save memory): each micro-batch's
    float32 gradient is cast down and added."""
    mesh = mesh_2d()

    @jax.jit
    def step(params, xs, ys):
        def body(acc, xy):
            grads = jax.grad(_mlp)(params, *xy)
            return jax.tree.map(lambda a, g: a + g.astype(jnp.bfloat16), acc, grads), None

        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.bfloat16), params)
        grads, _ = lax.scan(body, zeros, (xs, ys))
        return grads

    return Case("bf16_carry_accumulate", step, (_replicated_params(mesh), *_batches(mesh)), mesh, "auto")


def complex_accumulate() -> Case:
    """A complex-valued weight (a unitary-ish layer), its gradient accumulated over micro-batches
    (``jax.grad`` of a real loss of complex parameters gives the conjugate Wirtinger gradient)."""
    mesh = mesh_2d()

    def loss(W, x, y):
        return jnp.mean(jnp.abs(x.astype(jnp.complex64) @ W - y) ** 2)

    @jax.jit
    def step(W, xs, ys):
        def body(acc, xy):
            return acc + jax.grad(loss)(W, *xy), None

        grads, _ = lax.scan(body, jnp.zeros_like(W), (xs, ys))
        return grads

    W = jax.device_put((_normal((16, 8)) + 1j * _normal((16, 8))).astype(np.complex64), NamedSharding(mesh, P()))
    return Case("complex_accumulate", step, (W, *_batches(mesh)), mesh, "auto")
