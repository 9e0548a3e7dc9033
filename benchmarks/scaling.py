"""Benchmark 2c: analysis time against program size, on ``demos/deep.py`` at growing depth.

For each target size the depth of ``demos/deep.py`` (``SHARDSCOPE_DEEP_DEPTH``) is chosen so
the naive plan has about that many equations. Tracing is timed on its own; the analysis is
``jaxpr_model.from_jaxpr`` -> ``dataflow.build_graph`` -> ``dataflow.collectives``, each timed
separately, the median of a few repeats on the same traced jaxpr, with the garbage collector
paused as the pipeline reads a program (``pipeline.gc_pause``; the trace runs with it, as there).
``ratio`` is the analysis's CPU time over the trace's, both measured in this process: other
processes on the machine inflate both alike, so it is the figure to compare between runs.

Run alone: ``python -m benchmarks.scaling [--quick | --smoke]``.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from pathlib import Path
from typing import Callable

from benchmarks.common import DEMOS, grid as grid_of, parse_args, peak_rss_mib, stats, write_result
from benchmarks.harness import Benchmark, Column, Prose, SummaryRow, Table, ratio_column, verdict

DEEP = DEMOS / "deep.py"
TARGET_S_AT_10K = 1.0
FULL = {"equations": (1_000, 3_000, 10_000, 30_000, 50_000), "repeats": 3}
QUICK = {"equations": (1_000, 10_000), "repeats": 2}
SMOKE = {"equations": (200, 400), "repeats": 1}
"""Two sizes: the growth and the slope need two points."""
PHASES = ("from_jaxpr", "build_graph", "collectives")


def main(argv: list[str] | None = None) -> None:
    """Measure every size and write ``scaling.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    from shardscope.targets.host import ensure_devices

    ensure_devices(2)
    grid = grid_of(args, FULL, QUICK, SMOKE)
    base, per_layer = calibrate()
    rows = [measure(depth_for(target, base, per_layer), grid["repeats"]) for target in grid["equations"]]
    for row, target in zip(rows, grid["equations"]):
        row["target_equations"] = target
    small, large = rows[0], rows[-1]
    write_result(
        "scaling",
        args,
        {
            "model": "demos/deep.py (residual tanh MLP, width 8), naive plan, 2 devices, default chunking",
            "equations_per_layer": per_layer,
            "repeats": grid["repeats"],
            "target_s_at_10k": TARGET_S_AT_10K,
            "rows": rows,
            # 1.0 means exactly linear: time per equation at the largest size over the smallest
            "per_equation_growth": (large["analysis_s"] / large["equations"]) / (small["analysis_s"] / small["equations"]),
            "per_equation_growth_cpu": (large["analysis_cpu_s"] / large["equations"])
            / (small["analysis_cpu_s"] / small["equations"]),
            "loglog_slope": _slope([r["equations"] for r in rows], [r["analysis_s"] for r in rows]),
            "loglog_slope_cpu": _slope([r["equations"] for r in rows], [r["analysis_cpu_s"] for r in rows]),
            "peak_rss_mib": peak_rss_mib(),
        },
    )


def calibrate() -> tuple[int, int]:
    """Equations of the naive plan at depth 1 and 2: ``equations = base + per_layer * depth``."""
    one, two = (_traced(depth)[2].equation_count for depth in (1, 2))
    return one - (two - one), two - one


def depth_for(equations: int, base: int, per_layer: int) -> int:
    """The depth whose naive plan has about ``equations`` equations."""
    return max(1, round((equations - base) / per_layer))


def _traced(depth: int) -> tuple[float, float, object, object]:
    """Trace the naive plan of the deep demo at ``depth``: (seconds, CPU seconds, program, jaxpr)."""
    from shardscope.plans import registry
    from shardscope.sources.loading import load_demo_file
    from shardscope.engine.jaxpr.model import from_jaxpr
    from shardscope.config.settings import Settings

    os.environ["SHARDSCOPE_DEEP_DEPTH"] = str(depth)
    demo = load_demo_file(DEEP).get("deep")
    assert len(demo.spec.params) == depth, "demos/deep.py did not take its depth from the environment"
    built = registry.build_plans(demo, Settings(path=Path(DEEP)))
    start_cpu = time.process_time()
    start = time.perf_counter()
    traced = built.functions["naive"].trace(*built.args)
    trace_s = time.perf_counter() - start
    trace_cpu_s = time.process_time() - start_cpu
    return trace_s, trace_cpu_s, from_jaxpr(traced.jaxpr), traced.jaxpr


def measure(depth: int, repeats: int) -> dict:
    """Trace ``repeats`` times, timing each analysis phase after each trace."""
    from shardscope.engine.jaxpr import dataflow
    from shardscope.pipeline.gc_pause import paused

    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    totals, cpu, traces, trace_cpu = [], [], [], []
    program = jaxpr = None
    for _ in range(repeats):
        # each trace starts from the same heap: the last repeat's program freed and collected
        program = jaxpr = None
        gc.collect()
        trace_s, trace_cpu_s, program, jaxpr = _traced(depth)
        traces.append(trace_s)
        trace_cpu.append(trace_cpu_s)
        with paused():
            _analyse(jaxpr, phases, totals, cpu)
    assert program is not None
    graph = dataflow.build_graph(program)
    found = dataflow.collectives(program)
    row = {
        "depth": depth,
        "equations": program.equation_count,
        "graph_nodes": graph.number_of_nodes(),
        "graph_edges": graph.number_of_edges(),
        "collectives": len(found),
        "trace_s": statistics.median(traces),
        "trace_cpu_s": statistics.median(trace_cpu),
        "phases_s": {name: stats(samples) for name, samples in phases.items()},
        "analysis": stats(totals),
        "analysis_s": statistics.median(totals),
        # CPU time of this (single-threaded) work: what other processes on the machine do not inflate
        "analysis_cpu_s": statistics.median(cpu),
    }
    row["ratio"] = row["analysis_cpu_s"] / row["trace_cpu_s"]
    row["us_per_equation"] = row["analysis_s"] / row["equations"] * 1e6
    print(f"depth {depth}: {row['equations']} equations, trace {row['trace_s']:.2f} s (CPU {row['trace_cpu_s']:.3f} s), "
          f"analysis {row['analysis_s']:.3f} s (CPU {row['analysis_cpu_s']:.3f} s, {row['ratio']:.2f}x the trace) "
          f"({row['us_per_equation']:.0f} us/equation)", flush=True)
    return row


def _analyse(jaxpr: object, phases: dict[str, list[float]], totals: list[float], cpu: list[float]) -> None:
    """One timed analysis of ``jaxpr``: its phases, wall total and CPU total appended."""
    from shardscope.engine.jaxpr import dataflow
    from shardscope.engine.jaxpr.model import from_jaxpr

    start_cpu = time.process_time()
    start = time.perf_counter()
    program = from_jaxpr(jaxpr)
    t1 = time.perf_counter()
    dataflow.build_graph(program)
    t2 = time.perf_counter()
    dataflow.collectives(program)
    t3 = time.perf_counter()
    phases["from_jaxpr"].append(t1 - start)
    phases["build_graph"].append(t2 - t1)
    phases["collectives"].append(t3 - t2)
    totals.append(t3 - start)
    cpu.append(time.process_time() - start_cpu)


def _slope(sizes: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(time) against log(size): 1.0 is linear, 2.0 quadratic."""
    xs = [math.log(n) for n in sizes]
    ys = [math.log(t) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _described(data: dict) -> list[str]:
    load = data.get("load_average")
    return [
        f"{data['model']}; about {data['equations_per_layer']} equations per layer. Tracing is timed on its "
        f"own; the analysis is `jaxpr_model.from_jaxpr` -> `dataflow.build_graph` -> `dataflow.collectives` on "
        f"the traced jaxpr (the garbage collector paused, as the pipeline reads a program), median of "
        f"{data['repeats']} repeats, each after its own trace. The ratio is the analysis's CPU time over the "
        f"trace's, both in one process: the figure to compare between runs on a loaded machine"
        + (f" (1-minute load average {load['start']:.1f} at the start, {load['end']:.1f} at the end)"
           if isinstance(load, dict) else "")
        + f". The process peaked at {data['peak_rss_mib']:,.0f} MiB resident.",
    ]


def _slope_lines(data: dict) -> list[str]:
    if "loglog_slope" not in data:
        return []
    return [f"Slope of log(time) against log(equations), least squares over all sizes: "
            f"{data['loglog_slope']:.2f} wall, {data['loglog_slope_cpu']:.2f} CPU (1.0 is linear). "
            f"Time per equation at the largest size over the smallest: {data['per_equation_growth']:.2f} wall, "
            f"{data['per_equation_growth_cpu']:.2f} CPU. Wall times rise with the machine's load; the CPU "
            "time of this single-threaded work is what an idle machine would show."]


def _near_10k(data: dict) -> dict:
    return min(data["rows"], key=lambda r: abs(r["equations"] - 10_000))


def _summary(data: dict) -> list[SummaryRow]:
    row, target = _near_10k(data), data["target_s_at_10k"]
    rows = [SummaryRow(f"analysis time at {row['equations']:,} equations", f"< {target} s", f"{row['analysis_s']:.2f} s",
                       verdict(row["analysis_s"] < target, row["analysis_s"] / target))]
    slope = data.get("loglog_slope")
    if slope is not None:
        first, last = data["rows"][0], data["rows"][-1]
        rows.append(SummaryRow(f"linear scaling, {first['equations']:,} to {last['equations']:,} equations: "
                               "slope of log time vs log size (wall, CPU)", "1.0",
                               f"{slope:.2f}, {data['loglog_slope_cpu']:.2f}",
                               "met" if slope <= 1.15 else f"**missed**: superlinear (slope {slope:.2f})"))
    return rows


def _phase(name: str) -> Callable[[dict], float]:
    return lambda r: r["phases_s"][name]["median"]


BENCHMARK = Benchmark(
    name="scaling",
    heading="2c. Analysis time against program size",
    in_make_bench=True,
    summary=_summary,
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("equations", lambda r: r["equations"], digits=None),
                Column("depth", lambda r: r["depth"], digits=None),
                Column("trace", lambda r: r["trace_s"], unit="s"),
                Column("trace CPU", lambda r: r.get("trace_cpu_s"), unit="s"),
                Column("from_jaxpr", _phase("from_jaxpr"), unit="s", digits=3, better="lower"),
                Column("build_graph", _phase("build_graph"), unit="s", digits=3, better="lower"),
                Column("collectives", _phase("collectives"), unit="s", digits=3, better="lower"),
                Column("analysis", lambda r: r["analysis_s"], unit="s", digits=3, better="lower", strong=True),
                Column("analysis CPU", lambda r: r.get("analysis_cpu_s"), unit="s", digits=3, better="lower"),
                ratio_column("analysis / trace (CPU)", lambda r: r.get("ratio"), better="lower", strong=True),
                Column("per equation", lambda r: r["us_per_equation"], unit="us", digits=0, better="lower"),
            ),
            rows=lambda d: d["rows"],
        ),
        Prose(_slope_lines),
    ),
)


if __name__ == "__main__":
    main()
