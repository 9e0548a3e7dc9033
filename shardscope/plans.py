"""The naive, deferred and reference programs of one :class:`Settings`, and their inputs.

- naive: ``lax.scan`` over chunks of ``jax.vjp`` inside ``jax.shard_map``; ``params`` stay
  invariant, so the transpose of the implicit ``pvary`` all-reduces every chunk's gradient.
- deferred: ``params`` cast to varying before the loop, per-device accumulation, one
  ``lax.psum`` after it.
- reference: the unchunked ``jax.vjp`` of ``f`` over the whole batch.

All shard_maps trace with ``check_vma=True``: without it the naive all-reduce silently
disappears and the gradient is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from shardscope import keys
from shardscope.demos import DemoFunction
from shardscope.errors import SettingsError, TraceError, quote_error
from shardscope.settings import Settings, default_chunk_size, divisors

PLAN_NAMES = ("naive", "deferred")


@dataclass(frozen=True)
class Shapes:
    """The sizes that follow from a demo and the settings."""

    batch: int
    devices: int
    per_device_batch: int
    chunk_size: int
    chunks_per_device: int


@dataclass(frozen=True)
class Plans:
    """The jitted programs and the concrete, already placed inputs they run on."""

    shapes: Shapes
    mesh: Mesh
    functions: dict[str, Callable]  # naive, deferred, reference
    args: tuple[Any, Any, Any]  # params, x, v


def materialize(tree: Any, seed: int) -> Any:
    """Concrete arrays for a pytree of arrays and ``ShapeDtypeStruct``s, reproducibly random."""
    rng = np.random.default_rng(seed)

    def leaf(value: Any) -> Any:
        if isinstance(value, jax.ShapeDtypeStruct) and keys.is_key_dtype(value.dtype):
            return keys.random_keys(value.dtype, value.shape, int(rng.integers(2**31)))
        if isinstance(value, jax.ShapeDtypeStruct):
            return _random(rng, value.shape, np.dtype(value.dtype))
        if keys.is_key_array(value):
            return value  # numpy cannot hold typed keys; they are used as given
        return np.asarray(value)

    return jax.tree.map(leaf, tree, is_leaf=lambda v: isinstance(v, jax.ShapeDtypeStruct))


def _random(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    # jnp.issubdtype knows bfloat16 and the other ml_dtypes floats; np.issubdtype does not
    if jnp.issubdtype(dtype, jnp.complexfloating):
        parts = rng.standard_normal((2, *shape)) / np.sqrt(2.0)
        return (parts[0] + 1j * parts[1]).astype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return rng.standard_normal(shape).astype(dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return rng.integers(0, 8, shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def batch_size(x: Any) -> int:
    """The common leading axis of every leaf of ``x``."""
    sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in jax.tree.leaves(x)}
    if len(sizes) != 1 or None in sizes:
        raise SettingsError(
            f"The leaves of x must share one leading (batch) axis; found sizes {sorted(map(str, sizes))}.",
            "give every leaf of x the batch N as its first axis",
        )
    return sizes.pop()


def resolve_shapes(batch: int, settings: Settings, available_devices: int) -> Shapes:
    """Check the settings against the batch and fill in the default chunk size."""
    devices = settings.devices
    if not 1 <= devices <= available_devices:
        raise SettingsError(
            f"{devices} devices asked for, but {available_devices} are available.",
            f"pick 1 to {available_devices} devices",
        )
    if batch % devices:
        valid = [d for d in divisors(batch) if d <= available_devices]
        raise SettingsError(
            f"The batch N={batch} does not split over {devices} devices.",
            f"use a device count that divides {batch}: {', '.join(map(str, valid))}",
        )
    per_device = batch // devices
    chunk = default_chunk_size(per_device) if settings.chunk_size is None else settings.chunk_size
    if chunk <= 0 or per_device % chunk:
        raise SettingsError(
            f"Chunk size {chunk} does not divide the per-device batch "
            f"{per_device} (N={batch} over {devices} devices).",
            f"valid chunk sizes: {', '.join(map(str, divisors(per_device)))}",
        )
    return Shapes(batch, devices, per_device, chunk, per_device // chunk)


def _chunked(tree: Any, shapes: Shapes) -> Any:
    """Split the per-device batch axis of every leaf into (chunks, chunk_size)."""
    split = (shapes.chunks_per_device, shapes.chunk_size)
    return jax.tree.map(lambda a: a.reshape(split + a.shape[1:]), tree)


def _scan_vjp(f: Callable, params: Any, x: Any, v: Any, shapes: Shapes, init: Any) -> Any:
    """Accumulate ``vjp(f)(params)`` over the chunks of ``x`` and ``v`` with ``lax.scan``."""

    def body(acc, chunk):
        x_chunk, v_chunk = chunk
        _, pullback = jax.vjp(lambda p: f(p, x_chunk), params)
        (grad,) = pullback(v_chunk)
        return jax.tree.map(jnp.add, acc, grad), None

    total, _ = lax.scan(body, init, (_chunked(x, shapes), _chunked(v, shapes)))
    return total


def naive_local(f: Callable, shapes: Shapes) -> Callable:
    """The per-device naive plan: ``params`` stay invariant inside the loop."""

    def local(params, x, v):
        init = jax.tree.map(jnp.zeros_like, params)
        return _scan_vjp(f, params, x, v, shapes, init)

    return local


def deferred_local(f: Callable, shapes: Shapes, axis: str) -> Callable:
    """The per-device deferred plan: cast to varying, accumulate, one psum after the loop."""

    def local(params, x, v):
        varying = jax.tree.map(lambda p: lax.pcast(p, axis, to="varying"), params)
        init = jax.tree.map(lambda p: lax.pcast(jnp.zeros_like(p), axis, to="varying"), params)
        partial = _scan_vjp(f, varying, x, v, shapes, init)
        return jax.tree.map(lambda g: lax.psum(g, axis), partial)

    return local


def reference(f: Callable) -> Callable:
    """The unchunked VJP over the whole batch."""

    def full(params, x, v):
        _, pullback = jax.vjp(lambda p: f(p, x), params)
        return pullback(v)[0]

    return full


def build_plans(demo_fn: DemoFunction, settings: Settings) -> Plans:
    """Check the settings, make the inputs and the three jitted programs for ``demo_fn``."""
    f = demo_fn.fn
    params = materialize(demo_fn.spec.params, demo_fn.spec.seed)
    x = materialize(demo_fn.spec.x, demo_fn.spec.seed + 1)
    _check_params(params)
    shapes = resolve_shapes(batch_size(x), settings, len(jax.devices()))
    out = _output_shape(f, params, x, shapes.batch)
    v = materialize(out, demo_fn.spec.seed + 2)

    mesh = Mesh(np.array(jax.devices()[: shapes.devices]), (settings.axis,))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P(settings.axis))
    args = (
        jax.device_put(params, replicated),
        jax.device_put(x, sharded),
        jax.device_put(v, sharded),
    )

    def mapped(local: Callable) -> Callable:
        return jax.jit(
            jax.shard_map(
                local,
                mesh=mesh,
                in_specs=(P(), P(settings.axis), P(settings.axis)),
                out_specs=P(),
                check_vma=True,
            )
        )

    functions = {
        "naive": mapped(naive_local(f, shapes)),
        "deferred": mapped(deferred_local(f, shapes, settings.axis)),
        "reference": jax.jit(reference(f), out_shardings=replicated),
    }
    return Plans(shapes=shapes, mesh=mesh, functions=functions, args=args)


def _check_params(params: Any) -> None:
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise SettingsError("params is empty: there is nothing to differentiate.")
    dtypes = [leaf.dtype if keys.is_key_array(leaf) else np.asarray(leaf).dtype for leaf in leaves]
    bad = [str(dtype) for dtype in dtypes if keys.is_key_dtype(dtype) or not jnp.issubdtype(dtype, jnp.inexact)]
    if bad:
        raise SettingsError(
            f"params must be floating point or complex to take a VJP; found {', '.join(bad)}.",
            "give params real or complex float dtypes; pass PRNG keys in x (one per example) "
            "or make them inside f",
        )


def _output_shape(f: Callable, params: Any, x: Any, batch: int) -> Any:
    """The output's shapes (the cotangent's), checked to be inexact and batch-leading."""
    try:
        out = jax.eval_shape(f, params, x)
    except Exception as exc:  # the user's model failed on its own example inputs
        raise TraceError(
            f"The model fails on its example inputs: {quote_error(exc)}",
            "check that f(params, x) runs on the shapes given to @shardscope.demo",
        ) from exc
    for leaf in jax.tree.leaves(out):
        if not leaf.shape or leaf.shape[0] != batch:
            raise SettingsError(
                f"Every output leaf must have the batch N={batch} as its first axis; got shape {leaf.shape}.",
                "return per-example outputs from f(params, x), shape (N, ...)",
            )
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            raise SettingsError(
                f"The output dtype {leaf.dtype} is not differentiable.",
                "return real or complex float outputs",
            )
    return out


def describe_trace_error(exc: BaseException, axis: str) -> TraceError:
    """Turn JAX's tracing error into a message that quotes it, with a ``lax.pcast`` hint for carry errors."""
    text = str(exc)
    if "carry" in text and "manual axis types do not match" in text:
        return TraceError(
            "A loop in the model starts from a value that is the same on every device but becomes "
            "per-device (varying over the mesh axis) inside the loop: " + quote_error(exc),
            "derive the initial carry from x, e.g. jnp.zeros_like(x[:, 0]), so that it is per-device like x "
            f"(lax.pcast(init, {axis!r}, to='varying') does the same only where f runs inside shard_map: "
            "shardscope also runs f unmapped, for the reference)",
        )
    return TraceError(
        f"The model fails to trace under jax.shard_map: {quote_error(exc)}",
        "jax.vjp of f(params, x) must trace on one device's slice of the batch inside jax.shard_map; "
        "--debug shows JAX's full error",
    )
