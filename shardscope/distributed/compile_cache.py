"""JAX's persistent compilation cache, which a command turns on for its own process: a program
compiled before (the same file, unchanged, on the same devices) is read back from disk instead of
compiled again, so a second ``shardscope check`` of it spends its time on the analysis.

Where it lives: ``JAX_COMPILATION_CACHE_DIR`` when the user set it, else
``$XDG_CACHE_HOME/shardscope/jax`` (``~/.cache/shardscope/jax``), at most :data:`MAX_BYTES`: a
command removes the least recently used entries past that as it starts (:func:`trim`).
``SHARDSCOPE_NO_CACHE=1`` or a command's ``--no-cache`` turns it off. Only a command calls
:func:`start_compilation_cache`: a library call (``shardscope.inspect``) leaves its caller's JAX
configuration as it is.

Source locations are part of the cache's key here (JAX leaves them out by default): an
executable read back from the cache carries the source-location table of the compile that
wrote it, and shardscope shows those lines next to each collective. With them in the key, a file
whose lines moved compiles afresh and its lines are the current trace's.

Why shardscope bounds the cache itself rather than through ``jax_compilation_cache_max_size``:
with that option JAX takes a lock and reads every entry's size and access time on each write
(``LRUCache._evict_if_needed``), so a write costs time in proportion to the entries already there
(``python -m benchmarks.cache_writes``: 5.5 ms a write with 100 entries, 49 ms with 1,000, 445 ms
with 10,000; a 1 GiB cache of CPU executables holds tens of thousands). Left unbounded in JAX
(its default), a write is one file; :func:`trim` reads the directory once per command instead.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Mapping, NamedTuple

NO_CACHE_ENV = "SHARDSCOPE_NO_CACHE"
"""Set to 1 (or true, yes) to compile afresh, as ``--no-cache`` does."""
JAX_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
MAX_BYTES = 1 << 30
"""The cache's bound on disk (1 GiB): a CPU executable of the demos takes tens of kB, a
12-layer transformer step under 1 MB."""
TRIMMED_TO = 3 / 4
"""A trim removes entries until the cache holds at most this share of :data:`MAX_BYTES`, so the
commands that follow add to it for a while before the next trim removes anything."""

TRIM_EVERY = 3600.0
"""Seconds between two trims (:func:`trim_now_and_then`): a trim reads every entry's size (about
5 ms per thousand entries), a command's writes add a few entries."""
_STAMP = ".trimmed"
"""The file whose modification time is the last trim's."""

_ENTRY = "-cache"
_ACCESS_TIME = "-atime"
"""JAX names an executable ``KEY-cache``; with its own bound on, it also wrote ``KEY-atime``
(earlier versions of shardscope turned that on): a trim removes those with their entry."""


_UNREADABLE_ENTRY = r"Error (reading|writing) persistent compilation cache entry"


def cache_directory(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where the compilation cache of a command lives, or None when the user turned it off."""
    if environ.get(NO_CACHE_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    if environ.get(JAX_DIR_ENV):
        return Path(environ[JAX_DIR_ENV]).expanduser()
    xdg = environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores a relative path
    return base / "shardscope" / "jax"


def cache_options(directory: Path | None) -> dict[str, str | int | float | bool]:
    """The JAX options that turn the cache on in ``directory`` (off when None)."""
    if directory is None:
        return {"jax_enable_compilation_cache": False}
    return {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": str(directory),
        # unbounded in JAX (its default): its bound reads the whole directory on every write; the
        # bound is kept by trim(), once per command
        "jax_compilation_cache_max_size": -1,
        # JAX keeps only compiles over 1 s by default: most of a CPU program's are shorter
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
        # the lines shown come from the current trace, never from the compile that filled the cache
        "jax_compilation_cache_include_metadata_in_key": True,
    }


def start_compilation_cache(enabled: bool = True) -> Path | None:
    """Turn JAX's persistent compilation cache on for this process (off when not ``enabled`` or
    when ``SHARDSCOPE_NO_CACHE`` is set); returns its directory (None: off).

    For a command, before its first compile. The options go into the environment too, which JAX
    reads when it is imported: the explorer paints its first screen before JAX is imported (in
    its first worker), and the workers of ``--processes`` inherit them. Once JAX is imported they
    are set on ``jax.config`` as well.

    JAX's warning about an entry it could not read back is silenced: it compiles afresh then, and
    the compile-only devices of a TPU slice (``--target``) write entries that their client cannot
    read back (``DeserializeLoadedExecutable``), which would warn on every second run.
    """
    directory = cache_directory() if enabled else None
    options = cache_options(directory)
    if directory is not None:
        warnings.filterwarnings("ignore", message=_UNREADABLE_ENTRY, category=UserWarning)
        trim_now_and_then(directory)
    jax = sys.modules.get("jax")
    for name, value in options.items():
        os.environ[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
        if jax is not None:
            jax.config.update(name, value)
    return directory


class Trimmed(NamedTuple):
    """What a :func:`trim` found and removed, in entries and bytes."""

    entries: int
    bytes: int
    removed: int
    removed_bytes: int


def trim(directory: Path, max_bytes: int = MAX_BYTES) -> Trimmed:
    """Bound the cache in ``directory``: when its entries take more than ``max_bytes``, remove the
    least recently used ones (by the file's access time, or its modification time when that is
    later: a file system mounted ``noatime`` gives the order they were written in) until they take
    at most :data:`TRIMMED_TO` of it. One pass over the directory.

    Safe while another process uses the cache: a file removed under it is a cache miss there
    (JAX compiles afresh), and a file another trim removed first is skipped."""
    entries: list[tuple[float, int, str]] = []
    orphans: list[str] = []
    try:
        with os.scandir(directory) as listing:
            names = {item.name: item for item in listing if item.is_file(follow_symlinks=False)}
    except OSError:  # missing or unreadable: nothing to trim, and JAX reports a cache it cannot use
        return Trimmed(0, 0, 0, 0)
    total = 0
    for name, item in names.items():
        if name.endswith(_ACCESS_TIME):
            if name.removesuffix(_ACCESS_TIME) + _ENTRY not in names:
                orphans.append(name)
            continue
        if not name.endswith(_ENTRY):
            continue
        try:
            stat = item.stat(follow_symlinks=False)
        except OSError:
            continue
        entries.append((max(stat.st_atime, stat.st_mtime), stat.st_size, name))
        total += stat.st_size
    for name in orphans:
        _remove(directory / name)
    if total <= max_bytes:
        return Trimmed(len(entries), total, 0, 0)
    removed = removed_bytes = 0
    for _, size, name in sorted(entries):
        if total - removed_bytes <= max_bytes * TRIMMED_TO:
            break
        _remove(directory / name)
        _remove(directory / (name.removesuffix(_ENTRY) + _ACCESS_TIME))
        removed += 1
        removed_bytes += size
    return Trimmed(len(entries), total, removed, removed_bytes)


def trim_now_and_then(directory: Path, every: float = TRIM_EVERY) -> Trimmed | None:
    """:func:`trim` the cache in ``directory`` unless it was trimmed less than ``every`` seconds
    ago (None then): what a command does as it starts."""
    stamp = directory / _STAMP
    try:
        if time.time() - stamp.stat().st_mtime < every:
            return None
    except OSError:  # never trimmed
        pass
    trimmed = trim(directory)
    try:
        stamp.touch()
    except OSError:  # no directory yet (JAX makes it at its first write) or one we cannot write to
        pass
    return trimmed


def _remove(path: Path) -> None:
    """Remove a cache file, which another process may have removed already."""
    try:
        path.unlink()
    except OSError:  # gone already, or a directory the user cannot write: the cache stays as it is
        pass
