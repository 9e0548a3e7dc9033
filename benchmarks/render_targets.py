"""``BENCHMARKS.md``'s section on compiling for TPU and GPU targets, from ``results/target_compile.json``."""

from __future__ import annotations

import statistics
from typing import Any

ROUTES = (
    ("trace", "trace over n CPU devices"),
    ("retargeted", "compile for the target (lowering + the target's compile)"),
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
        "## 5. Compiling for a TPU slice or GPUs without one (`--target`)",
        "",
        "`python -m benchmarks.target_compile` (needs `pip install 'shardscope[tpu,gpu]'`; writes "
        "`benchmarks/results/target_compile.json`; not part of `make bench`, run alone). demos/train_step.py's "
        "`step` (a `shard_map` over `batch`, 4 micro-batches in a `lax.scan`, 8 examples per device) with its "
        f"mesh over n devices; medians of {result['rounds_per_case']} rounds (min-max), a new `jax.jit` each "
        "round, the routes interleaved. jax "
        f"{versions.get('jax', '?')}, libtpu {result['libtpu']}, jax-cuda12-plugin {result.get('cuda_plugin', '-')}; "
        f"1-minute load average {load['start']:.1f} -> "
        f"{load['end']:.1f} on this machine's 2 shared cores.",
        "",
        "| target | devices | " + " | ".join(label for _, label in ROUTES) + " |",
        "|---|---:|" + "---:|" * len(ROUTES),
    ]
    for case in result["cases"]:
        cells = " | ".join(_cell(case["rounds"][key]) for key, _ in ROUTES)
        target = case.get("target") or f"tpu:{case['topology']}"
        out.append(f"| {target} | {case['devices']} | {cells} |")
    out += [
        "",
        "`shardscope report/check --target` takes the trace it already made for the CPU and compiles it for the "
        "target (`compile for the target`): nothing is traced again, and nothing runs there.",
        "",
        "Install size of the GPU compiler (`pip install 'shardscope[gpu]'`: jax-cuda12-plugin and jax-cuda12-pjrt "
        "of the installed jax, no CUDA libraries): about 290 MB to download, 478 MB installed with jax 0.10.2 "
        "(jax_plugins/xla_cuda12 458 MB, jax_cuda12_plugin 20 MB; 488 MB with jax 0.12.0.1).",
        "",
    ]
    return out
