"""Programs written the way users write them, each built against a given mesh, for the target tests.

Every builder takes a ``jax.sharding.Mesh`` with one axis, ``data``, and returns a
:class:`Built`: the jitted function, its example arguments (``jax.ShapeDtypeStruct`` with
shardings over that mesh) and the mesh to trace under (``jax.set_mesh``) for Explicit axes.
Built over CPU devices, they are what a program file makes at import; built over a target's
devices, they are the program written for the target directly: the reference the retargeted
compile is compared with.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

MICRO_BATCHES, FEATURES = 4, 16


@dataclass(frozen=True)
class Built:
    """A program over one mesh: ``fn(*args)``, traced under ``context_mesh`` when it is set."""

    fn: Callable
    args: tuple
    context_mesh: Any = None

    def trace(self) -> Any:
        """``fn.trace(*args)`` (under ``jax.set_mesh(context_mesh)`` for Explicit axes)."""
        with jax.set_mesh(self.context_mesh) if self.context_mesh is not None else contextlib.nullcontext():
            return self.fn.trace(*self.args)


def _loss(W, xb):
    return jnp.sum(jnp.tanh(xb @ W) ** 2)


def _batch(mesh: Mesh) -> int:
    return 16 * mesh.size


def gspmd_accumulate(mesh: Mesh) -> Built:
    """jit + NamedSharding: W replicated, the batch sharded over ``data``, grads of 4 micro-batches added in a scan."""
    W = jax.ShapeDtypeStruct((FEATURES, FEATURES), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((MICRO_BATCHES, _batch(mesh), FEATURES), jnp.float32,
                             sharding=NamedSharding(mesh, P(None, "data")))

    @jax.jit
    def step(W, x):
        def body(acc, xb):
            return acc + jax.grad(_loss)(W, xb), None

        acc, _ = lax.scan(body, jnp.zeros_like(W), x)
        return acc

    return Built(step, (W, x))


def needed_in_loop(mesh: Mesh) -> Built:
    """shard_map: each iteration's carry is built from the psum of the one before (the reduction is needed)."""
    W = jax.ShapeDtypeStruct((FEATURES, FEATURES), jnp.float32, sharding=NamedSharding(mesh, P()))
    h = jax.ShapeDtypeStruct((_batch(mesh), FEATURES), jnp.float32, sharding=NamedSharding(mesh, P("data")))

    def local(W, h):
        def body(h, _):
            total = lax.psum(jnp.sum(h @ W, axis=0, keepdims=True), "data")
            return jnp.tanh(h + total), None

        h, _ = lax.scan(body, h, None, length=MICRO_BATCHES)
        return h

    sm = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data")), out_specs=P("data"))
    return Built(jax.jit(sm), (W, h))


def nested(mesh: Mesh) -> Built:
    """An outer jit over a scan whose body constrains a sharding and calls an inner jit with a shard_map."""
    W = jax.ShapeDtypeStruct((FEATURES, FEATURES), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((MICRO_BATCHES, _batch(mesh), FEATURES), jnp.float32,
                             sharding=NamedSharding(mesh, P(None, "data")))

    @jax.jit
    def summed_grad(W, xb):
        local = lambda W, xb: lax.psum(jax.grad(_loss)(W, xb), "data")  # noqa: E731
        return jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data")), out_specs=P())(W, xb)

    @jax.jit
    def step(W, x):
        def body(acc, xb):
            xb = lax.with_sharding_constraint(xb, NamedSharding(mesh, P("data")))
            return acc + summed_grad(W, xb), None

        acc, _ = lax.scan(body, jnp.zeros_like(W), x)
        return acc

    return Built(step, (W, x))


def _explicit(mesh: Mesh) -> Mesh:
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Explicit,) * len(mesh.axis_names))


def explicit_naive(mesh: Mesh) -> Built:
    """Explicit axes (``jax.set_mesh``): the accumulation as written first."""
    emesh = _explicit(mesh)
    W = jax.ShapeDtypeStruct((FEATURES, FEATURES), jnp.float32, sharding=NamedSharding(emesh, P()))
    x = jax.ShapeDtypeStruct((MICRO_BATCHES, _batch(mesh), FEATURES), jnp.float32,
                             sharding=NamedSharding(emesh, P(None, "data")))

    @jax.jit
    def step(W, x):
        def body(acc, xb):
            return acc + jax.grad(_loss)(W, xb), None

        acc, _ = lax.scan(body, jnp.zeros_like(W), x)
        return acc

    return Built(step, (W, x), emesh)


def explicit_reduced(mesh: Mesh) -> Built:
    """Explicit axes with the reduced/unreduced fix: W reduced, the accumulator unreduced, one reshard after."""
    emesh = _explicit(mesh)
    W = jax.ShapeDtypeStruct((FEATURES, FEATURES), jnp.float32, sharding=NamedSharding(emesh, P()))
    x = jax.ShapeDtypeStruct((MICRO_BATCHES, _batch(mesh), FEATURES), jnp.float32,
                             sharding=NamedSharding(emesh, P(None, "data")))

    @jax.jit
    def step(W, x):
        Wr = jax.reshard(W, P(None, None, reduced={"data"}))
        acc = jax.reshard(jnp.zeros_like(W), P(None, None, unreduced={"data"}))

        def body(acc, xb):
            return acc + jax.grad(_loss)(Wr, xb), None

        acc, _ = lax.scan(body, acc, x)
        return jax.reshard(acc, P(None, None))

    return Built(step, (W, x), emesh)


def fsdp_accumulate(mesh: Mesh) -> Built:
    """jit + NamedSharding, FSDP: two weights sharded over ``data`` on their first axis, the
    batch too, grads of 4 micro-batches added in a scan and returned sharded like the weights
    (on TPU: the weights' all-gathers as async collective fusions, the gradients' sums as
    all-reduce-scatter fusions)."""
    sharded = NamedSharding(mesh, P("data"))
    params = {"w1": jax.ShapeDtypeStruct((512, 1024), jnp.float32, sharding=sharded),
              "w2": jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=sharded)}
    x = jax.ShapeDtypeStruct((MICRO_BATCHES, 64, 512), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    def loss(p, xb):
        return jnp.mean(jnp.tanh(xb @ p["w1"]) @ p["w2"])

    @jax.jit
    def step(params, x):
        def body(acc, xb):
            return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, xb)), None

        acc, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), x)
        return jax.tree.map(lambda g: lax.with_sharding_constraint(g, sharded), acc)

    return Built(step, (params, x))


PROGRAMS: dict[str, Callable[[Mesh], Built]] = {
    "gspmd_accumulate": gspmd_accumulate,
    "needed_in_loop": needed_in_loop,
    "fsdp_accumulate": fsdp_accumulate,
    "nested": nested,
    "explicit_naive": explicit_naive,
    "explicit_reduced": explicit_reduced,
}
