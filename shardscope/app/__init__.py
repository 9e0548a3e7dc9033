"""The Textual explorer: the only part of shardscope that imports Textual.

Importing this package does not import JAX: the app starts JAX in its first worker, after the
first paint.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shardscope.app.app import ShardscopeApp
from shardscope.app.factory import make_app
from shardscope.settings import Settings


def run_app(
    settings: Settings,
    *,
    max_devices: int = 8,
    export_dir: Path | None = None,
    profile_startup: bool = False,
) -> int:
    """Run the explorer until the user quits; returns the exit status."""
    app = make_app(settings, max_devices=max_devices, export_dir=export_dir, profile_startup=profile_startup)
    app.run()
    if app.profile is not None:
        print(app.profile.json_line(), file=sys.stderr)
    return app.return_code or 0


__all__ = ["ShardscopeApp", "make_app", "run_app"]
