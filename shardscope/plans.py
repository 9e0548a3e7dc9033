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

from shardscope.demos import DemoFunction
from shardscope.errors import SettingsError, TraceError
from shardscope.examples import batch_size, check_fits, materialize
from shardscope.failures import model_error
from shardscope.settings import Settings, check_device_count, default_chunk_size, divisors

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


def resolve_shapes(batch: int, settings: Settings, available_devices: int) -> Shapes:
    """Check the settings against the batch and fill in the default chunk size."""
    devices = settings.devices
    check_device_count(devices, batch, available_devices)
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
    batch = batch_size(demo_fn.spec.x)
    check_fits(demo_fn.spec.params, demo_fn.spec.x, settings.devices)  # before a byte is allocated
    shapes = resolve_shapes(batch, settings, len(jax.devices()))
    params = materialize(demo_fn.spec.params, demo_fn.spec.seed)
    x = materialize(demo_fn.spec.x, demo_fn.spec.seed + 1)
    _check_params(params)
    out = _output_shape(f, params, x, shapes.batch, settings.axis)
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
    bad = [str(np.asarray(leaf).dtype) for leaf in leaves if not jnp.issubdtype(np.asarray(leaf).dtype, jnp.inexact)]
    if bad:
        raise SettingsError(
            f"params must be floating point or complex to take a VJP; found {', '.join(bad)}.",
            "give params real or complex float dtypes",
        )


def _output_shape(f: Callable, params: Any, x: Any, batch: int, axis: str) -> Any:
    """The output's shapes (the cotangent's), checked to be inexact and batch-leading."""
    try:
        out = jax.eval_shape(f, params, x)
    except Exception as exc:  # the user's model failed on its own example inputs
        raise model_error(exc, axis) from exc
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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe_trace_error(exc: BaseException, axis: str) -> TraceError:
    """Turn JAX's tracing error into one message, with a ``lax.pcast`` hint for carry errors."""
    text = str(exc)
    if "carry" in text and "manual axis types do not match" in text:
        return TraceError(
            "A loop in the model starts from a value that is the same on every device but becomes "
            "per-device (varying over the mesh axis) inside the loop: " + _first_line(exc),
            f"derive the initial carry from x, or cast it with lax.pcast(init, {axis!r}, to='varying')",
        )
    return TraceError(
        f"The model fails to trace under jax.shard_map: {type(exc).__name__}: {_first_line(exc)}",
        "jax.vjp of f(params, x) must trace on one device's slice of the batch inside jax.shard_map; "
        "--debug shows JAX's full error",
    )
