"""The step estimate against measured time, on this machine's CPU or on a real TPU chip (not in ``run.py``).

``python -m benchmarks.step_estimate`` runs on whatever JAX's default backend is:

- on a CPU host it writes ``benchmarks/results/step_estimate.json``: programs scaled down for
  the CPU, estimated with the peaks ``shardscope calibrate`` measures here
  (:func:`shardscope.pipeline.cpu_peaks.measure_cpu_chip`);
- on a TPU VM (``PYTHONPATH=<checkout> python -m benchmarks.step_estimate`` with JAX and
  libtpu, no network needed) it times the same programs at a chip's scale, estimated with the
  chip's published peaks (:mod:`shardscope.hardware.chips`), prints the table and writes
  ``benchmarks/results/step_estimate_<chip>.json`` (``step_estimate_v5e.json``).

``python -m benchmarks.render`` puts each result file in ``BENCHMARKS.md``. Per program: the
median of the timed calls (each call waited on), shardscope's estimate (a roofline per
instruction of the compiled module, loops counted, plus the chip's per-call and per-iteration
overheads), XLA's own ``cost_analysis()["optimal_seconds"]`` where the backend gives one (it counts a
loop body once), and measured / estimate.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable

from benchmarks.common import grid, parse_args, stats, write_result
from benchmarks.harness import Benchmark, Column, Each, Prose, Table, ratio_column

REPEATS, QUICK_REPEATS, SMOKE_REPEATS = 20, 5, 2


@dataclass(frozen=True)
class Program:
    """One program to time: ``fn`` jitted over arrays of ``shapes`` (each ``(shape, dtype)``)."""

    name: str
    words: str
    fn: Callable
    shapes: tuple[tuple[tuple[int, ...], str], ...]


def programs(scale: str) -> list[Program]:
    """The programs at a chip's scale (``tpu``: as measured on a v5e in DESIGN.md) or the CPU's."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    big = scale == "tpu"
    n_mm = 8192 if big else 1024
    n_small = 2048 if big else 256
    batch, d_in, d_out = (8192, 4096, 16384) if big else (1024, 512, 2048)
    stream = (256 << 20) if big else (32 << 20)
    scan_n, steps = (512, 100) if big else (128, 100)
    dtype = "bfloat16" if big else "float32"

    def matmul(a, b):
        return a @ b

    def mlp_grad(w, x):
        return jax.grad(lambda w: jnp.sum(jax.nn.relu(x @ w) ** 2))(w)

    def elementwise(x):
        return jnp.tanh(x) * 2 + 1

    def scan(w, c):
        return lax.scan(lambda c, _: (jnp.tanh(c @ w), None), c, None, length=steps)[0]

    size = jnp.dtype(dtype).itemsize
    return [
        Program("matmul", f"{n_mm}^3 {dtype} matmul", matmul, (((n_mm, n_mm), dtype), ((n_mm, n_mm), dtype))),
        Program("mlp_grad", f"MLP layer's gradient ({batch}x{d_in} by {d_in}x{d_out}, {dtype})", mlp_grad,
                (((d_in, d_out), dtype), ((batch, d_in), dtype))),
        Program("elementwise", f"elementwise pass over {stream >> 20} MiB ({dtype})", elementwise,
                (((stream // size,), dtype),)),
        Program("small_matmul", f"{n_small}^3 {dtype} matmul", matmul,
                (((n_small, n_small), dtype), ((n_small, n_small), dtype))),
        Program("scan", f"lax.scan of {steps} matmuls {scan_n}x{scan_n} ({dtype})", scan,
                (((scan_n, scan_n), dtype), ((scan_n, scan_n), dtype))),
    ]


def measure(program: Program, repeats: int) -> dict[str, Any]:
    """One program compiled and timed (JAX alone): its samples, its compiled module's text, XLA's
    cost analysis and the device, as ``--measured`` reads them back."""
    import time

    import jax
    import jax.numpy as jnp

    args = tuple(jnp.ones(shape, dtype) * 0.01 for shape, dtype in program.shapes)
    compiled = jax.jit(program.fn).lower(*args).compile()
    for _ in range(3):  # warm-up
        jax.block_until_ready(compiled(*args))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        samples.append(time.perf_counter() - start)
    try:
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    except Exception:  # a backend without a cost analysis
        cost = {}
    kept = {key: float(value) for key, value in (cost or {}).items() if key in ("flops", "bytes accessed", "optimal_seconds")}
    return {"samples": samples, "hlo": compiled.as_text(), "cost": kept, "words": program.words,
            "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__}


def estimated(name: str, measured: dict[str, Any], chip: Any) -> dict[str, Any]:  # chip: a shardscope Chip
    """The row of one measured program: its median against shardscope's estimate of its module."""
    from shardscope.engine.hlo.roofline import estimate_step
    from shardscope.engine.hlo.text import parse
    from shardscope.engine.hlo.work import module_work

    estimate = estimate_step(module_work(parse(measured["hlo"])), chip)
    assert estimate is not None  # every chip here has a bandwidth
    times = stats(measured["samples"])
    optimal = measured["cost"].get("optimal_seconds")
    return {
        "name": name, "words": measured["words"], "measured_s": times,
        "estimate_s": estimate.seconds, "compute_s": estimate.compute_s, "memory_s": estimate.memory_s,
        "overhead_s": estimate.overhead_s, "flops": estimate.flops, "bytes": estimate.bytes,
        "loop_iterations": estimate.loop_iterations, "xla_optimal_s": optimal,
        "xla_flops": measured["cost"].get("flops"), "ratio": times["median"] / estimate.seconds,
    }


def table(rows: list[dict[str, Any]], chip: str) -> str:
    """The rows as a plain-text table for the terminal."""
    lines = [f"step estimate against measured time on {chip} (medians)",
             f"{'program':<58} {'measured':>11} {'estimate':>11} {'ratio':>6} {'XLA optimal':>12}"]
    for row in rows:
        xla = "-" if row["xla_optimal_s"] is None else f"{row['xla_optimal_s'] * 1e3:.3f} ms"
        lines.append(f"{row['words']:<58} {row['measured_s']['median'] * 1e3:>8.3f} ms "
                     f"{row['estimate_s'] * 1e3:>8.3f} ms {row['ratio']:>5.2f}x {xla:>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Time and estimate every program on the default backend (or estimate ``--measured``'s); write the JSON."""
    import json
    from pathlib import Path

    def measured_option(parser: "argparse.ArgumentParser") -> None:
        parser.add_argument("--measured", type=Path, help="estimate the programs measured elsewhere (a JSON of "
                            "{name: measure()'s value}, e.g. from a TPU VM) instead of measuring here")

    args = parse_args(__doc__.splitlines()[0], argv, measured_option)
    from shardscope.hardware.catalogue import chip_of
    from shardscope.pipeline.cpu_peaks import measure_cpu_chip

    repeats = grid(args, REPEATS, QUICK_REPEATS, SMOKE_REPEATS)
    if args.measured is not None:
        measurements = json.loads(args.measured.read_text())
        device_kind = next(iter(measurements.values()))["device_kind"]
        backend = "tpu"
    else:
        import jax

        backend, device_kind = jax.default_backend(), jax.devices()[0].device_kind
        scale = "tpu" if backend == "tpu" else "cpu"
        chosen = grid(args, programs(scale), programs(scale), programs("cpu")[-1:])  # smoke: the small scan on the CPU
        measurements = {p.name: measure(p, repeats) for p in chosen}
    chip = chip_of(device_kind) if backend == "tpu" else measure_cpu_chip(repeats)
    if chip is None:
        print(f"shardscope has no figures for {device_kind}", file=sys.stderr)
        return 1
    rows = [estimated(name, measured, chip) for name, measured in measurements.items()]
    print(table(rows, f"{chip.name} ({device_kind})"))
    name = "step_estimate" if backend != "tpu" else f"step_estimate_{chip.name}"
    jax_version = next(iter(measurements.values()))["jax"]
    path = write_result(name, args, {"backend": backend, "device_kind": device_kind, "chip": chip.to_json(),
                                     "jax": jax_version, "repeats": len(rows[0]["measured_s"]["samples"]),
                                     "rows": rows})
    print(f"wrote {path}")
    return 0


CHIPS_WITH_FIGURES = ("v4", "v5e", "v5p", "v6e", "a100", "h100", "h200", "b200")
"""The chips shardscope estimates for (:mod:`shardscope.hardware.chips`)."""


def _chips(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each chip's result, the CPU's first."""
    return [results[name] for name in sorted(results, key=lambda n: (n != "step_estimate", n))]


def _chip_described(result: dict[str, Any]) -> list[str]:
    chip, load = result["chip"], result["load_average"]
    where = (f"1-minute load average {load['start']:.1f} -> {load['end']:.1f}" if result["backend"] == "cpu"
             else "timed on the chip's own host (`--measured`: estimated here from the modules it compiled)")
    peaks = ", ".join(f"{dtype} {flops / 1e12:.3g} TFLOP/s" for dtype, flops in chip["peak_flops"].items()
                      if dtype != "default")
    return [
        f"### {chip['name']} ({result['device_kind']}, jax {result['jax']})",
        "",
        f"Peaks: {peaks}; memory {chip['memory_bandwidth_Bps'] / 1e9:.3g} GB/s; "
        f"{chip['call_overhead_s'] * 1e6:.3g} us per call, {chip['iteration_overhead_s'] * 1e6:.3g} us per loop "
        f"iteration ({chip['sources'].get('overheads', '')}). Medians of {result['repeats']} calls; {where}.",
    ]


def _unchecked(results: dict[str, dict[str, Any]]) -> list[str]:
    measured = {r["chip"]["name"] for r in results.values()}
    unchecked = [chip for chip in CHIPS_WITH_FIGURES if chip not in measured]
    return [f"The estimate is unchecked on {', '.join(unchecked)}: no measurement of those chips here."] if unchecked else []


def _ms_column(title: str, key: str, **options: Any) -> Column:
    return Column(title, lambda row: row[key], unit="ms", scale=1e3, digits=3, **options)


BENCHMARK = Benchmark(
    name="step_estimate",
    heading="9. The step estimate against measured time",
    files=("step_estimate*.json",),
    several=True,
    blocks=(
        Prose(lambda results: [
            "`python -m benchmarks.step_estimate` (run alone; on a TPU VM it times the chip: `PYTHONPATH=<checkout> "
            "python -m benchmarks.step_estimate`). Per program, the median of the timed calls against shardscope's "
            "estimate: a roofline per instruction of the compiled module (its flops at the chip's peak for their "
            "dtype, its bytes at the memory bandwidth, the longer of the two), loops counted, plus the chip's "
            "per-call and per-iteration overheads; and XLA's own `optimal_seconds` where the backend has a cost "
            "analysis (it counts a loop body once). On the CPU the peaks are the ones `shardscope calibrate` "
            "measures on this machine (in the same run); on a TPU the chip's published ones. The CPU's bandwidth is "
            "a stream through main memory: a program whose arrays stay in the CPU's caches (the scan's carry) runs "
            "faster than its estimate, and this machine's cores are shared with other work."]),
        Each(_chips, (
            Prose(_chip_described),
            Table(
                columns=(
                    Column("program", lambda row: row["words"], align="left"),
                    Column("measured, median (min-max)", lambda row: row["measured_s"], unit="ms", scale=1e3,
                           digits=3),
                    _ms_column("estimate", "estimate_s"),
                    _ms_column("compute", "compute_s"),
                    _ms_column("memory", "memory_s"),
                    _ms_column("overheads", "overhead_s"),
                    ratio_column("measured / estimate", lambda row: row["ratio"]),
                    _ms_column("XLA's optimal_seconds", "xla_optimal_s"),
                ),
                rows=lambda result: result["rows"],
            ),
        )),
        Prose(_unchecked),
    ),
)


if __name__ == "__main__":
    sys.exit(main())
