"""Benchmark 3: naive vs deferred in one process and across 2 and 4 processes (gloo), and the
cost of one all-reduce at several message sizes (``shardscope calibrate``) in each setting.

Every cell runs the real CLI (``shardscope report --json`` / ``calibrate --json``) with
``--processes P`` on 4 devices in all (4 in one process, 2 x 2, 4 x 1), so the three settings
run the same programs and only the transport of the collectives changes.

Run alone: ``python -m benchmarks.cross_process [--quick | --smoke]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import FRESH_COMPILES, ROOT, grid as grid_of, parse_args, python, write_result

DEVICES = 4
PER_DEVICE_BATCH = 64
CELLS = ({"M": 10**4, "chunks": 16}, {"M": 10**5, "chunks": 16})
"""Headline cells of benchmark 1: the linear layer with M parameters, 16 chunks per device."""
SIZES = "1KiB,16KiB,64KiB,256KiB,1MiB"
FULL = {"processes": (1, 2, 4), "repeats": 15, "calibrate_repeats": 10}
QUICK = {"processes": (1, 2), "repeats": 5, "calibrate_repeats": 3}
SMOKE = {"processes": (1,), "repeats": 2, "calibrate_repeats": 2, "cells": CELLS[:1], "sizes": "1KiB,16KiB"}

DEMO = '''
import jax
import jax.numpy as jnp

import shardscope


@shardscope.demo(params=jax.ShapeDtypeStruct((100, {cols}), jnp.float32),
                 x=jax.ShapeDtypeStruct(({batch}, 100), jnp.float32))
def linear_{m}(W, x):
    """x @ W with {m} parameters."""
    return x @ W
'''


def cli(*args: str) -> dict:
    """Run ``shardscope ARGS --json`` in a fresh process and return its JSON."""
    result = subprocess.run([python(), "-m", "shardscope", *args, "--json"], cwd=ROOT,
                            capture_output=True, text=True, timeout=1200, env={**os.environ, **FRESH_COMPILES})
    if result.returncode != 0:
        raise RuntimeError(f"shardscope {' '.join(args)} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout)


def main(argv=None) -> int:
    """Measure every cell in every process setting, then the all-reduce calibration."""
    args = parse_args(__doc__.splitlines()[0], argv)
    grid = grid_of(args, FULL, QUICK, SMOKE)
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for cell in grid.get("cells", CELLS):
            path = Path(tmp) / f"linear_{cell['M']}.py"
            path.write_text(DEMO.format(cols=cell["M"] // 100, batch=DEVICES * PER_DEVICE_BATCH, m=cell["M"]))
            for processes in grid["processes"]:
                start = time.perf_counter()
                data = cli("report", str(path), "--devices", str(DEVICES), "--processes", str(processes),
                           "-c", str(PER_DEVICE_BATCH // cell["chunks"]), "-r", str(grid["repeats"]))
                naive, deferred = data["variants"]["naive"], data["variants"]["deferred"]
                cells.append({
                    **cell, "processes": processes, "transport": data["collectives_transport"],
                    "naive_ms": naive["run_s"]["median"] * 1e3, "deferred_ms": deferred["run_s"]["median"] * 1e3,
                    "ratio": data["speedup"], "all_reduces": [naive["executed_collectives"],
                                                              deferred["executed_collectives"]],
                    "bytes_per_call": [naive["bytes_per_call"], deferred["bytes_per_call"]],
                    "max_abs_err": max(naive["max_abs_err"], deferred["max_abs_err"]),
                    "wall_s": time.perf_counter() - start,
                })
                print(f"M={cell['M']} P={processes}: naive/deferred {data['speedup']:.2f}x", flush=True)
    calibrations = []
    for processes in grid["processes"]:
        data = cli("calibrate", "--devices", str(DEVICES), "--processes", str(processes),
                   "--sizes", grid.get("sizes", SIZES), "-r", str(grid["calibrate_repeats"]))
        calibrations.append(data)
        print(f"calibrate P={processes}: alpha {data['latency_s'] * 1e6:.1f} us, "
              f"fit error {data['rms_relative_error']:.0%} RMS", flush=True)
    write_result("cross_process", args, {"devices": DEVICES, "per_device_batch": PER_DEVICE_BATCH,
                                         "repeats": grid["repeats"], "cells": cells, "calibrations": calibrations})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
