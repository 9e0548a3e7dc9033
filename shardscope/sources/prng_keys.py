"""PRNG key dtypes (``jax.random.key``): recognise them, size them and make random ones.

A typed key array has a dtype such as ``key<fry>`` that numpy cannot interpret: its size comes
from the key's data (:func:`jax.random.key_data`), and example keys are made with
:func:`jax.random.split`, never through numpy.
"""

from __future__ import annotations

import functools
from math import prod
from typing import TYPE_CHECKING, Any

from shardscope.errors import SettingsError

if TYPE_CHECKING:
    import jax

IMPLEMENTATIONS = ("threefry2x32", "rbg", "unsafe_rbg")
"""The PRNG implementations ``jax.random.key(seed, impl=...)`` accepts by name."""


def is_key_dtype(dtype: Any) -> bool:  # Any: anything, a dtype or not (jax raises TypeError)
    """True for a typed PRNG key dtype (``key<fry>``, ``key<rbg>``, ...)."""
    import jax

    try:
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except TypeError:  # not a dtype at all
        return False


def is_key_array(value: object) -> bool:
    """True for a JAX array of typed PRNG keys."""
    return is_key_dtype(getattr(value, "dtype", None))


@functools.lru_cache(maxsize=None)
def key_itemsize(dtype: object) -> int:
    """Bytes of one key of ``dtype``: the size of its ``jax.random.key_data``."""
    import jax

    data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
    return prod(data.shape) * data.dtype.itemsize


def random_keys(dtype: object, shape: tuple[int, ...], seed: int) -> jax.Array:
    """A key array of ``shape`` and ``dtype``, split from one key made from ``seed`` (reproducible)."""
    import jax

    return jax.random.split(jax.random.key(seed, impl=_implementation(dtype)), shape)


def _implementation(dtype: object) -> str:
    import jax

    for name in IMPLEMENTATIONS:
        if jax.random.key(0, impl=name).dtype == dtype:
            return name
    raise SettingsError(
        f"shardscope cannot make example keys of dtype {dtype}.",
        f"use keys of one of the implementations {', '.join(IMPLEMENTATIONS)}, or give concrete keys",
    )
