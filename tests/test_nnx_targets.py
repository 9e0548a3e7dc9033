"""A flax NNX program compiled for a target: the jax-ai-stack miniGPT tutorial's shape (layers
annotated with ``nnx.with_partitioning``, the model made under a mesh by an ``nnx.jit``,
``nnx.Optimizer`` and ``nnx.MultiMetric``, an ``nnx.jit`` train step). Its scalars (the
optimizer's step, the metric's count) are on one device, which ``jit`` turns into a
``GSPMDSharding`` over the program's devices: shardscope moves that to the target as well.

The target's collectives are recounted from a compile by JAX alone: the same step as a pure
function of the model's state, its inputs laid out by the partition specs the model declares,
compiled over the target's devices.
"""

from __future__ import annotations

import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardscope.targets import compile as targets, registry
from test_gpu_targets import needs_plugin
from test_targets import needs_libtpu

VOCAB, EMBED, HEADS, FF, MAXLEN, BATCH = 64, 16, 2, 32, 8, 8
BLOCKS = 1  # the tutorial stacks several; one has every kind of layer and sharding, and compiles in less time
_COLLECTIVE = re.compile(r"= \S+ (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def _sharded(init, *axes):
    return nnx.with_partitioning(init, axes)


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        xavier = nnx.initializers.xavier_uniform()
        self.attention = nnx.MultiHeadAttention(
            num_heads=HEADS, in_features=EMBED, decode=False, kernel_init=_sharded(xavier, None, "model"),
            bias_init=_sharded(nnx.initializers.zeros_init(), "model"), rngs=rngs)
        self.norm1 = nnx.LayerNorm(EMBED, rngs=rngs)
        self.up = nnx.Linear(EMBED, FF, kernel_init=_sharded(xavier, None, "model"), rngs=rngs)
        self.down = nnx.Linear(FF, EMBED, kernel_init=_sharded(xavier, "model", None), rngs=rngs)
        self.norm2 = nnx.LayerNorm(EMBED, rngs=rngs)

    def __call__(self, x):
        x = self.norm1(x + self.attention(x, mask=nnx.make_causal_mask(x[..., 0])))
        return self.norm2(x + self.down(nnx.relu(self.up(x))))


class MiniGPT(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.tokens = nnx.Embed(VOCAB, EMBED, embedding_init=_sharded(nnx.initializers.normal(), None, "model"),
                                rngs=rngs)
        self.positions = nnx.Embed(MAXLEN, EMBED, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(BLOCKS)])
        self.head = nnx.Linear(EMBED, VOCAB, kernel_init=_sharded(nnx.initializers.xavier_uniform(), None, "model"),
                               rngs=rngs)

    def __call__(self, tokens):
        x = self.tokens(tokens) + self.positions(jnp.arange(tokens.shape[1])[None, :])
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@nnx.jit
def _create_model(rngs):
    model = MiniGPT(rngs)
    state = nnx.state(model)
    nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
    return model


def _loss(model, batch):
    logits = model(batch[0])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[1]).mean(), logits


def _step(model, optimizer, metrics, batch):
    (loss, _), grads = nnx.value_and_grad(_loss, has_aux=True)(model, batch)
    metrics.update(loss=loss)
    optimizer.update(model, grads)


train_step = nnx.jit(_step)


def _program(mesh: Mesh):
    with jax.set_mesh(mesh):
        model = _create_model(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    metrics = nnx.MultiMetric(loss=nnx.metrics.Average("loss"))
    tokens = jax.device_put(jnp.zeros((BATCH, MAXLEN), jnp.int32), NamedSharding(mesh, P("batch", None)))
    return model, optimizer, metrics, (tokens, tokens)


def _kinds(text: str) -> Counter[str]:
    return Counter(_COLLECTIVE.findall(text))


def _by_jax_alone(program, target_devices) -> str:
    """The step compiled by JAX over ``target_devices``: a pure function of the whole state, each
    leaf laid out over the target's mesh as it is over the CPU's (one device's scalars replicated)."""
    model, optimizer, metrics, batch = program
    graph, state = nnx.split((model, optimizer, metrics))
    mesh = Mesh(np.array(target_devices).reshape(4, 2), ("batch", "model"))

    def pure(state, batch):
        model, optimizer, metrics = nnx.merge(graph, state)
        _step(model, optimizer, metrics, batch)
        return nnx.state((model, optimizer, metrics))

    def abstract(leaf):
        spec = leaf.sharding.spec if isinstance(leaf.sharding, NamedSharding) else P()
        return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec))

    return jax.jit(pure).lower(jax.tree.map(abstract, state), jax.tree.map(abstract, batch)).compile().as_text()


@pytest.mark.parametrize("target", [pytest.param("tpu:v5e:2x4", marks=needs_libtpu),
                                    pytest.param("gpu:h100:8", marks=needs_plugin)])
def test_an_nnx_train_step_with_one_device_scalars_compiles_for_a_target(target):
    program = _program(Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("batch", "model")))
    traced = train_step.trace(*program)
    kinds = {type(s).__name__ for s in jax.tree.leaves(jax.tree.map(lambda a: a.sharding, nnx.state(program[:3])))}
    assert "SingleDeviceSharding" in kinds  # what jit turns into a GSPMDSharding
    devices = registry.load_target(registry.parse_target(target))
    compiled = targets.compile_for_target(traced, devices)
    expected = _kinds(_by_jax_alone(program, devices.devices))
    assert expected["all-reduce"] > 0  # the model axis's sums at least
    assert _kinds(compiled.hlo_text) == expected
