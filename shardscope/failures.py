"""What the user's code raised inside JAX, as one :class:`TraceError` with a hint.

Demo code runs at import, while tracing (``jax.eval_shape``, ``.trace``) and at run time
(``jax.debug.callback``). Whatever it raises there, including ``sys.exit()``, becomes one
message that names the stage and the demo file's line; a traceback is for ``--debug``.
"""

from __future__ import annotations

import contextlib
import dis
import logging
import re
import sysconfig
import traceback
from pathlib import Path
from typing import Iterator

from shardscope.errors import TraceError, quote_error
from shardscope.sources.source_files import demo_frames

_CALLBACK_LOGGER = "jax._src.debugging"  # logs every failing jax.debug.callback with a traceback


def raised_by_user_code(exc: BaseException) -> "traceback.FrameSummary | None":
    """The frame that raised ``exc`` when it is the user's own code (outside installed packages,
    Python's library and shardscope), else None: JAX's errors are raised inside JAX.

    Under ``jax.jit`` JAX removes its own frames from the traceback, so the last frame left is
    the user's line that called into JAX even when JAX raised: then a line that was calling a
    function (JAX's ``shard_map``, ``vmap``, or a builtin) does not count; a ``raise``, an
    ``assert`` or a dict lookup does."""
    last = last_user_frame(exc)
    if last is None or not _jax_removed_frames(exc):
        return last
    return None if (_instruction(exc) or "").startswith("CALL") else last


def last_user_frame(exc: BaseException) -> "traceback.FrameSummary | None":
    """The last frame of ``exc``'s traceback when it is the user's own code, else None."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    path = Path(last.filename).resolve()
    library = {Path(p).resolve() for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                            sysconfig.get_paths()["platlib"])}
    own = Path(__file__).resolve().parent
    if last.filename.startswith("<") or any(path.is_relative_to(p) for p in (*library, own)):
        return None
    if {"site-packages", "dist-packages"} & set(path.parts):
        return None
    return last


_JAX_REMOVED_FRAMES = "JAX has removed its internal frames"  # JAX's note (or its cause's text) when it did


def _jax_removed_frames(exc: BaseException) -> bool:
    """True when JAX filtered its own frames out of ``exc``'s traceback (its default outside IPython)."""
    notes = getattr(exc, "__notes__", None) or []
    cause = exc.__cause__
    return any(_JAX_REMOVED_FRAMES in note for note in notes) or (
        cause is not None and type(cause).__name__ == "UnfilteredStackTrace")


def _instruction(exc: BaseException) -> str | None:
    """The bytecode instruction the last frame of ``exc``'s traceback was running (``CALL``,
    ``CALL_KW``, ``CALL_FUNCTION_EX``, ``RAISE_VARARGS``, ``BINARY_SUBSCR``): the last one at or
    before its offset (3.11 points into a call's caches)."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    before = [i for i in dis.get_instructions(tb.tb_frame.f_code) if i.offset <= tb.tb_lasti]
    return before[-1].opname if before else None


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s text (its type name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_CARRY_CAST = re.compile(
    r"pcast\(\.\.\., (\([^)]*\)), to='varying'\)`, to the initial carry value corresponding to "
    r"the input carry(?: component)? ([^\s.;]+)"
)
"""JAX's own fix for a loop carry that starts invariant and comes out varying (the axes, the carry)."""


def trace_error(exc: BaseException, subject: str, *, demo: bool, axis: str | tuple[str, ...] | None = None,
                debug: str = "--debug shows JAX's whole error") -> TraceError:
    """JAX's tracing error ``exc`` as one :class:`TraceError`: every command and the Python API
    quote it the same way (the lines that name the value and its types, :func:`quote_error`).

    ``subject`` is what failed ("the model", a program's name); ``demo`` says whether it is a
    demo's ``f``, which shardscope maps itself and also runs unmapped (for the reference), or
    the user's own program. A loop carry that starts the same on every device and comes out
    per-device gets its own message and the fix for that case; ``debug`` says where the whole
    error is.
    """
    text, quoted = str(exc), quote_error(exc)
    if "carry" in text and "manual axis types do not match" in text:
        return TraceError(
            f"A loop in {subject} starts from a value that is the same on every device but becomes "
            f"per-device (varying over the mesh axis) inside the loop: {quoted}",
            f"{_carry_hint(text, demo, axis)}; {debug}",
        )
    if demo:
        return TraceError(
            f"The model fails to trace under jax.shard_map: {quoted}",
            f"jax.vjp of f(params, x) must trace on one device's slice of the batch inside jax.shard_map; {debug}",
        )
    if isinstance(exc, TypeError) and _ARITY.search(text):  # Python's own: the call, not a value
        return TraceError(
            f"{subject} fails to trace on its example arguments: {quoted}",
            f"the example arguments (args= and kwargs= of @shardscope.program) do not match {subject}'s "
            f"parameters; {debug}",
        )
    called = last_user_frame(exc)
    if _INDIVISIBLE in text:  # raised inside JAX, though its traceback ends on the user's call
        at = "" if called is None else f"; the shard_map is called at {_where(called)}"
        return TraceError(f"{subject} fails to trace on its example arguments: {quoted}",
                          f"{_indivisible_hint(text)}{at}; {debug}")
    raised = raised_by_user_code(exc)
    if raised is not None:  # the program's own raise: its words, not a disagreement of types
        return TraceError(
            f"{subject} fails to trace on its example arguments: {quoted}",
            f"the program's own code raised it ({_where(raised)}), not JAX; {debug}",
        )
    if called is not None and not type(exc).__module__.startswith("jax"):  # a builtin's type: JAX's or the call's
        return TraceError(
            f"{subject} fails to trace on its example arguments: {quoted}",
            f"raised at {_where(called)}, by that line itself or by JAX beneath it (JAX leaves its own frames out "
            f"of the traceback): the message above says what went wrong; {debug}",
        )
    inside = "" if called is None else f"raised by JAX inside the call at {_where(called)}: "
    return TraceError(
        f"{subject} fails to trace on its example arguments: {quoted}",
        f"{inside}JAX's message above says which value and which types disagree; {debug}",
    )


def _where(frame: "traceback.FrameSummary") -> str:
    return f"{Path(frame.filename).name}:{frame.lineno}, in {frame.name}"


_INDIVISIBLE = "was given argument arrays with axis sizes that are not evenly divisible by the corresponding mesh axis sizes"
"""The words of JAX's ``shard_map`` check of its inputs' shapes against the mesh (a bullet per argument follows)."""
_INDIVISIBLE_ARGUMENT = re.compile(
    r"(?:\* )?the passed (?P<arg>\S+) of shape (?P<shape>\S+),(?: where \S+ is bound to (?P<fn>.+?)'s parameter "
    r"'(?P<param>[^']+)',)? corresponds to .*?which maps array axis (?P<dim>\d+) \(of size (?P<size>\d+)\) to mesh "
    r"(?:axis|axes) (?P<axes>.+?) \(of (?:total )?size (?P<count>\d+)\)")


def _indivisible_hint(text: str) -> str:
    """What does not divide, from JAX's ``shard_map`` message: the first argument whose split
    dimension the mesh axis does not divide (and how many more), and what to change."""
    found = list(_INDIVISIBLE_ARGUMENT.finditer(text))
    if not found:
        return ("JAX's shard_map checks its inputs against the mesh: an argument's dimension is split over a mesh "
                "axis that does not divide it, as JAX's message above says; give example arguments whose split "
                "dimensions the mesh divides, a mesh that divides them, or other in_specs")
    first = found[0]
    name = f"{first['fn']}'s parameter {first['param']!r}" if first["param"] else first["arg"]
    more = f" (and {len(found) - 1} more argument{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    axes = "axis" if first["axes"].startswith("'") else "axes"
    return (f"JAX's shard_map checks its inputs against the mesh: it splits dimension {first['dim']} of {name} "
            f"({first['shape']}, size {first['size']}) over mesh {axes} {first['axes']} of size {first['count']}, "
            f"which does not divide {first['size']}{more}; give example arguments whose split dimensions the mesh "
            f"divides, a mesh that divides them, or other in_specs")


_ARITY = re.compile(r"missing \d+ required (positional|keyword-only) argument|takes \d+ positional arguments? but \d+ "
                    r"(was|were) given|got an unexpected keyword argument|got multiple values for argument")


def _carry_hint(text: str, demo: bool, axis: str | tuple[str, ...] | None) -> str:
    """Cast the initial carry to varying (a program), or derive it from ``x`` (a demo's ``f``)."""
    found = _CARRY_CAST.search(text)
    if axis is None:
        axis = tuple(re.findall(r"'([^']*)'", found.group(1))) if found else ("AXIS",)
    axes = axis[0] if isinstance(axis, tuple) and len(axis) == 1 else axis
    if demo:
        return ("derive the initial carry from x, e.g. jnp.zeros_like(x[:, 0]), so that it is per-device like x "
                f"(lax.pcast(init, {axes!r}, to='varying') does the same only where f runs inside shard_map: "
                "shardscope also runs f unmapped, for the reference)")
    carry = f"the carry {found.group(2)}" if found else "the carry"
    return (f"cast the initial value of {carry} to varying before the loop, "
            f"lax.pcast(init, {axes!r}, to='varying'), or derive it from a per-device argument "
            "(jnp.zeros_like of a slice of it) so that it is per-device from the start")


def system_exit(exc: SystemExit, path: Path, function: str) -> TraceError:
    """``sys.exit(N)`` called inside the model while shardscope traced or ran it."""
    frames = demo_frames(exc, path)
    where = f", {path.name} line {frames[-1].lineno}" if frames else ""
    return TraceError(
        f"The demo called sys.exit({exc.code!r}) inside {function}{where}.",
        "shardscope traces and runs the model: it must return its output, not exit",
    )


def model_error(exc: BaseException, axis: str) -> TraceError:
    """The model failed on its own example inputs (outside ``shard_map``)."""
    text = str(exc)
    if "unbound axis name" in text:
        found = first_line(exc).split(". ")[0].rstrip(".")  # JAX goes on: "call psum under shard_map"
        return TraceError(
            f"The model uses a mesh axis itself: {type(exc).__name__}: {found}.",
            f"shardscope maps f(params, x) per example and adds the collectives over {axis!r} itself: "
            "the model may not use the mesh axis (no lax.psum, all_gather, ... inside it)",
        )
    return TraceError(
        f"The model fails on its example inputs: {type(exc).__name__}: {first_line(exc)}",
        "check that f(params, x) runs on the shapes given to @shardscope.demo",
    )


def run_error(exc: BaseException, title: str, path: Path) -> TraceError:
    """The compiled program ``title`` (``naive plan``, ``program step``) failed while running (a
    ``jax.debug.callback`` that raised).

    JAX wraps the callback's exception and its traceback in a ``JaxRuntimeError``: the message
    keeps the callback's own last line and points at the demo file's line.
    """
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(" ")]
    cause = lines[-1] if lines else type(exc).__name__
    where = re.findall(rf'File "[^"]*{re.escape(path.name)}", line (\d+)', text)
    at = f" ({path.name} line {where[-1]})" if where else ""
    return TraceError(
        f"The {title} failed while running: {cause}{at}.",
        "a callback in the model (jax.debug.callback, io_callback, pure_callback) raised; "
        "--debug shows JAX's full error",
    )


@contextlib.contextmanager
def quiet_callback_logs() -> Iterator[None]:
    """Keep JAX from logging a traceback per failing ``jax.debug.callback`` (it raises anyway)."""
    logger = logging.getLogger(_CALLBACK_LOGGER)
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)
