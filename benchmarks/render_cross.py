"""The cross-process section of ``BENCHMARKS.md``: plans over gloo, and the all-reduce fit."""

from __future__ import annotations

from typing import Any


def cross_process_section(result: dict[str, Any] | None, failure: str | None = None) -> list[str]:
    """Section 4: naive vs deferred in one process and across processes; per-all-reduce cost."""
    out = ["## 4. Across processes (jax.distributed over gloo)", ""]
    if failure:
        out += [f"**Failed:** {failure}", ""]
    if result is None:
        return out + ["No results yet: run `python -m benchmarks.cross_process`.", ""]
    out += [
        f"{result['devices']} CPU devices in all: in one process, or `--processes P` local workers joined "
        "by `jax.distributed.initialize` with CPU collectives over gloo (TCP on 127.0.0.1), each holding "
        f"{result['devices']}/P devices. The real CLI, `shardscope report --json --processes P`, linear "
        f"layer with M parameters, per-device batch {result['per_device_batch']}, 16 chunks per device, "
        f"{result['repeats']} timed rounds; naive/deferred is the median of per-round ratios "
        "(`speedup` in the JSON). Times are process 0's. 1-min load average "
        f"{result['load_average']['start']:.1f} -> {result['load_average']['end']:.1f} (2 cores shared with "
        f"other work); the report runs took {sum(c['wall_s'] for c in result['cells']) / 60:.1f} min of wall "
        "time including start-up and compiles.",
        "",
        "| M | processes | transport | naive ms | deferred ms | naive/deferred | all-reduces/call naive, deferred "
        "| B/call naive, deferred | max abs err |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["cells"]:
        out.append(
            f"| {c['M']:.0e} | {c['processes']} | {c['transport']} | {c['naive_ms']:.2f} | {c['deferred_ms']:.2f} "
            f"| **{c['ratio']:.2f}x** | {c['all_reduces'][0]}, {c['all_reduces'][1]} "
            f"| {c['bytes_per_call'][0]:,}, {c['bytes_per_call'][1]:,} | {c['max_abs_err']:.1e} |"
        )
    out += [
        "",
        "### One all-reduce at each message size, and the alpha-beta fit",
        "",
        "`shardscope calibrate --devices 4 --processes P`: 16 dependent all-reduces inside one compiled "
        "loop per call (dispatch paid once), median over the timed calls, divided by 16. The fit is "
        "t = 2(n-1)·alpha + 2(n-1)/n · S/B by least squares on relative error; its error is the "
        "relative difference between the fitted and the measured time at each size.",
        "",
    ]
    sizes = [p["payload_bytes"] for p in result["calibrations"][0]["points"]]
    out += ["| processes | transport | " + " | ".join(f"{s:,} B" for s in sizes)
            + " | alpha | B | fit error RMS (worst) |",
            "|---:|---|" + "---:|" * len(sizes) + "---:|---:|---:|"]
    for cal in result["calibrations"]:
        cells = " | ".join(f"{p['seconds'] * 1e6:.0f} us" for p in cal["points"])
        bandwidth = "-" if cal["bandwidth_Bps"] is None else f"{cal['bandwidth_Bps'] / 1e9:.2f} GB/s"
        out.append(f"| {cal['processes']} | {cal['collectives_transport']} | {cells} "
                   f"| {cal['latency_s'] * 1e6:.1f} us | {bandwidth} "
                   f"| {cal['rms_relative_error']:.0%} ({cal['max_relative_error']:.0%}) |")
    out += ["", "Over gloo every all-reduce pays milliseconds of latency at every size here (TCP between "
            "processes on a loaded 2-core machine), which is why naive/deferred grows from about 2x in one "
            "process to about 10x across processes at the same 16 chunks per device.", "",
            "Use a fit with `--link B,alpha` (printed by `shardscope calibrate`) to project onto this "
            "machine; a large fit error says the line does not describe it well (a loaded machine, caches).", ""]
    return out
