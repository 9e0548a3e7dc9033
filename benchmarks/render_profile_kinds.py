"""Benchmark 10's section of ``BENCHMARKS.md``: each instruction kind's measured time on a real
TPU v5e chip (its profile's ``hlo_stats``) against shardscope's per-instruction estimate
(``results/profile_kinds_v5e.json``; ``python -m benchmarks.profile_kinds``)."""

from __future__ import annotations

from typing import Any

SHOWN_ABOVE_S = 1e-6
"""Instructions faster than this per run are left out of the table (the chip's bookkeeping copies)."""


def profile_kinds_section(result: dict[str, Any] | None) -> list[str]:
    """The table, the costliest instructions first."""
    if not result:
        return []
    out = [
        "## 10. The cost model against the chip's profile, per instruction",
        "",
        "`benchmarks/profile_capture_tpu.py` ran one program per instruction kind on a real "
        f"{result['device_kind']} (jax {result['jax']}), 10 calls each under `jax.profiler`; "
        "`python -m benchmarks.profile_kinds` reads the stored profile with XProf's `hlo_stats` (each "
        "instruction's self time per run) and sets shardscope's roofline of that instruction beside it "
        "(overheads left out). Rerun it after the estimate changes: nothing is measured again. Collectives "
        "are not in it: the machine has one chip.",
        "",
        "| program | instruction | XProf's category | runs | measured per run | estimate per run | measured / estimate "
        "| bound by (XProf) |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for row in sorted(result["rows"], key=lambda r: -r["measured_s"]):
        if row["measured_s"] < SHOWN_ABOVE_S:
            continue
        estimate = row["estimate_s"]
        ratio = "-" if not estimate else f"{row['measured_s'] / estimate:.2f}x"
        out.append(f"| {row['program']} | `{row['instruction']}` | {row['category']} | {row['runs']} | "
                   f"{_us(row['measured_s'])} | {'-' if estimate is None else _us(estimate)} | {ratio} | "
                   f"{row['bound_by']} |")
    return out + [""]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"
