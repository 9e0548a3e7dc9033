"""``shardscope sweep``: every plan at every chunk size, with progress on stderr, as a table or JSON."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from shardscope.plans.settings import Settings


def check_options(args: argparse.Namespace) -> None:
    """Parse ``--chunk-sizes`` and ``--memory-budget`` before JAX starts (a typo fails fast)."""
    from shardscope.costmodel.quantities import parse_size
    from shardscope.costmodel.sweep import parse_chunk_sizes

    args.chunk_sizes_list = parse_chunk_sizes(args.chunk_sizes) if args.chunk_sizes else None
    args.memory_budget_bytes = parse_size(args.memory_budget) if args.memory_budget else None


def run(args: argparse.Namespace, settings: Settings, demo_file: Any = None) -> int:
    """``shardscope sweep``: every plan at every chunk size, with progress on stderr."""
    from shardscope.distributed.workers import is_leader
    from shardscope.costmodel.sweep import run_sweep
    from shardscope.render.sweep import render_sweep, sweep_json

    def progress(done: int, total: int, chunk: int) -> None:
        if is_leader():
            print(f"sweep: chunk size {chunk} done ({done}/{total})", file=sys.stderr, flush=True)

    with contextlib.redirect_stdout(sys.stderr):
        sweep = run_sweep(settings, args.chunk_sizes_list, args.memory_budget_bytes, progress, demo_file)
    if not is_leader():
        return 0
    if args.json:
        import json

        from shardscope.render.json_values import finite

        print(json.dumps(finite(sweep_json(sweep)), allow_nan=False))
    else:
        from shardscope.render.console import stdout_console

        render_sweep(sweep, stdout_console())
    return 0
