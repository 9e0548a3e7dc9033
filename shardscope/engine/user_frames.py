"""Which frame of a traceback is the user's: the innermost outside installed packages.

Both views name a collective by the user's line: the jaxpr's equations carry Python tracebacks,
the compiled module a table of stack frames; both pick the frame here.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Callable, TypeVar

_F = TypeVar("_F")


_INSTALLED = frozenset({"site-packages", "dist-packages"})


def is_library_file(file_name: str) -> bool:
    """True for an installed package's file (flax's ``nnx/nn/linear.py``, equinox's layers): a
    line there is the library's, not the user's. shardscope's own files are never skipped (its
    plans' frames name their collectives themselves, and its shipped demos are the user's code),
    wherever it is installed."""
    parts = PurePath(file_name).parts
    return bool(_INSTALLED.intersection(parts)) and "shardscope" not in parts


def users_first(frames: "tuple[_F, ...]", file_of: "Callable[[_F], str]") -> "_F | None":
    """The innermost of ``frames`` (innermost first) in the user's own files, else the innermost:
    a collective made inside ``nnx.Linear.__call__`` is named by the user's line that called the
    layer."""
    return next((f for f in frames if not is_library_file(file_of(f))), frames[0] if frames else None)
