"""Naive vs deferred vs reduced on real training layouts: FSDP (``demos/fsdp.py``) and a 2-D mesh
(``demos/mlp.py`` on data=4,model=2), with collective runs per call and memory per device.

Run alone: ``python -m benchmarks.layouts [--repeats R] [--smoke]``; writes ``benchmarks/results/layouts.json``
and prints the Markdown table BENCHMARKS.md quotes. Times are medians of interleaved rounds; the
speedup is the median of the per-round ratios (shardscope.pipeline.comparison).
"""

from __future__ import annotations

import os

from benchmarks.common import ROOT, grid, parse_args, write_result

CASES = (
    ("fsdp.py", "data=4", None),
    ("fsdp.py", "data=4,model=2", None),
    ("mlp.py", "data=4,model=2", "data"),
)


def run_case(demo: str, mesh: str, batch_axes: str | None, repeats: int) -> dict:
    """One analysis: per plan, runs per call, bytes, memory per device, median run time, error."""
    from shardscope.pipeline.run import analyze
    from shardscope.plans.mesh import Mesh, parse_axes
    from shardscope.plans.settings import Settings

    settings = Settings(ROOT / "demos" / demo, mesh=Mesh.parse(mesh), repeats=repeats,
                        batch_axes=None if batch_axes is None else parse_axes(batch_axes))
    a = analyze(settings, graphs=False)
    return {
        "demo": demo, "mesh": mesh, "batch_axes": list(a.shapes.batch_axes),
        "chunks_per_device": a.shapes.chunks_per_device, "load_average_1min": os.getloadavg()[0],
        "comparison": a.comparison.speedup_text(),
        "unavailable": a.unavailable,
        "plans": {
            name: {
                "runs_per_call": p.jaxpr_runs.value, "in_loops": p.collectives_in_loops, "bytes_per_call": p.jaxpr_bytes.value,
                "argument_bytes": p.memory.get("argument_size_in_bytes"), "temp_bytes": p.memory.get("temp_size_in_bytes"),
                "median_ms": p.run_s.median * 1e3, "max_abs_err": p.max_abs_err,
            }
            for name, p in a.plans.items()
        },
    }


def markdown(results: list[dict]) -> str:
    """The table BENCHMARKS.md quotes."""
    lines = ["| demo | mesh (batch over) | plan | runs/call (in loops) | B/call | memory/device: args + temps | median | max err |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        for name, p in r["plans"].items():
            lines.append(
                f"| {r['demo']} | {r['mesh']} ({','.join(r['batch_axes'])}) | {name} | {p['runs_per_call']} ({p['in_loops']}) "
                f"| {p['bytes_per_call']:,} | {p['argument_bytes']:,} + {p['temp_bytes']:,} B | {p['median_ms']:.2f} ms "
                f"| {p['max_abs_err']:.1e} |")
        for name, reason in r["unavailable"].items():
            lines.append(f"| {r['demo']} | {r['mesh']} | {name} | unavailable: {reason} | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the cases, write ``layouts.json`` and print the table."""
    args = parse_args(__doc__.splitlines()[0], argv,
                      lambda parser: parser.add_argument("--repeats", type=int, default=30, help="timed rounds"))
    repeats = grid(args, args.repeats, args.repeats, 2)
    from shardscope.targets.host import ensure_devices

    ensure_devices(8)
    results = [run_case(*case, repeats) for case in grid(args, CASES, CASES, CASES[:1])]
    write_result("layouts", args, results)
    print(markdown(results))
    for r in results:
        print(f"{r['demo']} {r['mesh']}: {r['comparison']} (load {r['load_average_1min']:.1f})")


if __name__ == "__main__":
    main()
