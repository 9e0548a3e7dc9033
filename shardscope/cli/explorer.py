"""``shardscope open``: the explorer (the default command: ``shardscope FILE``, or ``shardscope``
alone for the seed demo).

The module is not named ``open``: importing it would bind ``shardscope.cli.open`` over the
builtin in the package's namespace.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from shardscope.cli.options import DemoOptions, add_demo_options, positive, require_profile_converter
from shardscope.cli.parsing import AddParser
from shardscope.cli.launch import DEFAULT_MAX_DEVICES
from shardscope.config.settings import MAX_DEVICES, Settings, check_device_count

NAME = "open"


class AppOptions(TypedDict):
    """The keyword arguments of :func:`~shardscope.app.run_app` and ``make_app`` the options give."""

    max_devices: int
    export_dir: Path | None
    profile_startup: bool


def register(add_parser: AddParser) -> None:
    """Add ``open`` and its options to the ``shardscope`` parser."""
    parser = add_parser(NAME, help="open the explorer (the default command)")
    add_demo_options(parser, seed_default=True)
    parser.add_argument("--max-devices", type=positive, default=DEFAULT_MAX_DEVICES,
                        help="CPU devices to start JAX with; the sidebar offers meshes up to this size "
                             f"(default 8, at most {MAX_DEVICES})")
    parser.add_argument("--export-dir", type=Path, help="where `e` writes the diff and the palette's Screenshot "
                        "its SVG, made if needed (default: the working directory)")
    parser.add_argument("--profile-startup", action="store_true",
                        help="log seconds to first paint and to first results on exit")
    parser.add_argument("--target", metavar="tpu:TOPOLOGY",
                        help="also compile every plan for this TPU slice, e.g. tpu:v5e:2x2 (the sidebar's target field; "
                             "nothing runs there); starts as many CPU devices as the slice has; "
                             "needs pip install 'shardscope[tpu]'")
    parser.add_argument("--what-if", action="store_true",
                        help="a program file: open with each program's verified what-if rewrite beside it "
                             "(as the key w does)")
    parser.set_defaults(run=run)  # then the shared options it has not placed: --on, --profile, --profile-dir


@dataclass(frozen=True)
class ExplorerOptions:
    """The options of ``shardscope open``."""

    demo: DemoOptions
    max_devices: int
    export_dir: Path | None
    profile_startup: bool
    what_if: bool = False
    target: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExplorerOptions:
        """The options as ``open``'s subparser parsed them."""
        return cls(DemoOptions.from_args(args), args.max_devices, args.export_dir, args.profile_startup, args.what_if,
                   args.target)

    def app_options(self) -> tuple[Settings, AppOptions]:
        """The settings to open and the app's options; needs no JAX (the app starts it in its
        first worker, with the device count set before the file is imported). A device count
        over the cap is refused here, before JAX starts."""
        from shardscope.targets.registry import checked_targets  # the targets' records: only when the app opens

        # a target's form and size, and libtpu, are checked now; whether libtpu knows it, in the app's first run
        targets = tuple(target.text() for target in checked_targets(() if self.target is None else (self.target,)))
        require_profile_converter(self.demo)  # --profile with --profile-dir: one message, before the app opens
        settings = self.demo.settings().with_(what_if=self.what_if, targets=targets)
        max_devices = max(self.max_devices, settings.mesh.devices)
        check_device_count(max_devices)  # the app starts this many CPU devices: refuse thousands now
        return settings, AppOptions(max_devices=max_devices, export_dir=self.export_dir,
                                    profile_startup=self.profile_startup)


def run(args: argparse.Namespace, argv: tuple[str, ...]) -> int:
    """Run the explorer until the user quits (it handles Ctrl+C and SIGTERM itself)."""
    settings, app_options = ExplorerOptions.from_args(args).app_options()
    from shardscope.app import run_app  # Textual (about 0.5 s): only when the explorer opens

    return run_app(settings, **app_options)
