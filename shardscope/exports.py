"""Writing files so that nothing a user has is lost: atomically, never overwriting silently."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from shardscope.errors import ShardscopeError


def write_atomic(path: str | Path, text: str, *, overwrite: bool = False) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    Refuses to replace an existing file unless ``overwrite``; the check and the rename are one
    step (a hard link) when not overwriting, so a file that appears meanwhile is not replaced.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise ShardscopeError(f"{path} exists; not overwriting it.", "pass --force to replace it, or pick another -o")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ShardscopeError(f"No such directory: {directory}", "create it first or pick another path")
    if path.is_dir():
        raise ShardscopeError(f"{path} is a directory.", "give the path of a file to write")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ShardscopeError(f"Cannot write in {directory}: {exc.strerror or exc}", "pick another path") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise ShardscopeError(f"{path} exists; not overwriting it.", "pick another path") from None
            os.unlink(tmp)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # disk full, permissions: the user's to fix, not a crash
            raise ShardscopeError(f"Cannot write {path}: {exc.strerror or exc}", "pick another path") from exc
        raise
    return path


def write_new(directory: str | Path, stem: str, suffix: str, text: str) -> Path:
    """Write to ``directory/stem+suffix``, or ``stem-1+suffix``, ... whichever is free first."""
    directory = Path(directory)
    for n in range(10_000):
        candidate = directory / (f"{stem}{suffix}" if n == 0 else f"{stem}-{n}{suffix}")
        if candidate.exists():
            continue
        try:
            return write_atomic(candidate, text)
        except ShardscopeError:
            if candidate.exists():
                continue  # taken between the check and the write: try the next name
            raise
    raise ShardscopeError(f"No free file name for {stem}{suffix} in {directory}.", "clean up old exports")
