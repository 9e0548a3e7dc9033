"""JAX's persistent compilation cache, which a command turns on for its own process: a program
compiled before (the same file, unchanged, on the same devices) is read back from disk instead of
compiled again, so a second ``shardscope check`` of it spends its time on the analysis.

Where it lives: ``JAX_COMPILATION_CACHE_DIR`` when the user set it, else
``$XDG_CACHE_HOME/shardscope/jax`` (``~/.cache/shardscope/jax``), at most :data:`MAX_BYTES`: a
command removes the least recently used entries past that as it starts (:func:`trim`).
``SHARDSCOPE_NO_CACHE=1`` or a command's ``--no-cache`` turns it off. Only a command calls
:func:`start_compilation_cache`: a library call (``shardscope.inspect``) leaves its caller's JAX
configuration as it is.

A folder on a remote file system, as JAX accepts it (``gs://bucket/cache``, read through
``etils.epath`` and the file system's own package, ``gcsfs`` for ``gs://``), is handed to JAX
as written: never made a local path (``Path('gs://b')`` is the local folder ``gs:/b``). When the
package that reads it is missing, the command says so and compiles without the cache. shardscope
bounds and repairs only a local cache.

An entry JAX cannot read back (a write cut short, a damaged disk) is removed when JAX reports
it, so the compile that follows writes it anew: JAX itself never overwrites an entry that exists.

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

import glob
import importlib.util
import os
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, TextIO, Union

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
_READ_FAILED = re.compile(r"Error reading persistent compilation cache entry for '(?P<name>[^']+)'")
"""JAX's warning when an entry cannot be read back: it names the module (``jit_step``), or the
whole key (``jit_step-<hash>``) when only looking the entry up failed."""

CacheLocation = Union[Path, str]
"""A local folder, or a remote file system's URL as JAX reads it (``gs://bucket/cache``)."""
_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")


def cache_directory(environ: Mapping[str, str] = os.environ) -> CacheLocation | None:
    """Where the compilation cache of a command lives, or None when the user turned it off: a
    remote folder (``gs://bucket/cache``) as the URL the user gave, a local one as a path."""
    if environ.get(NO_CACHE_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    if environ.get(JAX_DIR_ENV):
        given = environ[JAX_DIR_ENV]
        if remote_scheme(given):
            return given
        return Path(given.removeprefix("file://")).expanduser()
    xdg = environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores a relative path
    return base / "shardscope" / "jax"


def remote_scheme(location: CacheLocation) -> str:
    """The file system scheme of a remote cache folder (``gs``), ``""`` for a local one."""
    match = _URL.match(location) if isinstance(location, str) else None
    return "" if match is None or match.group("scheme").lower() == "file" else match.group("scheme").lower()


def unusable_reason(location: CacheLocation) -> str:
    """Why JAX cannot use the cache folder ``location`` in this environment (``""``: it can).

    Only what can be told without the network: JAX opens a remote folder through ``etils.epath``,
    which reads ``gs://`` with ``gcsfs`` (or TensorFlow's file system) and other schemes through
    ``fsspec``'s package for them."""
    scheme = remote_scheme(location)
    if not scheme:
        return ""
    if importlib.util.find_spec("etils") is None:
        return "JAX reads a remote folder through etils.epath, which is not installed (pip install etils[epath])"
    if importlib.util.find_spec("tensorflow") is not None:  # epath's other backend reads every scheme TF does
        return ""
    try:
        import fsspec  # type: ignore[import-untyped]  # no stubs; in the function: only a remote folder needs it

        fsspec.get_filesystem_class(scheme)
    except ImportError as exc:
        return f"reading {scheme}:// folders needs a package that is not installed ({exc})"
    except ValueError:
        return f"no installed file system reads {scheme}:// folders"
    return ""


def cache_options(directory: CacheLocation | None) -> dict[str, str | int | float | bool]:
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


def start_compilation_cache(enabled: bool = True) -> CacheLocation | None:
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
    reason = unusable_reason(directory) if directory is not None else ""
    if reason:
        print(f"shardscope: the compilation cache {directory} ({JAX_DIR_ENV}) is not used: {reason}; "
              f"compiling without it.", file=sys.stderr)
        directory = None
    options = cache_options(directory)
    if directory is not None:
        warnings.filterwarnings("ignore", message=_UNREADABLE_ENTRY, category=UserWarning)
        if isinstance(directory, Path):  # a remote folder is JAX's alone to read and write
            warnings.filterwarnings("always", message=_READ_FAILED.pattern, category=UserWarning)
            warnings.showwarning = _removing_unreadable_entries(directory, warnings.showwarning)
            trim_now_and_then(directory)
    jax = sys.modules.get("jax")
    for name, value in options.items():
        os.environ[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
        if jax is not None:
            jax.config.update(name, value)
    return directory


def _removing_unreadable_entries(directory: Path, shown: Callable[..., None]) -> Callable[..., None]:
    """``warnings.showwarning`` that, for JAX's warning that it could not read an entry back,
    removes the damaged entries of that module from ``directory`` (so the compile that follows
    writes them anew) and shows nothing; any other warning goes to ``shown``."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        read = _READ_FAILED.search(str(message))
        if read is None:
            shown(message, category, filename, lineno, file, line)
            return
        remove_damaged_entries(directory, read.group("name"))

    return show


def remove_damaged_entries(directory: Path, name: str) -> list[str]:
    """Remove the entries of module (or key) ``name`` in ``directory`` whose bytes do not
    decompress as JAX wrote them; returns their file names. An entry that decompresses but that
    this client cannot load (a TPU slice's compile-only executable) is left: writing it again
    would not make it loadable."""
    removed = []
    for path in sorted(directory.glob(f"{glob.escape(name)}*{_ENTRY}")):
        key = path.name.removesuffix(_ENTRY)
        if key != name and not key.startswith(name + "-"):
            continue
        try:
            data = path.read_bytes()
        except OSError:  # gone already: JAX writes it anew
            continue
        if not _decompresses(data):
            _remove(path)
            _remove(directory / (key + _ACCESS_TIME))
            removed.append(path.name)
    return removed


def _decompresses(data: bytes) -> bool:
    """Whether a cache entry's bytes decompress as JAX compresses them (zstandard, else zlib)."""
    # JAX is loaded by now (its warning called here); its own function knows which codec it used
    from jax._src.compilation_cache import decompress_executable

    try:
        decompress_executable(data)
    except Exception:  # the codec's error for damaged bytes: zstd.ZstdError, zlib.error
        return False
    return True


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
