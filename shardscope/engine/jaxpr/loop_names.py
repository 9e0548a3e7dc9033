"""How a loop is named to the user: by its place among the loops around it and by the line that wrote it.

Equation names are unique only in their block, so the chunk loop of an RNN's plan and the RNN's
own scan inside it are both ``scan_0``. :func:`loop_path` names a loop with the loops around it
(``scan_0/scan_1``); :func:`loop_words` says what the user wrote (``the lax.fori_loop at
model.py:12 (step)``, from the traceback: a fori_loop with static bounds is a scan in the
jaxpr), ``the plan's chunk loop`` for the loop shardscope's plans add, and a neutral ``the loop
at model.py:12`` when the JAX function is not known.
"""

from __future__ import annotations

from shardscope.engine.jaxpr.model import is_shardscope_file, short_source, source_file


def loop_path(loop_id: str, enclosing_ids: tuple[str, ...]) -> str:
    """``scan_0/scan_1``: ``loop_id`` from its outermost enclosing loop on (``scan_0`` alone for an outermost loop)."""
    outermost = enclosing_ids[0] if enclosing_ids else loop_id
    head = outermost.rsplit("/", 1)[0] + "/" if "/" in outermost else ""
    return loop_id[len(head):] if loop_id.startswith(head) else loop_id


def is_own_code(source: str) -> bool:
    """True when ``source`` (``/path/file.py:42 (fn)``) is a line of shardscope's own modules (a
    demo shipped in the package is the user's code: it is not imported as a shardscope module)."""
    path = source_file(source)
    return path is not None and is_shardscope_file(path)


def loop_words(primitive: str, written_as: str, source: str) -> str:
    """``the lax.scan at rnn.py:36 (rnn)``: a loop as its user wrote it (``source`` with its directories).

    ``the plan's chunk loop`` when shardscope's plan made it; ``the loop at model.py:12`` when the
    JAX function is not known; ``the while loop`` when nothing is.
    """
    if is_own_code(source):
        return "the plan's chunk loop"
    where = f" at {short_source(source)}" if source else ""
    if written_as:
        return f"the lax.{written_as}{where}"
    return f"the loop{where}" if where else f"the {primitive} loop"
