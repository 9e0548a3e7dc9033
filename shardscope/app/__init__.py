"""The Textual explorer: the only part of shardscope that imports Textual.

Importing this package does not import JAX: the app starts JAX in its first worker, after the
first paint.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from shardscope.app.app import ShardscopeApp
from shardscope.app.factory import make_app
from shardscope.app.leaving import run_until_quit
from shardscope.config.settings import Settings


def run_app(
    settings: Settings,
    *,
    max_devices: int = 8,
    export_dir: Path | None = None,
    profile_startup: bool = False,
) -> int:
    """Run the explorer until the user quits; returns the exit status.

    ``q``, Ctrl+C, SIGTERM and SIGHUP end it within about a second whatever the analysis worker
    does (compiling a deep model, a demo stuck at import) and whether the terminal is still
    there or not (:mod:`shardscope.app.leaving`).
    """
    app = make_app(settings, max_devices=max_devices, export_dir=export_dir, profile_startup=profile_startup)
    return asyncio.run(run_until_quit(app))


__all__ = ["ShardscopeApp", "make_app", "run_app"]
