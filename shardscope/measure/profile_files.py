"""Where a profile's files are: ``--profile-dir``'s folder, a run in it, a ``gs://`` bucket.

``jax.profiler.start_trace(DIR)`` writes ``DIR/plugins/profile/<run>/<host>.xplane.pb``: one file
per host (each process of a job writes its own), one ``<run>`` folder per trace, named by the
time it started. A folder holding several runs is read at its newest, and the choice is said
(:attr:`ProfileFiles.note`). Every file is checked by type before anything reads it: a FIFO, a
device (``/dev/zero`` linked in), a socket is refused, and so is a file past
:data:`MAX_FILE_BYTES`; a regular file's size is known before reading, so nothing reads without
an end.

A ``gs://`` folder is copied into a local folder first (gcsfs, with the user's Google Cloud
credentials). Without a network gcsfs retries each request for minutes, logging a traceback each
time: the listing runs under a deadline (:data:`GS_DEADLINE_S`), with gcsfs's log kept off the
terminal, and the copy is bounded by the sizes the listing gave.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, TypeVar

from shardscope.errors import ShardscopeError, file_kind

PROFILE_EXTRA = "shardscope[profile]"
"""The extra that installs gcsfs (with XProf's own package)."""

SUFFIX = ".xplane.pb"

MAX_FILE_BYTES = 2 << 30
"""The largest ``.xplane.pb`` read (2 GiB): its events become Python objects, several times its
size in memory. A trace of a few steps is megabytes; a larger one holds many steps."""

GS_DEADLINE_S = 20.0
"""How long listing a ``gs://`` folder may take: the first contact with the bucket. Without a
network gcsfs would retry for minutes."""

_MAX_DEPTH = 6
"""How deep a folder is searched for runs (``DIR/plugins/profile/<run>/`` is 3 down)."""

T = TypeVar("T")


class ProfileError(ShardscopeError):
    """A profile that cannot be read: none there, a special or truncated file, gcsfs missing,
    a bucket out of reach."""


@dataclass(frozen=True)
class ProfileFiles:
    """The ``.xplane.pb`` files of one run (one per host) and what was chosen to find them:
    ``note`` says which run of several was read ("" when there was no choice)."""

    files: tuple[Path, ...]
    run: str
    note: str = ""


def profile_files(location: str | Path) -> ProfileFiles:
    """The ``.xplane.pb`` files at ``location`` (local): one file, a ``plugins/profile/<run>``
    folder, or the folder ``start_trace`` was given (its newest run, said in the note)."""
    path = Path(location)
    kind = _kind(path)
    if kind == "missing":
        raise ProfileError(f"{location}: no such file or folder.", "give the folder jax.profiler.start_trace wrote into")
    if kind == "file":
        if not path.name.endswith(SUFFIX):
            raise ProfileError(f"{location} is not a profile ({SUFFIX} file), nor a folder.",
                               "give its plugins/profile/<run> folder or one .xplane.pb file")
        return ProfileFiles((_checked(path),), path.parent.name)
    if kind != "folder":
        raise ProfileError(f"{location} is {kind}, not a folder nor a {SUFFIX} file.",
                           "give the folder jax.profiler.start_trace wrote into")
    runs = _runs(path)
    if not runs:
        if not any(path.iterdir()):
            raise ProfileError(f"{location} is empty: no profile in it.",
                               "capture one with jax.profiler.start_trace(DIR) ... stop_trace(), then pass DIR")
        raise ProfileError(f"{location} holds no profile: no {SUFFIX} file in it or under plugins/profile/.",
                           "pass the folder given to jax.profiler.start_trace, or its plugins/profile/<run> folder")
    newest = max(runs, key=lambda run: (run.name, str(run)))  # start_trace names a run by its start time
    files = tuple(_checked(f) for f in sorted(newest.iterdir()) if f.name.endswith(SUFFIX))
    note = ""
    if len(runs) > 1:
        older = sorted(r.name for r in runs if r != newest)
        note = (f"read the run {newest.name}, the newest of {len(runs)} in {location} "
                f"(also there: {', '.join(older[-3:])}{' ...' if len(older) > 3 else ''}); "
                f"pass {newest.parent}/<run> for another")
    return ProfileFiles(files, newest.name, note)


def _kind(path: Path) -> str:
    """``file``, ``folder``, ``missing``, or what else it is (``a FIFO``, ``a device``), the
    link followed: nothing is opened to find out."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:  # a loop of links, a name too long, no permission
        raise ProfileError(f"{path} cannot be read: {exc.strerror or exc}.",
                           "give the folder jax.profiler.start_trace wrote into") from exc
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return file_kind(mode, "a special file")


def _checked(path: Path) -> Path:
    """``path`` when it is a regular file of a readable size (links followed); else one message."""
    kind = _kind(path)
    if kind != "file":
        raise ProfileError(f"{path} is {'missing' if kind == 'missing' else kind}, not a profile file: "
                           "nothing was read from it.", "a profile's files are regular files that start_trace wrote")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ProfileError(f"{path} is {size / (1 << 30):.1f} GiB: too large to read here "
                           f"(at most {MAX_FILE_BYTES >> 30} GiB per host).",
                           "profile fewer steps (a few calls of the step are enough)")
    return path


def _runs(folder: Path) -> list[Path]:
    """The folders under ``folder`` (itself included) that hold ``.xplane.pb`` files, links to
    folders not followed (no loops), at most :data:`_MAX_DEPTH` down."""
    found = []
    top = len(folder.parts)
    for here, subfolders, names in os.walk(folder, followlinks=False):
        if any(name.endswith(SUFFIX) for name in names):
            found.append(Path(here))
        if len(Path(here).parts) - top >= _MAX_DEPTH:
            subfolders.clear()
    return found


def fetched(location: str, into: Path) -> Path:
    """A ``gs://`` profile folder (or file) copied into ``into`` (gcsfs reads it); a local path as
    it is. The listing runs under a deadline; nothing larger than :data:`MAX_FILE_BYTES` a file
    is copied."""
    if not location.startswith("gs://"):
        return Path(location)
    try:
        import gcsfs
    except ImportError as exc:
        raise ProfileError(f"Reading {location} needs gcsfs, which is not installed.",
                           f'pip install gcsfs (the full {PROFILE_EXTRA} brings it), or copy the folder '
                           "locally: gsutil -m cp -r ...") from exc
    _require_network(location)
    with _gcsfs_quiet():
        # the credentials' lookup (a metadata server asked, with retries) counts in the deadline too
        fs, sizes = _within(GS_DEADLINE_S, lambda: _listed(gcsfs, location), location)
        for name, size in sizes.items():
            if size > MAX_FILE_BYTES:
                raise ProfileError(f"{name} is {size / (1 << 30):.1f} GiB: too large to read here.",
                                   "profile fewer steps (a few calls of the step are enough)")
            parts = name.rstrip("/").split("/")
            target = into / parts[-2] / parts[-1]  # <run>/<host>.xplane.pb, as profile_files reads
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                fs.get(name, str(target))
            except Exception as exc:  # gcsfs's own errors: credentials, a network that went away
                raise ProfileError(f"Could not copy {name}: {_first_line(exc)}",
                                   "check the path and your Google Cloud credentials") from None
    return into


GS_HOST = "storage.googleapis.com"


def _require_network(location: str) -> None:
    """One message at once when Cloud Storage's host name does not resolve (no network here),
    rather than gcsfs's retries; through a proxy (``HTTPS_PROXY``) the proxy resolves it."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "STORAGE_EMULATOR_HOST")):
        return
    try:
        _within(GS_DEADLINE_S / 4, lambda: socket.getaddrinfo(GS_HOST, 443), location)
    except ProfileError as exc:
        raise ProfileError(f"Could not read {location}: {GS_HOST} cannot be reached from here (no network?).",
                           "copy the folder locally (gsutil -m cp -r ...) and pass the copy") from exc


def _listed(gcsfs: ModuleType, location: str) -> tuple[Any, dict[str, int]]:  # Any: gcsfs's file system (untyped)
    """gcsfs's file system, and each ``.xplane.pb`` under ``location`` with its size in bytes."""
    fs = gcsfs.GCSFileSystem(requests_timeout=GS_DEADLINE_S)
    found = fs.find(location, detail=True)
    return fs, {name: int(info.get("size") or 0) for name, info in found.items() if name.endswith(SUFFIX)}


def _within(seconds: float, work: Callable[[], T], location: str) -> T:
    """``work()`` in a daemon thread, given up after ``seconds`` (gcsfs retries for minutes
    without a network, and its calls cannot be cancelled from outside)."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="shardscope-gs", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ProfileError(f"Could not reach {location} within {seconds:.0f} s (no network, or the bucket does not "
                           "answer).", "copy the folder locally (gsutil -m cp -r ...) and pass the copy")
    if "error" in outcome:
        exc = outcome["error"]
        raise ProfileError(f"Could not read {location}: {_first_line(exc)}",  # type: ignore[arg-type]
                           "check the path and your Google Cloud credentials") from None
    return outcome["result"]  # type: ignore[return-value]


def _first_line(exc: BaseException) -> str:
    """``ClientConnectorDNSError: Cannot connect to host ...``: one line of a network error."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@contextmanager
def _gcsfs_quiet() -> Iterator[None]:
    """gcsfs's log (a traceback per retry, to stderr through logging's last resort) kept off the
    terminal while it runs: its errors still reach the caller as exceptions."""
    logger = logging.getLogger("gcsfs")
    handler = logging.NullHandler()
    before = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = before
