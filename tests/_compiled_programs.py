"""Real-style sharded programs for the compiled-plan tests, written as users write them.

Each builder returns a :class:`Case`: the jitted step, its (placed) arguments, the mesh and the
style (``auto``: jit with shardings on Auto axes, ``explicit``: Explicit axes, ``shard_map``).
:func:`compiled_text` compiles a case (inside ``jax.set_mesh`` for Explicit axes) and
:func:`recount` counts what the text says with a few regular expressions written here, so a
test's expected numbers never come from shardscope.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MICRO = 4
"""Micro-batches of every accumulation loop (the while loop's trip count)."""


@dataclass(frozen=True)
class Case:
    """A program to compile: ``fn(*args)`` on ``mesh``, in one of three styles."""

    name: str
    fn: Callable
    args: tuple
    mesh: Mesh
    style: str
    notes: dict = field(default_factory=dict)

    def context(self) -> contextlib.AbstractContextManager:
        """The mesh context Explicit axes need while tracing, compiling and running."""
        return jax.set_mesh(self.mesh) if self.style == "explicit" else contextlib.nullcontext()

    def run(self) -> Any:
        """``fn(*args)`` as numpy."""
        with self.context():
            return jax.tree.map(np.asarray, self.fn(*self.args))


def shardy_modes() -> list[bool | None]:
    """``[True, False]`` where this JAX has the Shardy flag, else ``[None]`` (one partitioner)."""
    return [True, False] if hasattr(jax.config, "jax_use_shardy_partitioner") else [None]


@contextlib.contextmanager
def partitioner(shardy: bool | None):
    """Compile with Shardy on or off (``None``: leave the flag as it is)."""
    if shardy is None:
        yield
        return
    before = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", shardy)
    try:
        yield
    finally:
        jax.config.update("jax_use_shardy_partitioner", before)


def mesh_2d() -> Mesh:
    """``data=4, model=2`` over the 8 CPU devices (Auto axes)."""
    return Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))


def explicit_mesh() -> Mesh:
    """``data=4, model=2`` with Explicit axes."""
    from jax.sharding import AxisType

    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2,
                         devices=jax.devices()[:8])


def _data(shape: tuple[int, ...], seed: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape).astype(np.float32) * 0.3)


def _mlp_loss(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["W"])
    return jnp.mean((h @ params["V"] - y) ** 2)


def _params() -> dict:
    return {"W": _data((16, 32), 1), "V": _data((32, 8), 2)}


def _batches(micro: int = MICRO, batch: int = 32) -> tuple[jax.Array, jax.Array]:
    return _data((micro, batch, 16), 3), _data((micro, batch, 8), 4)


def _placed(mesh: Mesh, xs: jax.Array, ys: jax.Array) -> tuple:
    """The MLP's parameters replicated and the micro-batches split over ``data``, on ``mesh``."""
    return (jax.device_put(_params(), NamedSharding(mesh, P())),
            jax.device_put(xs, NamedSharding(mesh, P(None, "data"))),
            jax.device_put(ys, NamedSharding(mesh, P(None, "data"))))


# --------------------------------------------------------------------------- jit + shardings (Auto)


def gspmd_accumulate(micro: int = MICRO) -> Case:
    """Params replicated, batch sharded over ``data``, ``jax.grad`` added into a scan carry."""
    mesh = mesh_2d()

    @jax.jit
    def step(params, xs, ys):
        def body(acc, xy):
            grads = jax.grad(_mlp_loss)(params, *xy)
            return jax.tree.map(jnp.add, acc, grads), None

        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        return grads

    args = _placed(mesh, *_batches(micro))
    return Case("gspmd_accumulate", step, args, mesh, "auto")


def reference_gradient(params: dict, xs: jax.Array, ys: jax.Array) -> dict:
    """The accumulated gradient of :func:`gspmd_accumulate`, computed on one device with numpy inputs."""
    params, xs, ys = jax.tree.map(np.asarray, (params, xs, ys))
    total = jax.tree.map(np.zeros_like, params)
    for x, y in zip(xs, ys):
        total = jax.tree.map(np.add, total, _host_grad(params, x, y))
    return total


def _host_grad(params: dict, x: np.ndarray, y: np.ndarray) -> dict:
    """The MLP loss's gradient by hand in numpy (an independent derivation)."""
    W, V = params["W"].astype(np.float64), params["V"].astype(np.float64)
    x, y = x.astype(np.float64), y.astype(np.float64)
    a = x @ W
    h = np.tanh(a)
    out = h @ V
    d_out = 2 * (out - y) / out.size
    dV = h.T @ d_out
    dh = d_out @ V.T
    dW = x.T @ (dh * (1 - h**2))
    return {"V": dV, "W": dW}


def fsdp_accumulate() -> Case:
    """FSDP through shardings: params sharded over ``data`` on their first axis, batch over ``data``."""
    mesh = mesh_2d()

    @jax.jit
    def step(params, xs, ys):
        def body(acc, xy):
            grads = jax.grad(_mlp_loss)(params, *xy)
            return jax.tree.map(jnp.add, acc, grads), None

        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        return grads

    xs, ys = _batches()
    args = (jax.device_put(_params(), NamedSharding(mesh, P("data", None))),
            jax.device_put(xs, NamedSharding(mesh, P(None, "data"))),
            jax.device_put(ys, NamedSharding(mesh, P(None, "data"))))
    return Case("fsdp_accumulate", step, args, mesh, "auto")


def tp_constraint() -> Case:
    """Tensor parallelism through ``with_sharding_constraint``: column- then row-parallel matmuls."""
    mesh = mesh_2d()

    @jax.jit
    def forward(w1, w2, x):
        h = jnp.tanh(x @ w1)
        h = lax.with_sharding_constraint(h, NamedSharding(mesh, P("data", "model")))
        y = h @ w2
        return lax.with_sharding_constraint(y, NamedSharding(mesh, P("data", None)))

    args = (jax.device_put(_data((16, 64), 5), NamedSharding(mesh, P(None, "model"))),
            jax.device_put(_data((64, 16), 6), NamedSharding(mesh, P("model", None))),
            jax.device_put(_data((32, 16), 7), NamedSharding(mesh, P("data", None))))
    return Case("tp_constraint", forward, args, mesh, "auto")


def tp_residual_grad(micro: bool) -> Case:
    """A residual stack scanned over layers with the weights sharded over ``model`` (column- then
    row-parallel), differentiated with ``jax.grad``: ``h = h + tanh(h @ wa) @ wb``. Each layer's
    partial sum over ``model`` is all-reduced and added into ``h`` (forward) or into its gradient
    (backward), which the next layer multiplies. With ``micro``, the layer scan runs inside a
    ``lax.scan`` over micro-batches split over ``data``, the weights' gradients accumulated."""
    mesh = mesh_2d()
    layers, width, hidden = 3, 8, 16

    def loss(wa, wb, x):
        def layer(h, w):
            a, b = w
            return h + jnp.tanh(h @ a) @ b, None

        h, _ = lax.scan(layer, x, (wa, wb))
        return jnp.mean(h ** 2)

    if micro:
        @jax.jit
        def step(wa, wb, xs):
            def one(acc, x):
                grads = jax.grad(loss, argnums=(0, 1))(wa, wb, x)
                return jax.tree.map(jnp.add, acc, grads), None

            grads, _ = lax.scan(one, (jnp.zeros_like(wa), jnp.zeros_like(wb)), xs)
            return grads

        x = jax.device_put(_data((MICRO, 8, width), 11), NamedSharding(mesh, P(None, "data", None)))
    else:
        step = jax.jit(jax.grad(loss, argnums=(0, 1)))
        x = jax.device_put(_data((8, width), 11), NamedSharding(mesh, P()))
    args = (jax.device_put(_data((layers, width, hidden), 12) * 0.1, NamedSharding(mesh, P(None, None, "model"))),
            jax.device_put(_data((layers, hidden, width), 13) * 0.1, NamedSharding(mesh, P(None, "model", None))), x)
    return Case(f"tp_residual_grad{'_micro' if micro else ''}", step, args, mesh, "auto", {"layers": layers})


def scan_over_layers(accumulate: bool) -> Case:
    """Layers stacked and scanned over (as MaxText does); with ``accumulate``, micro-batches too.

    Each layer's gradient is written into its own slot of the stacked gradient by the backward
    scan (a dynamic-update-slice per layer): summing it inside that loop is needed there.
    """
    mesh = mesh_2d()
    layers, width = 3, 16

    def loss(stack, x):
        def layer(h, w):
            return jnp.tanh(h @ w), None

        h, _ = lax.scan(layer, x, stack)
        return jnp.mean(h**2)

    if accumulate:
        @jax.jit
        def step(stack, xs):
            def body(acc, x):
                return acc + jax.grad(loss)(stack, x), None

            grads, _ = lax.scan(body, jnp.zeros_like(stack), xs)
            return grads

        xs = _data((MICRO, 32, width), 9)
    else:
        step = jax.jit(jax.grad(loss))
        xs = _data((32, width), 9)
    spec = P(None, "data") if accumulate else P("data")
    args = (jax.device_put(_data((layers, width, width), 8), NamedSharding(mesh, P())),
            jax.device_put(xs, NamedSharding(mesh, spec)))
    return Case(f"scan_over_layers{'_accumulate' if accumulate else ''}", step, args, mesh, "auto",
                {"layers": layers})


# --------------------------------------------------------------------------- Explicit axes


def explicit_accumulate(fixed: bool) -> Case:
    """Explicit axes: the naive loop, or the reduced/unreduced route (one all-reduce at the root)."""
    mesh = explicit_mesh()

    def loss(W, x, y):
        return jnp.mean((jnp.tanh(x @ W) - y) ** 2)

    def naive(W, xs, ys):
        def body(acc, xy):
            return acc + jax.grad(loss)(W, *xy), None

        acc, _ = lax.scan(body, jnp.zeros_like(W), (xs, ys))
        return acc

    def deferred(W, xs, ys):
        Wr = jax.reshard(W, P(None, None, reduced={"data"}))

        def body(acc, xy):
            return acc + jax.grad(loss)(Wr, *xy), None

        acc0 = jax.reshard(jnp.zeros_like(W), P(None, None, unreduced={"data"}))
        acc, _ = lax.scan(body, acc0, (xs, ys))
        return jax.reshard(acc, P(None, None))

    with jax.set_mesh(mesh):
        args = (jax.device_put(_data((16, 8), 10), P()),
                jax.device_put(_data((MICRO, 32, 16), 11), P(None, "data")),
                jax.device_put(_data((MICRO, 32, 8), 12), P(None, "data")))
    fn = jax.jit(deferred if fixed else naive)
    return Case(f"explicit_accumulate{'_fixed' if fixed else ''}", fn, args, mesh, "explicit")


# --------------------------------------------------------------------------- shard_map


def shard_map_accumulate(fixed: bool) -> Case:
    """The accumulation loop inside ``shard_map``: naive (psum_invariant per micro-batch) or fixed."""
    mesh = mesh_2d()
    devices = mesh.shape["data"]

    def local(params, xs, ys):
        if fixed:
            params = lax.pcast(params, "data", to="varying")

        def body(acc, xy):  # each device's mean over its rows, over the devices: the global mean
            grads = jax.grad(lambda p, x, y: _mlp_loss(p, x, y) / devices)(params, *xy)
            return jax.tree.map(jnp.add, acc, grads), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        grads, _ = lax.scan(body, zeros, (xs, ys))
        return lax.psum(grads, "data") if fixed else grads

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")),
                                 out_specs=P(), axis_names={"data"}))
    args = _placed(mesh, *_batches())
    return Case(f"shard_map_accumulate{'_fixed' if fixed else ''}", step, args, mesh, "shard_map")


def shard_map_dead_collectives() -> Case:
    """A shard_map step whose loss ``pmean`` (under ``jax.grad``), ``ppermute`` and inverse
    ``all_to_all`` nothing uses: the compiler removes them; the gradient's all-reduce remains."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))

    def local(W, x):
        def loss(W):
            value = jnp.mean(jnp.tanh(x @ W) ** 2)
            return lax.pmean(value, "data")  # the loss value: jax.grad discards it

        grad = jax.grad(loss)(W)  # summed over devices already: the transpose of W's implicit pvary
        lax.ppermute(x, "data", [(i, (i + 1) % 4) for i in range(4)])  # discarded
        lax.all_to_all(x, "data", 0, 1, tiled=True)  # discarded
        return grad

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data")), out_specs=P()))
    args = (jax.device_put(_data((16, 8), 13), NamedSharding(mesh, P())),
            jax.device_put(_data((32, 16), 14), NamedSharding(mesh, P("data"))))
    return Case("shard_map_dead_collectives", step, args, mesh, "shard_map")


def tp_shard_map_outside_sum() -> Case:
    """A column-parallel ``shard_map`` whose out_specs leave the activation sharded over ``model``:
    the sum the jitted code takes of it is an all-reduce the partitioner writes."""
    mesh = mesh_2d()

    def local(w1, x):
        return jnp.tanh(x @ w1)

    @jax.jit
    def forward(w1, x):
        h = jax.shard_map(local, mesh=mesh, in_specs=(P(None, "model"), P("data")), out_specs=P("data", "model"))(w1, x)
        return jnp.sum(h, axis=1)

    args = (jax.device_put(_data((16, 64), 15), NamedSharding(mesh, P(None, "model"))),
            jax.device_put(_data((32, 16), 16), NamedSharding(mesh, P("data"))))
    return Case("tp_shard_map_outside_sum", forward, args, mesh, "shard_map")


# --------------------------------------------------------------------------- equinox


def equinox_step() -> Case:
    """An equinox MLP trained under ``eqx.filter_jit`` with a sharded batch and 4 micro-batches."""
    import equinox as eqx

    mesh = mesh_2d()
    model = eqx.nn.MLP(16, 8, 32, 2, key=jax.random.key(0))
    model = eqx.filter_shard(model, NamedSharding(mesh, P()))

    @eqx.filter_jit
    def step(model, xs, ys):
        def loss(model, x, y):
            return jnp.mean((jax.vmap(model)(x) - y) ** 2)

        def body(acc, xy):
            grads = eqx.filter_grad(loss)(model, *xy)
            return jax.tree.map(jnp.add, acc, grads), None

        params, static = eqx.partition(model, eqx.is_array)
        zeros = jax.tree.map(jnp.zeros_like, params)
        grads, _ = lax.scan(body, zeros, (xs, ys))
        return grads

    xs, ys = _batches()
    args = (model, jax.device_put(xs, NamedSharding(mesh, P(None, "data"))),
            jax.device_put(ys, NamedSharding(mesh, P(None, "data"))))
    return Case("equinox_step", step, args, mesh, "auto")


# --------------------------------------------------------------------------- compiling and recounting


@functools.lru_cache(maxsize=None)
def _compiled(builder: Callable, key: tuple, shardy: bool | None) -> tuple[Case, Any, Any]:
    case = builder(*key)
    with partitioner(shardy), case.context():
        if hasattr(case.fn, "trace"):
            traced = case.fn.trace(*case.args)
            compiled = traced.lower().compile()
        else:  # eqx.filter_jit: lowers, does not trace
            traced, compiled = None, case.fn.lower(*case.args).compile().compiled
    return case, traced, compiled


def compile_case(builder: Callable, *key: Any, shardy: bool | None = None) -> tuple[Case, Any, Any]:
    """``(case, traced, compiled)`` for ``builder(*key)``, cached per partitioner setting."""
    return _compiled(builder, key, shardy)


def compiled_text(builder: Callable, *key: Any, shardy: bool | None = None) -> str:
    """The compiled module's text of ``builder(*key)``."""
    return compile_case(builder, *key, shardy=shardy)[2].as_text()


_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", re.M)
_COLLECTIVE = re.compile(
    r"^\s+(?:ROOT )?%?([\w.\-]+) = .*? (all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute"
    r"|collective-broadcast|ragged-all-to-all)(-start)?\(", re.M)


def recount(text: str) -> dict[str, Any]:
    """What the text holds, counted independently of shardscope.

    ``{"collectives": {kind: instructions}, "in_while": {kind: instructions in a while body},
    "runs": {kind: runs per call}}``: a collective's computation is a while body when some
    ``while(...)`` names it as ``body=``; runs multiply the bodies' trip counts (one level of
    nesting through the while's own computation being a body too). Collectives in async
    wrappers are found by their ``-start`` opcode or inside the wrapped computation.
    """
    spans = [(m.start(), m.group(1)) for m in _COMPUTATION.finditer(text)]
    bodies: dict[str, int] = {}
    parent_of_body: dict[str, str] = {}
    for m in re.finditer(r"^\s+(?:ROOT )?%?[\w.\-]+ = [^\n]* while\([^\n]*", text, re.M):
        line = m.group(0)
        body = re.search(r"body=%?([\w.\-]+)", line).group(1)
        trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
        bodies[body] = int(trip.group(1)) if trip else -1
        parent_of_body[body] = _enclosing(spans, m.start())
    counts: dict[str, int] = {}
    in_while: dict[str, int] = {}
    runs: dict[str, int] = {}
    for m in _COLLECTIVE.finditer(text):
        kind = m.group(2)
        where = _enclosing(spans, m.start())
        counts[kind] = counts.get(kind, 0) + 1
        trips, computation = 1, where
        while computation in bodies:
            trips *= bodies[computation]
            computation = parent_of_body[computation]
        if where in bodies:
            in_while[kind] = in_while.get(kind, 0) + 1
        runs[kind] = runs.get(kind, 0) + trips
    return {"collectives": counts, "in_while": in_while, "runs": runs}


def _enclosing(spans: list[tuple[int, str]], position: int) -> str:
    name = ""
    for start, computation in spans:
        if start > position:
            break
        name = computation
    return name


def contracted_matmul(axes: tuple[str, ...] = ("model",), permuted: bool = False) -> Case:
    """``a @ b`` with the contracted dimension sharded over ``axes``: the partitioner sums the
    partial products with an all-reduce over exactly those axes. ``permuted``: the mesh lists
    the devices in another order (the groups name positions in the mesh, not device ids)."""
    devices = np.array(jax.devices()[:8])
    if permuted:
        devices = devices[[3, 0, 6, 1, 7, 2, 5, 4]]
    mesh = Mesh(devices.reshape(4, 2), ("data", "model"))
    spec = axes if len(axes) > 1 else axes[0]
    args = (jax.device_put(_data((8, 16), 17), NamedSharding(mesh, P(None, spec))),
            jax.device_put(_data((16, 8), 18), NamedSharding(mesh, P(spec, None))))
    return Case(f"contracted_matmul_{'_'.join(axes)}{'_permuted' if permuted else ''}", jax.jit(jnp.matmul), args, mesh, "auto")


def shard_map_fsdp_gather_in_loop() -> Case:
    """FSDP under ``shard_map``: each micro-batch all-gathers the sharded weight again, although
    it does not change inside the loop (loop-invariant)."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))

    def local(w_shard, xs):
        def body(acc, x):
            w = lax.all_gather(w_shard, "data", tiled=True)
            return acc + jnp.sum(jnp.tanh(x @ w)), None

        total, _ = lax.scan(body, lax.pcast(jnp.zeros((), jnp.float32), "data", to="varying"), xs)
        return lax.psum(total, "data")

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P(None, "data")), out_specs=P()))
    args = (jax.device_put(_data((16, 8), 19), NamedSharding(mesh, P("data"))),
            jax.device_put(_data((MICRO, 32, 16), 20), NamedSharding(mesh, P(None, "data"))))
    return Case("shard_map_fsdp_gather_in_loop", step, args, mesh, "shard_map")


def shard_map_while_and_cond() -> Case:
    """A psum in a ``while_loop`` with a bound known only at run time, and one in a ``cond`` branch."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))

    def local(x, n):
        def body(carry):
            i, v = carry
            return i + 1, lax.pcast(lax.psum(v, "data") * 0.5, "data", to="varying")

        _, v = lax.while_loop(lambda c: c[0] < n, body, (0, x))
        return lax.cond(n > 2, lambda v: lax.pcast(lax.psum(v, "data"), "data", to="varying"), lambda v: v * 2.0, v)

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P()), out_specs=P("data")))
    args = (jax.device_put(_data((8, 4), 21), NamedSharding(mesh, P("data"))), jnp.asarray(3))
    return Case("shard_map_while_and_cond", step, args, mesh, "shard_map")


def shard_map_invariant_psum_in_loop() -> Case:
    """A ``psum`` of a value the loop never changes (a weight's norm), taken in every iteration."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))

    def local(w_shard, xs):
        def body(acc, x):
            scale = lax.psum(jnp.sum(w_shard**2), "data")
            return acc + jnp.sum(x) / scale, None

        total, _ = lax.scan(body, lax.pcast(jnp.zeros((), jnp.float32), "data", to="varying"), xs)
        return lax.psum(total, "data")

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P(None, "data")), out_specs=P()))
    args = (jax.device_put(_data((16, 8), 22), NamedSharding(mesh, P("data"))),
            jax.device_put(_data((MICRO, 32, 16), 23), NamedSharding(mesh, P(None, "data"))))
    return Case("shard_map_invariant_psum_in_loop", step, args, mesh, "shard_map")


def _loss_and_grad_body(params, xy, scale, square: str = ""):
    """One micro-batch's loss and gradient (``scale`` times the loss: 1, or 1/devices in a
    shard_map); ``square``: ``"grads"`` or ``"loss"`` is squared (not linear in its sum)."""
    loss, grads = jax.value_and_grad(lambda p, x, y: _mlp_loss(p, x, y) * scale)(params, *xy)
    if square == "grads":
        grads = jax.tree.map(jnp.square, grads)
    return (jnp.square(loss) if square == "loss" else loss), grads


def gspmd_loss_and_grad_accumulate(square: str = "") -> Case:
    """The usual training loop under jit with shardings: the loss accumulated beside the
    gradients (``acc_loss + loss``: the mean's 1/N multiplies the all-reduced sum before the
    add, and XLA combines the loss's all-reduce with the gradients'). ``square``: the carry
    adds the square of the gradients (or of the loss) instead, which is not linear in the sum."""
    mesh = mesh_2d()

    @jax.jit
    def step(params, xs, ys):
        def body(acc, xy):
            loss, grads = _loss_and_grad_body(params, xy, 1.0, square)
            return (acc[0] + loss, jax.tree.map(jnp.add, acc[1], grads)), None

        (loss, grads), _ = lax.scan(body, (jnp.float32(0), jax.tree.map(jnp.zeros_like, params)), (xs, ys))
        return loss / MICRO, grads

    args = _placed(mesh, *_batches())
    return Case(f"gspmd_loss_and_grad{f'_square_{square}' if square else ''}", step, args, mesh, "auto")


def shard_map_loss_and_grad_accumulate() -> Case:
    """The same loop inside ``shard_map``: the gradient's ``psum_invariant`` and the loss's
    ``pmean`` in each iteration, combined by XLA into one all-reduce whose ``op_name`` is the
    two ops' merged (``.../(psum_invariant:transpose(jvp())/psum_invariant)``)."""
    mesh = mesh_2d()
    devices = mesh.shape["data"]

    def local(params, xs, ys):
        def body(acc, xy):
            loss, grads = _loss_and_grad_body(params, xy, 1.0 / devices)
            return (acc[0] + lax.psum(loss, "data"), jax.tree.map(jnp.add, acc[1], grads)), None

        (loss, grads), _ = lax.scan(body, (jnp.float32(0), jax.tree.map(jnp.zeros_like, params)), (xs, ys))
        return loss, grads

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")),
                                 out_specs=P(), axis_names={"data"}))
    args = _placed(mesh, *_batches())
    return Case("shard_map_loss_and_grad", step, args, mesh, "shard_map")
