"""Programs for the what-if tests, written as users write them, each with its hand-written fix,
and a recount of a compiled module's collectives written here (never shardscope's).

Each builder returns ``(step, args)`` with concrete arrays placed on the mesh; ``fixed=True``
gives the program with the fix a user would write (the reference the rewrite must equal).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MICRO = 4
"""Micro-batches of every accumulation loop."""


def _mesh(devices: int = 4, name: str = "data") -> Mesh:
    return Mesh(np.array(jax.devices()[:devices]), (name,))


def _data(shape: tuple[int, ...], seed: int, dtype: Any = np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.complexfloating):
        return ((rng.normal(size=shape) + 1j * rng.normal(size=shape)) * 0.3).astype(dtype)
    return (rng.normal(size=shape) * 0.3).astype(dtype)


def _place(mesh: Mesh, tree: Any, spec: P) -> Any:
    return jax.tree.map(lambda a: jax.device_put(a, NamedSharding(mesh, spec)), tree)


def _shard_map_step(local: Callable, mesh: Mesh) -> Callable:
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P()))


def _accumulate(loss: Callable, fixed: bool, devices: int) -> Callable:
    """The micro-batch accumulation inside ``shard_map``, naive or fixed; each device's loss is its
    share of the global mean (divided by the devices) so both give the global gradient."""

    def local(params, xs, ys):
        model = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params) if fixed else params

        def body(acc, batch):
            grads = jax.grad(lambda p, x, y: loss(p, x, y) / devices)(model, *batch)
            return jax.tree.map(jnp.add, acc, grads), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        if fixed:
            zeros = jax.tree.map(lambda z: lax.pcast(z, "data", to="varying"), zeros)
        grads, _ = lax.scan(body, zeros, (xs, ys))
        return lax.psum(grads, "data") if fixed else grads

    return local


# --------------------------------------------------------------------------- deferrable programs


def nested_pytree(fixed: bool = False) -> tuple[Callable, tuple]:
    """A two-layer MLP whose parameters are a nested pytree: ``{"layers": [{"w", "b"}, ...], "out"}``."""
    mesh = _mesh()

    def loss(params, x, y):
        h = x
        for layer in params["layers"]:
            h = jnp.tanh(h @ layer["w"] + layer["b"])
        return jnp.mean((h @ params["out"] - y) ** 2)

    params = {"layers": [{"w": _data((8, 16), 1), "b": _data((16,), 2)}, {"w": _data((16, 16), 3), "b": _data((16,), 4)}],
              "out": _data((16, 2), 5)}
    args = (_place(mesh, params, P()), _place(mesh, _data((MICRO, 32, 8), 6), P(None, "data")),
            _place(mesh, _data((MICRO, 32, 2), 7), P(None, "data")))
    return _shard_map_step(_accumulate(loss, fixed, 4), mesh), args


def complex_parameters(fixed: bool = False) -> tuple[Callable, tuple]:
    """A complex64 weight, a real loss: the gradient (and its all-reduce) is complex."""
    mesh = _mesh()

    def loss(params, x, y):
        return jnp.mean(jnp.abs(x @ params["W"] - y) ** 2)

    params = {"W": _data((8, 4), 8, np.complex64)}
    args = (_place(mesh, params, P()), _place(mesh, _data((MICRO, 32, 8), 9, np.complex64), P(None, "data")),
            _place(mesh, _data((MICRO, 32, 4), 10, np.complex64), P(None, "data")))
    return _shard_map_step(_accumulate(loss, fixed, 4), mesh), args


T = 5
"""Time steps of the RNN's own loop."""


def rnn(fixed: bool = False) -> tuple[Callable, tuple]:
    """An Elman RNN with its own ``lax.scan`` over ``T`` steps, its gradient accumulated over
    micro-batches: the recurrent weight's sum runs in the time loop inside the micro-batch loop."""
    mesh = _mesh()

    def loss(params, x, y):  # x: (batch, T, D)
        inputs = jnp.swapaxes(x, 0, 1) @ params["Wx"] + params["b"]

        def step(h, u):
            h = jnp.tanh(h @ params["Wh"] + u)
            return h, None

        h, _ = lax.scan(step, jnp.zeros_like(inputs[0]), inputs)
        return jnp.mean((h - y) ** 2)

    params = {"Wx": _data((3, 6), 11), "Wh": _data((6, 6), 12), "b": _data((6,), 13)}
    args = (_place(mesh, params, P()), _place(mesh, _data((MICRO, 16, T, 3), 14), P(None, "data")),
            _place(mesh, _data((MICRO, 16, 6), 15), P(None, "data")))
    return _shard_map_step(_accumulate(loss, fixed, 4), mesh), args


# --------------------------------------------------------------------------- programs a rewrite would break


def _grad_step(extra: Callable[[Any, Any, Any], Any], start: str = "zeros") -> tuple[Callable, tuple]:
    """``acc = extra(acc, grads, params)`` in a shard_map micro-batch loop (``grads`` summed inside)."""
    mesh = _mesh()

    def loss(W, x, y):
        return jnp.mean((jnp.tanh(x @ W) - y) ** 2)

    def local(W, xs, ys):
        def body(acc, batch):
            return extra(acc, jax.grad(loss)(W, *batch), W), None

        acc0 = jnp.zeros_like(W) if start == "zeros" else W
        acc, _ = lax.scan(body, acc0, (xs, ys))
        return acc

    args = (_place(mesh, _data((8, 4), 16), P()), _place(mesh, _data((MICRO, 32, 8), 17), P(None, "data")),
            _place(mesh, _data((MICRO, 32, 4), 18), P(None, "data")))
    return _shard_map_step(local, mesh), args


def weight_decay_added() -> tuple[Callable, tuple]:
    """Something else added into the accumulator: ``acc + grad + 0.01 * W`` (summed after the
    loop, the decay would count once per device)."""
    return _grad_step(lambda acc, g, W: acc + g + 0.01 * W)


def accumulator_from_the_weights() -> tuple[Callable, tuple]:
    """The accumulator starts from the weights, not zero (``W - lr * sum of grads``)."""
    return _grad_step(lambda acc, g, W: acc - 0.1 * g, start="weights")


def pmax_in_the_loop() -> tuple[Callable, tuple]:
    """A non-sum reduction accumulated: the max over devices of each micro-batch's gradient."""
    mesh = _mesh()

    def loss(W, x, y):
        return jnp.mean((jnp.tanh(x @ W) - y) ** 2)

    def local(W, xs, ys):
        W = lax.pcast(W, "data", to="varying")

        def body(acc, batch):
            return acc + lax.pmax(jax.grad(loss)(W, *batch), "data"), None

        acc, _ = lax.scan(body, jnp.zeros((8, 4), jnp.float32), (xs, ys))
        return acc

    args = (_place(mesh, _data((8, 4), 19), P()), _place(mesh, _data((MICRO, 32, 8), 20), P(None, "data")),
            _place(mesh, _data((MICRO, 32, 4), 21), P(None, "data")))
    return _shard_map_step(local, mesh), args


def normalised_every_step() -> tuple[Callable, tuple]:
    """The next iteration reads the reduced value: the hidden state is divided by its global norm."""
    mesh = _mesh()

    def local(h, xs):
        def body(h, x):
            h = jnp.tanh(h + x)
            return h / jnp.sqrt(lax.psum(jnp.sum(h * h), "data")), None

        h, _ = lax.scan(body, h, xs)
        return h

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P(None, "data")), out_specs=P("data")))
    args = (_place(mesh, _data((16, 4), 22), P("data")), _place(mesh, _data((MICRO, 16, 4), 23), P(None, "data")))
    return step, args


# --------------------------------------------------------------------------- loop-invariant programs


def gather_in_a_branch(fixed: bool = False) -> tuple[Callable, tuple]:
    """FSDP's gather of a sharded weight, inside a ``lax.cond`` branch the loop takes every
    other micro-batch: XLA's loop-invariant code motion does not look into conditionals, so the
    CPU module keeps it in the loop. ``fixed`` gathers once before the loop."""
    mesh = _mesh()

    def local(w_shard, xs):
        gathered = lax.all_gather(w_shard, "data", tiled=True) if fixed else None

        def body(carry, x):
            i, acc = carry
            full = (lambda: gathered) if fixed else (lambda: lax.all_gather(w_shard, "data", tiled=True))
            y = lax.cond(i % 2 == 0, lambda: x @ full(), lambda: x @ jnp.tile(w_shard, (4, 1)))
            return (i + 1, acc + jnp.tanh(y)), None

        acc0 = lax.pcast(jnp.zeros((xs.shape[1], 8), jnp.float32), "data", to="varying")
        return lax.scan(body, (0, acc0), xs)[0][1]

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P(None, "data")), out_specs=P("data")))
    args = (_place(mesh, _data((8, 8), 24), P("data")), _place(mesh, _data((MICRO, 16, 8), 25), P(None, "data")))
    return step, args


def gather_in_the_body() -> tuple[Callable, tuple]:
    """The same gather straight in the loop body: the CPU compiler already hoists it."""
    mesh = _mesh()

    def local(w_shard, xs):
        def body(acc, x):
            return acc + jnp.tanh(x @ lax.all_gather(w_shard, "data", tiled=True)), None

        acc0 = lax.pcast(jnp.zeros((xs.shape[1], 8), jnp.float32), "data", to="varying")
        return lax.scan(body, acc0, xs)[0]

    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("data"), P(None, "data")), out_specs=P("data")))
    args = (_place(mesh, _data((8, 8), 26), P("data")), _place(mesh, _data((MICRO, 16, 8), 27), P(None, "data")))
    return step, args


# --------------------------------------------------------------------------- jit steps that reshape the batch


BATCH, D_IN, D_HIDDEN = 64, 16, 32
"""The reshaped step's sizes: 64 rows over 8 devices, 4 micro-batches of 16 rows."""


def _reshaped_params(nested: bool) -> dict:
    if nested:
        # (a second bias makes XLA:CPU's partitioner gather the batch and compute every row on
        # every device: no sum left to move)
        return {"layers": [{"w": _data((D_IN, D_HIDDEN), 30), "b": _data((D_HIDDEN,), 31)},
                           {"w": _data((D_HIDDEN, D_HIDDEN), 32)}],
                "out": _data((D_HIDDEN, 1), 34)}
    return {"w1": _data((D_IN, D_HIDDEN), 30), "w2": _data((D_HIDDEN, 1), 34)}


def _layers(params: dict) -> tuple[list, Any]:
    """``[(w, b or None), ...]`` and the output weight, for either pytree."""
    if "layers" in params:
        return [(layer["w"], layer.get("b")) for layer in params["layers"]], params["out"]
    return [(params["w1"], None)], params["w2"]


def reshaped_loss(params, x, y):
    """Mean squared error of a tanh MLP on one micro-batch (either pytree)."""
    layers, out = _layers(params)
    h = x
    for w, b in layers:
        h = jnp.tanh(h @ w + (0.0 if b is None else b))
    return jnp.mean((h @ out - y) ** 2)


def reshaped_micro_batches(nested: bool = False, fixed: bool = False, flipped: bool = False) -> tuple[Callable, tuple]:
    """Issue 45's step: jit, the parameters replicated, the batch ``[B]`` split over ``data`` and
    reshaped ``[MICRO, B/MICRO]`` inside the step; each micro-batch's gradient and loss added
    into a ``lax.scan`` carry. ``nested``: the parameters are ``{"layers": [{"w", "b"}, {"w"}],
    "out"}``. ``fixed``: the fix as the shard_map route's snippet writes it (each device reshapes
    its own rows; the sums after the loop divided by the 8 devices, since each device's mean is
    over its own rows). ``flipped``: the batch reversed first (``jnp.flip``), which neither
    Explicit axes nor a per-device step splits."""
    mesh = _mesh(8)
    params = _reshaped_params(nested)
    args = (_place(mesh, params, P()), _place(mesh, _data((BATCH, D_IN), 35), P("data")),
            _place(mesh, _data((BATCH, 1), 36), P("data")))

    def accumulate(params, x, y, model, start):
        def micro_batch(carry, batch):
            grads, total = carry
            value, g = jax.value_and_grad(reshaped_loss)(model, *batch)
            return (jax.tree.map(jnp.add, grads, g), total + value), None

        xs, ys = x.reshape(MICRO, -1, D_IN), y.reshape(MICRO, -1, 1)
        (grads, total), _ = lax.scan(micro_batch, start, (xs, ys))
        return grads, total

    def step(params, x, y):
        x = jnp.flip(x, 0) if flipped else x
        grads, total = accumulate(params, x, y, params, (jax.tree.map(jnp.zeros_like, params), jnp.zeros(())))
        return jax.tree.map(lambda g: g / MICRO, grads), total / MICRO

    def step_fixed(params, x, y):
        local = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)
        start = jax.tree.map(lambda a: lax.pcast(a, "data", to="varying"),
                             (jax.tree.map(jnp.zeros_like, params), jnp.zeros(())))
        grads, total = accumulate(params, x, y, local, start)
        grads, total = jax.tree.map(lambda a: lax.psum(a, "data") / 8, (grads, total))
        return jax.tree.map(lambda g: g / MICRO, grads), total / MICRO

    if fixed:
        return jax.jit(jax.shard_map(step_fixed, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())), args
    return jax.jit(step), args


def reshaped_reference(params: Any, x: Any, y: Any) -> tuple[Any, float]:
    """The reshaped step's gradient and loss by hand in numpy (float64): micro-batch ``m`` is
    rows ``16m .. 16m+15``, its loss their mean squared error, backpropagated through the tanh
    layers; both averaged over the micro-batches."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    layers, out = _layers(jax.tree.map(f64, params))
    x, y = f64(x), f64(y)
    rows = BATCH // MICRO
    grads = jax.tree.map(np.zeros_like, jax.tree.map(f64, params))
    g_layers, g_out = _layers(grads)
    total = 0.0
    for m in range(MICRO):
        hs = [x[m * rows:(m + 1) * rows]]
        for w, b in layers:
            hs.append(np.tanh(hs[-1] @ w + (0.0 if b is None else b)))
        residual = hs[-1] @ out - y[m * rows:(m + 1) * rows]
        total += float(np.mean(residual ** 2))
        d = 2 * residual / residual.size
        g_out += hs[-1].T @ d
        dh = d @ out.T
        for k in reversed(range(len(layers))):
            dz = dh * (1 - hs[k + 1] ** 2)
            g_layers[k][0][...] += hs[k].T @ dz
            if g_layers[k][1] is not None:
                g_layers[k][1][...] += dz.sum(0)
            dh = dz @ layers[k][0].T
    return jax.tree.map(lambda g: g / MICRO, grads), total / MICRO


# --------------------------------------------------------------------------- recounting the compiled text


_KINDS = "all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|ragged-all-to-all"
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) [^\n]*\{\s*$", re.M)
# a tuple type holds no "=" but in the printer's /*index=5*/ marks (a combined all-reduce of 6 values or more)
_INSTRUCTION = re.compile(rf"^\s+(?:ROOT )?%?[\w.\-]+ = (?:\((?:[^=]|=\d+\*/)*?\)|\S+) ({_KINDS})(-start)?\(([^)]*)\)",
                          re.M)


def recount(text: str) -> dict[str, dict[str, int]]:
    """What a compiled module runs, counted from its text alone.

    ``{"instructions": {kind: n}, "in_loop": {kind: n}, "runs": {kind: runs per call},
    "value_runs": {kind: runs per call x values carried}}``. A computation runs as often as the
    ones that call it: a while body ``known_trip_count`` times, its condition once more, a
    conditional's branches at most once (counted once: an upper bound), a fusion or call once. ``in_loop`` counts instructions in computations reached through a while loop.
    """
    bodies = _computations(text)
    calls: dict[str, list[tuple[str, int, bool]]] = {name: [] for name in bodies}
    for name, body in bodies.items():
        for line in body.splitlines():
            trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
            if " while(" in line:
                n = int(trip.group(1)) if trip else 1
                calls[name] += [(re.search(r"body=%?([\w.\-]+)", line).group(1), n, True),
                                (re.search(r"condition=%?([\w.\-]+)", line).group(1), n + 1, True)]
                continue
            branches = re.search(r"branch_computations=\{([^}]*)\}", line)
            callees = re.findall(r"%?([\w.\-]+)", branches.group(1)) if branches else []
            callees += re.findall(r"(?:true_computation|false_computation|calls)=%?([\w.\-]+)", line)
            if re.search(r" call\(", line):  # a call's body is its to_apply (a reduction's is its combiner)
                callees += re.findall(r"to_apply=%?([\w.\-]+)", line)
            calls[name] += [(callee, 1, False) for callee in callees if callee in bodies]
    entry = next(name for name, body in bodies.items() if body.startswith("ENTRY"))
    runs: dict[str, tuple[int, bool]] = {}
    stack = [(entry, 1, False)]
    while stack:
        name, count, looped = stack.pop()
        before = runs.get(name, (0, False))
        runs[name] = (before[0] + count, before[1] or looped)
        stack += [(callee, count * n, looped or loop) for callee, n, loop in calls[name]]
    found: dict[str, dict[str, int]] = {"instructions": {}, "in_loop": {}, "runs": {}, "value_runs": {}}
    for name, body in bodies.items():
        count, looped = runs.get(name, (0, False))
        for match in _INSTRUCTION.finditer(body):
            kind, operands = match.group(1), len(re.findall(r"%[\w.\-]+", match.group(3))) or 1
            found["instructions"][kind] = found["instructions"].get(kind, 0) + 1
            if looped:
                found["in_loop"][kind] = found["in_loop"].get(kind, 0) + 1
            found["runs"][kind] = found["runs"].get(kind, 0) + count
            found["value_runs"][kind] = found["value_runs"].get(kind, 0) + count * operands
    return found


def _computations(text: str) -> dict[str, str]:
    """Each computation's text (its header line first) by name."""
    heads = list(_HEADER.finditer(text))
    return {m.group(2): text[m.start(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
            for i, m in enumerate(heads)}


def outputs(step: Callable, args: tuple) -> Any:
    """``step(*args)`` as numpy."""
    return jax.tree.map(np.asarray, step(*args))


def assert_same(a: Any, b: Any, rtol: float = 2e-5) -> None:
    """Every leaf of ``a`` equals ``b``'s within ``rtol`` of the largest entry (numpy's own check)."""
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b) and len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b):
        scale = max(float(np.max(np.abs(x), initial=0.0)), 1e-30)
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=0, atol=rtol * scale)
