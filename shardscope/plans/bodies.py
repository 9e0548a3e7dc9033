"""The per-device bodies of the plans: how each one chunks the VJP under ``jax.shard_map``.

Every body gets a :class:`Layout` (the model, the sizes, which axes the batch is split over and
how each parameter leaf is sharded) and returns ``local(params, x, v) -> gradient``, the
function ``jax.shard_map`` maps over the mesh.

- naive: replicated leaves stay invariant inside the loop, so the transpose of the implicit
  ``pvary`` all-reduces every chunk's gradient; sharded leaves are all-gathered inside every
  chunk, and the transpose of that gather reduce-scatters every chunk's gradient.
- deferred: replicated leaves are cast to varying before the loop, sharded leaves gathered once
  before it; each device accumulates its own partial gradient and one ``psum`` (replicated) or
  ``psum_scatter`` (sharded) after the loop reduces it.
- reduced: JAX's own deferral: the weight is typed reduced (``{R:..}``), its gradient unreduced
  (``{U:..}``) and accumulates so across the loop; one ``unreduced_psum`` after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax

from shardscope.config.shapes import Shapes


@dataclass(frozen=True)
class Split:
    """How one parameter leaf is sharded: per array dimension, the mesh axes it is split over.

    Not a pytree node, so a tree of them mirrors ``params`` leaf for leaf.
    """

    dims: tuple[tuple[str, ...], ...]

    @property
    def axes(self) -> tuple[str, ...]:
        """Every mesh axis the leaf is split over (empty for a replicated leaf)."""
        return tuple(a for axes in self.dims for a in axes)


@dataclass(frozen=True)
class Layout:
    """What a plan body needs to know about one analysis.

    ``splits`` mirrors ``params`` with a :class:`Split` per leaf.
    """

    f: Callable
    shapes: Shapes
    batch_axes: tuple[str, ...]
    splits: Any  # a pytree of Split mirroring the user's params: any structure

    @property
    def sharded(self) -> bool:
        """True when some parameter leaf is sharded over the mesh."""
        return any(split.axes for split in jax.tree.leaves(self.splits))


def _chunked(tree: Any, shapes: Shapes) -> Any:  # a pytree of arrays, the user's structure
    """Split the per-device batch axis of every leaf into (chunks, chunk_size)."""
    split = (shapes.chunks_per_device, shapes.chunk_size)
    return jax.tree.map(lambda a: a.reshape(split + a.shape[1:]), tree)


def scan_vjp(f: Callable, params: Any, x: Any, v: Any, shapes: Shapes, init: Any,  # the user's pytrees: any structure
             prepare: Callable | None = None) -> Any:  # a pytree like params
    """Accumulate ``vjp(f)(params)`` over the chunks of ``x`` and ``v`` with ``lax.scan``.

    ``prepare(params)`` runs inside each chunk's forward (the naive plan gathers sharded leaves
    there), so its transpose runs inside each chunk's backward.
    """
    prepare = prepare or (lambda p: p)

    def body(acc, chunk):
        x_chunk, v_chunk = chunk
        _, pullback = jax.vjp(lambda p: f(prepare(p), x_chunk), params)
        (grad,) = pullback(v_chunk)
        return jax.tree.map(jnp.add, acc, grad), None

    total, _ = lax.scan(body, init, (_chunked(x, shapes), _chunked(v, shapes)))
    return total


def varying_axes(value: jax.Array) -> frozenset:
    """The mesh axes ``value`` (a traced array inside ``shard_map``) varies over."""
    mat = getattr(jax.typeof(value), "manual_axis_type", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def to_varying(value: jax.Array, axes: tuple[str, ...]) -> jax.Array:
    """``value`` cast to vary over ``axes``, only over the axes it does not vary over yet.

    Casting an already-varying value raises "Unsupported pcast from=varying": check first.
    """
    missing = tuple(a for a in axes if a not in varying_axes(value))
    return lax.pcast(value, missing, to="varying") if missing else value


def gather(split: Split, leaf: jax.Array) -> jax.Array:
    """The whole leaf from this device's shard: an ``all_gather`` per split dimension."""
    for dim, axes in enumerate(split.dims):
        if axes:
            leaf = lax.all_gather(leaf, axes if len(axes) > 1 else axes[0], axis=dim, tiled=True)
    return leaf


def scatter(split: Split, grad: jax.Array) -> jax.Array:
    """This device's shard of a summed gradient: a ``psum_scatter`` per split dimension."""
    for dim, axes in enumerate(split.dims):
        if axes:
            grad = lax.psum_scatter(grad, axes if len(axes) > 1 else axes[0], scatter_dimension=dim, tiled=True)
    return grad


def _map(fn: Callable, layout: Layout, *trees: Any) -> Any:  # pytrees like the user's params
    """``fn(split, *leaves)`` over the parameter leaves, with each leaf's :class:`Split`."""
    return jax.tree.map(fn, layout.splits, *trees)


def naive(layout: Layout) -> Callable:
    """Replicated leaves invariant in the loop; sharded leaves gathered inside every chunk."""

    def local(params, x, v):
        init = jax.tree.map(jnp.zeros_like, params)
        init = _map(lambda split, z: to_varying(z, split.axes), layout, init)
        prepare = lambda p: _map(gather, layout, p)  # noqa: E731
        return scan_vjp(layout.f, params, x, v, layout.shapes, init, prepare)

    return local


def deferred(layout: Layout) -> Callable:
    """Gather once, cast to varying, accumulate per device, one psum / psum_scatter after the loop."""
    axes = layout.batch_axes

    def local(params, x, v):
        whole = _map(lambda split, p: to_varying(gather(split, p), axes), layout, params)
        init = jax.tree.map(lambda w: to_varying(jnp.zeros_like(w), axes), whole)
        partial = scan_vjp(layout.f, whole, x, v, layout.shapes, init)
        return _map(lambda split, g: _reduce(split, g, axes), layout, partial)

    return local


def _reduce(split: Split, grad: jax.Array, batch_axes: tuple[str, ...]) -> jax.Array:
    """Sum a per-device partial gradient over the batch axes, back to the leaf's own sharding."""
    rest = tuple(a for a in batch_axes if a not in split.axes)
    if rest:
        grad = lax.psum(grad, rest)
    if split.axes:
        grad = scatter(split, to_varying(grad, split.axes))
    return grad


def reduced(layout: Layout) -> Callable:
    """Weight typed reduced, gradient accumulated unreduced, one ``unreduced_psum`` after the loop."""
    axes = layout.batch_axes

    def local(params, x, v):
        weights = jax.tree.map(lambda p: lax.pcast(p, axes, to="reduced"), params)
        # Casting an invariant value straight to unreduced raises "Unsupported pcast": go through varying.
        init = jax.tree.map(
            lambda p: lax.pcast(lax.pcast(jnp.zeros_like(p), axes, to="varying"), axes, to="unreduced"), params
        )
        partial = scan_vjp(layout.f, weights, x, v, layout.shapes, init)
        return jax.tree.map(lambda g: lax.psum(g, axes), partial)

    return local


def floor(layout: Layout) -> Callable:
    """The deferred plan without its final reduction: the compute-only floor (no collectives).

    Each device returns its partial gradient; the plan's ``out_specs`` stack them over the batch
    axes, and summing that stack gives the gradient.
    """
    axes = layout.batch_axes

    def local(params, x, v):
        whole = jax.tree.map(lambda p: to_varying(p, axes), params)
        init = jax.tree.map(lambda w: to_varying(jnp.zeros_like(w), axes), whole)
        partial = scan_vjp(layout.f, whole, x, v, layout.shapes, init)
        return jax.tree.map(lambda g: g[None], partial)

    return local


def reference(f: Callable) -> Callable:
    """The unchunked VJP over the whole batch."""

    def full(params, x, v):
        _, pullback = jax.vjp(lambda p: f(p, x), params)
        return pullback(v)[0]

    return full
