"""Run every benchmark, each in its own process, then regenerate ``BENCHMARKS.md``.

``python -m benchmarks.run`` (``make bench``): the full grid, results in ``benchmarks/results/``
and ``BENCHMARKS.md`` at the repository root. ``--quick`` (``make bench-quick``): a smaller grid,
results and their ``BENCHMARKS.md`` in ``benchmarks/results/quick/``. ``--only NAME`` runs some
of them (the others keep their last results in the rendered file).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from benchmarks import render
from benchmarks.common import ROOT, python

BENCHMARKS = tuple(sorted((b.name for b in render.benchmarks() if b.in_make_bench), key=lambda name: name == "app_start"))
"""Run by ``make bench``, in the file's order but the app (which may not be installed yet) last."""
ALONE = tuple(b.name for b in render.benchmarks() if not b.in_make_bench)
"""Run alone (``python -m benchmarks.NAME``): too long for ``make bench``, or needing the tpu extra.
Every benchmark takes ``--smoke`` (its smallest cell, once), which the test suite runs."""
HELPERS = ("common", "harness", "render", "run", "bare_compile", "bare_linear", "bare_llama_target", "transformer_step", "unrolled_step",
           "psum_chain", "lm_parts", "llama_model", "llama_step", "mixtral_model", "mixtral_step", "llama_adamw_model", "llama_adamw_step",
           "moe_model", "moe_step", "on_chip", "profile_capture_tpu",
           "tpu_corpus", "tpu_corpus_dry", "hlo_cases", "decoder_step", "pipelined_step", "maxtext_v5e_layouts", "gpu_gpt3_layouts",
           "bare_layouts")
"""The modules of ``benchmarks/`` that are not benchmarks: what they share (the harness, the one renderer), the
baselines and program files the benchmarks run, and ``on_chip`` (shardscope's commands on a real TPU
VM; it needs a chip: ``tests/test_on_chip.py`` runs it where there is one), ``profile_capture_tpu``
(the profile ``profile_kinds`` reads, captured on a chip with jax and numpy alone) and ``tpu_corpus``
(the programs ``tpu_corpus_report`` replays, measured on a chip with jax and numpy alone; ``tpu_corpus_dry``
compiles them for a TPU without one, before a chip's time is spent), ``hlo_cases`` (the
hostile module texts ``hostile_hlo`` runs and the suite's fuzz test reads); the layouts anchors' programs
(``decoder_step``, ``pipelined_step``, ``maxtext_v5e_layouts``, ``gpu_gpt3_layouts``) and their baseline
(``bare_layouts``: JAX's own compiles)."""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns 1 if any failed (the others are still rendered)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid (about 2 minutes)")
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="run only this benchmark (repeatable)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    failures: dict[str, str] = {}
    for name in args.only or BENCHMARKS:
        print(f"== {name}{' (quick)' if args.quick else ''}", flush=True)
        start = time.perf_counter()
        command = [python(), "-m", f"benchmarks.{name}"] + (["--quick"] if args.quick else [])
        # output streams through: progress is visible, and a failure shows its traceback
        status = subprocess.run(command, cwd=ROOT).returncode
        print(f"== {name}: {'ok' if status == 0 else f'failed ({status})'} in {time.perf_counter() - start:.0f} s",
              flush=True)
        if status != 0:
            failures[name] = f"`python -m benchmarks.{name}` exited with status {status} (see its output)."
    elapsed = time.perf_counter() - started
    if not args.only:  # the whole run: remembered so that re-rendering alone can still say it
        render.save_run(args.quick, elapsed, failures)
    path = render.write(args.quick, failures, elapsed if not args.only else None)
    print(f"wrote {path.relative_to(ROOT)} ({elapsed / 60:.1f} min)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
