"""shardscope: see the communication plan of a chunked VJP under ``jax.shard_map``.

Importing this package is cheap: it does not import JAX, Textual or networkx. Demo files only
need :func:`demo`, program files :func:`program`; :func:`inspect` analyses any program and
:mod:`shardscope.testing` asserts on it in tests; :func:`layouts` marks a function that builds a
step for any mesh, whose layouts ``shardscope layouts`` ranks on a target.
"""

from typing import TYPE_CHECKING, Callable, Sequence

from shardscope.sources.demos import demo
from shardscope.errors import ShardscopeError
from shardscope.sources.layouts import layouts
from shardscope.sources.programs import program

if TYPE_CHECKING:
    from shardscope.hardware.chips import Chip
    from shardscope.engine.hlo.roofline import StepEstimate
    from shardscope.engine.joined.inspection import Inspection


def inspect(fn: Callable, *args: object, **kwargs: object) -> "Inspection":
    """Trace ``fn(*args, **kwargs)`` and return its :class:`~shardscope.engine.joined.inspection.Inspection`.

    Every collective with its loops, runs per call, bytes, value, source line and verdict;
    ``print()`` shows the table, a notebook its HTML.
    """
    # the engine and numpy (about 0.4 s): not on import. The renderings and the what-if register
    # themselves on the Inspection as they are imported: print() and .what_if() need them.
    import shardscope.render.findings_html  # noqa: F401
    import shardscope.whatif.what_if  # noqa: F401
    from shardscope.pipeline.one_program import inspect as _inspect

    return _inspect(fn, *args, **kwargs)


def inspect_on(target: str | Sequence[str], fn: Callable, *args: object, **kwargs: object) -> "Inspection":
    """:func:`inspect` of ``fn(*args, **kwargs)`` with its plan on ``target`` too (``"gpu:h100:8"``,
    ``"tpu:v5e:2x4"``, or several): ``inspection.targets`` holds what that compiler did with each
    collective (``.comparison.placements``, ``.compiled.counts()``, ``.staying_findings``).

    Nothing runs on the target; its devices come from JAX's CUDA plugin or libtpu (the ``gpu`` and
    ``tpu`` extras). The program's mesh must span as many devices as the target has.
    """
    # JAX and the engine: not on import; the renderings register themselves as inspect()'s do
    import shardscope.render.findings_html  # noqa: F401
    import shardscope.whatif.what_if  # noqa: F401
    from shardscope.pipeline.one_program import inspect_on as _inspect_on

    return _inspect_on(target, fn, args, kwargs)


def estimate_module(hlo_text: str, chip: "str | Chip") -> "StepEstimate":
    """Estimate one call of a compiled XLA module on a chip, from the module's text.

    ``hlo_text`` is what ``jax.jit(f).lower(*args).compile().as_text()`` returns (or an XLA dump's
    ``*after_optimizations.txt``, a stored module); ``chip`` a chip's name: ``"v5e"``, ``"v5p"``,
    ``"v6e"``, ``"v4"``, ``"h100"``, ``"a100"``, ``"h200"``, ``"b200"``. Each instruction takes the
    longer of its work at the chip's rates (matmuls at their dtype's and precision's peak, other
    work at the vector unit's) and its bytes at the chip's memory bandwidth, loops counted.

    The returned estimate has ``.seconds`` (one call waited on, its per-call overhead included),
    ``.dispatched_seconds`` (one call among calls dispatched back to back, as a training loop
    runs them), ``.lower_bound`` (True when the module holds instructions the model cannot time)
    and ``.unmodelled`` (those instructions and how many: ``("sort", 1)``, ``("top-k", 1)``,
    ``("while loop of unknown trip count", 1)``); ``.checked`` says how it compares with
    measured times on that chip, empty where no chip was measured. Collectives are not
    included: ``.collectives_s`` is None. ``str()`` of ``.line()`` gives the one-line summary.

    A chip is a name, never a path: a GPU of your own is described in a file given as
    ``chip="gpu:path/to/gpu.txtpb"`` (a ``GpuTargetConfigProto`` in text form, like shardscope's
    ``gpu_descriptions/h100.txtpb``).

    ``hlo_text`` is read as a module XLA printed: a text cut off (a dump copied while it was
    written), edited or not HLO at all is refused, never estimated. Every refusal is a
    :class:`ShardscopeError`: a ``ValueError`` for a chip shardscope does not know (``ChipError``)
    or a text that is not a module (``HloTextError``, its message naming the line to blame), a
    ``TypeError`` for a value that is not a string (``ArgumentTypeError``).
    """
    from shardscope.costmodel.estimate import estimate_module as _estimate_module

    return _estimate_module(hlo_text, chip)


__all__ = ["demo", "estimate_module", "inspect", "inspect_on", "layouts", "program", "ShardscopeError"]
__version__ = "0.1.0"
