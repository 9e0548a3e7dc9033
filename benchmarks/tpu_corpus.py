"""A validation corpus for the step estimate: programs of the kinds users run, timed on a real chip.

Needs only jax and numpy (it runs on a TPU VM as it is)::

    python benchmarks/tpu_corpus.py OUT_DIR [--set tuned|held-out|all|run4|run5] [--only NAME ...] [--list]
                                    [--profile] [--deadline SECONDS]

For each program it compiles the jitted function for the machine's first device, keeps
``compiled.as_text()``, and times it two ways:

- **waited**: each call blocked on (``jax.block_until_ready``), the median of ~20 calls;
- **dispatched**: N calls back to back, then one wait, the time divided by N; the median over a
  few rounds (a training loop dispatches ahead like this).

Each program's result is one JSON line appended to ``OUT_DIR/corpus.jsonl`` as soon as it is
measured (a failing program records its error and the others go on). ``--profile`` then runs each
measured program six times more under one ``jax.profiler`` trace (``OUT_DIR/profile.xplane.pb``:
``python -m benchmarks.profile_kinds --from-profile`` reads each instruction's time from it), and
``--deadline`` starts no program past that many seconds, so that a bounded device session still
brings back what it measured. ``tests/fixtures/tpu_corpus``
keeps the lines measured on a real v5e chip; ``tests/test_tpu_corpus.py`` replays every estimate
from them without a chip.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

BF16 = jnp.bfloat16
PROGRAMS: list[tuple[str, str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]]] = []
"""(name, kind, make): ``make()`` returns the function to jit and its arguments."""


def program(name: str, kind: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(make: Callable[[], Any]) -> Callable[[], Any]:
        PROGRAMS.append((name, kind, make))
        return make
    return register


def rand(shape: tuple[int, ...], dtype: Any = BF16, seed: int = 0, scale: float = 0.02) -> Any:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) * scale, dtype=dtype)


def _int8(shape: tuple[int, ...], seed: int) -> Any:
    """Random int8 operands, as a quantized matmul's."""
    return jnp.asarray(np.random.default_rng(seed).integers(-100, 100, shape), jnp.int8)


# --- transformer blocks -------------------------------------------------------------------------

def _block_params(d: int, heads: int, kv_heads: int, ff: int, dtype: Any = BF16) -> dict[str, Any]:
    hd = d // heads
    return {"wq": rand((d, heads, hd), dtype, 1), "wk": rand((d, kv_heads, hd), dtype, 2),
            "wv": rand((d, kv_heads, hd), dtype, 3), "wo": rand((heads, hd, d), dtype, 4),
            "w1": rand((d, ff), dtype, 5), "w2": rand((ff, d), dtype, 6),
            "g1": jnp.ones((d,), dtype), "g2": jnp.ones((d,), dtype)}


def _rms(x: Any, g: Any) -> Any:
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(x.dtype) * g


def _attention(q: Any, k: Any, v: Any, causal: bool) -> Any:
    heads, kv_heads = q.shape[2], k.shape[2]
    if kv_heads != heads:
        k = jnp.repeat(k, heads // kv_heads, axis=2)
        v = jnp.repeat(v, heads // kv_heads, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / np.sqrt(q.shape[-1])
    if causal:
        n = q.shape[1]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -1e30)
    p = jax.nn.softmax(s, -1).astype(q.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def _block(p: dict[str, Any], x: Any, causal: bool = True) -> Any:
    h = _rms(x, p["g1"])
    q = jnp.einsum("bsd,dhk->bshk", h, p["wq"])
    k = jnp.einsum("bsd,dhk->bshk", h, p["wk"])
    v = jnp.einsum("bsd,dhk->bshk", h, p["wv"])
    x = x + jnp.einsum("bshk,hkd->bsd", _attention(q, k, v, causal), p["wo"])
    h = _rms(x, p["g2"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def _block_grad(b: int, s: int, d: int, heads: int, kv_heads: int, causal: bool = True) -> Any:
    params, x = _block_params(d, heads, kv_heads, 4 * d), rand((b, s, d), BF16, 7, 1.0)

    def loss(p: Any, x: Any) -> Any:
        return jnp.sum(_block(p, x, causal).astype(jnp.float32) ** 2)
    return jax.grad(loss, argnums=(0, 1)), (params, x)


@program("block_fwd_small", "transformer")
def _() -> Any:
    return (lambda p, x: _block(p, x)), (_block_params(512, 8, 8, 2048), rand((4, 512, 512), BF16, 7, 1.0))


@program("block_fwd_large", "transformer")
def _() -> Any:
    return (lambda p, x: _block(p, x)), (_block_params(2048, 16, 16, 8192), rand((4, 2048, 2048), BF16, 7, 1.0))


@program("block_grad_small", "transformer")
def _() -> Any:
    return _block_grad(8, 512, 512, 8, 8)


@program("block_grad_medium", "transformer")
def _() -> Any:
    return _block_grad(8, 1024, 1024, 16, 16)


@program("block_grad_gqa", "transformer")
def _() -> Any:
    return _block_grad(4, 2048, 2048, 16, 4)


@program("block_grad_noncausal", "transformer")
def _() -> Any:
    return _block_grad(16, 256, 768, 12, 12, causal=False)


@program("attention_fwd_hd128", "attention")
def _() -> Any:
    q, k, v = (rand((8, 2048, 8, 128), BF16, i, 1.0) for i in range(3))
    return (lambda q, k, v: _attention(q, k, v, True)), (q, k, v)


@program("attention_grad_hd64", "attention")
def _() -> Any:
    q, k, v = (rand((4, 1024, 16, 64), BF16, i, 1.0) for i in range(3))
    f = jax.grad(lambda q, k, v: jnp.sum(_attention(q, k, v, True).astype(jnp.float32)), argnums=(0, 1, 2))
    return f, (q, k, v)


@program("kv_decode_step", "attention")
def _() -> Any:
    cache_k, cache_v = rand((16, 4096, 16, 128), BF16, 1, 1.0), rand((16, 4096, 16, 128), BF16, 2, 1.0)
    q = rand((16, 1, 16, 128), BF16, 3, 1.0)
    return (lambda q, k, v: _attention(q, k, v, False)), (q, cache_k, cache_v)


@program("stacked_layers_scan12", "loop")
def _() -> Any:
    d = 1024
    stacked = jax.tree.map(lambda a: jnp.stack([a] * 12), _block_params(d, 8, 8, 4 * d))
    x = rand((4, 512, d), BF16, 7, 1.0)

    def f(ps: Any, x: Any) -> Any:
        return lax.scan(lambda h, p: (_block(p, h), None), x, ps)[0]
    return f, (stacked, x)


# --- MLPs -----------------------------------------------------------------------------------------

@program("mlp_fwd_bf16", "mlp")
def _() -> Any:
    return (lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2), (rand((8192, 4096), BF16, 1), rand((4096, 16384), BF16, 2),
                                                        rand((16384, 4096), BF16, 3))


@program("mlp_grad_bf16", "mlp")
def _() -> Any:
    f = jax.grad(lambda w1, w2, x: jnp.sum((jax.nn.gelu(x @ w1) @ w2).astype(jnp.float32) ** 2), argnums=(0, 1))
    return f, (rand((2048, 8192), BF16, 1), rand((8192, 2048), BF16, 2), rand((4096, 2048), BF16, 3, 1.0))


@program("mlp_small_batch", "mlp")
def _() -> Any:
    return (lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2), (rand((32, 4096), BF16, 1), rand((4096, 16384), BF16, 2),
                                                        rand((16384, 4096), BF16, 3))


@program("mlp_remat_grad", "mlp")
def _() -> Any:
    layer = jax.checkpoint(lambda w, x: jax.nn.gelu(x @ w))
    f = jax.grad(lambda ws, x: jnp.sum(layer(ws[1], layer(ws[0], x)).astype(jnp.float32)))
    return f, ((rand((4096, 4096), BF16, 1), rand((4096, 4096), BF16, 2)), rand((8192, 4096), BF16, 3, 1.0))


@program("matmul_bf16_4096", "matmul")
def _() -> Any:
    return jnp.matmul, (rand((4096, 4096), BF16, 1), rand((4096, 4096), BF16, 2))


@program("batched_matmul_bf16", "matmul")
def _() -> Any:
    return (lambda a, b: jnp.einsum("bij,bjk->bik", a, b)), (rand((64, 1024, 512), BF16, 1),
                                                            rand((64, 512, 1024), BF16, 2))


# --- precision and integer matmuls ---------------------------------------------------------------

def _f32_matmul(precision: Any) -> Any:
    return (lambda a, b: jnp.matmul(a, b, precision=precision)), (rand((4096, 4096), jnp.float32, 1),
                                                                 rand((4096, 4096), jnp.float32, 2))


@program("matmul_f32_default", "precision")
def _() -> Any:
    return _f32_matmul(lax.Precision.DEFAULT)


@program("matmul_f32_high", "precision")
def _() -> Any:
    return _f32_matmul(lax.Precision.HIGH)


@program("matmul_f32_highest", "precision")
def _() -> Any:
    return _f32_matmul(lax.Precision.HIGHEST)


@program("mlp_f32_highest_grad", "precision")
def _() -> Any:
    with_p = lambda x, w: jnp.matmul(x, w, precision=lax.Precision.HIGHEST)  # noqa: E731
    f = jax.grad(lambda w, x: jnp.sum(jax.nn.relu(with_p(x, w)) ** 2))
    return f, (rand((2048, 2048), jnp.float32, 1), rand((4096, 2048), jnp.float32, 2, 1.0))


def _int8_matmul(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b, preferred_element_type=jnp.int32)


@program("matmul_int8", "int8")
def _() -> Any:
    return _int8_matmul, (_int8((8192, 8192), 1), _int8((8192, 8192), 2))


@program("matmul_int8_4096", "int8")
def _() -> Any:
    return _int8_matmul, (_int8((4096, 4096), 1), _int8((4096, 4096), 2))


@program("matmul_fp8", "fp8")
def _() -> Any:
    a = rand((4096, 4096), jnp.float8_e4m3fn, 1, 1.0)
    b = rand((4096, 4096), jnp.float8_e4m3fn, 2, 1.0)
    return (lambda a, b: jnp.matmul(a, b, preferred_element_type=BF16)), (a, b)


# --- convolutions -------------------------------------------------------------------------------

def _conv(x: Any, w: Any, stride: int = 1, groups: int = 1) -> Any:
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)


_conv_grad = jax.grad(lambda w, x: jnp.sum(_conv(x, w).astype(jnp.float32) ** 2), argnums=(0, 1))
"""A convolution's gradient with respect to its kernel and its input."""


@program("conv3x3_fwd", "conv")
def _() -> Any:
    return _conv, (rand((32, 56, 56, 256), BF16, 1, 1.0), rand((3, 3, 256, 256), BF16, 2))


@program("conv3x3_grad", "conv")
def _() -> Any:
    return _conv_grad, (rand((3, 3, 128, 128), BF16, 2), rand((32, 56, 56, 128), BF16, 1, 1.0))


@program("resnet_block_grad", "conv")
def _() -> Any:
    def block(ws: Any, x: Any) -> Any:
        h = _conv(x, ws[0])
        h = (h - jnp.mean(h, (0, 1, 2))) * lax.rsqrt(jnp.var(h.astype(jnp.float32), (0, 1, 2)) + 1e-5).astype(h.dtype)
        h = _conv(jax.nn.relu(h), ws[1])
        return jax.nn.relu(x + h)
    f = jax.grad(lambda ws, x: jnp.sum(block(ws, x).astype(jnp.float32) ** 2))
    return f, ((rand((3, 3, 128, 128), BF16, 2), rand((3, 3, 128, 128), BF16, 3)), rand((32, 28, 28, 128), BF16, 1, 1.0))


@program("conv_stride2_1x1", "conv")
def _() -> Any:
    return (lambda x, w: _conv(x, w, 2)), (rand((64, 56, 56, 256), BF16, 1, 1.0), rand((1, 1, 256, 512), BF16, 2))


@program("depthwise_conv", "conv")
def _() -> Any:
    return (lambda x, w: _conv(x, w, 1, 256)), (rand((32, 56, 56, 256), BF16, 1, 1.0), rand((3, 3, 1, 256), BF16, 2))


# --- embeddings, vocabulary, norms -------------------------------------------------------------

@program("embedding_lookup", "gather")
def _() -> Any:
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 32000, (64, 1024)), jnp.int32)
    return (lambda table, ids: table[ids]), (rand((32000, 1024), BF16, 2), ids)


@program("embedding_grad_scatter", "scatter")
def _() -> Any:
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 32000, (32, 1024)), jnp.int32)
    f = jax.grad(lambda table, ids: jnp.sum(table[ids].astype(jnp.float32) ** 2))
    return f, (rand((32000, 1024), jnp.float32, 2), ids)


@program("scatter_add_rows", "scatter")
def _() -> Any:
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 65536, (131072,)), jnp.int32)
    return (lambda acc, ids, upd: acc.at[ids].add(upd)), (rand((65536, 256), jnp.float32, 2), ids,
                                                        rand((131072, 256), jnp.float32, 3))


def _vocab_xent(w: Any, h: Any, labels: Any) -> Any:
    """The mean cross-entropy of the labels over a vocabulary's logits (the output layer's loss)."""
    logits = (h @ w).astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))


@program("vocab_xent_grad", "vocab")
def _() -> Any:
    labels = jnp.asarray(np.random.default_rng(1).integers(0, 32000, (8192,)), jnp.int32)
    return jax.grad(_vocab_xent, argnums=(0, 1)), (rand((1024, 32000), BF16, 2), rand((8192, 1024), BF16, 3, 1.0),
                                                   labels)


@program("vocab_xent_fwd_128k", "vocab")
def _() -> Any:
    labels = jnp.asarray(np.random.default_rng(1).integers(0, 128000, (2048,)), jnp.int32)
    return _vocab_xent, (rand((2048, 128000), BF16, 2), rand((2048, 2048), BF16, 3, 1.0), labels)


@program("rms_norm", "norm")
def _() -> Any:
    return _rms, (rand((16, 2048, 4096), BF16, 1, 1.0), jnp.ones((4096,), BF16))


@program("layer_norm_grad", "norm")
def _() -> Any:
    def ln(x: Any, g: Any) -> Any:
        x32 = x.astype(jnp.float32)
        mu = jnp.mean(x32, -1, keepdims=True)
        y = (x32 - mu) * lax.rsqrt(jnp.var(x32, -1, keepdims=True) + 1e-5)
        return jnp.sum((y * g).astype(jnp.float32) ** 2)
    return jax.grad(ln, argnums=(0, 1)), (rand((16, 2048, 2048), BF16, 1, 1.0), jnp.ones((2048,), jnp.float32))


def _softmax_rows(x: Any) -> Any:
    return jax.nn.softmax(x, -1)


@program("softmax_f32", "norm")
def _() -> Any:
    return _softmax_rows, (rand((64, 16, 512, 512), jnp.float32, 1, 1.0),)


@program("elementwise_gelu", "elementwise")
def _() -> Any:
    return (lambda x, y: jax.nn.gelu(x) * y + 1.0), (rand((8192, 16384), BF16, 1, 1.0), rand((8192, 16384), BF16, 2))


@program("reduce_sum_f32", "elementwise")
def _() -> Any:
    return (lambda x: jnp.sum(x, axis=0)), (rand((16384, 8192), jnp.float32, 1, 1.0),)


@program("transpose_copy", "elementwise")
def _() -> Any:
    return (lambda x: jnp.transpose(x, (0, 2, 1, 3)) * 2), (rand((32, 1024, 16, 128), BF16, 1, 1.0),)


# --- optimizers ---------------------------------------------------------------------------------

def _f32_tree(shapes: list[tuple[int, ...]], seed: int) -> list[Any]:
    """A list of f32 arrays of ``shapes``, a model's parameters (or its gradients, or a moment)."""
    return [rand(shape, jnp.float32, seed + i) for i, shape in enumerate(shapes)]


def _sgd_momentum(p: Any, g: Any, m: Any) -> Any:
    m = jax.tree.map(lambda m, g: 0.9 * m + g, m, g)
    return jax.tree.map(lambda p, m: p - 0.01 * m, p, m), m


def _adam_state(shapes: list[tuple[int, ...]]) -> tuple[Any, ...]:
    """Parameters, gradients and Adam's two moments (the second kept positive) of ``shapes``."""
    second_moment = jax.tree.map(jnp.abs, _f32_tree(shapes, 30))
    return _f32_tree(shapes, 0), _f32_tree(shapes, 10), _f32_tree(shapes, 20), second_moment


def _adam(params: Any, grads: Any, m: Any, v: Any) -> Any:
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, grads)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, grads)
    params = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), params, m, v)
    return params, m, v


@program("adam_update", "optimizer")
def _() -> Any:
    shapes = [(4096, 4096), (4096, 16384), (16384, 4096), (4096,), (32000, 4096)]
    return _adam, _adam_state(shapes)


@program("sgd_momentum", "optimizer")
def _() -> Any:
    shapes = [(8192, 8192), (8192, 4096)]
    return _sgd_momentum, (_f32_tree(shapes, 0), _f32_tree(shapes, 10), _f32_tree(shapes, 20))


# --- mixture of experts -------------------------------------------------------------------------

def _moe_dispatch(logits: Any, experts: int, cap: int) -> Any:
    """Tokens x experts x capacity slots: each token to its top expert's next free slot (one-hot, as
    a dense MoE layer dispatches)."""
    choice = jnp.argmax(logits, -1)
    pos = jnp.cumsum(jax.nn.one_hot(choice, experts, dtype=jnp.int32), 0) - 1
    return (jax.nn.one_hot(choice, experts, dtype=BF16)[:, :, None]
            * jax.nn.one_hot(jnp.take_along_axis(pos, choice[:, None], 1)[:, 0], cap, dtype=BF16)[:, None, :])


@program("moe_onehot_einsum", "moe")
def _() -> Any:
    experts, cap, d, ff, tokens = 8, 1024, 1024, 4096, 8192

    def f(x: Any, router: Any, w1: Any, w2: Any) -> Any:
        dispatch = _moe_dispatch(x @ router, experts, cap)
        xe = jnp.einsum("tec,td->ecd", dispatch, x)
        h = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xe, w1))
        ye = jnp.einsum("ecf,efd->ecd", h, w2)
        return jnp.einsum("tec,ecd->td", dispatch, ye)
    return f, (rand((tokens, d), BF16, 1, 1.0), rand((d, experts), BF16, 2), rand((experts, d, ff), BF16, 3),
               rand((experts, ff, d), BF16, 4))


@program("moe_topk_gather", "moe")
def _() -> Any:
    experts, d, tokens = 64, 1024, 16384

    def f(x: Any, router: Any) -> Any:
        weights, idx = lax.top_k(jax.nn.softmax((x @ router).astype(jnp.float32)), 2)
        order = jnp.argsort(idx[:, 0])
        return x[order] * weights[order, :1].astype(BF16)
    return f, (rand((tokens, d), BF16, 1, 1.0), rand((d, experts), BF16, 2))


# --- sort, top-k, random ------------------------------------------------------------------------

@program("sort_16m", "sort")
def _() -> Any:
    return jnp.sort, (rand((16 * 2**20,), jnp.float32, 1, 1.0),)


@program("sort_rows", "sort")
def _() -> Any:
    return (lambda x: jnp.sort(x, -1)), (rand((4096, 4096), jnp.float32, 1, 1.0),)


@program("topk_vocab", "topk")
def _() -> Any:
    return (lambda x: lax.top_k(x, 50)), (rand((256, 32000), jnp.float32, 1, 1.0),)


@program("argsort_keys", "sort")
def _() -> Any:
    return jnp.argsort, (rand((2**20,), jnp.float32, 1, 1.0),)


@program("dropout", "rng")
def _() -> Any:
    def f(key: Any, x: Any) -> Any:
        keep = jax.random.bernoulli(key, 0.9, x.shape)
        return jnp.where(keep, x / 0.9, 0)
    return f, (jax.random.key(0), rand((8192, 8192), BF16, 1, 1.0))


@program("random_normal", "rng")
def _() -> Any:
    return (lambda key: jax.random.normal(key, (8192, 8192), jnp.float32)), (jax.random.key(0),)


@program("random_bits_u32", "rng")
def _() -> Any:
    return (lambda key: jax.random.bits(key, (4096, 8192), jnp.uint32)), (jax.random.key(1),)


# --- loops --------------------------------------------------------------------------------------

@program("fori_small_matmuls", "loop")
def _() -> Any:
    def f(w: Any, x: Any) -> Any:
        return lax.fori_loop(0, 1000, lambda i, x: jnp.tanh(x @ w), x)
    return f, (rand((128, 128), BF16, 1), rand((128, 128), BF16, 2, 1.0))


@program("scan_microbatch_grads", "loop")
def _() -> Any:
    def f(w: Any, xs: Any) -> Any:
        g = jax.grad(lambda w, x: jnp.sum(jax.nn.relu(x @ w).astype(jnp.float32) ** 2))

        def body(acc: Any, x: Any) -> Any:
            return acc + g(w, x).astype(jnp.float32), None
        return lax.scan(body, jnp.zeros(w.shape, jnp.float32), xs)[0]
    return f, (rand((2048, 2048), BF16, 1), rand((8, 2048, 2048), BF16, 2, 1.0))


@program("while_unknown_trips", "loop")
def _() -> Any:
    def f(w: Any, x: Any, n: Any) -> Any:
        def body(c: Any) -> Any:
            return jnp.tanh(c[0] @ w), c[1] + 1
        return lax.while_loop(lambda c: c[1] < n, body, (x, 0))[0]
    return f, (rand((1024, 1024), BF16, 1), rand((1024, 1024), BF16, 2, 1.0), jnp.int32(50))


@program("while_converge", "loop")
def _() -> Any:
    def f(x: Any) -> Any:
        def body(c: Any) -> Any:
            return 0.5 * (c[0] + x / c[0]), c[1] + 1
        return lax.while_loop(lambda c: (c[1] < 100) & (jnp.max(jnp.abs(c[0] * c[0] - x)) > 1e-3), body,
                              (x, 0))
    return f, (jnp.abs(rand((4096, 4096), jnp.float32, 1, 1.0)) + 1,)


@program("cumsum_f32", "scan-op")
def _() -> Any:
    return (lambda x: jnp.cumsum(x, -1)), (rand((4096, 8192), jnp.float32, 1, 1.0),)


# --- held out: measured after the model's rules were written (run 2), never tuned on -----------

HELD_OUT: list[tuple[str, str, Callable[[], Any]]] = []


def held_out(name: str, kind: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(make: Callable[[], Any]) -> Callable[[], Any]:
        HELD_OUT.append((name, kind, make))
        return make
    return register


@held_out("h_block_grad_large", "transformer")
def _() -> Any:
    return _block_grad(4, 1024, 2048, 16, 16)


@held_out("h_block_fwd_gqa", "transformer")
def _() -> Any:
    return (lambda p, x: _block(p, x)), (_block_params(1536, 12, 4, 6144), rand((8, 1024, 1536), BF16, 7, 1.0))


@held_out("h_attention_grad_hd128_full", "attention")
def _() -> Any:
    q, k, v = (rand((4, 1024, 8, 128), BF16, i, 1.0) for i in range(3))
    f = jax.grad(lambda q, k, v: jnp.sum(_attention(q, k, v, False).astype(jnp.float32)), argnums=(0, 1, 2))
    return f, (q, k, v)


@held_out("h_mlp_grad_f32_default", "precision")
def _() -> Any:
    f = jax.grad(lambda w1, w2, x: jnp.sum(jax.nn.relu(x @ w1) @ w2), argnums=(0, 1))
    return f, (rand((2048, 4096), jnp.float32, 1), rand((4096, 2048), jnp.float32, 2), rand((4096, 2048), jnp.float32, 3))


@held_out("h_matmul_f32_high_rect", "precision")
def _() -> Any:
    return (lambda a, b: jnp.matmul(a, b, precision=lax.Precision.HIGH)), (rand((8192, 2048), jnp.float32, 1),
                                                                          rand((2048, 4096), jnp.float32, 2))


@held_out("h_mlp_int8", "int8")
def _() -> Any:
    def f(a: Any, w: Any) -> Any:
        return jnp.clip(_int8_matmul(a, w) >> 8, -127, 127).astype(jnp.int8)
    return f, (_int8((8192, 4096), 1), _int8((4096, 8192), 2))


@held_out("h_conv5x5_grad", "conv")
def _() -> Any:
    return _conv_grad, (rand((5, 5, 64, 128), BF16, 2), rand((16, 64, 64, 64), BF16, 1, 1.0))


@held_out("h_conv_stride2_3x3_fwd", "conv")
def _() -> Any:
    return (lambda x, w: jax.nn.relu(_conv(x, w, 2))), (rand((64, 112, 112, 64), BF16, 1, 1.0),
                                                      rand((3, 3, 64, 128), BF16, 2))


@held_out("h_embedding_lookup_128k", "gather")
def _() -> Any:
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 128000, (32, 2048)), jnp.int32)
    return (lambda table, ids: table[ids] * 2), (rand((128000, 2048), BF16, 2), ids)


@held_out("h_embedding_grad_bf16", "scatter")
def _() -> Any:
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 50000, (16, 2048)), jnp.int32)
    f = jax.grad(lambda table, ids: jnp.sum(table[ids].astype(jnp.float32) ** 2))
    return f, (rand((50000, 768), BF16, 2), ids)


@held_out("h_vocab_xent_grad_50k", "vocab")
def _() -> Any:
    labels = jnp.asarray(np.random.default_rng(1).integers(0, 50304, (4096,)), jnp.int32)
    return jax.grad(_vocab_xent, argnums=(0, 1)), (rand((768, 50304), BF16, 2), rand((4096, 768), BF16, 3, 1.0), labels)


@held_out("h_rms_norm_grad", "norm")
def _() -> Any:
    f = jax.grad(lambda x, g: jnp.sum(_rms(x, g).astype(jnp.float32) ** 2), argnums=(0, 1))
    return f, (rand((8, 2048, 4096), BF16, 1, 1.0), jnp.ones((4096,), BF16))


@held_out("h_softmax_f32", "norm")
def _() -> Any:
    return _softmax_rows, (rand((16, 16, 512, 512), jnp.float32, 1, 1.0),)


@held_out("h_adam_update", "optimizer")
def _() -> Any:
    shapes = [(2048, 2048), (2048, 8192), (8192, 2048), (2048,), (32000, 2048)]
    return _adam, _adam_state(shapes)


@held_out("h_sgd_momentum", "optimizer")
def _() -> Any:
    shapes = [(4096, 4096), (4096, 2048)]
    return _sgd_momentum, (_f32_tree(shapes, 0), _f32_tree(shapes, 10), _f32_tree(shapes, 20))


@held_out("h_moe_onehot_grad", "moe")
def _() -> Any:
    experts, cap, d, ff, tokens = 4, 1024, 512, 2048, 4096

    def f(w1: Any, w2: Any, x: Any, router: Any) -> Any:
        dispatch = _moe_dispatch(x @ router, experts, cap)
        xe = jnp.einsum("tec,td->ecd", dispatch, x)
        ye = jnp.einsum("ecf,efd->ecd", jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xe, w1)), w2)
        return jnp.sum(jnp.einsum("tec,ecd->td", dispatch, ye).astype(jnp.float32) ** 2)
    return jax.grad(f, argnums=(0, 1)), (rand((experts, d, ff), BF16, 3), rand((experts, ff, d), BF16, 4),
                                         rand((tokens, d), BF16, 1, 1.0), rand((d, experts), BF16, 2))


@held_out("h_sort_bf16_rows", "sort")
def _() -> Any:
    return (lambda x: jnp.sort(x, -1)), (rand((8192, 1024), BF16, 1, 1.0),)


@held_out("h_topk_128k", "topk")
def _() -> Any:
    return (lambda x: lax.top_k(x, 8)), (rand((64, 128000), jnp.float32, 1, 1.0),)


@held_out("h_dropout_f32", "rng")
def _() -> Any:
    def f(key: Any, x: Any) -> Any:
        return jnp.where(jax.random.bernoulli(key, 0.8, x.shape), x / 0.8, 0)
    return f, (jax.random.key(3), rand((4096, 8192), jnp.float32, 1, 1.0))


@held_out("h_random_uniform", "rng")
def _() -> Any:
    return (lambda key: jax.random.uniform(key, (4096, 16384), BF16)), (jax.random.key(2),)


@held_out("h_scan_layers_grad", "loop")
def _() -> Any:
    d = 512
    stacked = jax.tree.map(lambda a: jnp.stack([a] * 6), _block_params(d, 8, 8, 4 * d))

    def f(ps: Any, x: Any) -> Any:
        return jnp.sum(lax.scan(lambda h, p: (_block(p, h), None), x, ps)[0].astype(jnp.float32) ** 2)
    return jax.grad(f), (stacked, rand((8, 512, d), BF16, 7, 1.0))


@held_out("h_fori_mlp", "loop")
def _() -> Any:
    def f(w: Any, x: Any) -> Any:
        return lax.fori_loop(0, 200, lambda i, x: jax.nn.relu(x @ w), x)
    return f, (rand((1024, 1024), BF16, 1), rand((2048, 1024), BF16, 2, 1.0))


@held_out("h_while_unknown_mlp", "loop")
def _() -> Any:
    def f(w: Any, x: Any, n: Any) -> Any:
        return lax.while_loop(lambda c: c[1] < n, lambda c: (jax.nn.relu(c[0] @ w), c[1] + 1), (x, 0))[0]
    return f, (rand((2048, 2048), BF16, 1), rand((2048, 2048), BF16, 2, 1.0), jnp.int32(20))


@held_out("h_cumsum_bf16_axis0", "scan-op")
def _() -> Any:
    return (lambda x: jnp.cumsum(x, 0)), (rand((4096, 4096), BF16, 1, 1.0),)


@held_out("h_layer_norm_fwd", "norm")
def _() -> Any:
    def ln(x: Any) -> Any:
        x32 = x.astype(jnp.float32)
        return ((x32 - jnp.mean(x32, -1, keepdims=True)) * lax.rsqrt(jnp.var(x32, -1, keepdims=True) + 1e-5)
                ).astype(x.dtype)
    return ln, (rand((32, 1024, 2048), BF16, 1, 1.0),)


# --- run 4: gathers at several widths, tables and forms; the out-of-band kinds again ------------

RUN4: list[str] = []
"""The programs first measured in run 4 (``--set run4``): gathers, tuned and held out, and more
programs of the kinds the model missed (softmax, cumsum)."""

PROFILED_AGAIN = ("embedding_lookup", "h_embedding_lookup_128k", "h_softmax_f32", "cumsum_f32", "depthwise_conv",
                  "h_conv5x5_grad", "h_conv_stride2_3x3_fwd", "conv_stride2_1x1", "block_fwd_small",
                  "h_moe_onehot_grad", "attention_fwd_hd128", "block_grad_noncausal")
"""Programs of earlier runs measured again in run 4, under the profiler too: the out-of-band ones."""


def run4(name: str, kind: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register a run-4 program: tuned, or held out when its name starts with ``h_``."""
    register = held_out(name, kind) if name.startswith("h_") else program(name, kind)

    def both(make: Callable[[], Any]) -> Callable[[], Any]:
        RUN4.append(name)
        return register(make)
    return both


def table(shape: tuple[int, ...], dtype: Any = BF16, seed: int = 0) -> Any:
    """A large array made on the device (a gather's time does not depend on its values)."""
    return jax.random.normal(jax.random.key(seed), shape, dtype)


def ids(high: int, shape: tuple[int, ...], seed: int = 1) -> Any:
    """Uniformly random row numbers below ``high``, as a token batch's."""
    return jnp.asarray(np.random.default_rng(seed).integers(0, high, shape), jnp.int32)


def _rows(vocab: int, width: int, rows: int, dtype: Any = BF16) -> Any:
    """``rows`` rows of a ``vocab x width`` table, taken by random ids (an embedding lookup)."""
    return (lambda t, i: t[i]), (table((vocab, width), dtype), ids(vocab, (rows,)))


# Tables of 256-512 MiB stay in HBM (XLA:TPU prefetches a table of up to ~100 MB into on-chip
# memory, S(1) in the module); every table here is read at random rows of 128 B to 16 KiB.
for _vocab, _width, _count, _dtype, _name in (
        (2**21, 128, 2**18, BF16, "gather_rows_bf16_w128"),
        (2**20, 256, 2**17, BF16, "gather_rows_bf16_w256"),
        (2**19, 512, 2**16, BF16, "gather_rows_bf16_w512"),
        (2**18, 1024, 2**16, BF16, "gather_rows_bf16_w1024"),
        (2**17, 2048, 2**15, BF16, "gather_rows_bf16_w2048"),
        (2**16, 4096, 2**14, BF16, "gather_rows_bf16_w4096"),
        (2**15, 8192, 2**13, BF16, "gather_rows_bf16_w8192"),
        (2**17, 1024, 2**15, jnp.float32, "gather_rows_f32_w1024"),
        (2**18, 1024, 2**14, BF16, "gather_rows_bf16_w1024_r16k"),
        (2**18, 1024, 2**18, BF16, "gather_rows_bf16_w1024_r256k"),
        (300_000, 768, 49_152, BF16, "h_gather_rows_bf16_w768"),
        (2**18, 512, 2**16, jnp.float32, "h_gather_rows_f32_w512"),
        (80_000, 3072, 2**14, BF16, "h_gather_rows_bf16_w3072"),
        (200_000, 1024, 2**16, BF16, "h_gather_rows_bf16_200k")):
    run4(_name, "gather")(lambda v=_vocab, w=_width, r=_count, d=_dtype: _rows(v, w, r, d))

# Tables small enough to be prefetched into on-chip memory (S(1)).
for _vocab, _width, _count, _dtype, _name in (
        (2**14, 1024, 2**17, BF16, "gather_vmem_bf16_w1024"), (2**16, 256, 2**18, BF16, "gather_vmem_bf16_w256"),
        (2**14, 512, 2**16, jnp.float32, "h_gather_vmem_f32_w512")):
    run4(_name, "gather")(lambda v=_vocab, w=_width, r=_count, d=_dtype: _rows(v, w, r, d))


@run4("gather_scaled_f32", "gather")
def _() -> Any:
    return (lambda t, i: t[i].astype(jnp.float32) * 32.0), (table((2**18, 1024)), ids(2**18, (64, 512)))


@run4("gather_take_fill", "gather")
def _() -> Any:
    return (lambda t, i: jnp.take(t, i, axis=0)), (table((2**18, 1024)), ids(2**18, (2**15,)))


@run4("gather_plus_positions", "gather")
def _() -> Any:
    return (lambda t, p, i: t[i] + p), (table((2**18, 1024)), table((512, 1024), BF16, 3), ids(2**18, (64, 512)))


@run4("take_along_axis_f32", "gather")
def _() -> Any:
    return (lambda x, i: jnp.take_along_axis(x, i, 1)), (table((4096, 16384), jnp.float32), ids(16384, (4096, 64)))


@run4("h_embedding_scaled_f32", "gather")
def _() -> Any:
    return (lambda t, i: t[i].astype(jnp.float32) * 45.25), (table((2**18, 2048)), ids(2**18, (16, 1024)))


@run4("h_take_along_axis_bf16", "gather")
def _() -> Any:
    return (lambda x, i: jnp.take_along_axis(x, i, 1)), (table((8192, 16384)), ids(16384, (8192, 16)))


@run4("h_permute_rows", "gather")
def _() -> Any:
    perm = jnp.asarray(np.random.default_rng(1).permutation(2**16), jnp.int32)
    return (lambda x, p: x[p]), (table((2**16, 2048)), perm)


@run4("softmax_bf16", "norm")
def _() -> Any:
    return _softmax_rows, (table((32, 16, 512, 512)),)


@run4("softmax_f32_rows2048", "norm")
def _() -> Any:
    return _softmax_rows, (table((32768, 2048), jnp.float32),)


@run4("max_subtract_f32", "norm")
def _() -> Any:
    return (lambda x: x - jnp.max(x, -1, keepdims=True)), (table((16, 16, 512, 512), jnp.float32),)


@run4("cumsum_bf16_axis1", "scan-op")
def _() -> Any:
    return (lambda x: jnp.cumsum(x, -1)), (table((4096, 8192)),)


@run4("cumsum_f32_axis0", "scan-op")
def _() -> Any:
    return (lambda x: jnp.cumsum(x, 0)), (table((8192, 4096), jnp.float32),)


@run4("gather_columns_bf16", "gather")
def _() -> Any:
    return (lambda x, i: x[:, i]), (table((4096, 32768)), ids(32768, (1024,)))


# --- run 5: a decode step's KV cache, clipping by global norm, a bottleneck's batch norm, 1-D cumsums -----

RUN5: list[str] = []
"""The programs first measured in run 5 (``--set run5``): the kinds issue 53 found out of band (a GQA
decode step over a KV cache in a scan, clipping by global norm over many tensors, a ResNet bottleneck's
batch-norm gradient, a cumsum of a long vector), several sizes each; ``h_`` ones held out."""

REMEASURED5 = ("resnet_block_grad", "adam_update", "cumsum_f32", "kv_decode_step", "layer_norm_grad")
"""Programs of earlier runs measured again in run 5 (the same kinds; a drift check)."""


def run5(name: str, kind: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register a run-5 program: tuned, or held out when its name starts with ``h_``."""
    register = held_out(name, kind) if name.startswith("h_") else program(name, kind)

    def both(make: Callable[[], Any]) -> Callable[[], Any]:
        RUN5.append(name)
        return register(make)
    return both


def weights(shape: tuple[int, ...], seed: int, dtype: Any = BF16) -> Any:
    """A weight made on the device, scaled as an initializer would."""
    return (table(shape, dtype, seed) * 0.02).astype(dtype)


def _decode_step(layers: int, batch: int, cache: int, d: int, heads: int, kv_heads: int, ff: int,
                 repeat: bool = False) -> Any:
    """One token of a decoder: ``layers`` layers in a ``lax.scan`` over stacked weights and each
    layer's KV cache (``cache`` positions), the new key and value written at ``pos`` with
    ``lax.dynamic_update_slice``, attention over the whole cache masked past ``pos`` (GQA: query
    heads grouped over ``kv_heads``, or the keys repeated with ``jnp.repeat``)."""
    hd, group = d // heads, heads // kv_heads
    p = {"wq": weights((layers, d, heads, hd), 1), "wk": weights((layers, d, kv_heads, hd), 2),
         "wv": weights((layers, d, kv_heads, hd), 3), "wo": weights((layers, heads, hd, d), 4),
         "w1": weights((layers, d, ff), 5), "w2": weights((layers, ff, d), 6),
         "g1": jnp.ones((layers, d), BF16), "g2": jnp.ones((layers, d), BF16)}
    shape = (layers, batch, cache, kv_heads, hd)

    def step(p: Any, ck: Any, cv: Any, x: Any, pos: Any) -> Any:
        def layer(x: Any, lp: Any) -> Any:
            w, ck, cv = lp
            h = _rms(x, w["g1"])
            q = jnp.einsum("bsd,dhk->bshk", h, w["wq"])
            ck = lax.dynamic_update_slice(ck, jnp.einsum("bsd,dhk->bshk", h, w["wk"]), (0, pos, 0, 0))
            cv = lax.dynamic_update_slice(cv, jnp.einsum("bsd,dhk->bshk", h, w["wv"]), (0, pos, 0, 0))
            valid = jnp.arange(cache) <= pos
            if repeat:
                k, v = jnp.repeat(ck, group, axis=2), jnp.repeat(cv, group, axis=2)
                s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / np.sqrt(hd)
                prob = jax.nn.softmax(jnp.where(valid, s, -1e30), -1).astype(BF16)
                o = jnp.einsum("bhqk,bkhd->bqhd", prob, v)
            else:
                qg = q.reshape(batch, 1, kv_heads, group, hd)
                s = jnp.einsum("bqkgd,bskd->bkgqs", qg, ck).astype(jnp.float32) / np.sqrt(hd)
                prob = jax.nn.softmax(jnp.where(valid, s, -1e30), -1).astype(BF16)
                o = jnp.einsum("bkgqs,bskd->bqkgd", prob, cv).reshape(batch, 1, heads, hd)
            x = x + jnp.einsum("bshk,hkd->bsd", o, w["wo"])
            x = x + jax.nn.gelu(_rms(x, w["g2"]) @ w["w1"]) @ w["w2"]
            return x, (ck, cv)
        x, (ck, cv) = lax.scan(layer, x, (p, ck, cv))
        return x, ck, cv
    return step, (p, table(shape, BF16, 7), table(shape, BF16, 8), table((batch, 1, d), BF16, 9),
                  jnp.int32(cache // 2 + 1))


for _name, _sizes in (
        ("decode_gqa_b8_s4096_l8", (8, 8, 4096, 2048, 16, 4, 5632)),
        ("decode_gqa_b32_s2048_l8", (8, 32, 2048, 2048, 16, 4, 5632)),
        ("decode_mha_b8_s4096_l4", (4, 8, 4096, 2048, 16, 16, 5632)),
        ("decode_gqa_b8_s8192_l4_d4096", (4, 8, 8192, 4096, 32, 8, 11008)),
        ("h_decode_gqa_b16_s4096_l6", (6, 16, 4096, 2048, 16, 2, 5632)),
        ("h_decode_gqa_b4_s16384_l4", (4, 4, 16384, 2048, 16, 4, 5632))):
    run5(_name, "decode")(lambda s=_sizes: _decode_step(*s))


@run5("h_decode_gqa_repeat_b8_s4096_l8", "decode")
def _() -> Any:
    return _decode_step(8, 8, 4096, 2048, 16, 4, 5632, repeat=True)


def _layer_shapes(layers: int, d: int, ff: int) -> list[tuple[int, ...]]:
    """A transformer's parameter shapes, 10 per layer: 4 attention matrices, 2 MLP matrices, 4 vectors."""
    return [s for _ in range(layers) for s in ((d, d), (d, d), (d, d), (d, d), (d, ff), (ff, d), (d,), (d,),
                                                (ff,), (d,))]


def _global_norm(grads: list[Any]) -> Any:
    return jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in grads))


def _clip_by_global_norm(grads: list[Any]) -> list[Any]:
    """optax.clip_by_global_norm(1.0): every gradient scaled by min(1, 1 / its global norm)."""
    scale = jnp.minimum(1.0, 1.0 / (_global_norm(grads) + 1e-6))
    return [(g * scale).astype(g.dtype) for g in grads]


def _grads(layers: int, d: int, ff: int, dtype: Any = jnp.float32) -> tuple[list[Any]]:
    return ([table(shape, dtype, i) for i, shape in enumerate(_layer_shapes(layers, d, ff))],)


for _name, _sizes in (
        ("clip_norm_120_d512", (12, 512, 2048)),    # 120 tensors, 37.8M f32
        ("clip_norm_30_d1024", (3, 1024, 4096)),    # the same bytes in 30 tensors
        ("clip_norm_480_d256", (48, 256, 1024)),    # and in 480
        ("clip_norm_120_d128", (12, 128, 512)),     # 120 small tensors, 2.4M f32
        ("h_clip_norm_240_d384", (24, 384, 1536)),
        ("h_clip_norm_120_d1024", (12, 1024, 4096))):
    run5(_name, "clip")(lambda s=_sizes: (_clip_by_global_norm, _grads(*s)))


@run5("global_norm_120_d512", "clip")
def _() -> Any:
    return _global_norm, _grads(12, 512, 2048)


@run5("h_clip_norm_120_d512_bf16", "clip")
def _() -> Any:
    return _clip_by_global_norm, _grads(12, 512, 2048, BF16)


def _batch_norm(h: Any, g: Any, b: Any) -> Any:
    """Training-mode batch norm over batch and space (statistics in f32)."""
    h32 = h.astype(jnp.float32)
    mean, var = jnp.mean(h32, (0, 1, 2)), jnp.var(h32, (0, 1, 2))
    return ((h32 - mean) * lax.rsqrt(var + 1e-5) * g + b).astype(h.dtype)


def _bottleneck(p: Any, x: Any) -> Any:
    """A ResNet bottleneck: 1x1 down to ``mid`` features, 3x3, 1x1 back up, each with batch norm."""
    h = jax.nn.relu(_batch_norm(_conv(x, p["w1"]), p["g1"], p["b1"]))
    h = jax.nn.relu(_batch_norm(_conv(h, p["w2"]), p["g2"], p["b2"]))
    return jax.nn.relu(x + _batch_norm(_conv(h, p["w3"]), p["g3"], p["b3"]))


def _bottleneck_args(n: int, hw: int, c: int, mid: int) -> tuple[Any, Any]:
    p = {"w1": weights((1, 1, c, mid), 1), "w2": weights((3, 3, mid, mid), 2), "w3": weights((1, 1, mid, c), 3)}
    for i, width in ((1, mid), (2, mid), (3, c)):
        p[f"g{i}"], p[f"b{i}"] = jnp.ones((width,), jnp.float32), jnp.zeros((width,), jnp.float32)
    return p, table((n, hw, hw, c), BF16, 4)


def _bottleneck_grad(n: int, hw: int, c: int, mid: int) -> Any:
    f = jax.grad(lambda p, x: jnp.sum(_bottleneck(p, x).astype(jnp.float32) ** 2), argnums=(0, 1))
    return f, _bottleneck_args(n, hw, c, mid)


for _name, _sizes in (
        ("bottleneck_bn_grad_28_512", (32, 28, 512, 128)),
        ("bottleneck_bn_grad_14_1024", (32, 14, 1024, 256)),
        ("h_bottleneck_bn_grad_56_256", (16, 56, 256, 128)),
        ("h_bottleneck_bn_grad_7_2048", (64, 7, 2048, 512))):
    run5(_name, "conv")(lambda s=_sizes: _bottleneck_grad(*s))


@run5("bottleneck_bn_fwd_28_512", "conv")
def _() -> Any:
    return _bottleneck, _bottleneck_args(32, 28, 512, 128)


@run5("batch_norm_relu_grad", "norm")
def _() -> Any:
    f = jax.grad(lambda x, g, b: jnp.sum(jax.nn.relu(_batch_norm(x, g, b)).astype(jnp.float32) ** 2), argnums=(0, 1, 2))
    return f, (table((32, 56, 56, 256), BF16, 1), jnp.ones((256,), jnp.float32), jnp.zeros((256,), jnp.float32))


for _name, _shape, _dtype, _axis in (
        ("cumsum_f32_16m", (2**24,), jnp.float32, 0),
        ("cumsum_f32_1m", (2**20,), jnp.float32, 0),
        ("cumsum_bf16_16m", (2**24,), BF16, 0),
        ("cumsum_f32_rows_256x65536", (256, 65536), jnp.float32, 1),
        ("h_cumsum_f32_4m", (2**22,), jnp.float32, 0),
        ("h_cumsum_f32_64m", (2**26,), jnp.float32, 0),
        ("h_cumsum_f32_rows_2048x2048", (2048, 2048), jnp.float32, 1)):
    run5(_name, "scan-op")(lambda s=_shape, d=_dtype, a=_axis: ((lambda x: jnp.cumsum(x, a)), (table(s, d),)))



for _name, _count, _form in (("args_in_480", 480, "in"), ("args_out_480", 480, "out"), ("args_inout_120", 120, "inout"),
                             ("args_inout_30", 30, "inout")):
    run5(_name, "overhead")(lambda n=_count, form=_form: _many_buffers(n, form))


def _many_buffers(count: int, form: str) -> Any:
    """A call's cost with many small buffers and little work: ``count`` arguments summed into one
    scalar (``in``), one argument scaled into ``count`` results (``out``), or both (``inout``)."""
    xs = [table((256,), jnp.float32, i) for i in range(count)]
    if form == "in":
        return (lambda xs: sum(jnp.sum(x) for x in xs)), (xs,)
    if form == "out":
        return (lambda x: [x * float(i) for i in range(count)]), (xs[0],)
    return (lambda xs: [x * 2.0 for x in xs]), (xs,)


# --- measuring ----------------------------------------------------------------------------------

def timings(compiled: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    """Waited-on and back-to-back per-call medians, in seconds."""
    for _ in range(3):
        jax.block_until_ready(compiled(*args))
    probe = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    one = time.perf_counter() - probe
    calls = 20 if one < 0.05 else 8
    waited = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        waited.append(time.perf_counter() - start)
    n = 20 if one < 0.05 else 5
    dispatched = []
    for _ in range(5 if one < 0.05 else 3):
        start = time.perf_counter()
        out = None
        for _ in range(n):  # each result dropped as the next is dispatched, as a training loop's
            out = compiled(*args)
        jax.block_until_ready(out)
        dispatched.append((time.perf_counter() - start) / n)
        del out
    return {"waited_s": statistics.median(waited), "waited_min_s": min(waited), "waited_max_s": max(waited),
            "waited_calls": calls, "dispatched_s": statistics.median(dispatched),
            "dispatched_rounds": [round(d, 9) for d in dispatched], "dispatched_calls": n}


def measure(name: str, kind: str, make: Callable[[], Any]) -> tuple[dict[str, Any], Any]:
    """One program's row (its module, XLA's cost analysis, its timings, or its error) and its
    compiled executable (None when it failed)."""
    row: dict[str, Any] = {"name": name, "kind": kind, "held_out": name.startswith("h_")}
    start = time.perf_counter()
    compiled = None
    try:
        fn, args = make()
        compiled = jax.jit(fn).lower(*args).compile()
        row["compile_s"] = time.perf_counter() - start
        row["hlo"] = compiled.as_text()
        try:
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, (list, tuple)) else cost
            row["xla_cost"] = {k: float(v) for k, v in (cost or {}).items()
                               if k in ("flops", "bytes accessed", "optimal_seconds", "transcendentals")}
        except Exception as error:  # noqa: BLE001 - a backend without a cost analysis
            row["xla_cost_error"] = repr(error)
        row.update(timings(compiled, args))
        del args, fn
    except Exception as error:  # noqa: BLE001 - one program's failure must not lose the others
        row["error"] = f"{type(error).__name__}: {error}"[:2000]
        row["traceback"] = traceback.format_exc()[-3000:]
        compiled = None
    row["total_s"] = time.perf_counter() - start
    return row, compiled


def profile(measured: list[tuple[str, Callable[[], Any], Any]], out: Path, calls: int = 5) -> None:
    """Run each measured program ``calls`` times more under one ``jax.profiler`` trace (its
    arguments made again) and keep the trace as ``out/profile.xplane.pb``: each instruction's
    time on the chip (``python -m benchmarks.profile_kinds`` reads such a trace)."""
    work = Path("/tmp/tpu_corpus_trace")
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.host_tracer_level = 1
    jax.profiler.start_trace(str(work), profiler_options=options)
    try:
        for name, make, compiled in measured:
            args = make()[1]
            jax.block_until_ready(compiled(*args))
            for _ in range(calls):
                jax.block_until_ready(compiled(*args))
            del args
    finally:
        jax.profiler.stop_trace()
    traces = sorted(work.rglob("*.xplane.pb"))
    if traces:
        (out / "profile.xplane.pb").write_bytes(traces[-1].read_bytes())


def chosen(which: str) -> list[tuple[str, str, Callable[[], Any]]]:
    """The programs of one set (``tuned``, ``held-out``, ``run4``: those first measured in run 4
    and the out-of-band ones measured again) or of both."""
    every = PROGRAMS + HELD_OUT
    if which in ("run4", "run5"):
        first, again = (RUN4, PROFILED_AGAIN) if which == "run4" else (RUN5, REMEASURED5)
        by_name = {p[0]: p for p in every}
        return [by_name[name] for name in first] + [p for p in every if p[0] in again]
    return {"tuned": PROGRAMS, "held-out": HELD_OUT, "all": every}[which]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", default=Path("."))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--skip", nargs="*", default=())
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--set", choices=("tuned", "held-out", "all", "run4", "run5"), default="tuned",
                        help="the programs the model was tuned on, the ones held out, both, or run 4's")
    parser.add_argument("--profile", action="store_true",
                        help="then run each program again under jax.profiler (OUT_DIR/profile.xplane.pb)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which no further program starts (the profile is skipped past 1.2x it)")
    args = parser.parse_args(argv)
    if args.list:
        for name, kind, _ in chosen(args.set):
            print(f"{kind:12} {name}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    device = jax.devices()[0]
    header = {"jax": jax.__version__, "platform": device.platform, "device_kind": device.device_kind,
              "numpy": np.__version__}
    print(json.dumps(header), flush=True)
    began = time.perf_counter()
    measured = []
    with (args.out / "corpus.jsonl").open("a") as out:
        out.write(json.dumps({"header": header}) + "\n")
        for name, kind, make in chosen(args.set):
            if (args.only and name not in args.only) or name in args.skip:
                continue
            if args.deadline is not None and time.perf_counter() - began > args.deadline:
                print(json.dumps({"skipped": name, "reason": "deadline"}), flush=True)
                continue
            row, compiled = measure(name, kind, make)
            out.write(json.dumps(row) + "\n")
            out.flush()
            summary = {k: row.get(k) for k in ("name", "waited_s", "dispatched_s", "compile_s", "error")}
            print(json.dumps(summary), flush=True)
            if args.profile and compiled is not None:
                measured.append((name, make, compiled))
            jax.clear_caches()
            gc.collect()
    if measured and (args.deadline is None or time.perf_counter() - began < 1.2 * args.deadline):
        profile(measured, args.out)
        print(json.dumps({"profiled": len(measured), "elapsed_s": time.perf_counter() - began}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
