"""Benchmark 4c's section of ``BENCHMARKS.md``: ``shardscope check`` at real scale against JAX's
own route for the same program (``results/check_at_scale.json``, ``python -m
benchmarks.check_at_scale``, run alone), and the phase that costs the difference."""

from __future__ import annotations

from typing import Any

from benchmarks.render_check_cost import _seconds

JAX_ROUTE = {
    "unrolled": ("trace", "cpu_lower_and_compile"),
    "llama": ("trace", "target_lower_and_compile"),
}
"""The phases JAX's own route runs too (the trace, and the one compile it makes): every other
phase of a ``check`` is what shardscope adds."""
PHASES = {
    "trace": "trace",
    "jaxpr_view": "jaxpr view",
    "cpu_lower_and_compile": "CPU lower + compile",
    "cpu_compiled_plan": "CPU compiled plan",
    "target_lower_and_compile": "target lower + compile",
    "target_compiled_plan": "target compiled plan",
}
DESCRIBED = {
    "unrolled": "a residual MLP unrolled by a Python loop to {layers:,} layers (`benchmarks/unrolled_step.py` with "
                "`SHARDSCOPE_UNROLLED_LAYERS={layers}` in the environment of both commands), its gradients under "
                "jit; JAX's route is `jax.jit(f).lower(*args).compile()`",
    "llama": "a Llama-3-8B-shaped FSDP x TP train step ({layers} scanned layers, {micro} micro-batches; "
             "`benchmarks/llama_model.py`) checked for `{target}` over {devices} CPU devices; JAX's route builds the "
             "same step over the slice's compile-only devices and compiles it (`lower().compile()`, as MaxText's "
             "ahead-of-time compile does)",
}


def check_at_scale_section(scale: dict[str, Any] | None) -> list[str]:
    """The section: each program's two wall times and peak memories with their ratios against
    the target, the phases of one check, and which added phase costs the most."""
    if not scale:
        return []
    target, load = scale["target_ratio"], scale["load_average"]
    sizes = {"unrolled": {"layers": scale["unrolled_layers"]},
             "llama": {"layers": scale["llama"]["layers"], "micro": scale["llama"]["micro_batches"],
                       "target": scale["llama"]["target"], "devices": scale["llama"]["devices"]}}
    out = [
        "## 7b. `check` at real scale, against JAX's own route",
        "",
        "`python -m benchmarks.check_at_scale` (run alone; not part of `make bench`). Two programs: "
        + "; and ".join(DESCRIBED[name].format(**sizes[name]) for name in scale["programs"]) + ". "
        f"Each of {scale['rounds']} rounds runs both commands of a program in fresh processes, one after the other, "
        "the order alternating; the ratio is taken round by round (side by side) and its median quoted; peak RSS is "
        "each process's own (`wait4`, as `/usr/bin/time -v` reports it). No compilation cache. 1-minute load average "
        f"{load['start']:.1f} -> {load['end']:.1f} on this machine's 2 shared cores.",
        "",
        "| program | command | `check` wall, median (min-max) | JAX's route | check / JAX (median of per-round "
        f"ratios; target <= {target}x) | peak RSS: check, JAX | check / JAX (target <= {target}x) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in scale["programs"].items():
        ratio, rss = row["ratio_median"], row["rss_ratio_median"]
        out.append(
            f"| `{name}` | `{scale['commands'][name]['check']}` vs `{scale['commands'][name]['bare']}` | "
            f"{_seconds(row['check_wall_s'])} | {_seconds(row['bare_wall_s'])} | "
            f"**{ratio:.2f}x** ({_met(ratio, target)}; rounds {_range(row['ratios'])}) | "
            f"{row['check_rss_mib']['median']:,.0f} MiB, {row['bare_rss_mib']['median']:,.0f} MiB | "
            f"**{rss:.2f}x** ({_met(rss, target)}) |")
    phases = scale.get("phases_s", {})
    if phases:
        shown = [key for key in PHASES if any(key in p for p in phases.values())]
        out += ["", "One `check` of each program in one process, phase by phase (seconds; the collector paused, as "
                "the command runs them):", "",
                "| program | " + " | ".join(PHASES[key] for key in shown) + " |",
                "|---" + "|---:" * len(shown) + "|"]
        for name, p in phases.items():
            out.append(f"| `{name}` | " + " | ".join(f"{p[key]:.2f}" if key in p else "-" for key in shown) + " |")
        out += ["", "What the difference is made of: the phases JAX's route does not run, against the difference "
                "of the median walls (the rest is the spread of XLA's compile between processes on a shared machine):",
                ""]
        out += [_difference(name, p, scale["programs"].get(name)) for name, p in phases.items()]
    return out + [""]


def _difference(name: str, phases: dict[str, float], row: dict[str, Any] | None) -> str:
    """Which phase JAX's route does not run costs ``name``'s check the most, in words."""
    added = {key: seconds for key, seconds in phases.items() if key not in JAX_ROUTE[name]}
    costliest = max(added, key=lambda key: added[key])
    walls = ""
    if row is not None:
        walls = (f" The median walls differ by {row['check_wall_s']['median'] - row['bare_wall_s']['median']:.1f} s; "
                 f"the compile both routes make ({PHASES[JAX_ROUTE[name][1]]}) took {phases[JAX_ROUTE[name][1]]:.1f} s "
                 "in the phase run.")
    return (f"- `{name}`: shardscope's own phases take {sum(added.values()):.2f} s of the check; the costliest is "
            f"the {PHASES[costliest]} ({added[costliest]:.2f} s).{walls}")


def _met(ratio: float, target: float) -> str:
    return "met" if ratio <= target else "missed"


def _range(ratios: list[float]) -> str:
    return f"{min(ratios):.2f}-{max(ratios):.2f}x"
