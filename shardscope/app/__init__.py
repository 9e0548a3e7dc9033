"""The Textual explorer: the only part of shardscope that imports Textual.

Importing this package does not import JAX: the app starts JAX in its first worker, after the
first paint.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path

from shardscope.app import runner
from shardscope.app.app import ShardscopeApp
from shardscope.app.factory import make_app
from shardscope.activities import current_activity
from shardscope.distributed.interrupts import exit_status, remove_temporary_files
from shardscope.plans.settings import Settings


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_app(
    settings: Settings,
    *,
    max_devices: int = 8,
    export_dir: Path | None = None,
    profile_startup: bool = False,
) -> int:
    """Run the explorer until the user quits; returns the exit status.

    ``q``, Ctrl+C and SIGTERM end it within about a second whatever the analysis worker does
    (compiling a deep model, a demo stuck at import): once Textual has restored the terminal, a
    worker still busy is not waited for (a thread cannot be stopped, and asyncio and Python's
    exit would join it): the process leaves with ``os._exit``.
    """
    app = make_app(settings, max_devices=max_devices, export_dir=export_dir, profile_startup=profile_startup)
    status = asyncio.run(_run_until_quit(app))
    return status


async def _run_until_quit(app: ShardscopeApp) -> int:
    loop = asyncio.get_running_loop()
    for signum in _SIGNALS:  # quit as q does (the terminal restored), with the shell's status
        loop.add_signal_handler(signum, functools.partial(app.exit, return_code=exit_status(signum)))
    try:
        await app.run_async()
    finally:
        for signum in _SIGNALS:
            loop.remove_signal_handler(signum)
    if app.profile is not None:
        print(app.profile.json_line(), file=sys.stderr)
    status = app.return_code or 0
    if runner.busy():  # the terminal is restored: leave without joining the worker
        say_what_was_interrupted()
        leave_now(status)
    return status


def say_what_was_interrupted() -> None:
    """On stderr, what the worker left behind was doing (``importing demo.py, at line 3``), if it
    said: a demo that loops forever at import is named when the user quits the loading screen."""
    doing = current_activity()
    if doing is not None:
        print(f"shardscope: quit while {doing}; it had not finished", file=sys.__stderr__ or sys.stderr)


def leave_now(status: int) -> None:
    """Flush what was printed and end the process now, without joining any thread."""
    remove_temporary_files()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
            pass
    os._exit(status)


__all__ = ["ShardscopeApp", "make_app", "run_app"]
