"""The train steps of ``benchmarks/decoder_step.py`` with pipeline parallelism too: a ``pipeline``
mesh axis splits the layers into stages, as GSPMD pipelining does (and MaxText's ``pipeline.py``).

The stacked layers are reshaped to ``(stages, layers per stage, ...)`` with the stage dimension
over ``pipeline``. The global batch is split into ``microbatches``; a ``lax.scan`` of
``microbatches + stages - 1`` iterations shifts a buffer of one microbatch per stage along the
stage dimension (the partitioner makes the shift a collective-permute over ``pipeline``), feeds
the next microbatch to stage 0, runs every stage's layers on its slot at once (``jax.vmap`` over
the stages, each stage's own weights) and keeps what the last stage finished. The iterations
where a stage has no microbatch yet (or any more) compute on zeros: the pipeline's bubble is in
the compiled step, and so in its estimate. The embedding and the head run outside the pipeline.
With one stage this is gradient accumulation over the microbatches.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from benchmarks.decoder_step import (BATCH_AXES, Decoder, _adamw, _layer_norm, _layer_shapes, layer_of,
                                     _rms_norm, global_batch)


def _parameters(model: Decoder, mesh: Mesh) -> dict[str, Any]:
    """The weights as ``decoder_step.parameter_shapes`` lays them out, the layers split into stages."""
    stages = mesh.shape["pipeline"]
    if model.layers % stages:
        raise ValueError(f"{model.layers} layers do not split into {stages} pipeline stages")

    def leaf(shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    d = model.width
    layers = {name: leaf((stages, model.layers // stages, *shape[1:]), P("pipeline", *spec))
              for name, (shape, spec) in _layer_shapes(model, mesh.shape["tensor"]).items()}
    params = {"embed": leaf((model.vocab, d), P("tensor", "fsdp")), "layers": layers, "final_scale": leaf((d,), P())}
    if model.block == "gpt":
        params["positions"] = leaf((model.tokens, d), P(None, "fsdp"))
        params["final_bias"] = leaf((d,), P())
    else:
        params["head"] = leaf((d, model.vocab), P("fsdp", "tensor"))
    return params


def _pipeline(model: Decoder, mesh: Mesh, microbatches: int) -> Callable[[dict[str, Any], jax.Array], jax.Array]:
    """The layers run as a pipeline over ``x`` (microbatches, batch, tokens, width)."""
    stages = mesh.shape["pipeline"]
    slots = NamedSharding(mesh, P("pipeline", BATCH_AXES, None, "tensor"))
    block = layer_of(model)

    @jax.checkpoint
    def layer(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        return block(x, p), None

    def stage(weights: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        return lax.scan(layer, x, weights)[0]

    def run(weights: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        def tick(carry: tuple[jax.Array, jax.Array], i: jax.Array) -> tuple[tuple[jax.Array, jax.Array], None]:
            state, done = carry
            fed = jnp.where(i < microbatches, x[jnp.minimum(i, microbatches - 1)], jnp.zeros_like(x[0]))
            state = lax.with_sharding_constraint(jnp.concatenate([fed[None], state[:-1]]), slots)
            state = jax.vmap(stage)(weights, state)
            finished = jnp.maximum(i - (stages - 1), 0)
            kept = jnp.where(i >= stages - 1, state[-1], done[finished])
            return (state, lax.dynamic_update_index_in_dim(done, kept, finished, 0)), None

        empty = lax.with_sharding_constraint(jnp.zeros((stages, *x.shape[1:]), x.dtype), slots)
        (_, done), _ = lax.scan(tick, (empty, jnp.zeros_like(x)), jnp.arange(microbatches + stages - 1))
        return done

    return run


def build(mesh: Mesh, model: Decoder, per_device_batch: float, microbatches: int) -> tuple[Callable, tuple[Any, Any]]:
    """``model``'s jitted train step over ``mesh`` (axes ``data``, ``fsdp``, ``tensor`` and ``pipeline``)
    in ``microbatches``, and its example arguments (the train state, donated, and the token ids)."""
    batch = global_batch(mesh, per_device_batch)
    split = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch % microbatches or (batch // microbatches) % split:
        raise ValueError(f"a global batch of {batch} in {microbatches} microbatches does not split over "
                         f"data x fsdp = {split}")
    pipeline = _pipeline(model, mesh, microbatches)
    between = NamedSharding(mesh, P(None, BATCH_AXES, None, "tensor"))

    def loss(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
        x = params["embed"].astype(jnp.bfloat16)[tokens]
        if model.block == "gpt":
            x = x + params["positions"].astype(jnp.bfloat16)[None]
        x = lax.with_sharding_constraint(x.reshape(microbatches, batch // microbatches, *x.shape[1:]), between)
        x = pipeline(params["layers"], x).reshape(batch, model.tokens, model.width)
        if model.block == "gpt":
            h = _layer_norm(x, params["final_scale"], params["final_bias"])
            logits = jnp.einsum("btd,vd->btv", h, params["embed"].astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        else:
            h = _rms_norm(x, params["final_scale"])
            logits = jnp.einsum("btd,dv->btv", h, params["head"].astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        chosen = jnp.take_along_axis(logits, jnp.roll(tokens, -1, axis=1)[..., None], -1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - chosen)

    def step(state: dict[str, Any], tokens: jax.Array) -> tuple[dict[str, Any], jax.Array]:
        value, grads = jax.value_and_grad(loss)(state["params"], tokens)
        params, m, v = _adamw(state["params"], grads, state["m"], state["v"], state["count"])
        return {"params": params, "m": m, "v": v, "count": state["count"] + 1}, value

    params = _parameters(model, mesh)
    state = {"params": params, "m": params, "v": params,
             "count": jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))}
    tokens = jax.ShapeDtypeStruct((batch, model.tokens), jnp.int32, sharding=NamedSharding(mesh, P(BATCH_AXES, None)))
    return jax.jit(step, donate_argnums=0), (state, tokens)
