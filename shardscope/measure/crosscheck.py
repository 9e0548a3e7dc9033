"""Do the plans compute the same gradient? A dtype-aware comparison between plans.

The error against the unchunked reference (``max_abs_err``) is only zero-ish when the model is
separable over the batch: a ``lax.cond`` on a batch-dependent predicate, or a statistic over the
batch, makes the chunked gradient differ from the unchunked one by design. Two plans chunk the
same way, so their gradients must agree whatever the model: when they do not, one plan computes
something else (e.g. a collective inside a ``cond`` branch that only some devices take).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

TOLERANCE_NOTE = "tolerance: sqrt(machine epsilon) of the dtype, relative to the largest gradient entry"


@dataclass(frozen=True)
class GradientCheck:
    """The largest difference between two plans' gradients, and what would be within rounding."""

    baseline: str
    candidate: str
    max_abs_diff: float
    tolerance: float
    dtype: str
    subject: str = "gradients"  # "outputs" when two programs of a program file are compared
    leaf: str = ""
    """The path of the leaf that differs most relative to its tolerance (``[1][0].mu['W']``)."""
    scale: float = 0.0
    """The largest ``|entry|`` of that leaf in either result: the tolerance is ``sqrt(eps)`` of the
    dtype times this (0 for integers, which must match exactly)."""

    def tolerance_text(self) -> str:
        """What the tolerance is, in numbers: ``4.2e-02 = sqrt(eps) of float32 (3.5e-04) x 1.2e+02, the
        largest |entry| of out['W1']``; ``0 (int32 must match exactly)`` for an integer leaf."""
        if self.scale <= 0:
            if self.tolerance == 0 and not self.dtype.startswith(("float", "bfloat", "complex")):
                return f"0 ({self.dtype} must match exactly)"
            return f"{self.tolerance:.1e} (every entry is 0)"
        of = f" of {'out' if self.subject == 'outputs' else 'the gradient'}{self.leaf}" if self.leaf else ""
        return (f"{self.tolerance:.1e} = sqrt(eps) of {self.dtype} ({self.tolerance / self.scale:.1e}) "
                f"x {self.scale:.1e}, the largest |entry|{of}")

    @property
    def agree(self) -> bool:
        """True when every entry differs by no more than the tolerance (NaNs never agree)."""
        return self.max_abs_diff <= self.tolerance

    @property
    def warning(self) -> str | None:
        """One sentence when the plans disagree, else None."""
        if self.agree:
            return None
        if self.subject == "outputs":
            return (
                f"the {self.baseline} and {self.candidate} programs' outputs differ by {self.max_abs_diff:.2e} "
                f"(more than rounding allows: {self.tolerance_text()}): if they are meant to "
                f"compute the same thing, one of them computes something else"
            )
        return (
            f"the {self.baseline} and {self.candidate} plans' gradients differ by {self.max_abs_diff:.2e} "
            f"(more than rounding allows: {self.tolerance_text()}): they chunk the batch the same "
            f"way, so one of them computes something else; a collective inside a lax.cond whose predicate "
            f"differs between devices does this"
        )


def relative_tolerance(dtype: np.dtype) -> float:
    """``sqrt(eps)`` of ``dtype`` (its real part for complex): 3.5e-4 for float32, 0.088 for bfloat16."""
    import jax.numpy as jnp
    import numpy as np

    real = jnp.finfo(dtype).dtype
    return float(np.sqrt(float(jnp.finfo(real).eps)))


def compare_results(results: dict[str, Any], subject: str = "gradients") -> tuple[GradientCheck, ...]:
    """Each result against the first one's (``results``: plan or program name -> pytree), where
    both have the same structure, shapes and dtypes: programs that compute different things are
    not compared. ``subject`` (``gradients``, ``outputs``) says what the results are."""
    import jax

    names = list(results)
    if len(names) < 2 or not jax.tree.leaves(results[names[0]]):
        return ()
    base = layout(results[names[0]])
    checks = [
        _check(names[0], results[names[0]], name, results[name], subject)
        for name in names[1:] if layout(results[name]) == base
    ]
    return tuple(check for check in checks if check is not None)


def layout(tree: Any) -> tuple:  # a pytree of results: any leaves
    """The structure, shapes and dtypes of a pytree's leaves (arrays, ``ShapeDtypeStruct``s, scalars)."""
    import jax
    import numpy as np

    leaves, structure = jax.tree.flatten(tree, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))

    def dtype(leaf: object) -> str:
        return str(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)

    return str(structure), tuple((tuple(np.shape(leaf)), dtype(leaf)) for leaf in leaves)


def _check(base_name: str, base: Any, name: str, other: Any,  # pytrees of results: any leaves
           subject: str = "gradients") -> GradientCheck | None:
    """The worst leaf of ``other`` against ``base``, relative to its tolerance (None: no leaves).

    Floating leaves are ranked by their largest difference over their own tolerance; integer and
    bool leaves (an optimizer's step ``count``) must match exactly, and are the worst only when
    they do not (or when no leaf is floating): an equal counter says nothing about rounding."""
    import jax
    import numpy as np

    worst: tuple[float, float, float, str, str, float] | None = None  # (rank, diff, bound, dtype, leaf, scale)
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(base)[0]]
    for path, a, b in zip(paths, map(_numeric, jax.tree.leaves(base)), map(_numeric, jax.tree.leaves(other)), strict=True):
        diff = float(np.max(np.abs(a - b), initial=0.0))
        if np.isnan(diff):
            diff = float("inf")
        if np.issubdtype(a.dtype, np.inexact) or a.dtype.kind == "V":
            scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
            bound = relative_tolerance(a.dtype) * scale
            rank = diff / bound if bound > 0 else (float("inf") if diff > 0 else 0.0)
        else:  # integers and bools must match exactly
            scale, bound, rank = 0.0, 0.0, float("inf") if diff > 0 else -1.0
        if worst is None or rank > worst[0]:
            worst = (rank, diff, bound, str(a.dtype), path, scale)
    if worst is None:
        return None
    return GradientCheck(base_name, name, worst[1], worst[2], worst[3], subject, leaf=worst[4], scale=worst[5])


def _numeric(leaf: object) -> np.ndarray:
    """``leaf`` as a numpy array (a typed PRNG key as its key data, a bool as an integer)."""
    import jax
    import numpy as np

    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):  # keys are JAX's only
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    return array.astype(np.int64) if array.dtype == bool else array
