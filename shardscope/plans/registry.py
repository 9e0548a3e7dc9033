"""The plans: a registry of plan values, and the jitted programs and inputs of one :class:`Settings`.

A :class:`Plan` is a value: a name, a one-line description, how its per-device body is built
(:mod:`shardscope.plans.bodies`), its ``in_specs``/``out_specs`` and what it needs. :data:`PLANS` is
the registry; the core, the CLI, the JSON and every view iterate over the plans an analysis
holds, never over literal names. The reference (the unchunked VJP) is not a plan: every plan's
gradient is checked against it.

All shard_maps trace with ``check_vma=True``: without it the naive all-reduce silently
disappears and the gradient is wrong.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh as JaxMesh, NamedSharding, PartitionSpec as P
from jax.stages import Traced, Wrapped

from shardscope.errors import SettingsError, ShardscopeError, TraceError
from shardscope.failures import first_line, model_error, trace_error
from shardscope.measure import timing
from shardscope.plans import bodies
from shardscope.plans.bodies import Layout, Split
from shardscope.config.mesh import Mesh
from shardscope.config.settings import Settings
from shardscope.config.shapes import Shapes, resolve_shapes
from shardscope.sources import prng_keys
from shardscope.sources.demos import DemoFunction
from shardscope.sources.examples import batch_size, check_fits, materialize

REFERENCE = "reference"
"""The name of the unchunked VJP's program in :attr:`Plans.functions`."""


@dataclass(frozen=True)
class Plan:
    """One way to chunk the VJP: a value the registry holds and every layer iterates over.

    ``role`` is ``baseline`` (what users write first), ``candidate`` (a plan that defers the
    reduction; the comparison picks the best one) or ``floor`` (a yardstick that skips the
    reduction, for benchmarks). ``unavailable(layout)`` says why the plan cannot be built here,
    or None. ``gradient(output)`` turns the program's output into the gradient the reference
    check compares (the floor returns stacked partials).
    """

    name: str
    description: str
    body: Callable[[Layout], Callable]
    role: str = "candidate"
    unavailable: Callable[[Layout], str | None] = field(default=lambda layout: None)
    stacked_output: bool = False

    def in_specs(self, layout: Layout, param_specs: Any) -> tuple:  # a pytree of PartitionSpec like params
        """``(params, x, v)`` specs: params as declared, the batch split over the batch axes."""
        return (param_specs, P(layout.batch_axes), P(layout.batch_axes))

    def out_specs(self, layout: Layout, param_specs: Any) -> Any:  # pytrees of PartitionSpec like params
        """The gradient comes out sharded as its parameter (stacked over the batch axes for a floor)."""
        if self.stacked_output:
            return jax.tree.map(lambda _: P(layout.batch_axes), param_specs, is_leaf=lambda s: isinstance(s, P))
        return param_specs

    def gradient(self, output: Any) -> Any:  # pytrees like the user's params
        """The gradient the program's ``output`` stands for."""
        if self.stacked_output:
            return jax.tree.map(lambda g: np.asarray(g).sum(axis=0), output)
        return output


def _reduced_unavailable(layout: Layout) -> str | None:
    """Why JAX's reduced/unreduced types cannot build this plan here, or None."""
    if not reduced_types_supported():
        return f"jax {jax.__version__} has no reduced/unreduced types (lax.pcast(..., to='reduced'))"
    if layout.sharded:
        return "sharded parameters: the reduced plan covers replicated parameters only"
    return None


@functools.lru_cache(maxsize=None)
def reduced_types_supported() -> bool:
    """True when ``lax.pcast(..., to='reduced')`` traces here (jax 0.10 and later): probed once."""
    try:
        mesh = JaxMesh(np.array(jax.devices()[:1]), ("_probe",))
        probe = jax.shard_map(_probe_reduced, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=True)
        jax.eval_shape(probe, jax.ShapeDtypeStruct((1,), jnp.float32))
    except Exception:
        return False
    return True


def _probe_reduced(w: jax.Array) -> jax.Array:
    """Both casts the reduced plan makes, and the psum of an unreduced value."""
    jax.lax.pcast(w, "_probe", to="reduced")
    unreduced = jax.lax.pcast(jax.lax.pcast(w, "_probe", to="varying"), "_probe", to="unreduced")
    return jax.lax.psum(unreduced, "_probe")


NAIVE = Plan(
    "naive",
    "params invariant in the loop: every chunk's gradient is reduced",
    bodies.naive,
    role="baseline",
)
DEFERRED = Plan(
    "deferred",
    "params cast to varying before the loop: one reduction after it",
    bodies.deferred,
)
REDUCED = Plan(
    "reduced",
    "JAX's reduced/unreduced types: one unreduced_psum after the loop",
    bodies.reduced,
    unavailable=_reduced_unavailable,
)
FLOOR = Plan(
    "floor",
    "the deferred plan without its reduction: compute only, no collectives",
    bodies.floor,
    role="floor",
    stacked_output=True,
)

PLANS: tuple[Plan, ...] = (NAIVE, DEFERRED, REDUCED)
"""The plans every analysis builds (where they are available), in display order."""

PLAN_NAMES = tuple(p.name for p in PLANS)


@dataclass(frozen=True)
class Plans:
    """The jitted programs and the concrete, already placed inputs they run on.

    ``functions`` holds one program per plan that could be built, plus the reference;
    ``unavailable`` maps each plan that could not to the reason.
    """

    shapes: Shapes
    mesh: JaxMesh
    plans: dict[str, Plan]
    functions: dict[str, Wrapped]
    args: tuple[Any, Any, Any]  # params, x, v
    unavailable: dict[str, str]
    layout: Layout


def param_partition_specs(param_specs: Any, params: Any, mesh: Mesh) -> Any:  # pytrees: the user's params and their specs
    """``param_specs`` filled in (None: every leaf replicated) and checked against ``params``."""
    if param_specs is None:
        return jax.tree.map(lambda _: P(), params)
    try:
        specs = jax.tree.map(lambda _, s: s, params, param_specs, is_leaf=lambda s: isinstance(s, P))
    except (ValueError, TypeError) as exc:
        raise SettingsError(
            f"param_specs does not match the structure of params: {exc}",
            "give param_specs the same pytree structure as params, with a PartitionSpec per leaf",
        ) from None
    for leaf, spec in zip(jax.tree.leaves(params), jax.tree.leaves(specs, is_leaf=lambda s: isinstance(s, P))):
        if not isinstance(spec, P):
            raise SettingsError(f"param_specs holds {spec!r}, not a PartitionSpec.", "use jax.sharding.PartitionSpec")
        for dim, axes in enumerate(_spec_dims(spec, np.ndim(leaf))):
            missing = [axis for axis in axes if axis not in mesh.names]
            if missing:
                example = ",".join(f"{axis}=2" for axis in missing)
                raise SettingsError(
                    f"param_specs names {', '.join(map(repr, missing))}, which the mesh {mesh.text()} does not have.",
                    f"give a mesh with that axis (e.g. --mesh {example}), or no mesh at all to run on the demo's own",
                )
            size = mesh.size_of(axes)
            if np.shape(leaf)[dim] % size:
                raise SettingsError(
                    f"A parameter of shape {np.shape(leaf)} does not split over {size} devices along axis {dim} ({spec}).",
                    f"pick a mesh whose axes {','.join(axes)} divide {np.shape(leaf)[dim]}, or replicate that leaf",
                )
    return specs


def _spec_dims(spec: P, ndim: int) -> tuple[tuple[str, ...], ...]:
    """Per array dimension, the mesh axes a ``PartitionSpec`` splits it over."""
    dims = []
    for k in range(ndim):
        entry = spec[k] if k < len(spec) else None
        dims.append(() if entry is None else tuple(entry) if isinstance(entry, (tuple, list)) else (entry,))
    return tuple(dims)


def build_plans(demo_fn: DemoFunction, settings: Settings, plans: tuple[Plan, ...] = PLANS) -> Plans:
    """Check the settings, make the inputs and the jitted programs of ``plans`` for ``demo_fn``."""
    f = demo_fn.fn
    batch = batch_size(demo_fn.spec.x)
    replicated = getattr(demo_fn.spec, "param_specs", None) is None  # else sharded: no copy per device
    check_fits(demo_fn.spec.params, demo_fn.spec.x, settings.mesh.devices if replicated else 1)
    shapes = resolve_shapes(batch, settings, len(jax.devices()))
    params = materialize(demo_fn.spec.params, demo_fn.spec.seed)  # only once the sizes are known to fit
    x = materialize(demo_fn.spec.x, demo_fn.spec.seed + 1)
    _check_params(params)
    out = _output_shape(f, params, x, shapes.batch, settings.mesh.names[0])
    v = materialize(out, demo_fn.spec.seed + 2)

    spec_mesh = settings.mesh
    mesh = JaxMesh(np.array(jax.devices()[: spec_mesh.devices]).reshape(spec_mesh.sizes), spec_mesh.names)
    param_specs = param_partition_specs(getattr(demo_fn.spec, "param_specs", None), params, spec_mesh)
    splits = jax.tree.map(lambda leaf, s: Split(_spec_dims(s, np.ndim(leaf))), params, param_specs)
    layout = Layout(f, shapes, shapes.batch_axes, splits)
    batch_sharding = NamedSharding(mesh, P(shapes.batch_axes))
    args = (
        jax.tree.map(lambda p, s: jax.device_put(p, NamedSharding(mesh, s)), params, param_specs),
        jax.device_put(x, batch_sharding),
        jax.device_put(v, batch_sharding),
    )

    functions: dict[str, Wrapped] = {}
    unavailable: dict[str, str] = {}
    for plan in plans:
        reason = plan.unavailable(layout)
        if reason is not None:
            unavailable[plan.name] = reason
            continue
        functions[plan.name] = jax.jit(
            jax.shard_map(
                plan.body(layout),
                mesh=mesh,
                in_specs=plan.in_specs(layout, param_specs),
                out_specs=plan.out_specs(layout, param_specs),
                check_vma=True,
            )
        )
    grad_shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), param_specs, is_leaf=lambda s: isinstance(s, P))
    functions[REFERENCE] = jax.jit(bodies.reference(f), out_shardings=grad_shardings)
    built = {plan.name: plan for plan in plans if plan.name in functions}
    return Plans(shapes=shapes, mesh=mesh, plans=built, functions=functions, args=args,
                 unavailable=unavailable, layout=layout)


def trace_plans(
    built: Plans, *, with_reference: bool = False, progress: Callable[[str, float], None] | None = None,
) -> tuple[dict[str, tuple[Traced, float]], dict[str, str]]:
    """Trace each plan of ``built`` once: ``{name: (traced, seconds)}``, and the plans JAX cannot trace.

    The one place that decides which built plans are available, for the report, the diff, the
    check, the sweep and the app alike. The baseline failing to trace is the model's fault (a
    :class:`TraceError` that quotes JAX); a candidate plan that fails where the baseline traced
    is shardscope's own plan meeting a limit of the installed JAX (the reduced plan on a model
    whose own scan closes over the reduced weight): it is listed as unavailable with JAX's
    reason, never blamed on the model. ``with_reference`` traces the reference too.
    """
    report = progress or (lambda stage, fraction: None)
    names = [*built.plans, *([REFERENCE] if with_reference else [])]
    traced: dict[str, tuple[Traced, float]] = {}
    unavailable: dict[str, str] = {}
    for i, name in enumerate(names):
        report("tracing", i / len(names))
        try:
            traced[name] = timing.timed(lambda: built.functions[name].trace(*built.args))
        except ShardscopeError:
            raise
        except Exception as exc:
            plan = built.plans.get(name)
            if plan is not None and plan.role != "baseline" and traced:
                unavailable[name] = untraceable(exc)
                continue
            raise describe_trace_error(exc, tuple(built.shapes.batch_axes)) from exc
    return traced, unavailable


def _check_params(params: Any) -> None:  # the user's params: any pytree
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise SettingsError("params is empty: there is nothing to differentiate.")
    dtypes = [leaf.dtype if prng_keys.is_key_array(leaf) else np.asarray(leaf).dtype for leaf in leaves]
    bad = [str(dtype) for dtype in dtypes if prng_keys.is_key_dtype(dtype) or not jnp.issubdtype(dtype, jnp.inexact)]
    if bad:
        raise SettingsError(
            f"params must be floating point or complex to take a VJP; found {', '.join(bad)}.",
            "give params real or complex float dtypes; pass PRNG keys in x (one per example) "
            "or make them inside f",
        )


def _output_shape(f: Callable, params: Any, x: Any, batch: int, axis: str) -> Any:  # pytrees: the user's inputs, f's output
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


def untraceable(exc: BaseException) -> str:
    """Why a candidate plan is unavailable when JAX cannot trace it (the first line of JAX's error)."""
    return f"JAX cannot trace it here: {type(exc).__name__}: {first_line(exc)}"


def describe_trace_error(exc: BaseException, axis: str | tuple[str, ...]) -> TraceError:
    """JAX's error tracing a plan of the demo's ``f`` over ``axis`` (:func:`failures.trace_error`)."""
    return trace_error(exc, "the model", demo=True, axis=axis)
