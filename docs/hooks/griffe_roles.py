"""Sphinx roles in shardscope's docstrings as Markdown, for the API reference (mkdocstrings).

The docstrings cross-reference with Sphinx's roles (``:func:`inspect```, ``:class:`~a.b.C```),
which Markdown would print as they are. This griffe extension (mkdocs.yml,
``extensions:``) turns each into a code span of the name as Sphinx shows it: the last part when
it starts with ``~``, else the whole path.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def markdown_of_roles(text: str) -> str:
    """``:func:`~a.b.c``` as ```c```, ``:class:`a.B``` as ```a.B```."""
    return _ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles in every docstring griffe reads."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:  # griffe's hook
        if obj.docstring is not None:
            obj.docstring.value = markdown_of_roles(obj.docstring.value)
