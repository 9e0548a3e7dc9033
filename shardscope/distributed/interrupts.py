"""Ctrl+C and SIGTERM end a command at once, leaving nothing half-written.

Two things make the default ``KeyboardInterrupt`` unreliable under JAX: JAX runs Python
callbacks (its GC callback among them) in which an exception is printed as "Exception ignored"
and swallowed, and a long XLA call in the main thread (a compile) delays Python's signal
handlers until it returns. So :func:`run_interruptible` runs the work in a daemon thread while the
main thread only waits, and the handler removes the temporary files being written and leaves
with ``os._exit``: nothing can swallow it, nothing delays it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from shardscope.activities import current_activity, temporary_folders
from shardscope.native_stderr import terminal_stderr

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_temporary_files: set[str] = set()
_lock = threading.Lock()


@contextmanager
def temporary_file(path: str) -> Iterator[str]:
    """Mark ``path`` as removed on an interrupt while the block runs.

    Register a temporary file's name *before* creating it: a signal may arrive at any bytecode.
    """
    with _lock:
        _temporary_files.add(path)
    try:
        yield path
    finally:
        with _lock:
            _temporary_files.discard(path)


def remove_temporary_files() -> None:
    """Delete every temporary file and folder still registered (an interrupt is leaving)."""
    for path in list(_temporary_files):
        try:
            os.unlink(path)
        except OSError:
            pass  # not created yet, or already renamed into place
    for folder in temporary_folders():  # the layers below say them (shardscope.activities)
        shutil.rmtree(folder, ignore_errors=True)


_child_processes: set = set()


def register_child(popen) -> None:
    """End ``popen`` (a ``subprocess.Popen``) when an interrupt leaves, since ``os._exit`` skips cleanup."""
    with _lock:
        _child_processes.add(popen)


def unregister_child(popen) -> None:
    """``popen`` has been ended (or waited for) by its owner."""
    with _lock:
        _child_processes.discard(popen)


def end_child_processes(grace_s: float = 1.0) -> None:
    """SIGTERM every registered child, then SIGKILL whoever is still there after ``grace_s``."""
    children = list(_child_processes)
    for child in children:
        try:
            child.terminate()
        except OSError:
            pass
    deadline = time.monotonic() + grace_s
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - still running: kill it
            try:
                child.kill()
            except OSError:
                pass


def flush_streams() -> None:
    """Flush ``sys.stdout`` and ``sys.stderr`` before a process leaves with ``os._exit`` (which
    flushes nothing): a stream closed, or a reader gone (``| head``), is passed over."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream, a terminal gone (EIO): leaving matters more
            pass


def exit_status(signum: int) -> int:
    """The shell's status for a process ended by ``signum``: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + signum


def leave(signum: int, frame: object = None, keep: Callable[[], str] | None = None) -> None:
    """Signal handler: remove temporary files, end child processes, say so, and exit now.

    ``keep`` (a command that keeps what it finished: ``layouts``' rows) runs first and says
    what it kept, instead of "nothing was written"."""
    remove_temporary_files()
    end_child_processes()
    kept = "nothing was written"
    if keep is not None:
        try:
            kept = keep()
        except Exception as exc:  # noqa: BLE001 - what was done could not be kept: leaving matters more
            kept = f"what was done could not be written ({type(exc).__name__}: {exc})"
    doing = current_activity()
    during = f" while {doing}" if doing else ""
    message = f"\nshardscope: interrupted ({signal.Signals(signum).name}){during}; {kept}\n"
    try:  # the terminal's stderr: an import may hold sys.stderr, native code's redirect descriptor 2
        os.write(terminal_stderr(), message.encode(errors="replace"))
    except Exception:  # noqa: BLE001 - stderr may be closed; leaving matters more
        pass
    os._exit(exit_status(signum))


def run_interruptible(work: Callable[[], T], keep: Callable[[], str] | None = None) -> T:
    """``work()``, run in a daemon thread so that SIGINT and SIGTERM always end the process.

    The main thread waits in short, interruptible joins; the handler (:func:`leave`) runs there,
    with ``keep`` (what an interrupted command keeps of its work, and says it kept).
    Returns ``work``'s result or raises its exception.
    """
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread as is
            outcome["error"] = exc

    def handler(signum: int, frame: object) -> None:
        leave(signum, frame, keep)

    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    try:
        thread = threading.Thread(target=target, name="shardscope-work", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.25)
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]

