"""The one place shardscope asks XLA to compile: every caller (a program's plan, a program file,
a target, the what-if, the sweep, the calibration) lowers and compiles through here.

What every compile shares belongs here and nowhere else: the partitioner's log lines it prints
on the way, the target a module is compiled for (a target lowers for its own platform and hands
the lowering to :func:`compile_lowered`). JAX's persistent compilation cache, which the commands
turn on as they start (:mod:`shardscope.distributed.compile_cache`), serves all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jax.stages import Compiled, Lowered, Traced


def compile_lowered(lowered: "Lowered") -> "Compiled":
    """``lowered.compile()``: the module XLA builds for the devices it was lowered for."""
    return lowered.compile()


def compile_traced(traced: "Traced") -> "Compiled":
    """``traced.lower().compile()``, as ``jax.jit(fn).lower(*args).compile()`` would."""
    return compile_lowered(traced.lower())
