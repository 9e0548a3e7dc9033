"""Where a collective written in a ``jax.custom_vjp``'s backward rule really is.

JAX runs a custom VJP's ``bwd`` while it transposes the program, under the source information
of the call of the custom function (``_custom_lin_transpose`` inside ``user_context``): every
equation ``bwd`` makes, a ``lax.psum`` too, carries the frames of the line that called
``linear(W, x)``, not of ``bwd``'s own lines. The rule is found back from that call: the
function called there is a ``jax.custom_vjp`` of the user's module, its ``bwd`` is a Python
function whose source says where it calls the collective.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

from shardscope.collective_kinds import LAX_FUNCTIONS
from shardscope.engine.written_values import call_at



@dataclass(frozen=True)
class RuleSite:
    """A collective's line in a custom VJP's backward rule: ``file:line (bwd)``, the column of
    its call, and the custom function the rule belongs to."""

    file: str
    line: int
    column: int
    function: str  # the rule's name (``_bwd``)
    custom: str  # the custom_vjp function's name (``linear``)
    called: bool  # True when the rule's source calls the collective on this line (else: the rule's def line)

    def text(self) -> str:
        """``file.py:24 (_bwd)``, as an equation's source reads."""
        return f"{self.file}:{self.line} ({self.function})"


def backward_rule_site(file: str, line: int, column: int, primitive: str) -> RuleSite | None:
    """The line of the ``bwd`` rule that wrote the collective ``primitive``, for a backward-pass
    equation whose innermost user frame is (``file``, ``line``, ``column``); None when no
    ``jax.custom_vjp`` is called there."""
    call = call_at(file, line, column)
    if call is None:
        return None
    rule = _custom_vjp_named(file, _called_name(call))
    if rule is None:
        return None
    custom, bwd = rule
    return _site_in(bwd, custom, LAX_FUNCTIONS.get(primitive, (primitive,)))


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _custom_vjp_named(file: str, name: str) -> tuple[str, Callable] | None:
    """The ``bwd`` of the ``jax.custom_vjp`` called ``name`` in the module loaded from ``file``."""
    from jax import custom_vjp  # JAX is loaded by now: the equations are its

    if not name:
        return None
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) != file:
            continue
        found = getattr(module, name, None)
        bwd = getattr(found, "bwd", None) if isinstance(found, custom_vjp) else None
        if callable(bwd):
            return str(getattr(found, "__name__", name)), bwd
    return None


def _site_in(bwd: Callable, custom: str, functions: tuple[str, ...]) -> RuleSite | None:
    """The one call of ``functions`` in ``bwd``'s source, else ``bwd``'s def line."""
    parsed = _source_of(bwd)
    if parsed is None:
        return None
    file, first, indent, tree = parsed
    name = getattr(bwd, "__name__", "bwd")
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _called_name(node) in functions]
    if len(calls) == 1:
        return RuleSite(file, first + calls[0].lineno - 1, calls[0].col_offset + indent, name, custom, True)
    return RuleSite(file, first, 0, name, custom, False)


@functools.lru_cache(maxsize=64)
def _source_of(fn: Callable) -> tuple[str, int, int, ast.Module] | None:
    """``bwd``'s file, first line, indentation and parsed (dedented) source."""
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or ""
        indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        return file, first, indent, ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
