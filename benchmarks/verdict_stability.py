"""Does ``report`` name the same winner when run again on the same plans?

On a loaded machine single rounds scatter widely. Each round runs ``shardscope report
demos/mlp.py --mesh data=4,model=2 --batch-axes data --json`` (the issue's case: the three plans
of a two-layer MLP, deferred and reduced compiling to the same single all-reduce) twice in fresh
processes: with ``--repeats 20`` (exactly 20 rounds, as every ``report`` timed before) and with the
defaults (at least 20 rounds, and more within the 3 s timing budget until each comparison's
interval is within about +-5% or lies wholly beyond 2% of 1). From the first, two verdicts: the old rule (the interquartile range of the 20 per-round
ratios holds 1: no measurable difference; its ``q1``/``q3``, what ``speedup_spread`` always was)
and the new one (the 95% confidence interval of the median holds 1); from the second, the new
rule on the rounds it timed. A verdict that changes from round to round is one a user could not
trust; the counts say how often each rule named each verdict.

Run alone: ``python -m benchmarks.verdict_stability [--quick | --smoke]``. Not part of ``make bench``.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import Any

from benchmarks.common import grid, parse_args, python, run_child, stats, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table

FULL_ROUNDS, QUICK_ROUNDS = 8, 3
REPORT = ["-m", "shardscope", "report", "demos/mlp.py", "--mesh", "data=4,model=2", "--batch-axes", "data", "--json"]
RULES = (
    ("interquartile range of 20 rounds holds 1 (the old rule)", "twenty", "old"),
    ("95% interval of the median of 20 rounds holds 1", "twenty", "new"),
    ("95% interval of the median, more rounds within 3 s (the default)", "budget", "new"),
)


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and write ``verdict_stability.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    rounds = grid(args, FULL_ROUNDS, QUICK_ROUNDS, 1)
    runs: dict[str, list[dict[str, Any]]] = {"twenty": [], "budget": []}
    # the verdicts, not the compiles, are measured: the smoke run's second report reads back the first's
    # compiles (the environment's cache: the test run's own under the suite), the full run compiles afresh
    env = {"SHARDSCOPE_NO_CACHE": ""} if args.mode == "smoke" else None
    for i in range(rounds):
        for kind, extra in (("twenty", ["--repeats", "20"]), ("budget", [])):
            result = run_child([python(), *REPORT, *extra], env=env)
            if result["returncode"] != 0:
                raise RuntimeError(f"report exited with {result['returncode']}:\n{result['stderr'][-2000:]}")
            data = json.loads(result["stdout"])
            speedup = data["comparison"]["speedup"]
            runs[kind].append({"wall_s": result["wall_s"], "rounds": speedup["rounds"], "median": speedup["median"],
                               "q1": speedup["q1"], "q3": speedup["q3"], "low": speedup["low"],
                               "high": speedup["high"], "verdict": data["speedup_verdict"],
                               "text": data["comparison"]["text"]})
        print(f"round {i + 1}/{rounds}: " + "; ".join(f"{kind} {runs[kind][-1]['text']}" for kind in runs), flush=True)
    rows = [_row(title, runs[kind], rule) for title, kind, rule in RULES]
    write_result("verdict_stability", args, {"rounds": rounds, "command": " ".join(["shardscope", *REPORT[2:]]),
                                            "runs": runs, "rows": rows})
    for row in rows:
        print(f"{row['rule']}: {row['verdicts']}", flush=True)


def _row(title: str, runs: list[dict[str, Any]], rule: str) -> dict[str, Any]:
    """One rule's verdicts over the runs, with the rounds and the wall time they took."""
    verdicts = Counter(_old_verdict(r) if rule == "old" else r["verdict"] for r in runs)
    return {
        "rule": title,
        "verdicts": dict(verdicts),
        "same": max(verdicts.values()) if verdicts else 0,
        "runs": len(runs),
        "rounds": stats([r["rounds"] for r in runs]),
        "median_ratio": stats([r["median"] for r in runs]),
        "wall_s": stats([r["wall_s"] for r in runs]),
    }


def _old_verdict(run: dict[str, Any]) -> str:
    """The verdict the interquartile range alone gave (before the interval of the median)."""
    if run["q1"] <= 1.0 <= run["q3"]:
        return "no measurable difference"
    return "faster" if run["median"] > 1 else "slower"


def _verdicts(row: dict[str, Any]) -> str:
    return ", ".join(f"{verdict} {count}" for verdict, count in sorted(row["verdicts"].items(), key=lambda kv: -kv[1]))


BENCHMARK = Benchmark(
    name="verdict_stability",
    heading="Does `report` name the same winner twice?",
    level=3,
    blocks=(
        Prose(lambda result: [
            f"`python -m benchmarks.verdict_stability` (run alone; {result['rounds']} rounds; 1-minute load average "
            f"{result['load_average']['start']:.1f} -> {result['load_average']['end']:.1f} on this machine's 2 shared "
            f"cores). Each round runs `{result['command']}` with `--repeats 20` and with the defaults, each in a "
            "fresh process; the verdict is naive against deferred. The old rule read the interquartile range of "
            "the 20 per-round ratios (how much single rounds scatter); the new one reads the 95% confidence "
            "interval of their median, and by default times more rounds, within a 3 s budget, until that interval is "
            "within about +-5% or lies wholly beyond 2% of 1 (every two plans compared, but two that compile to the "
            "same work, which differ by noise)."]),
        Table(
            columns=(
                Column("rule", lambda r: r["rule"], align="left"),
                Column("verdicts over the runs", _verdicts, align="left"),
                Column("runs with the most common verdict", lambda r: f"{r['same']} of {r['runs']}", better="higher",
                       strong=True),
                Column("rounds timed, median (min-max)", lambda r: r["rounds"], digits=0),
                Column("naive/deferred, median ratio (min-max)", lambda r: r["median_ratio"], unit="ratio"),
                Column("report wall, median (min-max)", lambda r: r["wall_s"], unit="s", better="lower"),
            ),
            rows=lambda result: result["rows"],
        ),
    ),
)


if __name__ == "__main__":
    main()
