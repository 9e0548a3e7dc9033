"""``BENCHMARKS.md``'s section on compiling for TPU targets, from ``results/target_compile.json``."""

from __future__ import annotations

import statistics
from typing import Any

ROUTES = (
    ("trace", "trace over n CPU devices"),
    ("retargeted", "compile for the target (lowering + TPU compile)"),
    ("direct", "written for the target (JAX's own route)"),
    ("cpu", "CPU compile"),
)
"""The timings of each round, in the order the table shows them."""


def _cell(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.3f} s ({min(seconds):.3f}-{max(seconds):.3f})"


def target_compile_section(result: dict[str, Any] | None) -> list[str]:
    """Compile time for targets of 8, 64 and 256 devices on the train-step demo (run alone)."""
    if not result:
        return []
    load = result["load_average"]
    versions = result["machine"]["versions"]
    out = [
        "## 5. Compiling for a TPU slice without a TPU (`--target`)",
        "",
        "`python -m benchmarks.target_compile` (needs `pip install 'shardscope[tpu]'`; writes "
        "`benchmarks/results/target_compile.json`; not part of `make bench`, run alone). demos/train_step.py's "
        "`step` (a `shard_map` over `batch`, 4 micro-batches in a `lax.scan`, 8 examples per device) with its "
        f"mesh over n devices; medians of {result['rounds_per_case']} rounds (min-max), a new `jax.jit` each "
        "round, the routes interleaved. jax "
        f"{versions.get('jax', '?')}, libtpu {result['libtpu']}; 1-minute load average {load['start']:.1f} -> "
        f"{load['end']:.1f} on this machine's 2 shared cores.",
        "",
        "| target | devices | " + " | ".join(label for _, label in ROUTES) + " |",
        "|---|---:|" + "---:|" * len(ROUTES),
    ]
    for case in result["cases"]:
        cells = " | ".join(_cell(case["rounds"][key]) for key, _ in ROUTES)
        out.append(f"| tpu:{case['topology']} | {case['devices']} | {cells} |")
    out += [
        "",
        "`shardscope report/check --target` takes the trace it already made for the CPU and compiles it for the "
        "target (`compile for the target`): nothing is traced again, and nothing runs there.",
        "",
    ]
    return out
