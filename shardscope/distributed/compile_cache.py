"""JAX's persistent compilation cache, which a command turns on for its own process: a program
compiled before (the same file, unchanged, on the same devices) is read back from disk instead of
compiled again, so a second ``shardscope check`` of it spends its time on the analysis.

Where it lives: ``JAX_COMPILATION_CACHE_DIR`` when the user set it, else
``$XDG_CACHE_HOME/shardscope/jax`` (``~/.cache/shardscope/jax``), at most :data:`MAX_BYTES`
(JAX removes the least recently used entries past that). ``SHARDSCOPE_NO_CACHE=1`` or a
command's ``--no-cache`` turns it off. Only a command calls :func:`start_compilation_cache`: a
library call (``shardscope.inspect``) leaves its caller's JAX configuration as it is.

Source locations are part of the cache's key here (JAX leaves them out by default): an
executable read back from the cache carries the source-location table of the compile that
wrote it, and shardscope shows those lines next to each collective. With them in the key, a file
whose lines moved compiles afresh and its lines are the current trace's.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Mapping

NO_CACHE_ENV = "SHARDSCOPE_NO_CACHE"
"""Set to 1 (or true, yes) to compile afresh, as ``--no-cache`` does."""
JAX_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
MAX_BYTES = 1 << 30
"""The cache's bound on disk (1 GiB): a CPU executable of the demos takes tens of kB, a
12-layer transformer step under 1 MB."""


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
        "jax_compilation_cache_max_size": MAX_BYTES,
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
    jax = sys.modules.get("jax")
    for name, value in options.items():
        os.environ[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
        if jax is not None:
            jax.config.update(name, value)
    return directory
