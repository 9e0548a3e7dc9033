"""A value computed inside a program, named as the user wrote it: the variable its line assigns
(``h = jnp.tanh(acts)`` names ``h``), else the expression itself (``return a + b`` names
``a + b``).

A value no program input or output carries (an activation the partitioner reshards) has no
pytree path; its line is what the user recognises, and the name the line gives it is what a fix
applies to.
"""

from __future__ import annotations

import ast
import functools
import linecache

_LONGEST = 48
"""An expression longer than this is shown by its start (``jnp.einsum('bthd,bshd->bhts', ...``)."""


def written_name(file: str, line: int) -> str:
    """The name the statement at ``file``'s ``line`` gives its value (``""`` when the file or the
    line cannot be read as Python)."""
    statement = _statement_at(file, line)
    if statement is None:
        return ""
    targets = _assigned(statement)
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    value = getattr(statement, "value", None)
    text = ast.unparse(value) if isinstance(value, ast.expr) else ""
    return text if len(text) <= _LONGEST else text[: _LONGEST - 4] + " ..."


def _assigned(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return statement.targets if len(statement.targets) == 1 else []
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return [statement.target]
    return []


def _statement_at(file: str, line: int) -> ast.stmt | None:
    """The innermost simple statement that spans ``line``."""
    tree = _parsed("".join(linecache.getlines(file)))
    if tree is None:
        return None
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not hasattr(node, "body") and node.lineno <= line <= (node.end_lineno or 0):
            if found is None or node.lineno >= found.lineno:
                found = node
    return found


@functools.lru_cache(maxsize=8)
def _parsed(source: str) -> ast.Module | None:
    """``source`` parsed, once per text (an edited file is another text)."""
    try:
        return ast.parse(source) if source else None
    except (SyntaxError, ValueError):
        return None
