"""The one way to make the explorer: the CLI, the tests and the screenshot script all call
:func:`make_app`, so they run the same app with the same options."""

from __future__ import annotations

from pathlib import Path

from shardscope.app.app import ShardscopeApp
from shardscope.config.settings import Settings


def make_app(
    settings: Settings,
    *,
    max_devices: int = 8,
    export_dir: Path | None = None,
    autorun: bool = True,
    profile_startup: bool = False,
    hide_measurements: bool = False,
) -> ShardscopeApp:
    """The explorer on ``settings``.

    ``autorun=False`` only loads the demo file (the user presses r); ``hide_measurements``
    shows ``···`` for wall-clock numbers, so screenshots and snapshots do not change between runs.
    """
    return ShardscopeApp(
        settings,
        max_devices=max(max_devices, settings.mesh.devices),
        export_dir=export_dir,
        autorun=autorun,
        profile_startup=profile_startup,
        hide_measurements=hide_measurements,
    )
