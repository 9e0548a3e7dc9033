"""Benchmark 4a: what ``shardscope check`` costs on a user's program, against JAX's own compile of it.

The programs: a 12-layer transformer train step with 4-step gradient accumulation, in both
styles (``benchmarks/transformer_step.py``: jit with shardings, and the same under
``shard_map``), and a 600-layer residual MLP unrolled by a Python loop
(``benchmarks/unrolled_step.py``: its 600 gradients summed by one combined all-reduce, each
named); and a chain of 1,000 dependent psums written by a Python loop under ``shard_map``
(``benchmarks/psum_chain.py``: a thousand compiled all-reduces, each with a thousand psums of its
line to pair with). Each round runs, in fresh processes and alternating, ``shardscope check FILE --function
NAME --json`` and ``benchmarks/bare_compile.py NAME FILE``
(JAX alone: import the file, ``lower(*args).compile()``, ``as_text()``), so both wall times hold
the interpreter's start, JAX's import, the trace and XLA's compile, and the ratio is what the
analysis adds (the target: at most 1.3x). One untimed round comes first (the OS file cache and
the .pyc files would win it). Then, in this process, one run of each program is timed phase by
phase: the trace, the jaxpr view, the compile, the compiled plan.

Run alone, on a quiet machine: ``python -m benchmarks.check_cost [--quick | --smoke] [--programs
psum_chain,...]``. Not part of
``make bench`` (each round compiles the model four times, about 20 s each).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any, Callable

from benchmarks.common import ROOT, grid, parse_args, python, run_child, stats, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column

TARGET_RATIO = 1.3
FULL_ROUNDS, QUICK_ROUNDS = 5, 2
FILE = ROOT / "benchmarks" / "transformer_step.py"
UNROLLED = ROOT / "benchmarks" / "unrolled_step.py"
CHAIN = ROOT / "benchmarks" / "psum_chain.py"
PROGRAMS = {"step_shardings": FILE, "step_shard_map": FILE, "unrolled_step": UNROLLED, "psum_chain": CHAIN}
"""Each program and its file."""
EXIT_CODES = {"step_shardings": 1, "step_shard_map": 1, "unrolled_step": 0, "psum_chain": 0}
"""``check``'s status on each: both transformer steps' per-micro-batch sums are flagged; the
unrolled step and the psum chain have no loop."""
SMOKE_PROGRAMS = ("unrolled_step",)
SMOKE_LAYERS = "4"
"""The smallest cell (``--smoke``): the unrolled step, 4 layers deep unless
``SHARDSCOPE_UNROLLED_LAYERS`` says otherwise."""


def commands(name: str) -> dict[str, list[str]]:
    """``check`` and the bare compile of the program ``name``."""
    return {
        "check": [python(), "-m", "shardscope", "check", str(PROGRAMS[name]), "--function", name, "--json"],
        "bare": [python(), str(ROOT / "benchmarks" / "bare_compile.py"), name, str(PROGRAMS[name])],
    }


def _own_flags(parser: Any) -> None:
    parser.add_argument("--programs", default=",".join(PROGRAMS),
                        help=f"the programs to run, comma-separated (default: {','.join(PROGRAMS)})")


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and the phases, and write ``check_cost.json``."""
    args = parse_args(__doc__.splitlines()[0], argv, _own_flags)
    rounds = grid(args, FULL_ROUNDS, QUICK_ROUNDS, 1)
    chosen = tuple(name for name in PROGRAMS if name in args.programs.split(","))
    names = grid(args, chosen, chosen, tuple(n for n in SMOKE_PROGRAMS if n in chosen))
    if args.mode == "smoke":  # the children inherit it
        os.environ.setdefault("SHARDSCOPE_UNROLLED_LAYERS", SMOKE_LAYERS)
    runs = {name: {kind: [] for kind in ("check", "bare")} for name in names}
    for name in names if args.mode != "smoke" else ():  # the untimed round
        for kind, argv_ in commands(name).items():
            _checked(kind, run_child(argv_), name)
    for i in range(rounds):
        for name in names:
            order = list(commands(name).items())
            if i % 2:
                order.reverse()
            for kind, argv_ in order:
                runs[name][kind].append(_checked(kind, run_child(argv_), name))
                print(f"round {i + 1}/{rounds} {name} {kind}: {runs[name][kind][-1]['wall_s']:.1f} s", flush=True)
    programs = {}
    for name in names:
        check, bare = runs[name]["check"], runs[name]["bare"]
        found = json.loads(check[-1]["stdout"])
        programs[name] = {
            "check_wall_s": stats([r["wall_s"] for r in check]),
            "bare_wall_s": stats([r["wall_s"] for r in bare]),
            "check_rss_mib": stats([r["max_rss_mib"] for r in check]),
            "bare_rss_mib": stats([r["max_rss_mib"] for r in bare]),
            "ratio_median": statistics.median(c["wall_s"] / b["wall_s"] for c, b in zip(check, bare)),
            "exit_code": found["exit_code"],
            "compiled_collectives": len(found["compiled_collectives"]),
            "collective_equations": len(found["collectives"]),
            "counts": found["programs"][0]["counts"],
            "flagged": found["programs"][0]["flagged"],
        }
    write_result("check_cost", args, {
        "rounds": rounds,
        "target_ratio": TARGET_RATIO,
        "commands": {name: {kind: shown_command(argv_) for kind, argv_ in commands(name).items()} for name in names},
        "programs": programs,
        "phases_s": phases(names),
    })
    for name, row in programs.items():
        print(f"{name}: check {row['check_wall_s']['median']:.1f} s, bare {row['bare_wall_s']['median']:.1f} s, "
              f"ratio {row['ratio_median']:.2f}x", flush=True)


def phases(names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per program of ``names``, the seconds of each phase of one ``check`` in this process."""
    from shardscope.engine.hlo.compiled import plan_of
    from shardscope.engine.joined.inspection import inspect_traced
    from shardscope.engine.traceable import traceable
    from shardscope.targets.host import ensure_devices
    from shardscope.pipeline.gc_pause import paused
    from shardscope.sources.loading import import_file
    from shardscope.sources.programs import spec_of

    ensure_devices(8)
    found = {}
    for name in names:
        module = import_file(PROGRAMS[name])[0]
        spec = spec_of(getattr(module, name))
        program = traceable(getattr(module, name), spec.args, spec.kwargs)
        times: dict[str, float] = {}
        with paused():  # as the command reads it
            start = time.perf_counter()
            traced = program.function.trace(*program.args)
            times["trace"] = time.perf_counter() - start
            start = time.perf_counter()
            inspection = inspect_traced(traced, name, program.input_names, [])
            times["jaxpr_view"] = time.perf_counter() - start
            start = time.perf_counter()
            compiled = traced.lower().compile()
            times["lower_and_compile"] = time.perf_counter() - start
            start = time.perf_counter()
            plan_of(traced, compiled, input_names=program.input_names, program=inspection.program,
                    jaxpr_collectives=inspection.collectives)
            times["compiled_plan"] = time.perf_counter() - start
        times["instructions"] = compiled.as_text().count("\n")
        found[name] = times
    return found


def _checked(kind: str, result: dict, name: str) -> dict:
    expected = EXIT_CODES[name] if kind == "check" else 0
    if result["returncode"] != expected:
        raise RuntimeError(f"{kind} exited with {result['returncode']}:\n{result['stderr'][-2000:]}")
    return result


def shown_command(argv: list[str]) -> str:
    return " ".join(a.replace(str(ROOT) + "/", "") if a.startswith(str(ROOT)) else ("python" if a == python() else a)
                    for a in argv)


def rounds_run(results: dict[str, Any]) -> str:
    """How many rounds a benchmark run alone timed, and the machine's load while they ran."""
    load = results["load_average"]
    return (f"{results['rounds']} timed rounds after one untimed round; 1-minute load average {load['start']:.1f} -> "
            f"{load['end']:.1f} on this machine's 2 shared cores.")


def programs_of(results: dict[str, Any]) -> list[dict[str, Any]]:
    """A benchmark's per-program rows, each with its program's name and the benchmark's target ratio."""
    return [{"name": name, "target": results["target_ratio"], **row} for name, row in results["programs"].items()]


def _described(cost: dict[str, Any]) -> list[str]:
    first = next(iter(cost["commands"].values()))
    return [
        "`python -m benchmarks.check_cost` (run alone; not part of `make bench`). The program is a 12-layer "
        "transformer train step with 4-step gradient accumulation (`benchmarks/transformer_step.py`), in both "
        "styles: jit with shardings (`step_shardings`) and the same under `shard_map` (`step_shard_map`); and a "
        "600-layer residual MLP unrolled by a Python loop (`unrolled_step`, `benchmarks/unrolled_step.py`), whose "
        "600 gradients one combined all-reduce sums, each of them named"
        + ("; and a chain of 1,000 dependent psums written by a Python loop under `shard_map` (`psum_chain`, "
           "`benchmarks/psum_chain.py`), whose thousand all-reduces each have a thousand psums of their line to "
           "pair with" if "psum_chain" in cost["commands"] else "") + ". Each "
        f"round runs, in fresh processes and alternating, `{first['check']}` and `{first['bare']}` "
        "(JAX alone: import the file, `jax.jit(f).lower(*args).compile()`, `as_text()`), so both wall times hold "
        f"the interpreter's start, JAX's import, the trace and XLA's compile. {rounds_run(cost)}",
    ]


def _phase(key: str) -> Callable[[dict], float]:
    return lambda row: row[key]


BENCHMARK = Benchmark(
    name="check_cost",
    heading="7. What `check` costs on a user's program, and the compiled-plan parse",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("program", lambda r: f"`{r['name']}`", align="left"),
                Column("`check` wall, median (min-max)", lambda r: r["check_wall_s"], unit="s", better="lower"),
                Column("bare compile wall", lambda r: r["bare_wall_s"], unit="s"),
                ratio_column("check / bare, median of per-round ratios", lambda r: r["ratio_median"], better="lower",
                             target=TARGET_RATIO, strong=True),
                ratio_column("check peak RSS / bare", lambda r: r["check_rss_mib"]["median"] / r["bare_rss_mib"]["median"],
                             better="lower"),
                Column("compiled collectives", lambda r: r["compiled_collectives"], digits=None),
                Column("exit", lambda r: r["exit_code"], digits=None),
            ),
            rows=programs_of,
        ),
        Table(
            intro=lambda cost: "One `check` of each program in one process, phase by phase:",
            columns=(
                Column("program", lambda r: f"`{r['name']}`", align="left"),
                *(Column(title, _phase(key), unit="s", better="lower") for key, title in (
                    ("trace", "trace"), ("jaxpr_view", "jaxpr view"), ("lower_and_compile", "lower + compile"),
                    ("compiled_plan", "compiled plan"))),
                Column("HLO lines", lambda r: r["instructions"], digits=None),
            ),
            rows=lambda cost: [{"name": name, **p} for name, p in cost["phases_s"].items()],
        ),
    ),
)


if __name__ == "__main__":
    main()
