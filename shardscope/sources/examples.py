"""A demo's example inputs: checked leaf by leaf before anything is allocated, then filled.

Problems name the leaf by its pytree path (``params['w']``, ``x[1]``) and say what is wrong with
it: a negative dimension, no batch axis, an empty batch, more bytes than the machine has.
Nothing here starts JAX's backend: the CLI checks the batch before it sets the device count.
"""

from __future__ import annotations

import math
import os
from typing import Any, TypeGuard

import jax
import numpy as np

from shardscope.sources import prng_keys

from shardscope.errors import SettingsError


def is_shape(value: object) -> TypeGuard[jax.ShapeDtypeStruct]:
    """True for a ``jax.ShapeDtypeStruct`` (a leaf that only describes an array)."""
    return isinstance(value, jax.ShapeDtypeStruct)


def named_leaves(tree: Any, root: str) -> list[tuple[str, object]]:  # a user's pytree: any leaves
    """``[(name, leaf)]`` with names such as ``params['w']`` or ``x[0]``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_shape)
    return [(root + jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def leaf_shape(name: str, leaf: object) -> tuple[int, ...]:
    """The shape of one leaf; :class:`SettingsError` naming the leaf when a dimension is bad."""
    shape = tuple(leaf.shape) if hasattr(leaf, "shape") else np.asarray(leaf).shape
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        raise SettingsError(
            f"{name} has shape {shape}: every dimension must be a whole number >= 0.",
            f"fix the shape of {name} in @shardscope.demo(...)",
        )
    return tuple(int(d) for d in shape)


def leaf_dtype(leaf: object) -> np.dtype:
    """The dtype of one leaf (of the array numpy would make of it)."""
    dtype = getattr(leaf, "dtype", None)
    if prng_keys.is_key_dtype(dtype):
        return np.dtype(f"V{prng_keys.key_itemsize(dtype)}")  # a key's size is its key data's
    return np.dtype(dtype) if dtype is not None else np.asarray(leaf).dtype


def leaf_bytes(name: str, leaf: object) -> int:
    """How many bytes the leaf takes once filled."""
    return math.prod(leaf_shape(name, leaf)) * leaf_dtype(leaf).itemsize


def batch_size(x: Any) -> int:  # a user's pytree: any leaves
    """The common leading axis of every leaf of ``x`` (the batch N); at least 1."""
    leaves = named_leaves(x, "x")
    if not leaves:
        raise SettingsError("x is empty: it has no leaves, so no batch axis.", "give x an array of shape (N, ...)")
    sizes = {}
    for name, leaf in leaves:
        shape = leaf_shape(name, leaf)
        if not shape:
            what = f"is {leaf!r} (a {type(leaf).__name__})" if not hasattr(leaf, "shape") else f"has shape {shape}"
            raise SettingsError(
                f"{name} {what}: it has no batch axis.",
                "give every leaf of x the batch N as its first axis, shape (N, ...)",
            )
        sizes[name] = shape[0]
    if len(set(sizes.values())) != 1:
        found = ", ".join(f"{name}: {size}" for name, size in sizes.items())
        raise SettingsError(
            f"The leaves of x must share one leading (batch) axis; found {found}.",
            "give every leaf of x the batch N as its first axis",
        )
    batch = next(iter(sizes.values()))
    if batch == 0:
        raise SettingsError("The batch is empty: x has 0 examples (its leading axis is 0).", "give x at least one example per device")
    return batch


def check_fits(params: Any, x: Any, devices: int) -> int:  # a user's pytrees: any leaves
    """Refuse example inputs that cannot fit in memory, before a byte is allocated.

    Every device holds its own copy of ``params`` (replicated) and its slice of ``x``; the
    gradients of each plan are as large again. Returns the bytes the inputs take on the host.
    """
    named = named_leaves(params, "params") + named_leaves(x, "x")
    sizes = {name: leaf_bytes(name, leaf) for name, leaf in named}
    param_bytes = sum(size for name, size in sizes.items() if name.startswith("params"))
    needed = param_bytes * devices + (sum(sizes.values()) - param_bytes)
    available = available_memory()
    if available is not None and needed > available:
        name, size = max(sizes.items(), key=lambda item: item[1])
        leaf = dict(named)[name]
        raise SettingsError(
            f"The example inputs do not fit in memory: {name} alone is {leaf_shape(name, leaf)} "
            f"{leaf_dtype(leaf).name} = {human_bytes(size)}; with params on each of {devices} device(s) "
            f"they need at least {human_bytes(needed)}, and {human_bytes(available)} is available.",
            "use smaller shapes in @shardscope.demo(...): the plans' structure does not depend on the size",
        )
    return sum(sizes.values())


class ArgumentsDoNotFit(SettingsError):
    """A program's example arguments need more memory than this machine has: nothing can run
    it here, but what needs no arguments (tracing, compiling, the targets) still can."""


def check_program_fits(program: str, arguments: Any, shardings: Any, names: list[str] | None = None,  # pytrees alike
                       held: int = 0) -> int:
    """Refuse a program's example arguments that cannot fit in memory, before they are made.

    ``arguments`` is the ``(args, kwargs)`` the compiled program takes and ``shardings`` its
    ``input_shardings`` (the same structure): a shape leaf is filled on the host, then placed as
    the program expects it (a replicated leaf once on every device, a sharded one split over
    them). Concrete arrays exist already; only their device copies count. ``names`` are the
    leaves' names (``params['W']``; default ``args[0]['W']``); ``held`` the bytes the arguments
    of the programs before it already take. Returns the bytes these arguments take.
    """
    named = named_leaves(arguments, "")
    # None: an argument the program does not use (jit prunes it), put on one device as it is
    placed = jax.tree.leaves(shardings, is_leaf=lambda s: s is None or isinstance(s, jax.sharding.Sharding))
    if len(placed) != len(named):
        return 0  # a structure this check does not understand: the allocation will say what it says
    if names is None or len(names) != len(named):
        names = [_argument_name(path) for path, _ in named]
    needed, sizes = 0, {}
    for name, (_, leaf), sharding in zip(names, named, placed):
        shape, itemsize = leaf_shape(name, leaf), leaf_dtype(leaf).itemsize
        whole = math.prod(shape) * itemsize
        on_devices = whole if sharding is None else (
            math.prod(sharding.shard_shape(shape)) * itemsize * len(sharding.device_set))
        host = whole if is_shape(leaf) else 0
        sizes[name] = (shape, leaf_dtype(leaf), whole)
        needed += host + on_devices
    available = available_memory()
    if available is not None and held + needed > available:
        name, (shape, dtype, size) = max(sizes.items(), key=lambda item: item[1][2])
        others = f" besides the {human_bytes(held)} of the programs before it" if held else ""
        raise ArgumentsDoNotFit(
            f"The example arguments of the program {program} do not fit in memory: {name} alone is {shape} "
            f"{dtype.name} = {human_bytes(size)}; made and placed as the program expects them they need at least "
            f"{human_bytes(needed)}{others}, and {human_bytes(available)} is available.",
            f"give {program} smaller example arguments in @shardscope.program(args=...) to run and time it here "
            "(the collectives do not depend on the sizes)",
        )
    return needed


def _argument_name(path: str) -> str:
    """``[0]['embedding']`` (a leaf of ``(args, kwargs)``) as ``args[0]['embedding']``."""
    if path.startswith("[0]"):
        return "args" + path[3:]
    return "kwargs" + path[3:] if path.startswith("[1]") else path


def available_memory() -> int | None:
    """Bytes this process may still allocate: MemAvailable, or the cgroup's limit if lower."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as cgroup:
            text = cgroup.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as cgroup:
            used = int(cgroup.read().strip())
        if text != "max":
            limits.append(int(text) - used)
    except (OSError, ValueError):
        pass
    if not limits and hasattr(os, "sysconf"):
        try:
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            pass
    return min(limits) if limits else None


def human_bytes(count: float) -> str:
    """``40.0 GB``, ``1.5 MB``, ``12 B`` (powers of 1000, as disks and memory are sold)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if count < 1000 or unit == "EB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def materialize(tree: Any, seed: int) -> Any:  # a user's pytree: any leaves, and its filled copy
    """Concrete numpy arrays for a pytree of arrays and ``ShapeDtypeStruct``s, reproducibly random.

    Each leaf is drawn straight into its own buffer: no float64 draft that is then converted
    (for a 2 GB float32 parameter that draft alone was 4 GB more).
    """
    rng = np.random.default_rng(seed)

    def leaf(value: object) -> object:
        if is_shape(value) and prng_keys.is_key_dtype(value.dtype):  # typed PRNG keys: split from the seed
            return prng_keys.random_keys(value.dtype, tuple(value.shape), int(rng.integers(2**31)))
        if is_shape(value):
            return random_array(rng, tuple(value.shape), np.dtype(value.dtype))
        if prng_keys.is_key_array(value):
            return value  # numpy cannot hold typed keys; they are used as given
        return np.asarray(value)

    return jax.tree.map(leaf, tree, is_leaf=is_shape)


def random_array(rng: np.random.Generator, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """Standard normal floats (complex: real and imaginary parts of variance 1/2), small integers, bits."""
    import jax.numpy as jnp  # knows bfloat16 and the other ml_dtypes floats; np.issubdtype does not

    if dtype in (np.float32, np.float64):
        return rng.standard_normal(shape, dtype=dtype)
    if dtype in (np.complex64, np.complex128):
        flat = np.empty(math.prod(shape), dtype)
        parts = flat.view(np.float32 if dtype == np.complex64 else np.float64)  # re, im interleaved
        rng.standard_normal(dtype=parts.dtype, out=parts)  # type: ignore[arg-type]  # numpy's stubs cannot see that the view is float32 or float64
        parts *= parts.dtype.type(1 / np.sqrt(2.0))  # type: ignore[misc]  # the same view
        return flat.reshape(shape)
    if jnp.issubdtype(dtype, jnp.floating):  # float16, bfloat16, float8: draw float32, convert
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return rng.integers(0, 8, shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)
