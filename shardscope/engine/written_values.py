"""A value computed inside a program, named as the user wrote it: the variable its line assigns
(``h = jnp.tanh(acts)`` names ``h``), else the expression itself (``return a + b`` names
``a + b``). When the value is an operand of the line's value (``out = jnp.tanh(acts) + resid``:
the tanh, not the sum), the operation's column and primitive pick that operand out, and it is
named by its expression (``jnp.tanh(acts)``).

A value no program input or output carries (an activation the partitioner reshards) has no
pytree path; its line is what the user recognises, and the name the line gives it is what a fix
applies to.
"""

from __future__ import annotations

import ast
import functools
import linecache
from typing import Callable, Sequence

from shardscope.collective_kinds import LAX_FUNCTIONS
from shardscope.engine.user_frames import is_library_file

_LONGEST = 48
"""An expression longer than this is shown by its start (``jnp.einsum('bthd,bshd->bhts', ...``)."""


def written_name(file: str, line: int, column: int | None = None, primitive: str = "") -> str:
    """The name the statement at ``file``'s ``line`` gives its value (``""`` when the file or the
    line cannot be read as Python). With the ``column`` (0-based, as JAX's frames and XLA's
    source table give it) and the ``primitive`` of the operation that made the value, an
    operand of the statement's value that this operation computes is named by its expression."""
    statement = _statement_at(file, line)
    if statement is None:
        return ""
    value = getattr(statement, "value", None)
    operand = _operand_at(value, line, column, primitive) if isinstance(value, ast.expr) and column is not None else None
    if operand is not None:
        return _shortened(ast.unparse(operand))
    targets = _assigned(statement)
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    return _shortened(ast.unparse(value)) if isinstance(value, ast.expr) else ""


def written_operation(file: str, line: int, column: int, primitive: str) -> str:
    """:func:`written_name` of a value only where the line writes the operation ``primitive`` at
    ``column`` (``xs = x.reshape(...)`` for a ``reshape``); ``""`` for an operation JAX made
    for the line (the slice a ``lax.scan`` takes of its ``xs``), which the line does not name."""
    statement = _statement_at(file, line)
    value = getattr(statement, "value", None)
    if not isinstance(value, ast.expr) or not primitive:
        return ""
    if not _computes(value, primitive) and _operand_at(value, line, column, primitive) is None:
        return ""
    return written_name(file, line, column, primitive)


def gradient_operand(file: str, line: int, column: int, primitive: str) -> str:
    """The value whose gradient the backward-pass operation ``primitive`` at (``line``,
    ``column``) computes, as the line writes it. JAX transposes a forward operation under its
    own position, so the operation written at ``column`` (:func:`_operation_at`) is the one
    transposed; where it takes one operand, the gradient is that operand's (``x @ W`` of
    ``jnp.tanh(x @ W)``); ``""`` where it takes several (which one's, the line does not say)."""
    forward = _operation_at(file, line, column, primitive)
    if isinstance(forward, ast.UnaryOp):
        return _shortened(ast.unparse(forward.operand))
    arguments = forward.args if isinstance(forward, ast.Call) and not forward.keywords else []
    if len(arguments) != 1 or isinstance(arguments[0], ast.Starred):
        return ""
    return _shortened(ast.unparse(arguments[0]))


def _operation_at(file: str, line: int, column: int, primitive: str) -> ast.expr | None:
    """The one operation written at (``line``, ``column``) that the backward-pass ``primitive``
    transposes: a matmul for a ``dot_general`` or ``transpose``, else the function called or
    the unary operator there (a ``jnp.tanh(...)`` starts where the ``jnp.tanh(...) @ W`` around
    it does; its derivative's ``mul`` is transposed). None when none is, or several."""
    statement = _statement_at(file, line)
    if statement is None:
        return None
    matmul = primitive in ("dot_general", "transpose")
    written = [node for node in ast.walk(statement) if isinstance(node, ast.expr) and _starts_at(node, line, column)
               and (_computes(node, "dot_general") if matmul else isinstance(node, (ast.Call, ast.UnaryOp))
                    and not _computes(node, "dot_general"))]
    return written[0] if len(written) == 1 else None


Frame = tuple[str, int, int, str]
"""A frame of the user's code: ``(file, line, column, function)``, the column 0-based."""

_SAME_RESULT = frozenset({"jit", "checkpoint", "remat", "named_call"})
"""Transformations whose function returns what the function they wrap returns."""
_VALUE_FIRST = frozenset({"value_and_grad"})
"""Transformations whose function returns ``(value, gradient)``: the wrapped function's result first."""


def assigned_name(frames: "Sequence[Frame]", primitive: str) -> str:
    """The variable the program assigns the value that the operation ``primitive`` makes at the
    innermost of ``frames`` (innermost first): its statement's (``loss = jnp.mean(...)``), or for a
    value its function returns (``return jnp.mean(...)``, or one element of ``return a, b``), the
    variable its caller assigns that result to (``loss, g = jax.value_and_grad(loss_fn)(...)``:
    the value, the first of value_and_grad's results). ``""`` where the value is not the whole
    of what a statement assigns or returns, or the call is one whose result this cannot follow
    (a ``lax.scan`` of the function, the traced function's own caller): the program gives it no
    name of its own, and its output's path names it."""
    if not frames or not primitive:
        return ""
    file, line, column, function = frames[0]
    statement = _statement_at(file, line)
    value = getattr(statement, "value", None)
    if statement is None or not isinstance(value, ast.expr):
        return ""
    if isinstance(statement, ast.Return):
        path = _position(value, lambda node: _starts_at(node, line, column) and _computes(node, primitive))
        return _caller_assigns(frames[1:], function, path) if path is not None else ""
    while isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
        value = value.operand  # ``loss = -jnp.mean(...)``: the sum is the loss's, its sign aside
    if _starts_at(value, line, column) and _computes(value, primitive):
        return _target_name(statement, ())
    return ""


def _caller_assigns(frames: "Sequence[Frame]", callee: str, path: tuple[int, ...]) -> str:
    """The variable a caller assigns element ``path`` of ``callee``'s result to, returned on
    through further callers that return it whole (or as one element of a tuple)."""
    for file, line, column, function in frames:
        if is_library_file(file):
            return ""
        statement = _statement_at(file, line)
        value = getattr(statement, "value", None)
        if statement is None or not isinstance(value, ast.expr):
            return ""
        where = _position(value, lambda node: isinstance(node, ast.Call) and _starts_at(node, line, column))
        call = _element(value, where) if where is not None else None
        inner = _result_path(call, callee.rsplit(".", 1)[-1]) if isinstance(call, ast.Call) else None
        if where is None or inner is None:
            return ""
        path = where + inner + path
        if not isinstance(statement, ast.Return):
            return _target_name(statement, path)
        callee = function
    return ""


def _result_path(call: ast.Call, callee: str) -> tuple[int, ...] | None:
    """Where ``callee``'s result is in what ``call`` returns: all of it for ``callee(...)`` or a
    transformation that returns it as it is (``jax.checkpoint(callee)(...)``), the first element
    for ``jax.value_and_grad(callee)(...)``; None for any other call."""
    if _called_name(call.func) == callee:
        return ()
    wrapper = call.func
    if not isinstance(wrapper, ast.Call) or not wrapper.args or _called_name(wrapper.args[0]) != callee:
        return None
    transformation = _called_name(wrapper.func)
    return () if transformation in _SAME_RESULT else (0,) if transformation in _VALUE_FIRST else None


def _called_name(node: ast.expr) -> str:
    """``f`` of ``f`` or ``module.f``."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _position(value: ast.expr, matches: "Callable[[ast.expr], bool]") -> tuple[int, ...] | None:
    """Where in ``value`` the one node ``matches`` accepts is: ``()`` for ``value`` itself, ``(j,
    ...)`` for an element of a tuple (nested tuples too); None when none is."""
    if matches(value):
        return ()
    if isinstance(value, ast.Tuple):
        for j, element in enumerate(value.elts):
            inner = _position(element, matches)
            if inner is not None:
                return (j, *inner)
    return None


def _element(value: ast.expr, path: tuple[int, ...]) -> ast.expr | None:
    for j in path:
        if not isinstance(value, ast.Tuple) or j >= len(value.elts):
            return None
        value = value.elts[j]
    return value


def _target_name(statement: ast.stmt, path: tuple[int, ...]) -> str:
    """The name the assignment ``statement`` gives element ``path`` of its value (``loss`` of
    ``loss, g = ...`` for ``(0,)``); ``""`` when that is no single name."""
    targets = _assigned(statement)
    if len(targets) != 1:
        return ""
    target: ast.expr | None = targets[0]
    for j in path:
        if not isinstance(target, (ast.Tuple, ast.List)) or j >= len(target.elts):
            return ""
        target = target.elts[j]
    return target.id if isinstance(target, ast.Name) else ""


def _starts_at(node: ast.expr, line: int, column: int) -> bool:
    return (node.lineno, node.col_offset) == (line, column)


def _shortened(text: str) -> str:
    return text if len(text) <= _LONGEST else text[: _LONGEST - 4] + " ..."


_OPERATORS: dict[type, str] = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
                               ast.MatMult: "dot_general", ast.USub: "neg"}
"""The primitive each Python operator binds on arrays (``a @ b`` is a ``dot_general``)."""
_CALLED_AS = {"dot_general": {"dot", "matmul", "einsum"}, "integer_pow": {"square", "power"}, "pow": {"power"},
              "logistic": {"sigmoid"}, "reduce_sum": {"sum", "mean"}, "reduce_max": {"max", "amax"}}
"""Functions whose primitive has another name (``jnp.dot`` binds ``dot_general``); a collective's
are :data:`LAX_FUNCTIONS` (``lax.psum`` of a varying value binds ``psum_invariant``)."""


def _operand_at(value: ast.expr, line: int, column: int, primitive: str) -> ast.expr | None:
    """The one strict sub-expression of ``value`` that starts at (``line``, ``column``) and that
    ``primitive`` computes; None when the whole value is it, or no sub-expression (or several) is."""
    if not primitive or _computes(value, primitive):
        return None
    found = [node for node in ast.walk(value) if node is not value and isinstance(node, ast.expr)
             and (node.lineno, node.col_offset) == (line, column) and _computes(node, primitive)]
    return found[0] if len(found) == 1 else None


def _computes(node: ast.expr, primitive: str) -> bool:
    """True when ``node`` is an operation that binds ``primitive`` (``jnp.tanh(x)`` binds ``tanh``)."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name == primitive or name in _CALLED_AS.get(primitive, ()) or name in LAX_FUNCTIONS.get(primitive, ())
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return _OPERATORS.get(type(node.op)) == primitive or (primitive == "integer_pow" and isinstance(node.op, ast.Pow))
    return False


def _assigned(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return statement.targets if len(statement.targets) == 1 else []
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return [statement.target]
    return []


def _statement_at(file: str, line: int) -> ast.stmt | None:
    """The innermost simple statement that spans ``line``."""
    return _statements("".join(linecache.getlines(file))).get(line)


@functools.lru_cache(maxsize=8)
def _statements(source: str) -> dict[int, ast.stmt]:
    """The innermost simple statement that spans each line of ``source``, once per text (an
    edited file is another text; a program's thousands of collectives ask of one file)."""
    try:
        tree = ast.parse(source) if source else None
    except (SyntaxError, ValueError):
        return {}
    found: dict[int, ast.stmt] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.stmt) and not hasattr(node, "body"):
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                if line not in found or node.lineno >= found[line].lineno:
                    found[line] = node
    return found


def call_at(file: str, line: int, column: int) -> ast.Call | None:
    """The innermost call written at ``file``'s ``line`` that starts at ``column`` (0-based, as
    JAX's frames give it): the call a frame was running there (``lax.ppermute(y, ...)``, not the
    ``.sum()`` of ``lax.psum(x, 'i').sum()``)."""
    statement = _statement_at(file, line)
    if statement is None:
        return None
    calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call)
             and (node.lineno, node.col_offset) == (line, column)]
    return calls[-1] if calls else None


def written_argument(file: str, line: int, column: int) -> str:
    """The first argument of the call at (``line``, ``column``) as written (``y`` of
    ``lax.ppermute(y, 'stage', perm)``); ``""`` when there is none."""
    call = call_at(file, line, column)
    if call is None or not call.args:
        return ""
    return _shortened(ast.unparse(call.args[0]))
