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
from benchmarks.harness import Benchmark, Column, Prose, SummaryRow, Table, verdict

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
    # the smoke run's one round is its import profile too (python -X importtime), and its report may
    # read the environment's compilation cache (the test run's own under the suite): no process twice
    smoke = args.mode == "smoke"
    for i in range(rounds):
        order = list(commands().items())
        if i % 2:
            order.reverse()
        for name, argv_ in order:
            argv_ = [argv_[0], "-X", "importtime", *argv_[1:]] if smoke else argv_
            runs[name].append(_check(name, run_child(argv_, env={"SHARDSCOPE_NO_CACHE": ""} if smoke else None)))
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
    imports = {name: top_level_imports(runs[name][-1]["stderr"]) if smoke else import_profile(argv_)
               for name, argv_ in commands().items() if name != "bare_with_reference"}
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
    return top_level_imports(_check("importtime", run_child([argv[0], "-X", "importtime", *argv[1:]]))["stderr"],
                             floor_s)


def top_level_imports(stderr: str, floor_s: float = 0.01) -> dict[str, float]:
    """The seconds of each top-level import in ``python -X importtime``'s lines, the big ones."""
    found: dict[str, float] = {}
    for line in stderr.splitlines():
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


def _described(data: dict) -> list[str]:
    s = data["settings"]
    return [
        f"`shardscope report demos/linear.py --json` (defaults: {s['devices']} devices, chunk size {s['chunk_size']}, "
        f"{s['chunks_per_device']} chunks/device, {s['repeats']} timed runs after 2 warm-up rounds) against "
        "`benchmarks/bare_linear.py`, a plain JAX script that builds, traces, compiles and times the same two "
        "plans the same way, and against the same script with `--with-reference` (it also compiles, times and "
        "checks against the unchunked VJP, as the report does). Fresh processes, alternated, "
        f"{data['rounds']} rounds after one untimed round; wall time includes Python start and imports; peak "
        "memory is each process's own max RSS (`os.wait4`). Ratios are medians of per-round ratios.",
    ]


def _ratios(data: dict) -> list[str]:
    r = data["ratios"]
    return [
        f"report / bare: wall **{r['report_over_bare']['wall_median']:.2f}x**, peak memory "
        f"{r['report_over_bare']['rss_median']:.2f}x (target <= {data['target_ratio']}x). report / bare with "
        f"reference: wall {r['report_over_bare_with_reference']['wall_median']:.2f}x, memory "
        f"{r['report_over_bare_with_reference']['rss_median']:.2f}x.",
    ]


def _imports(data: dict) -> list[dict]:
    imports = data.get("top_level_imports_s")
    if not imports:
        return []
    report, bare = imports["report"], imports["bare"]
    names = sorted(set(report) | set(bare), key=lambda n: -max(report.get(n, 0), bare.get(n, 0)))
    return [{"module": name, "report": report.get(name), "bare": bare.get(name)} for name in names]


def _import_sums(data: dict) -> list[str]:
    imports = data.get("top_level_imports_s")
    if not imports:
        return []
    return [f"Sum: report {sum(imports['report'].values()):.2f} s, bare {sum(imports['bare'].values()):.2f} s."]


def _summary(data: dict) -> list[SummaryRow]:
    r = data["ratios"]["report_over_bare"]["wall_median"]
    return [SummaryRow("`shardscope report --json` wall time over bare JAX", f"<= {data['target_ratio']}x",
                       f"{r:.2f}x", verdict(r <= data["target_ratio"], r / data["target_ratio"]))]


def _misses(data: dict) -> list[str]:
    if data["ratios"]["report_over_bare"]["wall_median"] <= data["target_ratio"]:
        return []
    networkx = data.get("top_level_imports_s", {}).get("report", {}).get("shardscope.engine.jaxpr.dataflow")
    return [
        "**`shardscope report` over bare JAX** (pyinstrument of the report): beyond JAX's own import, "
        "the extra time is compiling, timing and checking the unchunked reference (the `--with-reference` "
        "row) and shardscope's imports (table above)"
        + (f"; networkx was still imported ({networkx:.2f} s under `-X importtime`)" if networkx else "")
        + ".",
    ]


BENCHMARK = Benchmark(
    name="tool_cost",
    heading="2a. What `shardscope report` costs over bare JAX",
    in_make_bench=True,
    summary=_summary,
    misses=_misses,
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("command", lambda r: f"`{r['command']}`", align="left"),
                Column("wall", lambda r: r["wall_s"], unit="s", better="lower"),
                Column("peak RSS", lambda r: r["max_rss_mib"]["median"], unit="MiB", digits=0, better="lower"),
                Column("CPU", lambda r: r["cpu_s"]["median"], unit="s", better="lower"),
            ),
            rows=lambda d: [{"command": d["commands"][name], **row} for name, row in d["summary"].items()],
        ),
        Prose(_ratios),
        Table(
            intro=lambda d: ("Top-level imports over 10 ms (`python -X importtime`, one run each; a module imported "
                             "by an earlier one is counted there):"),
            columns=(
                Column("module", lambda r: f"`{r['module']}`", align="left"),
                Column("report", lambda r: r["report"], unit="s", digits=3, better="lower"),
                Column("bare", lambda r: r["bare"], unit="s", digits=3, better="lower"),
            ),
            rows=_imports,
        ),
        Prose(_import_sums),
    ),
)


if __name__ == "__main__":
    main()
