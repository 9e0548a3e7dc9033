"""Benchmark 2a: what ``shardscope report demos/linear.py --json`` costs over bare JAX.

Alternates three processes per round: the report, ``benchmarks/bare_linear.py`` (the two plans
only) and ``bare_linear.py --with-reference`` (the same numeric work as the report). Each is a
fresh process, so wall time includes interpreter start and imports, as a user sees it. Peak
memory is each child's own ``ru_maxrss`` (``os.wait4``).

Run alone: ``python -m benchmarks.tool_cost [--quick | --smoke]``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from benchmarks.common import ROOT, grid, parse_args, python, run_child, stats, write_result

TARGET_RATIO = 1.3
FULL_ROUNDS, QUICK_ROUNDS = 9, 3


def commands() -> dict[str, list[str]]:
    """The three commands, by name."""
    bare = str(ROOT / "benchmarks" / "bare_linear.py")
    return {
        "report": [python(), "-m", "shardscope", "report", "demos/linear.py", "--json"],
        "bare": [python(), bare],
        "bare_with_reference": [python(), bare, "--with-reference"],
    }


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and write ``tool_cost.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    rounds = grid(args, FULL_ROUNDS, QUICK_ROUNDS, 1)
    runs: dict[str, list[dict]] = {name: [] for name in commands()}
    # one untimed round first: the OS file cache and .pyc files, not shardscope, would win it
    for name, argv_ in commands().items() if args.mode != "smoke" else ():
        _check(name, run_child(argv_))
    for i in range(rounds):
        order = list(commands().items())
        if i % 2:
            order.reverse()
        for name, argv_ in order:
            runs[name].append(_check(name, run_child(argv_)))
    summary = {
        name: {
            "wall_s": stats([r["wall_s"] for r in results]),
            "max_rss_mib": stats([r["max_rss_mib"] for r in results]),
            "cpu_s": stats([r["user_s"] + r["sys_s"] for r in results]),
        }
        for name, results in runs.items()
    }
    ratios = {
        f"report_over_{base}": {
            "wall_median": _median_ratio(runs["report"], runs[base], "wall_s"),
            "rss_median": _median_ratio(runs["report"], runs[base], "max_rss_mib"),
        }
        for base in ("bare", "bare_with_reference")
    }
    report_json = json.loads(runs["report"][-1]["stdout"])
    imports = {name: import_profile(argv_) for name, argv_ in commands().items() if name != "bare_with_reference"}
    write_result(
        "tool_cost",
        args,
        {
            "rounds": rounds,
            "target_ratio": TARGET_RATIO,
            "commands": {name: _shown(argv_) for name, argv_ in commands().items()},
            "settings": {k: report_json.get(k) for k in ("devices", "chunk_size", "chunks_per_device", "repeats")},
            "summary": summary,
            "ratios": ratios,
            "top_level_imports_s": imports,
        },
    )
    for base, ratio in ratios.items():
        print(f"{base}: wall {ratio['wall_median']:.2f}x, peak RSS {ratio['rss_median']:.2f}x", flush=True)


def import_profile(argv: list[str], floor_s: float = 0.01) -> dict[str, float]:
    """Seconds spent importing each top-level module (``python -X importtime``), the big ones."""
    result = _check("importtime", run_child([argv[0], "-X", "importtime", *argv[1:]]))
    found: dict[str, float] = {}
    for line in result["stderr"].splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if name.startswith("  ") or not cumulative.strip().isdigit():
            continue  # not top level (imported by another module), or the header line
        seconds = int(cumulative) / 1e6
        if seconds >= floor_s:
            found[name.strip()] = found.get(name.strip(), 0.0) + seconds
    return dict(sorted(found.items(), key=lambda item: -item[1]))


def _shown(argv: list[str]) -> str:
    """The command as a user would type it from the repository root."""
    words = [str(Path(w).relative_to(ROOT)) if w.startswith(str(ROOT)) else w for w in argv[1:]]
    return "python " + " ".join(words)


def _check(name: str, result: dict) -> dict:
    if result["returncode"] != 0:
        raise RuntimeError(f"{name} failed ({result['returncode']}):\n{result['stderr'][-2000:]}")
    return result


def _median_ratio(top: list[dict], bottom: list[dict], key: str) -> float:
    """Median of the per-round ratios: each round's runs were side by side."""
    return statistics.median(a[key] / b[key] for a, b in zip(top, bottom))


if __name__ == "__main__":
    main()
