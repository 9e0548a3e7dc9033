"""Do the plans compute the same gradient? A dtype-aware comparison between plans.

The error against the unchunked reference (``max_abs_err``) is only zero-ish when the model is
separable over the batch: a ``lax.cond`` on a batch-dependent predicate, or a statistic over the
batch, makes the chunked gradient differ from the unchunked one by design. Two plans chunk the
same way, so their gradients must agree whatever the model: when they do not, one plan computes
something else (e.g. a collective inside a ``cond`` branch that only some devices take).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

TOLERANCE_NOTE = "tolerance: sqrt(machine epsilon) of the dtype, relative to the largest gradient entry"


@dataclass(frozen=True)
class GradientCheck:
    """The largest difference between two plans' gradients, and what would be within rounding.

    Entries that are not finite (NaN, +inf, -inf) in one result must be the same in the other at
    the same place: two programs that give NaN in the same entries agree there, and one that gives
    NaN where the other gives a number does not (``non_finite_mismatch`` says where). Finite
    entries are compared within the tolerance, computed from finite entries only."""

    baseline: str
    candidate: str
    max_abs_diff: float
    """The largest ``|a - b|`` over the entries finite in both results."""
    tolerance: float
    dtype: str
    subject: str = "gradients"  # "outputs" when two programs of a program file are compared
    leaf: str = ""
    """The path of the leaf that differs most relative to its tolerance (``[1][0].mu['W']``)."""
    scale: float = 0.0
    """The largest finite ``|entry|`` of that leaf in either result: the tolerance is ``sqrt(eps)``
    of the dtype times this (0 for integers, which must match exactly)."""
    non_finite: int = 0
    """Entries (over every leaf) that are NaN or inf in both results, the same in both: they agree,
    but say nothing about whether the two compute the same numbers there."""
    non_finite_leaves: tuple[str, ...] = ()
    """The paths of the leaves that hold those entries."""
    non_finite_mismatch: str = ""
    """Where the results are not finite in different places (empty when they are not): ``the
    rewritten program has NaN in 12 entries of out[1]['v'] where the original program's are finite``."""

    def tolerance_text(self) -> str:
        """What the tolerance is, in numbers: ``4.2e-02 = sqrt(eps) of float32 (3.5e-04) x 1.2e+02, the
        largest |entry| of out['W1']``; ``0 (int32 must match exactly)`` for an integer leaf."""
        finite = " finite" if self.non_finite or self.non_finite_mismatch else ""
        if self.scale <= 0:
            if self.tolerance == 0 and not self.dtype.startswith(("float", "bfloat", "complex")):
                return f"0 ({self.dtype} must match exactly)"
            return f"{self.tolerance:.1e} (every{finite} entry is 0)"
        of = f" of {self._noun_of()}{self.leaf}" if self.leaf else ""
        return (f"{self.tolerance:.1e} = sqrt(eps) of {self.dtype} ({self.tolerance / self.scale:.1e}) "
                f"x {self.scale:.1e}, the largest{finite} |entry|{of}")

    def _noun_of(self) -> str:
        return "out" if self.subject == "outputs" else "the gradient"

    @property
    def agree(self) -> bool:
        """True when the results are not finite in the same entries (the same NaN or inf) and every
        finite entry differs by no more than the tolerance."""
        return not self.non_finite_mismatch and self.max_abs_diff <= self.tolerance

    @property
    def non_finite_note(self) -> str | None:
        """One sentence when both results have NaN or inf in the same entries (the check is weaker
        there: only their places are compared), else None."""
        if not self.non_finite:
            return None
        leaves = [f"{self._noun_of()}{leaf}" for leaf in self.non_finite_leaves]
        where = leaves[0] if len(leaves) == 1 else f"{leaves[0]} and {len(leaves) - 1} more"
        kind = "outputs" if self.subject == "outputs" else "gradients"
        return (f"both {kind} are NaN or inf in the same {_entries(self.non_finite)} ({where}) on these "
                f"example arguments: there only the places were compared, not the numbers")

    @property
    def warning(self) -> str | None:
        """One sentence when the plans disagree, else None."""
        if self.agree:
            return None
        if self.non_finite_mismatch:
            kind = "programs' outputs" if self.subject == "outputs" else "plans' gradients"
            return (f"the {self.baseline} and {self.candidate} {kind} are not finite in different entries: "
                    f"{self.non_finite_mismatch}: if they are meant to compute the same thing, one of them "
                    f"computes something else")
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


@dataclass(frozen=True)
class _LeafComparison:
    """One leaf of two results compared: its rank (difference over tolerance; inf when it must
    match and does not) and what makes it up."""

    rank: float
    diff: float
    bound: float
    scale: float
    non_finite: int = 0
    mismatch: str = ""


def _entries(n: int) -> str:
    """``1 entry``, ``12 entries``."""
    return f"{n:,} entry" if n == 1 else f"{n:,} entries"


def relative_tolerance(dtype: np.dtype) -> float:
    """``sqrt(eps)`` of ``dtype`` (its real part for complex): 3.5e-4 for float32, 0.088 for bfloat16."""
    real = jnp.finfo(dtype).dtype
    return float(np.sqrt(float(jnp.finfo(real).eps)))


def compare_results(results: dict[str, Any], subject: str = "gradients") -> tuple[GradientCheck, ...]:
    """Each result against the first one's (``results``: plan or program name -> pytree), where
    both have the same structure, shapes and dtypes: programs that compute different things are
    not compared. ``subject`` (``gradients``, ``outputs``) says what the results are."""
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
    leaves, structure = jax.tree.flatten(tree, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))

    def dtype(leaf: object) -> str:
        return str(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype)

    return str(structure), tuple((tuple(np.shape(leaf)), dtype(leaf)) for leaf in leaves)


def _check(base_name: str, base: Any, name: str, other: Any,  # pytrees of results: any leaves
           subject: str = "gradients") -> GradientCheck | None:
    """The worst leaf of ``other`` against ``base``, relative to its tolerance (None: no leaves).

    Floating leaves are ranked by their largest difference over their own tolerance (a leaf whose
    NaN or inf are in other places than ``base``'s is the worst); integer and bool leaves (an
    optimizer's step ``count``) must match exactly, and are the worst only when they do not (or
    when no leaf is floating): an equal counter says nothing about rounding."""
    noun = "program" if subject == "outputs" else "plan"
    root = "out" if subject == "outputs" else "the gradient"
    worst: tuple[_LeafComparison, str, str] | None = None  # (comparison, dtype, leaf)
    non_finite: list[tuple[str, int]] = []
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(base)[0]]
    for path, a, b in zip(paths, map(_numeric, jax.tree.leaves(base)), map(_numeric, jax.tree.leaves(other)), strict=True):
        names = (f"the {base_name} {noun}", f"the {name} {noun}", f"{root}{path}")
        leaf = _compare_leaf(a, b, names)
        if leaf.non_finite:
            non_finite.append((path, leaf.non_finite))
        if worst is None or leaf.rank > worst[0].rank:
            worst = (leaf, str(a.dtype), path)
    if worst is None:
        return None
    leaf, dtype, path = worst
    return GradientCheck(base_name, name, leaf.diff, leaf.bound, dtype, subject, leaf=path, scale=leaf.scale,
                         non_finite=sum(n for _, n in non_finite), non_finite_leaves=tuple(p for p, _ in non_finite),
                         non_finite_mismatch=leaf.mismatch)


def _compare_leaf(a: np.ndarray, b: np.ndarray, names: tuple[str, str, str]) -> _LeafComparison:
    """``b`` against ``a`` (``names``: the words for ``a``, ``b`` and the leaf). Floating leaves:
    their non-finite entries must be the same in both, their finite ones within ``sqrt(eps)`` of
    the largest finite ``|entry|`` (a complex entry's modulus); integers and bools must match exactly."""
    if not (np.issubdtype(a.dtype, np.inexact) or a.dtype.kind == "V"):  # integers and bools must match exactly
        diff = float(np.max(np.abs(a - b), initial=0.0))
        return _LeafComparison(float("inf") if diff > 0 else -1.0, diff, 0.0, 0.0)
    x, y = _widened(a), _widened(b)
    kind_x, kind_y = _entry_kinds(x), _entry_kinds(y)
    both = (kind_x == 0) & (kind_y == 0)
    diff = float(np.max(np.abs(np.where(both, x, 0) - np.where(both, y, 0)), initial=0.0))
    scale = max(float(np.max(np.abs(x), initial=0.0, where=kind_x == 0)),
                float(np.max(np.abs(y), initial=0.0, where=kind_y == 0)))
    bound = relative_tolerance(a.dtype) * scale
    mismatch = _mismatch_text(kind_x, kind_y, names, complex_=np.iscomplexobj(a))
    if mismatch:
        rank = float("inf")
    else:
        rank = diff / bound if bound > 0 else (float("inf") if diff > 0 else 0.0)
    same = int(np.count_nonzero(~both & (kind_x == kind_y)))
    return _LeafComparison(rank, diff, bound, scale, same, mismatch)


_KINDS = ("finite", "NaN", "+inf", "-inf")


def _widened(array: np.ndarray) -> np.ndarray:
    """A floating array as float64, a complex one as complex128: differences and moduli of narrow
    dtypes (float16, bfloat16) neither overflow nor round."""
    return array.astype(np.complex128 if np.iscomplexobj(array) else np.float64)


def _finiteness(array: np.ndarray) -> np.ndarray:
    """Each entry's index in :data:`_KINDS` (a real array): 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return np.select([np.isnan(array), np.isposinf(array), np.isneginf(array)], [1, 2, 3], 0).astype(np.int8)


def _entry_kinds(array: np.ndarray) -> np.ndarray:
    """Each entry's kind, 0 when it is finite: its index in :data:`_KINDS`, or for a complex entry
    ``4 x`` its real part's plus its imaginary part's, so that two complex entries are of the same
    kind when each part is (NaN in the real part only differs from NaN in both)."""
    if np.iscomplexobj(array):
        return 4 * _finiteness(array.real) + _finiteness(array.imag)
    return _finiteness(array)


def _kind_name(kind: int, complex_: bool) -> str:
    """An entry kind of :func:`_entry_kinds` in words: ``NaN``; for a complex entry whose parts
    are of different kinds, each non-finite part's (``NaN (real part)``, ``+inf (real part) and
    NaN (imaginary part)``)."""
    if not complex_:
        return _KINDS[kind]
    real, imag = divmod(kind, 4)
    if real == imag:
        return _KINDS[real]
    parts = [f"{_KINDS[k]} ({part} part)" for k, part in ((real, "real"), (imag, "imaginary")) if k]
    return " and ".join(parts)


def _mismatch_text(kind_a: np.ndarray, kind_b: np.ndarray, names: tuple[str, str, str], complex_: bool = False) -> str:
    """Where ``b`` is not finite in other entries than ``a`` (or with another NaN or inf), in words
    (empty when the patterns are the same): ``the rewritten program has NaN in 12 entries of
    out['v'] where the original program's are finite``. ``kind_a``, ``kind_b``: :func:`_entry_kinds`
    of a complex leaf when ``complex_``."""
    a_name, b_name, where = names
    differ = kind_a != kind_b
    if not differ.any():
        return ""
    pairs, counts = np.unique(np.stack([kind_a[differ], kind_b[differ]]), axis=1, return_counts=True)
    parts = []
    for (ka, kb), n in sorted(zip(pairs.T.tolist(), counts.tolist(), strict=True), key=lambda p: -p[1]):
        name_a, name_b = _kind_name(ka, complex_), _kind_name(kb, complex_)
        if ka == 0:
            parts.append(f"{b_name} has {name_b} in {_entries(n)} of {where} where {a_name}'s are finite")
        elif kb == 0:
            parts.append(f"{a_name} has {name_a} in {_entries(n)} of {where} where {b_name}'s are finite")
        else:
            parts.append(f"{_entries(n)} of {where} {'is' if n == 1 else 'are'} {name_a} in {a_name} "
                         f"and {name_b} in {b_name}")
    return "; ".join(parts)


def _numeric(leaf: object) -> np.ndarray:
    """``leaf`` as a numpy array (a typed PRNG key as its key data, a bool as an integer)."""
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):  # keys are JAX's only
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    return array.astype(np.int64) if array.dtype == bool else array
