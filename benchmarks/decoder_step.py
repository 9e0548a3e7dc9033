"""Llama- and GPT-shaped train steps as MaxText writes them, over any mesh of ``data``, ``fsdp`` and
``tensor`` axes: the programs ``shardscope layouts`` ranks against MaxText's tuned v5e-256 table.

A :class:`Decoder` holds a model's published dimensions (MaxText's ``configs/models/*.yml`` and,
for its ``default`` models, ``global_parameter_scale`` applied as its ``pyconfig`` does); :func:`build`
makes its train step over a mesh, the way MaxText's defaults do:

- weights in float32, computed in bfloat16 (``weight_dtype`` float32, ``dtype`` bfloat16), sharded
  by MaxText's logical axis rules: a weight's ``embed`` dimension over ``fsdp``, its ``heads`` or
  ``mlp`` dimension over ``tensor``, the vocabulary over ``tensor``; ``data`` replicates them;
- the batch over ``data`` x ``fsdp``; the activations between layers also split their ``embed``
  dimension over ``tensor`` (MaxText's ``activation_embed`` rule);
- the layers stacked and run by ``lax.scan`` under ``jax.checkpoint`` (``remat_policy=full``),
  attention causal, over blocks of 512 queries each rematerialized (a flash kernel's memory: one
  block's scores live at a time; MaxText runs Pallas's splash kernel, with the same flops and fewer
  bytes moved);
- the query, key and value projections one matmul where MaxText's configuration says ``fused_qkv``,
  SwiGLU's two input projections one where it says ``fused_mlp`` (:class:`Decoder`);
- AdamW (float32 moments), the state donated, one step per call (no gradient accumulation).

Everything is a ``jax.ShapeDtypeStruct``: the step is compiled for a slice, never run.
``per_device_batch`` is MaxText's: the global batch is it times the mesh's devices (a tensor-parallel
group shares its examples), and it may be a fraction (GPT-3 175B runs 0.5).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

BATCH_AXES = ("data", "fsdp")
"""The mesh axes the batch is split over (MaxText's ``activation_batch`` rule)."""


@dataclass(frozen=True)
class Decoder:
    """A decoder-only language model's dimensions; ``block`` is ``llama`` (RMS norm, RoPE, SwiGLU)
    or ``gpt`` (layer norm, learned positions, GELU, logits through the embedding)."""

    name: str
    layers: int
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    block: str = "llama"
    tokens: int = 2048
    fused_qkv: bool = False
    """MaxText's ``fused_qkv``: the query, key and value projections one matmul (heads and key-value
    heads equal), its weight ``(width, 3, heads, head_dim)``; else three matmuls."""
    fused_mlp: bool = False
    """MaxText's ``fused_mlp`` (the ``llama`` block): SwiGLU's two input projections one matmul, its
    weight ``(width, 2, ffn)``; else two."""

    @property
    def layer_parameters(self) -> int:
        """Parameters of one layer (its norms' included)."""
        attention = self.width * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = (3 if self.block == "llama" else 2) * self.width * self.ffn
        norms = (2 if self.block == "llama" else 4) * self.width
        return attention + mlp + norms

    @property
    def parameters(self) -> int:
        """Every parameter: the layers, the embedding, the head (none for GPT: tied) and positions."""
        outer = self.vocab * self.width * (2 if self.block == "llama" else 1)
        positions = self.tokens * self.width if self.block == "gpt" else 0
        return self.layers * self.layer_parameters + outer + positions + self.width * (1 if self.block == "llama" else 2)

    def flops_per_token(self) -> float:
        """A train step's model flops per token: 6 per parameter of the matmuls (forward and
        backward) and the causal attention's 6 x layers x tokens x heads x head_dim (half of the
        full square), as MaxText counts them (rematerialization not counted)."""
        matmul = self.layers * (self.layer_parameters - (2 if self.block == "llama" else 4) * self.width) \
            + self.vocab * self.width
        attention = 6 * self.layers * self.tokens * self.heads * self.head_dim
        return 6 * matmul + attention


def _scaled(name: str, scale: int) -> Decoder:
    """MaxText's ``default`` model at ``global_parameter_scale`` (``pyconfig.get_individual_scales``:
    each factor of 8 doubles every dimension; the rest go to the heads and MLP first, then the
    width) over its base (width 2048, 16 heads of 128, MLP 7168, 16 layers, vocabulary 32,000)."""
    base, rest = divmod(scale.bit_length() - 1, 3)
    heads = mlp = base + (rest > 0)
    width = base + (rest > 1)
    return Decoder(name, 16 << base, 2048 << width, 16 << heads, 16 << heads, 128, 7168 << mlp, 32000)


MODELS = {
    "llama2-7b": Decoder("llama2-7b", 32, 4096, 32, 32, 128, 11008, 32000),
    "llama2-13b": Decoder("llama2-13b", 40, 5120, 40, 40, 128, 13824, 32000),
    "llama2-70b": Decoder("llama2-70b", 80, 8192, 64, 8, 128, 28672, 32000),
    "default-16b": _scaled("default-16b", 16),
    "default-32b": _scaled("default-32b", 32),
    "default-64b": _scaled("default-64b", 64),
    "default-128b": _scaled("default-128b", 128),
    "gpt3-175b": Decoder("gpt3-175b", 96, 12288, 96, 96, 128, 49152, 50304, block="gpt", fused_qkv=True),
}
"""The models of MaxText's v5e-256 table, by MaxText's names (``configs/models/``)."""

TINY = Decoder("tiny", 2, 64, 4, 2, 16, 128, 256, tokens=32)
TINY_GPT = Decoder("tiny-gpt", 2, 64, 4, 4, 16, 128, 256, block="gpt", tokens=32)
"""The same programs at toy sizes (tests, ``--smoke``)."""


def _layer_shapes(model: Decoder, tensor: int) -> dict[str, tuple[tuple[int, ...], P]]:
    """Each stacked layer weight's shape and spec (the layer axis first, unsplit; key and value heads fewer than the tensor axis's devices replicated over it, as MaxText's are)."""
    n, d, h, k, hd, f, kv = (*(model.layers, model.width, model.heads, model.kv_heads, model.head_dim, model.ffn), "tensor" if model.kv_heads % tensor == 0 else None)
    if model.block == "gpt":
        if model.fused_mlp:
            raise ValueError(f"{model.name}: fused_mlp fuses SwiGLU's two input projections; a GPT block has one")
        return {
            "ln1_scale": ((n, d), P()), "ln1_bias": ((n, d), P()), "ln2_scale": ((n, d), P()),
            "ln2_bias": ((n, d), P()),
            "wqkv": ((n, d, 3, h, hd), P(None, "fsdp", None, "tensor")),
            "wo": ((n, h, hd, d), P(None, "tensor", None, "fsdp")),
            "w1": ((n, d, f), P(None, "fsdp", "tensor")),
            "w2": ((n, f, d), P(None, "tensor", "fsdp")),
        }
    shapes: dict[str, tuple[tuple[int, ...], P]] = {"attn_norm": ((n, d), P()), "mlp_norm": ((n, d), P())}
    if model.fused_qkv:
        if h != k:
            raise ValueError(f"{model.name}: fused_qkv needs as many key-value heads as heads ({k} against {h})")
        shapes["wqkv"] = ((n, d, 3, h, hd), P(None, "fsdp", None, "tensor"))
    else:
        shapes |= {"wq": ((n, d, h, hd), P(None, "fsdp", "tensor")), "wk": ((n, d, k, hd), P(None, "fsdp", kv)),
                   "wv": ((n, d, k, hd), P(None, "fsdp", kv))}
    shapes["wo"] = ((n, h, hd, d), P(None, "tensor", None, "fsdp"))
    if model.fused_mlp:
        shapes["wi"] = ((n, d, 2, f), P(None, "fsdp", None, "tensor"))
    else:
        shapes |= {"w1": ((n, d, f), P(None, "fsdp", "tensor")), "w3": ((n, d, f), P(None, "fsdp", "tensor"))}
    shapes["w2"] = ((n, f, d), P(None, "tensor", "fsdp"))
    return shapes


def parameter_shapes(model: Decoder, mesh: Mesh) -> dict[str, Any]:
    """The model's float32 weights over ``mesh`` as ``jax.ShapeDtypeStruct`` leaves."""
    def leaf(shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    d = model.width
    params = {
        "embed": leaf((model.vocab, d), P("tensor", "fsdp")),
        "layers": {name: leaf(shape, spec) for name, (shape, spec) in _layer_shapes(model, mesh.shape["tensor"]).items()},
        "final_scale": leaf((d,), P()),
    }
    if model.block == "gpt":
        params["positions"] = leaf((model.tokens, d), P(None, "fsdp"))
        params["final_bias"] = leaf((d,), P())
    else:
        params["head"] = leaf((d, model.vocab), P("fsdp", "tensor"))
    return params


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-5) * scale).astype(jnp.bfloat16)


def _layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, -1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), -1, keepdims=True)
    return ((x32 - mean) * lax.rsqrt(var + 1e-5) * scale + bias).astype(jnp.bfloat16)


def _rope(x: jax.Array) -> jax.Array:
    tokens, half = x.shape[1], x.shape[-1] // 2
    freq = 1.0 / (10_000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = jnp.arange(tokens, dtype=jnp.float32)[:, None] * freq
    sin, cos = jnp.sin(angle)[None, :, None, :], jnp.cos(angle)[None, :, None, :]
    a, b = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1).astype(x.dtype)


QUERY_BLOCK = 512
"""Queries per block of :func:`_attention`: a flash kernel's memory (MaxText's ``sa_block_q`` is
512 by default), one block's scores at a time."""


def _attention_block(q: jax.Array, k: jax.Array, v: jax.Array, start: jax.Array | int) -> jax.Array:
    """Causal attention of the queries ``q`` (batch, queries, kv heads, groups, dim) at positions
    ``start`` onwards over every key and value (batch, tokens, kv heads, dim)."""
    dim, queries, tokens = q.shape[-1], q.shape[1], k.shape[1]
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32) / jnp.sqrt(dim)
    mask = (start + jnp.arange(queries))[:, None] >= jnp.arange(tokens)[None, :]
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), -1).astype(jnp.bfloat16)
    return jnp.einsum("bkgts,bskd->btkgd", weights, v)


def _attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Causal attention of ``q`` (batch, tokens, heads, dim) over grouped ``k``, ``v``, one block of
    :data:`QUERY_BLOCK` queries at a time, each block rematerialized in the backward pass: the
    memory of a flash kernel (one block's scores live, not the whole square), the same flops as
    XLA's attention over the whole square (the causal mask applied, nothing skipped)."""
    batch, tokens, heads, dim = q.shape
    groups = heads // k.shape[2]
    q = q.reshape(batch, tokens, k.shape[2], groups, dim)
    if tokens <= QUERY_BLOCK or tokens % QUERY_BLOCK:
        return _attention_block(q, k, v, 0).reshape(batch, tokens, heads, dim)
    blocks = tokens // QUERY_BLOCK
    q = jnp.moveaxis(q.reshape(batch, blocks, QUERY_BLOCK, *q.shape[2:]), 1, 0)

    @jax.checkpoint
    def block(args: tuple[jax.Array, jax.Array]) -> jax.Array:
        return _attention_block(args[0], k, v, args[1])

    out = lax.map(block, (q, jnp.arange(blocks) * QUERY_BLOCK))
    return jnp.moveaxis(out, 0, 1).reshape(batch, tokens, heads, dim)


def _bf16(p: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {name: w.astype(jnp.bfloat16) for name, w in p.items()}


def _qkv(h: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The query, key and value projections as one matmul (MaxText's ``fused_qkv``: a
    ``DenseGeneral`` of features ``(3, heads, head_dim)``, then split)."""
    qkv = jnp.einsum("btd,dchk->btchk", h, w)
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]


def _llama_layer(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """A Llama layer; fused projections where its weights are (``wqkv``, ``wi``: :class:`Decoder`)."""
    w = _bf16(p)
    h = _rms_norm(x, p["attn_norm"])
    if "wqkv" in w:
        q, k, v = _qkv(h, w["wqkv"])
    else:
        q, k, v = (jnp.einsum("btd,dhk->bthk", h, w[name]) for name in ("wq", "wk", "wv"))
    x = x + jnp.einsum("bthk,hkd->btd", _attention(_rope(q), _rope(k), v), w["wo"])
    h = _rms_norm(x, p["mlp_norm"])
    if "wi" in w:  # MaxText's fused_mlp: one DenseGeneral of features (2, ffn), then each activation
        gate_up = jnp.einsum("btd,dcf->btcf", h, w["wi"])
        gate, up = gate_up[:, :, 0], gate_up[:, :, 1]
    else:
        gate, up = h @ w["w1"], h @ w["w3"]
    return x + (jax.nn.silu(gate) * up) @ w["w2"]


def _gpt_layer(x: jax.Array, p: dict[str, jax.Array], fused_qkv: bool = False) -> jax.Array:
    """A GPT layer; ``fused_qkv``: its query, key and value projections one matmul (:class:`Decoder`)."""
    w = _bf16(p)
    h = _layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    if fused_qkv:
        q, k, v = _qkv(h, w["wqkv"])
    else:
        q, k, v = (jnp.einsum("btd,dhk->bthk", h, w["wqkv"][:, i]) for i in range(3))
    x = x + jnp.einsum("bthk,hkd->btd", _attention(q, k, v), w["wo"])
    h = _layer_norm(x, p["ln2_scale"], p["ln2_bias"])
    return x + jax.nn.gelu(h @ w["w1"]) @ w["w2"]


def layer_of(model: Decoder) -> Callable[[jax.Array, dict[str, jax.Array]], jax.Array]:
    """The function of one of ``model``'s layers (its block, its projections fused or not)."""
    if model.block == "gpt":
        return functools.partial(_gpt_layer, fused_qkv=model.fused_qkv)
    return _llama_layer


def _loss(model: Decoder, mesh: Mesh) -> Callable[[dict[str, Any], jax.Array], jax.Array]:
    """The mean next-token cross-entropy, the layers scanned under ``jax.checkpoint``."""
    between = NamedSharding(mesh, P(BATCH_AXES, None, "tensor"))
    block = layer_of(model)

    @jax.checkpoint
    def layer(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        return lax.with_sharding_constraint(block(x, p), between), None

    def loss(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
        x = params["embed"].astype(jnp.bfloat16)[tokens]
        if model.block == "gpt":
            x = x + params["positions"].astype(jnp.bfloat16)[None]
        x, _ = lax.scan(layer, lax.with_sharding_constraint(x, between), params["layers"])
        if model.block == "gpt":
            h = _layer_norm(x, params["final_scale"], params["final_bias"])
            logits = jnp.einsum("btd,vd->btv", h, params["embed"].astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        else:
            h = _rms_norm(x, params["final_scale"])
            logits = jnp.einsum("btd,dv->btv", h, params["head"].astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        targets = jnp.roll(tokens, -1, axis=1)
        chosen = jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, -1) - chosen)

    return loss


def _adamw(params: Any, grads: Any, m: Any, v: Any, count: jax.Array) -> tuple[Any, Any, Any]:
    """One AdamW update (MaxText's defaults: b1 0.9, b2 0.95, eps 1e-8, weight decay 0.1, lr 3e-5)."""
    b1, b2, eps, decay, lr = 0.9, 0.95, 1e-8, 0.1, 3e-5
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    t = (count + 1).astype(jnp.float32)
    def update(p: jax.Array, m: jax.Array, v: jax.Array) -> jax.Array:
        step = (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + eps)
        return p - lr * (step + decay * p)
    return jax.tree.map(update, params, m, v), m, v


def global_batch(mesh: Mesh, per_device_batch: float) -> int:
    """MaxText's global batch: ``per_device_batch`` times the mesh's devices; ValueError when it is
    not a whole number of sequences, or does not split over the batch axes."""
    total = per_device_batch * mesh.size
    split = mesh.shape.get("data", 1) * mesh.shape.get("fsdp", 1)
    if total != int(total) or int(total) < 1:
        raise ValueError(f"per-device batch {per_device_batch} on {mesh.size} devices is {total} sequences: "
                         "not a whole number")
    if int(total) % split:
        raise ValueError(f"a global batch of {int(total)} sequences does not split over data x fsdp = {split}")
    return int(total)


def build(mesh: Mesh, model: Decoder, per_device_batch: float) -> tuple[Callable, tuple[Any, Any]]:
    """``model``'s jitted train step over ``mesh`` (axes ``data``, ``fsdp``, ``tensor``; a missing
    one counts as 1) and its example arguments: the train state (weights, AdamW moments, the step
    count; donated) and a batch of token ids."""
    for axis in ("data", "fsdp", "tensor"):
        if axis not in mesh.shape:
            raise ValueError(f"the mesh has no {axis!r} axis: give it one of size 1")
    batch = global_batch(mesh, per_device_batch)
    loss = _loss(model, mesh)

    def step(state: dict[str, Any], tokens: jax.Array) -> tuple[dict[str, Any], jax.Array]:
        value, grads = jax.value_and_grad(loss)(state["params"], tokens)
        params, m, v = _adamw(state["params"], grads, state["m"], state["v"], state["count"])
        return {"params": params, "m": m, "v": v, "count": state["count"] + 1}, value

    params = parameter_shapes(model, mesh)
    state = {"params": params, "m": params, "v": params,
             "count": jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))}
    tokens = jax.ShapeDtypeStruct((batch, model.tokens), jnp.int32, sharding=NamedSharding(mesh, P(BATCH_AXES, None)))
    return jax.jit(step, donate_argnums=0), (state, tokens)
