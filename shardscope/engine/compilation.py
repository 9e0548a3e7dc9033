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

import hashlib
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from shardscope.engine.compile_log import capturing_stderr, limit_messages, partitioner_only

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced

C = TypeVar("C", covariant=True)


class Compilable(Protocol[C]):
    """What compiles: JAX's ``Lowered``, or the lowering a target hands over (JAX's
    ``MeshComputation``, whose executable is the target's)."""

    def compile(self) -> C: ...

    def as_text(self, *, debug_info: bool = ...) -> str: ...


_MESSAGES: "weakref.WeakKeyDictionary[object, tuple[str, ...]]" = weakref.WeakKeyDictionary()
_FROM_CACHE: "weakref.WeakSet[object]" = weakref.WeakSet()

CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
"""The event JAX records (``jax.monitoring``) when its persistent compilation cache serves an
executable instead of compiling it: in the thread that asked for the compile, before it returns."""

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The duration JAX records around every compile it hands to XLA or to the persistent cache
(``pxla._cached_compilation``); a compile of a module this process compiled before is served
from JAX's memory and records none."""


class _Events(threading.local):
    """The compile events this thread has seen (the listeners count; a compile reads before and after)."""

    cache_hits = 0
    backend_compiles = 0


_EVENTS = _Events()
_LISTENING = threading.Lock()
_listeners_registered = False


def _count_event(event: str, **kwargs: str | int) -> None:
    if event == CACHE_HIT_EVENT:
        _EVENTS.cache_hits += 1


def _count_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == BACKEND_COMPILE_EVENT:
        _EVENTS.backend_compiles += 1


def _listen_for_compile_events() -> None:
    """Register the counting listeners with ``jax.monitoring`` once per process. They only count,
    in the compiling thread's own counters: nothing JAX does changes."""
    global _listeners_registered
    if _listeners_registered:
        return
    import jax  # loaded: a compile is under way

    with _LISTENING:
        if not _listeners_registered:
            jax.monitoring.register_event_listener(_count_event)
            jax.monitoring.register_event_duration_secs_listener(_count_duration)
            _listeners_registered = True


def compile_lowered(lowered: "Compilable[C]", compiler: str = "", quiet: bool = False) -> C:
    """``lowered.compile()``: the module XLA builds for the devices it was lowered for; the
    partitioner's log lines it prints are kept for :func:`partitioner_messages`, the compiler's
    limit errors for :func:`limit_errors`, whether a cache served it for :func:`served_from_cache`.
    ``compiler`` names another compiler than this process's own backend (a target, ``tpu:v5e:2x4``):
    a module lowered for a target has the same text as the CPU's, and each compiler's lines are its own.
    ``quiet``: its other log lines are kept off the terminal too (a compiler asked to log only so
    that its partitioner's lines are read)."""
    _listen_for_compile_events()
    hits, compiles = _EVENTS.cache_hits, _EVENTS.backend_compiles
    compiled, messages = _compile_keeping_lines(lowered, compiler, quiet)
    _MESSAGES[compiled] = messages
    # read back from the persistent cache, or not handed to XLA at all (JAX kept it in memory)
    if _EVENTS.cache_hits > hits or _EVENTS.backend_compiles == compiles:
        try:
            _FROM_CACHE.add(compiled)
        except TypeError:  # an object that cannot be weakly referenced: said to be compiled
            pass
    return compiled


def served_from_cache(compiled: object) -> bool:
    """True when a cache served ``compiled`` instead of XLA: JAX's persistent compilation cache
    (read back from disk) or JAX's own memory (this process compiled the same module before). Its
    compile time is the read's."""
    try:
        return compiled in _FROM_CACHE
    except TypeError:
        return False


def compile_capturing(lowered: "Compilable[C]") -> "tuple[C, tuple[str, ...]]":
    """``lowered.compile()`` and the messages of the partitioner's log lines it printed (not
    shown on the terminal; every other line of descriptor 2 still is)."""
    compiled, messages = _compile_keeping_lines(lowered)
    return compiled, partitioner_only(messages)


def _compile_keeping_lines(lowered: "Compilable[C]", compiler: str = "",
                           quiet: bool = False) -> "tuple[C, tuple[str, ...]]":
    with capturing_stderr(quiet) as messages:
        compiled = lowered.compile()
    return compiled, _remembered(lowered, tuple(messages), compiler)


def _remembered(lowered: "Compilable[object]", messages: tuple[str, ...], compiler: str = "") -> tuple[str, ...]:
    """``messages``, kept beside JAX's persistent compilation cache when it is on: an executable
    the cache serves is not compiled, so its partitioner prints nothing; the messages of the
    compile that filled the cache, for the same module and the same ``compiler``, are read back
    instead (never another compiler's: a target's compile of the CPU's module reads none of the
    CPU's lines, whichever of the two compiled first)."""
    # jax is loaded: ``lowered`` is its object
    import jax

    # JAX's config declares its options at run time: mypy sees no attribute
    directory = getattr(jax.config, "jax_compilation_cache_dir", None)
    if not getattr(jax.config, "jax_enable_compilation_cache", False) or not directory:
        return messages
    key = module_digest(lowered)
    if compiler:
        key = hashlib.sha256(f"{compiler}\n{key}".encode()).hexdigest()
    path = Path(directory) / "shardscope-partitioner" / f"{key}.txt"
    try:
        if messages:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(messages) + "\n", encoding="utf-8")
        elif path.is_file():
            return tuple(line for line in path.read_text(encoding="utf-8").splitlines() if line)
    except OSError:  # a cache that cannot be read or written: this compile's own messages stand
        pass
    return messages


def module_digest(lowered: "Compilable[object]", debug_info: bool = False) -> str:
    """The SHA-256 of ``lowered``'s module text (with its source locations when ``debug_info``):
    what keys a compile kept beside JAX's (its partitioner messages, a target's compile)."""
    text = lowered.as_text(debug_info=True) if debug_info else lowered.as_text()
    return hashlib.sha256(text.encode()).hexdigest()


def compile_traced(traced: "Traced", options: dict[str, object] | None = None) -> "Compiled":
    """``traced.lower().compile()``, as ``jax.jit(fn).lower(*args).compile()`` would (with XLA's
    ``options``, e.g. :data:`READ_ONLY`, when given)."""
    lowered = traced.lower()
    return compile_lowered(lowered if not options else _WithOptions(lowered, options))


READ_ONLY: dict[str, object] = {"xla_backend_optimization_level": 0}
"""XLA's options for a CPU executable that is read and never run (``check --target``'s CPU plan):
the HLO passes, the partitioner's among them, run as always, and only the machine code LLVM makes
from the optimized module is unoptimized. The compiled module's text, memory and cost analyses
are the same (the Llama-3-8B-shaped step of ``benchmarks/llama_step.py`` over 256 CPU devices:
identical text, 6.1 s of CPU against 10.0 s)."""


class _WithOptions:
    """A ``Lowered`` that compiles with XLA ``options`` (the same module text)."""

    def __init__(self, lowered: "Compilable[Compiled]", options: dict[str, object]) -> None:
        self.lowered, self.options = lowered, options

    def compile(self) -> "Compiled":
        return self.lowered.compile(compiler_options=self.options)  # type: ignore[call-arg]

    def as_text(self, *, debug_info: bool = False) -> str:
        return self.lowered.as_text(debug_info=debug_info)


def partitioner_messages(compiled: object) -> tuple[str, ...]:
    """What the partitioner printed while ``compiled`` was compiled here (empty for an
    executable compiled elsewhere)."""
    return partitioner_only(_kept(compiled))


def limit_errors(compiled: object) -> tuple[str, ...]:
    """The compiler's limit errors while ``compiled`` was compiled here (XLA:GPU's scheduler:
    "The byte size of input/output arguments (...) exceeds the base limit (...)")."""
    return limit_messages(_kept(compiled))


def _kept(compiled: object) -> tuple[str, ...]:
    try:
        return _MESSAGES.get(compiled, ())
    except TypeError:  # an object that cannot be weakly referenced was never recorded
        return ()
