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

So a signal also starts a deadline (:data:`GRACE_S`): if the process is still there then, it
leaves at once; a second signal leaves at once too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import traceback
from typing import TYPE_CHECKING

from shardscope.activities import current_activity
from shardscope.app import runner
from shardscope.distributed.interrupts import end_child_processes, exit_status, remove_temporary_files

if TYPE_CHECKING:
    from shardscope.app.app import ShardscopeApp

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 1.0
"""How long the app has to end by itself after a signal before the process leaves anyway."""

RESTORE_TERMINAL = "\x1b[?1000l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?25h\x1b[?1049l"
"""Mouse tracking and bracketed paste off, the cursor shown, the main screen back: what Textual
undoes when it ends, written when the deadline cut its ending short."""


async def run_until_quit(app: ShardscopeApp) -> int:
    """Run ``app`` until it quits or a signal ends it; returns the exit status.

    Returns only when no worker thread is still busy: otherwise the process leaves here.
    """
    loop = asyncio.get_running_loop()
    deadline = Deadline()
    for signum in SIGNALS:
        loop.add_signal_handler(signum, deadline.signalled, app, signum)
    failed = False
    try:
        await app.run_async()
    except BaseException:
        failed = True
        raise
    finally:
        for signum in SIGNALS:
            loop.remove_signal_handler(signum)
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
    """The first signal asks the app to exit and starts the deadline; a second one leaves now."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def signalled(self, app: ShardscopeApp, signum: int) -> None:
        """The handler of every signal in :data:`SIGNALS` (runs on the event loop)."""
        status = exit_status(signum)
        if self.signum is not None:
            leave_now(status, restore=signum != signal.SIGHUP and self.signum != signal.SIGHUP)
        self.signum = signum
        app.exit(return_code=status)
        timer = threading.Timer(GRACE_S, leave_now, (status,), {"restore": signum != signal.SIGHUP})
        timer.daemon = True  # the process may well end first
        timer.start()


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
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream, a terminal gone: leaving matters more
            pass
    os._exit(status)


def _say(text: str) -> None:
    """Write ``text`` on the real stderr (the terminal), if it is still there."""
    try:
        stream = sys.__stderr__ or sys.stderr
        stream.write(text)
        stream.flush()
    except Exception:  # noqa: BLE001 - a terminal gone (EIO), a closed stream: nothing to say it on
        pass
