"""Benchmark 8's section of ``BENCHMARKS.md``: a step of dispatches (one gradient call per
micro-batch, each all-reducing) against its fix, timed side by side
(``results/dispatch_steps.json``, ``python -m benchmarks.dispatch_steps``, run alone)."""

from __future__ import annotations

from typing import Any


def dispatch_section(result: dict[str, Any] | None) -> list[str]:
    """The section: how it was measured, one row per size, what the rows say."""
    if not result:
        return []
    load = result["load_average"]
    out = [
        "## 8. A step of dispatches: one all-reduce per micro-batch against one per step",
        "",
        "`python -m benchmarks.dispatch_steps` (run alone; not part of `make bench`; "
        f"{result['cpu_devices']} simulated CPU devices, the demo's mesh over the first of them; 1-minute load "
        f"average {load['start']:.1f} -> {load['end']:.1f} on this machine's 2 shared cores). `demos/dispatch_step.py`'s "
        "`step` is not jitted: a Python loop calls the jitted `grad_fn` once per micro-batch (each call its own "
        "module, all-reducing the replicated weight's gradient) and adds the results eagerly, then calls `apply`. "
        "`step_fixed` has each call return the devices' own gradients (stacked over `data`) and the update sum them: "
        "one all-reduce per step. Both run as written, eagerly, on the same placed arguments, timed interleaved "
        f"({result['rounds']} rounds after warm-up, the order rotating); `jax.jit(step)` (one module: XLA merges the "
        "calls and reduces once) is timed in the same rounds for context. The ratio is the median of the per-round "
        "ratios with their interquartile range. Collectives per step are `shardscope.testing.collective_counts`'.",
        "",
        "| micro-batches | batch | gradient | all-reduces/step: step, step_fixed | step ms, median (min-max) "
        "| step_fixed ms | step / step_fixed (IQR) | jax.jit(step) ms | largest output difference |",
        "|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for case in result["cases"]:
        ms = case["run_ms"]
        ratio = case["step_over_fixed"]
        counts = case["counts_per_step"]
        out.append(
            f"| {case['micro_batches']} | {case['batch']} | {case['d']}x{case['d']} f32 "
            f"({_size(case['gradient_bytes'])}) | {counts['step'].get('all-reduce', 0)}, "
            f"{counts['step_fixed'].get('all-reduce', 0)} | {_ms(ms['step'])} | {_ms(ms['step_fixed'])} "
            f"| **{ratio['median']:.2f}x** ({ratio['low']:.2f}-{ratio['high']:.2f}) | {ms['jit(step)']['median']:.2f} "
            f"| {case['max_abs_difference']:.1e} |")
    largest = max(result["cases"], key=lambda c: c["gradient_bytes"])
    out += [
        "",
        f"At the largest gradient the dispatch-per-micro-batch step takes {largest['run_ms']['step']['median']:.1f} ms "
        f"against {largest['run_ms']['step_fixed']['median']:.1f} ms for the fix, which calls the gradient function as "
        "often: the difference is mostly the all-reduces the fix does not run. The simulated devices' all-reduce is a copy "
        "through memory on the shared cores, so the ratio is this machine's, not an interconnect's. "
        f"`jax.jit(step)` runs one module with one all-reduce, yet took {largest['run_ms']['jit(step)']['median']:.1f} "
        "ms there: its devices' work shares the cores differently from the eager dispatches', which was not "
        "investigated further.",
        "",
    ]
    return out


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.0f} KiB"


def _ms(s: dict[str, Any]) -> str:
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"
