"""A target's compiles kept on disk beside JAX's persistent compilation cache.

A module compiled for a TPU slice or for GPUs is never read back from JAX's own cache (the
compile-only client cannot load an executable), so every command compiled it afresh: a
Llama-2-7B-shaped train step for ``tpu:v5e:16x16`` takes libtpu over 3 minutes of CPU. What
shardscope reads of such a compile is plain values (the module's text, the memory and cost
analyses, the compiler's messages, or its refusal for memory), so those are kept here, one
gzip'd JSON file per compile, under the key the process's own cache uses
(:func:`shardscope.targets.compile.compile_for_target`: the lowered module with its source
locations, the shardings and layouts, XLA's options, the target and the devices) and the
versions of jax and of the target's compiler. A ``layouts`` sweep's worker processes share them,
and a sweep run again (interrupted, or with another ranking) reads its compiles back.

Only where the command turned JAX's cache on (:mod:`shardscope.distributed.compile_cache`) and it
is a local folder; the files are named like JAX's entries (``...-cache``), so the cache's trim
bounds them with the rest. A file that cannot be read is a miss; writes are atomic.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from pathlib import Path

PREFIX = "shardscope-target-"
SUFFIX = "-cache"


def cache_folder() -> Path | None:
    """The local folder of JAX's persistent cache when the command turned it on (None otherwise)."""
    import jax  # loaded by now: a target's compile reached here

    directory = getattr(jax.config, "jax_compilation_cache_dir", None)  # JAX's config declares its options at run time
    if not getattr(jax.config, "jax_enable_compilation_cache", False) or not directory or "://" in str(directory):
        return None
    return Path(directory)


def digest(key: tuple[object, ...], versions: tuple[str, ...]) -> str:
    """The file name's digest of a compile's key and the versions that made it."""
    return hashlib.sha256(repr((key, versions)).encode()).hexdigest()


def load(name: str) -> dict[str, object] | None:
    """The record kept under ``name`` (None: none, the cache is off, or it cannot be read)."""
    folder = cache_folder()
    if folder is None:
        return None
    path = folder / f"{PREFIX}{name}{SUFFIX}"
    try:
        record = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError, EOFError):  # missing, damaged or cut short: compiled afresh
        return None
    if not isinstance(record, dict):
        return None
    try:
        os.utime(path)  # the trim removes the least recently used first
    except OSError:
        pass
    return record


def store(name: str, record: dict[str, object]) -> None:
    """Keep ``record`` under ``name`` (nothing when the cache is off or cannot be written)."""
    folder = cache_folder()
    if folder is None:
        return
    data = gzip.compress(json.dumps(record).encode(), compresslevel=6)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".shardscope-target-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, folder / f"{PREFIX}{name}{SUFFIX}")
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:  # a cache that cannot be written: this compile's result stands
        pass
