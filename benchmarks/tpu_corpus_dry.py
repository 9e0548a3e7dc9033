"""The TPU corpus's programs compiled for a TPU without one: a dry run before the chip's.

    python -m benchmarks.tpu_corpus_dry [--set run5] [--only NAME ...] [--topology v5e:2x4] [--out FILE]

Each program of ``benchmarks/tpu_corpus.py``'s set is compiled by libtpu for the first chip of a
compile-only topology (its arguments as shapes on that chip: nothing is allocated), and its module
estimated as ``shardscope.estimate_module(text, "v5e")`` would on the chip. A program that fails to
lower or compile here would fail on the chip too: run this before spending device time. ``--out``
keeps each module's text (JSON lines, as the corpus keeps them, without times) to read offline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import jax

from benchmarks import tpu_corpus
from shardscope.costmodel.estimate import estimate_module
from shardscope.engine.hlo.roofline import seconds_words
from shardscope.targets.tpu import TpuTarget


def compiled_text(make: Any, device: Any) -> str:
    """The module libtpu compiles for ``make``'s program on ``device`` (arguments as shapes only)."""
    box: dict[str, Any] = {}

    def arguments() -> Any:
        box["fn"], args = make()
        return args

    shapes = jax.eval_shape(arguments)
    placed = jax.sharding.SingleDeviceSharding(device)
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=placed), shapes)
    return str(jax.jit(box["fn"]).lower(*args).compile().as_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("tuned", "held-out", "all", "run4", "run5"), default="run5")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--topology", default="v5e:2x4")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    device = TpuTarget(args.topology).load().devices[0]
    failed = 0
    out = args.out.open("w") if args.out else None
    for name, kind, make in tpu_corpus.chosen(args.set):
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        try:
            text = compiled_text(make, device)
        except Exception as error:  # noqa: BLE001 - report every program's failure, then go on
            failed += 1
            print(f"{name:34} FAILED {type(error).__name__}: {str(error)[:300]}", flush=True)
            continue
        estimate = estimate_module(text, "v5e")
        print(f"{name:34} {seconds_words(estimate.seconds):>9} waited  {seconds_words(estimate.dispatched_seconds):>9} "
              f"back to back  ({time.perf_counter() - start:.1f} s to compile)", flush=True)
        if out is not None:
            out.write(json.dumps({"name": name, "kind": kind, "held_out": name.startswith("h_"), "hlo": text}) + "\n")
    if out is not None:
        out.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
