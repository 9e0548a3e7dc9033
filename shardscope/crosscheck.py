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

TOLERANCE_NOTE = "tolerance: sqrt(machine epsilon) of the dtype, relative to the largest gradient entry"


@dataclass(frozen=True)
class GradientCheck:
    """The largest difference between two plans' gradients, and what would be within rounding."""

    baseline: str
    candidate: str
    max_abs_diff: float
    tolerance: float
    dtype: str

    @property
    def agree(self) -> bool:
        """True when every entry differs by no more than the tolerance (NaNs never agree)."""
        return self.max_abs_diff <= self.tolerance

    @property
    def warning(self) -> str | None:
        """One sentence when the plans disagree, else None."""
        if self.agree:
            return None
        return (
            f"the {self.baseline} and {self.candidate} plans' gradients differ by {self.max_abs_diff:.2e} "
            f"(more than the {self.tolerance:.1e} rounding allows for {self.dtype}): they chunk the batch the same "
            f"way, so one of them computes something else; a collective inside a lax.cond whose predicate "
            f"differs between devices does this"
        )


def relative_tolerance(dtype: Any) -> float:
    """``sqrt(eps)`` of ``dtype`` (its real part for complex): 3.5e-4 for float32, 0.088 for bfloat16."""
    import jax.numpy as jnp
    import numpy as np

    real = jnp.finfo(dtype).dtype
    return float(np.sqrt(float(jnp.finfo(real).eps)))


def compare(outputs: dict[str, Any]) -> tuple[GradientCheck, ...]:
    """Each plan's gradient against the first plan's (``outputs``: plan name -> gradient pytree)."""
    import jax
    import numpy as np

    names = list(outputs)
    if len(names) < 2:
        return ()
    base_name = names[0]
    base_leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(outputs[base_name])]
    checks = []
    for name in names[1:]:
        worst: tuple[float, float, str] | None = None
        for a, b in zip(base_leaves, (np.asarray(x) for x in jax.tree.leaves(outputs[name])), strict=True):
            diff = float(np.max(np.abs(a - b), initial=0.0))
            scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(b), initial=0.0)))
            bound = relative_tolerance(a.dtype) * scale
            if np.isnan(diff):
                diff = float("inf")
            if worst is None or diff - bound > worst[0] - worst[1]:
                worst = (diff, bound, str(a.dtype))
        if worst is not None:
            checks.append(GradientCheck(base_name, name, worst[0], worst[1], worst[2]))
    return tuple(checks)
