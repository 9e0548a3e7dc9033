"""The one place shardscope asks XLA to compile: every caller (a program's plan, a program file,
a target, the what-if, the sweep, the calibration) lowers and compiles through here.

What every compile shares belongs here and nowhere else: the partitioner's log lines it prints
on the way (kept from the terminal by :func:`shardscope.engine.compile_log.capturing_stderr`
and held for the executable: :func:`partitioner_messages`), the target a module is compiled for
(a target lowers for its own platform and hands the lowering to :func:`compile_lowered`). JAX's
persistent compilation cache, which the commands turn on as they start
(:mod:`shardscope.distributed.compile_cache`), serves all of them.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from shardscope.engine.compile_log import capturing_stderr

if TYPE_CHECKING:
    from jax.stages import Compiled, Lowered, Traced

_MESSAGES: "weakref.WeakKeyDictionary[Compiled, tuple[str, ...]]" = weakref.WeakKeyDictionary()


def compile_lowered(lowered: "Lowered") -> "Compiled":
    """``lowered.compile()``: the module XLA builds for the devices it was lowered for; the
    partitioner's log lines it prints are kept for :func:`partitioner_messages`."""
    compiled, messages = compile_capturing(lowered)
    _MESSAGES[compiled] = messages
    return compiled


def compile_capturing(lowered: "Lowered") -> "tuple[Compiled, tuple[str, ...]]":
    """``lowered.compile()`` and the messages of the partitioner's log lines it printed (not
    shown on the terminal; every other line of descriptor 2 still is)."""
    with capturing_stderr() as messages:
        compiled = lowered.compile()
    return compiled, tuple(messages)


def compile_traced(traced: "Traced") -> "Compiled":
    """``traced.lower().compile()``, as ``jax.jit(fn).lower(*args).compile()`` would."""
    return compile_lowered(traced.lower())


def partitioner_messages(compiled: "Compiled") -> tuple[str, ...]:
    """What the partitioner printed while ``compiled`` was compiled here (empty for an
    executable compiled elsewhere, or one JAX's persistent cache served without compiling)."""
    try:
        return _MESSAGES.get(compiled, ())
    except TypeError:  # an object that cannot be weakly referenced was never recorded
        return ()
