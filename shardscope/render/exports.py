"""Writing files so that nothing a user has is lost: atomically, never overwriting silently."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from shardscope.errors import ShardscopeError, file_kind
from shardscope.distributed.interrupts import temporary_file

def write_atomic(path: str | Path, text: str, *, overwrite: bool = False) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    Refuses to replace an existing file unless ``overwrite``; the check and the rename are one
    step (a hard link) when not overwriting, so a file that appears meanwhile is not replaced.
    Only regular files are ever replaced: a directory, symbolic link, FIFO or device is refused
    even with ``overwrite``. A new file gets the permissions ``open(path, "w")`` would give (the
    umask); a replaced file keeps its mode.
    """
    if not str(path):
        raise ShardscopeError("The output path is empty.", "give a file name, or - for standard output")
    mode = _existing_mode(Path(path), str(path), overwrite)
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise ShardscopeError(f"No such directory: {directory}", "create it first or pick another path")
    if mode is None:
        mode = 0o666 & ~current_umask()
    while True:  # the name is registered before the file exists: an interrupt removes it
        tmp = str(directory / f".{path.name}.{secrets.token_hex(4)}.tmp")
        with temporary_file(tmp):
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            except OSError as exc:
                raise ShardscopeError(f"Cannot write in {directory}: {exc.strerror or exc}", "pick another path") from exc
            try:
                _fill(fd, text, mode)
                _commit(tmp, path, overwrite)
            except BaseException as exc:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                if isinstance(exc, OSError):  # disk full, permissions: the user's to fix, not a crash
                    raise ShardscopeError(f"Cannot write {path}: {exc.strerror or exc}", "pick another path") from exc
                raise
            return path


def _existing_mode(path: Path, text: str, overwrite: bool) -> int | None:
    """The mode of the regular file at ``path`` (None when there is none); refuses anything else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if text.endswith(("/", os.sep)):
            raise ShardscopeError(f"{text} names a directory (it ends with /).", "give the path of a file to write") from None
        return None
    except OSError as exc:
        raise ShardscopeError(f"Cannot use {text}: {exc.strerror or exc}", "pick another path") from exc
    if stat.S_ISDIR(info.st_mode):
        raise ShardscopeError(f"{text} is a directory.", f"give the path of a file to write, e.g. {path / 'plans.diff'}")
    if not stat.S_ISREG(info.st_mode):
        raise ShardscopeError(
            f"{text} is {file_kind(info.st_mode)}, not a regular file: shardscope only writes regular files.",
            "pick a new path or an existing regular file (- writes to standard output)",
        )
    if not overwrite:
        raise ShardscopeError(f"{path} exists; not overwriting it.", "pass --force to replace it, or pick another -o")
    return stat.S_IMODE(info.st_mode)


def _fill(fd: int, text: str, mode: int) -> None:
    os.fchmod(fd, mode)
    # surrogateescape: a demo file name with a non-UTF-8 byte is written back as that byte
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _commit(tmp: str, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise ShardscopeError(f"{path} exists; not overwriting it.", "pick another path") from None
    os.unlink(tmp)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells it (/proc)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (briefly process-wide)
    os.umask(mask)
    return mask


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
