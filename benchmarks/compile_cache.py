"""Benchmark 7b: a second ``shardscope check`` of an unchanged program, against the first.

The programs are benchmark 7's: the 12-layer transformer step (``benchmarks/transformer_step.py``)
written with shardings and with shard_map, and the unrolled step (``benchmarks/unrolled_step.py``).
Each round runs, in fresh processes, ``shardscope check FILE --function
NAME --json`` twice on one compilation cache directory, emptied before the round: the first
check compiles and fills it, the second reads the executable back. The ratio second / first is
taken round by round (the target: at most 0.4x); both wall times hold the interpreter's start,
JAX's import, the trace, the analysis, and the compile or the read.

Run alone: ``python -m benchmarks.compile_cache [--quick | --smoke]``. Not part of ``make bench``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks.check_cost import (EXIT_CODES, PROGRAMS, SMOKE_LAYERS, SMOKE_PROGRAMS, programs_of, rounds_run,
                                   shown_command)
from benchmarks.common import grid, parse_args, python, run_child, stats, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column

TARGET_RATIO = 0.4
FULL_ROUNDS, QUICK_ROUNDS = 5, 2


def command(name: str) -> list[str]:
    """``check`` of the program ``name`` in its file."""
    return [python(), "-m", "shardscope", "check", str(PROGRAMS[name]), "--function", name, "--json"]


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and write ``compile_cache.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    rounds = grid(args, FULL_ROUNDS, QUICK_ROUNDS, 1)
    names = grid(args, tuple(PROGRAMS), tuple(PROGRAMS), SMOKE_PROGRAMS)
    warm_rounds = 0 if args.mode == "smoke" else 1  # one untimed round first (the OS file cache, the .pyc files)
    if args.mode == "smoke":  # the children inherit it
        os.environ.setdefault("SHARDSCOPE_UNROLLED_LAYERS", SMOKE_LAYERS)
    programs = {}
    with tempfile.TemporaryDirectory() as scratch:
        cache = Path(scratch) / "jax"
        env = {"JAX_COMPILATION_CACHE_DIR": str(cache), "SHARDSCOPE_NO_CACHE": ""}
        for name in names:
            first, second = [], []
            for i in range(rounds + warm_rounds):
                shutil.rmtree(cache, ignore_errors=True)
                runs = [_checked(name, run_child(command(name), env=env)) for _ in range(2)]
                if runs[0]["stdout"] != runs[1]["stdout"]:
                    raise RuntimeError(f"{name}: the second check printed something else than the first")
                if i >= warm_rounds:
                    first.append(runs[0])
                    second.append(runs[1])
                    print(f"round {i + 1 - warm_rounds}/{rounds} {name}: {runs[0]['wall_s']:.1f} s, then {runs[1]['wall_s']:.1f} s",
                          flush=True)
            programs[name] = {
                "first_wall_s": stats([r["wall_s"] for r in first]),
                "second_wall_s": stats([r["wall_s"] for r in second]),
                "ratio_median": statistics.median(b["wall_s"] / a["wall_s"] for a, b in zip(first, second)),
                "entries": len(list(cache.glob("*-cache"))),
                "cache_bytes": sum(p.stat().st_size for p in cache.glob("*-cache")),
                "compiled_collectives": len(json.loads(second[-1]["stdout"])["compiled_collectives"]),
            }
    write_result("compile_cache", args, {
        "rounds": rounds,
        "target_ratio": TARGET_RATIO,
        "commands": {name: shown_command(command(name)) for name in names},
        "programs": programs,
    })
    for name, row in programs.items():
        print(f"{name}: first {row['first_wall_s']['median']:.1f} s, second {row['second_wall_s']['median']:.1f} s, "
              f"ratio {row['ratio_median']:.2f}x", flush=True)


def _checked(name: str, result: dict) -> dict:
    if result["returncode"] != EXIT_CODES[name]:  # both transformer steps are flagged, the unrolled one passes
        raise RuntimeError(f"check exited with {result['returncode']}:\n{result['stderr'][-2000:]}")
    return result


BENCHMARK = Benchmark(
    name="compile_cache",
    heading="The compilation cache: a second `check` of the same program",
    level=3,
    blocks=(
        Prose(lambda cache: [
            "`python -m benchmarks.compile_cache` (run alone). Each round empties a compilation cache directory "
            "(`JAX_COMPILATION_CACHE_DIR`), then runs each of "
            + ", ".join(f"`{c}`" for c in cache["commands"].values())
            + " twice in fresh processes: the first compiles and fills the cache, the second reads the executable "
            f"back; both print the same report. {rounds_run(cache)} The other benchmarks run with "
            "`SHARDSCOPE_NO_CACHE=1`."]),
        Table(
            columns=(
                Column("program", lambda r: f"`{r['name']}`", align="left"),
                Column("first `check`, median (min-max)", lambda r: r["first_wall_s"], unit="s", better="lower"),
                Column("second `check`", lambda r: r["second_wall_s"], unit="s", better="lower"),
                ratio_column("second / first, median of per-round ratios", lambda r: r["ratio_median"],
                             better="lower", target=TARGET_RATIO, strong=True),
                Column("cache entries", lambda r: r["entries"], digits=None),
                Column("cache size", lambda r: r["cache_bytes"] / 1024, unit="KiB", digits=None),
            ),
            rows=programs_of,
        ),
    ),
)


if __name__ == "__main__":
    main()
