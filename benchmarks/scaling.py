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

from benchmarks.common import DEMOS, grid as grid_of, parse_args, peak_rss_mib, stats, write_result

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
    from shardscope.plans.settings import Settings

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


if __name__ == "__main__":
    main()
