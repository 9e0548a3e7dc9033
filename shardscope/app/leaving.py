"""How the explorer's process ends: ``q``, Ctrl+C, SIGTERM and SIGHUP end it within about a
second, whatever its worker threads do, leaving nothing half-written.

A signal asks the app to exit as ``q`` does (Textual restores the terminal), with the shell's
status for it (143 for SIGTERM, 129 for SIGHUP). Two things could still keep the process alive:

- a worker thread still busy (a compile, a demo that loops at import, a sweep): a thread cannot
  be stopped, and ``asyncio.run`` and Python's exit join it. Once the app has ended, the process
  leaves with ``os._exit`` instead (:func:`leave_now`), after removing the temporary files being
  written (:mod:`shardscope.distributed.interrupts`).
- a terminal that is gone (its window closed: the SIGHUP case): every write to it fails
  (``EIO``), and a write that raised while the app ended must not skip the leaving above.

A terminal can also go without a SIGHUP: when it is not the process's controlling terminal (a
pseudo-terminal a test harness or a supervisor opened for it), nothing is sent when its other end
closes, and Textual's input thread then reads end-of-file in a loop, a core spinning for good.
:func:`watch_terminal` ends the app as a hang-up does instead.

So a signal also starts a deadline (:data:`GRACE_S`): if the process is still there then, it
leaves at once; a second signal leaves at once too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import select
import signal
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Callable

from shardscope.activities import current_activity
from shardscope.app.base import runner
from shardscope.distributed.interrupts import (end_child_processes, exit_status, flush_streams,
                                                remove_temporary_files)
from shardscope.engine.compile_abort import giving_back_the_terminal

if TYPE_CHECKING:
    from shardscope.app.app import ShardscopeApp

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 1.0
"""How long the app has to end by itself after a signal before the process leaves anyway."""

RESTORE_TERMINAL = ("\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?2004l\x1b[?1004l\x1b[?7h\x1b[<u"
                    "\x1b[?25h\x1b[?1049l")
"""Mouse tracking, bracketed paste and focus events off, lines wrapped again, the keyboard
protocol Textual pushed popped (before the main screen: each screen has its own), the cursor
shown, the main screen back: what Textual undoes when it ends, written when the deadline cut its
ending short, or by the sentinel after XLA aborted the process (:mod:`shardscope.engine.compile_abort`)."""


async def run_until_quit(app: ShardscopeApp) -> int:
    """Run ``app`` until it quits or a signal ends it; returns the exit status.

    Returns only when no worker thread is still busy: otherwise the process leaves here.
    """
    loop = asyncio.get_running_loop()
    deadline = Deadline()
    deadline.arm()
    watch_terminal(functools.partial(deadline.hung_up, app, loop))
    # Python's own handlers, not the loop's: those ran only once the event loop got a turn, and a
    # UI thread busy for seconds (a large Compiled tab laid out there) held the deadline back too
    previous = {signum: signal.signal(signum, lambda signum, _frame: deadline.signalled(app, loop, signum))
                for signum in SIGNALS}
    failed = False
    # should XLA abort the process, its sentinel gives the terminal back before it says so
    screen = giving_back_the_terminal(RESTORE_TERMINAL) if _is_terminal(2) else contextlib.nullcontext()
    try:
        with screen:
            await app.run_async()
    except BaseException:
        failed = True
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if app.profile is not None:  # --profile-startup: its timings, once the terminal is back
            _say(app.profile.json_line() + "\n")
        if runner.busy():  # asyncio.run would wait for the busy thread: leave without it
            if failed:
                _say(traceback.format_exc())
            if deadline.signum != signal.SIGHUP:  # no terminal to say it on after a hang-up
                say_what_was_interrupted()
            leave_now(app.return_code or (1 if failed else 0))
    return app.return_code or 0


class Deadline:
    """The first signal asks the app to exit and starts the deadline; a second one leaves now.

    The deadline's thread is started before any signal (:meth:`arm`): the handler only sets an
    event, as starting a thread inside a signal handler could wait for a lock its own thread
    held when the signal came.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._started = threading.Event()

    def arm(self) -> None:
        """Start the thread that ends the process :data:`GRACE_S` after the first signal."""
        thread = threading.Thread(target=self._leave_after_grace, name="shardscope-deadline", daemon=True)
        thread.start()  # daemon: the process may well end first

    def _leave_after_grace(self) -> None:
        self._started.wait()
        time.sleep(GRACE_S)
        assert self.signum is not None  # set before the event
        leave_now(exit_status(self.signum), restore=self.signum != signal.SIGHUP)

    def signalled(self, app: ShardscopeApp, loop: asyncio.AbstractEventLoop, signum: int) -> None:
        """The handler of every signal in :data:`SIGNALS`: it runs in the main thread between two
        bytecodes, even while the UI thread is busy; the app exits on the event loop's next turn."""
        status = exit_status(signum)
        if self.signum is not None:
            leave_now(status, restore=signum != signal.SIGHUP and self.signum != signal.SIGHUP)
        self.signum = signum
        self._started.set()
        loop.call_soon_threadsafe(functools.partial(app.exit, return_code=status))

    def hung_up(self, app: ShardscopeApp, loop: asyncio.AbstractEventLoop) -> None:
        """The terminal went away without a signal (:func:`watch_terminal`): leave as on SIGHUP,
        unless a signal's ending is already under way."""
        if self.signum is None:
            self.signalled(app, loop, signal.SIGHUP)


def watch_terminal(hung_up: Callable[[], None], fd: int = 0) -> None:
    """Call ``hung_up`` (once, from a daemon thread) when the terminal on ``fd`` hangs up: its
    other end closed. Nothing is watched where ``fd`` is not a terminal or the platform has no
    ``poll``."""
    if not hasattr(select, "poll") or not _is_terminal(fd):
        return
    poller = select.poll()
    poller.register(fd, select.POLLHUP)  # input is the driver's; a hang-up and an error are always reported

    def wait() -> None:
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            except OSError:
                return
            if any(mask & select.POLLNVAL for _fd, mask in events):  # the descriptor itself was closed
                return
            if events:
                hung_up()
                return

    threading.Thread(target=wait, name="shardscope-terminal", daemon=True).start()


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def say_what_was_interrupted() -> None:
    """On stderr, what the worker left behind was doing (``importing demo.py, at line 3``), if it
    said: a demo that loops forever at import is named when the user quits the loading screen."""
    doing = current_activity()
    if doing is not None:
        _say(f"shardscope: quit while {doing}; it had not finished\n")


def leave_now(status: int, *, restore: bool = False) -> None:
    """Remove the temporary files being written, end child processes, flush what was printed
    and end the process now, without joining any thread (``restore``: give the terminal back
    first, Textual did not get to)."""
    remove_temporary_files()
    end_child_processes()
    if restore:
        _say(RESTORE_TERMINAL)
    flush_streams()
    os._exit(status)


def _say(text: str) -> None:
    """Write ``text`` on the real stderr (the terminal), if it is still there."""
    try:
        stream = sys.__stderr__ or sys.stderr
        stream.write(text)
        stream.flush()
    except Exception:  # noqa: BLE001 - a terminal gone (EIO), a closed stream: nothing to say it on
        pass
