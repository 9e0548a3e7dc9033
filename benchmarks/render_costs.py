"""Sections 2a-2c of ``BENCHMARKS.md``: what the report, the app and the analysis cost."""

from __future__ import annotations

import os

from benchmarks import render_format as fmt


def tool_cost_section(data: dict | None, failure: str | None) -> list[str]:
    out = ["## 2a. What `shardscope report` costs over bare JAX", ""]
    if data is None:
        return out + [fmt.missing(failure), ""]
    s = data["settings"]
    out += [
        f"`shardscope report demos/linear.py --json` (defaults: {s['devices']} devices, chunk size {s['chunk_size']}, "
        f"{s['chunks_per_device']} chunks/device, {s['repeats']} timed runs after 2 warm-up rounds) against "
        "`benchmarks/bare_linear.py`, a plain JAX script that builds, traces, compiles and times the same two "
        "plans the same way, and against the same script with `--with-reference` (it also compiles, times and "
        "checks against the unchunked VJP, as the report does). Fresh processes, alternated, "
        f"{data['rounds']} rounds after one untimed round; wall time includes Python start and imports; peak "
        "memory is each process's own max RSS (`os.wait4`). Ratios are medians of per-round ratios.",
        "",
        "| command | wall s | peak RSS MiB | CPU s |",
        "|---|---:|---:|---:|",
    ]
    for name, row in data["summary"].items():
        out.append(f"| `{data['commands'][name]}` | {fmt.s_range(row['wall_s'])} | {row['max_rss_mib']['median']:.0f} | "
                   f"{row['cpu_s']['median']:.2f} |")
    r = data["ratios"]
    out += [
        "",
        f"report / bare: wall **{r['report_over_bare']['wall_median']:.2f}x**, peak memory "
        f"{r['report_over_bare']['rss_median']:.2f}x (target <= {data['target_ratio']}x). report / bare with "
        f"reference: wall {r['report_over_bare_with_reference']['wall_median']:.2f}x, memory "
        f"{r['report_over_bare_with_reference']['rss_median']:.2f}x.",
        "",
    ]
    imports = data.get("top_level_imports_s")
    if imports:
        out += ["Top-level imports over 10 ms (`python -X importtime`, one run each; a module imported by "
                "an earlier one is counted there):", "", "| module | report s | bare s |", "|---|---:|---:|"]
        report, bare = imports["report"], imports["bare"]
        for name in sorted(set(report) | set(bare), key=lambda n: -max(report.get(n, 0), bare.get(n, 0))):
            out.append(f"| `{name}` | {fmt.opt(report.get(name))} | {fmt.opt(bare.get(name))} |")
        out += ["", f"Sum: report {sum(report.values()):.2f} s, bare {sum(bare.values()):.2f} s.", ""]
    return out


def app_start_section(data: dict | None, failure: str | None) -> list[str]:
    out = ["## 2b. The explorer: start and key presses", ""]
    if data is None:
        return out + [fmt.missing(failure), ""]
    k = data["keys"]
    out += [
        f"Start: `ShardscopeApp(Settings('demos/linear.py'), profile_startup=True)` run headless through the "
        f"Pilot (`run_test(size={tuple(data['terminal_size'])})`), a fresh process per round, {data['rounds']} "
        "rounds after one untimed. The times are the app's own `--profile-startup` marks, in seconds since "
        "the process started (Python start and imports included). While it waits for them, the benchmark "
        "polls with plain asyncio sleeps: a Pilot pause posts a callback to every widget and forces a screen "
        "update, work that no user causes and that took the GIL from the run's worker (since c3dbbce; runs "
        "before it measured first results about 1 s later for that reason alone).",
        "",
        "| | median s | min s | max s | target |",
        "|---|---:|---:|---:|---:|",
        f"| first paint | {data['first_paint_s']['median']:.2f} | {data['first_paint_s']['min']:.2f} | "
        f"{data['first_paint_s']['max']:.2f} | < {data['targets_s']['first_paint']} s |",
        f"| first results | {data['results_s']['median']:.2f} | {data['results_s']['min']:.2f} | "
        f"{data['results_s']['max']:.2f} | < {data['targets_s']['results']} s |",
    ]
    bare = data.get("bare_textual_first_paint_s")
    if bare:
        out.append(f"| first paint of a bare Textual app (header, tree, footer), alternated with the above | "
                   f"{bare['median']:.2f} | {bare['min']:.2f} | {bare['max']:.2f} | |")
    stages = data.get("stages_s")
    if stages:
        out += ["", "When the analysis worker first reported each stage (median seconds since the process started; "
                "JAX is imported at the start of `loading`, after the first paint):", "",
                "| " + " | ".join(stages) + " | results painted |", "|" + "---:|" * (len(stages) + 1),
                "| " + " | ".join(f"{v['median']:.2f}" for v in stages.values()) + f" | {data['results_s']['median']:.2f} |"]
    out += [
        "",
        f"Keys: `demos/deep.py` at depth {k['depth']} ({k['equations']:,} equations in the naive plan), traced "
        f"with `analyze(measure=False)` ({k['analyze_trace_only_s']:.1f} s), handed to the app as its worker "
        f"does (a `RunFinished` message; on screen {k['show_results_s'] * 1e3:.0f} ms later"
        + (f", the first `n`'s lines drawn ahead {k['first_moves_drawn_s']['median'] * 1e3:.0f} ms after it arrived"
           if k.get("first_moves_drawn_s") else "")
        + "), then Pilot key presses in the Plans tab. **Key to paint** is from the key event to the last screen update it causes "
        "(the app's `_display` is wrapped to timestamp the compositor's updates). `pilot.press` itself only "
        "returns after Textual's idle detection (it sleeps until the process is idle), which puts a floor "
        "under its wall time whatever the key does: the bare Textual `Tree` row shows that floor"
        + (f" ({k['presses']['bare_tree_down']['pilot_press_s']['median'] * 1e3:.0f} ms here)"
           if k["presses"].get("bare_tree_down", {}).get("pilot_press_s") else "") + ".",
        "",
        "The GC column is the time Python's cyclic garbage collector ran during the key (`gc.callbacks`); "
        "the app freezes the analysis out of the collector when it arrives (`gc.freeze()`"
        + (f": {k['gc_frozen_objects']:,} objects frozen here" if k.get("gc_frozen_objects") is not None else "")
        + ").",
        "",
        "| key | key to paint ms (median, min-max) | CPU ms | GC ms (median, max) | `pilot.press` wall ms |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = {
        "first_n": (f"first `n`: every tree's cursor to the first collective (once in each of {k['first_n_apps']} "
                    "fresh apps)" if k.get("first_n_apps") else "first `n`: every tree to the first collective"),
        "first_N": (f"first `N`: every tree's cursor to the last collective (once in each of "
                    f"{k['first_capital_n_apps']} other fresh apps)" if k.get("first_capital_n_apps") else None),
        "n": "later `n`: next collective in every tree",
        "down": f"`down` in the naive tree ({k['tree_nodes_after_first_n']:,} nodes after the first `n`)",
        "bare_tree_down": "`down` in a bare Textual `Tree` of 1,000 leaves, no scrolling (the method's floor)",
        "bare_tree_down_scrolling": "the same, each `down` scrolling the tree by a line",
    }
    for name, label in labels.items():
        press = k["presses"].get(name)
        if press is None or label is None:
            continue
        paint = press["paint_s"]
        shown = (f"{paint['median'] * 1e3:.1f} ({paint['min'] * 1e3:.1f}-{paint['max'] * 1e3:.1f})" if paint
                 else "no repaint")
        out.append(f"| {label} | {shown} | {press['cpu_s']['median'] * 1e3:.1f} | {fmt.gc_ms(press)} | "
                   f"{press['pilot_press_s']['median'] * 1e3:.0f} |")
    load = k.get("load_average")
    if load:
        out += ["", f"The machine's load average when the keys were timed: {load[0]:.1f} (1 min), {load[1]:.1f} "
                f"(5 min), {load[2]:.1f} (15 min), on {os.cpu_count()} cores. Latencies and CPU times grow with "
                "the load: compare rows of one run, not runs at different loads."]
    return out + [""]


def scaling_section(data: dict | None, failure: str | None) -> list[str]:
    out = ["## 2c. Analysis time against program size", ""]
    if data is None:
        return out + [fmt.missing(failure), ""]
    out += [
        f"{data['model']}; about {data['equations_per_layer']} equations per layer. Tracing is timed on its "
        f"own; the analysis is `jaxpr_model.from_jaxpr` -> `dataflow.build_graph` -> `dataflow.collectives` on "
        f"the traced jaxpr (the garbage collector paused, as the pipeline reads a program), median of "
        f"{data['repeats']} repeats, each after its own trace. The ratio is the analysis's CPU time over the "
        f"trace's, both in one process: the figure to compare between runs on a loaded machine"
        + (f" (1-minute load average {data['load_average']['start']:.1f} at the start, "
           f"{data['load_average']['end']:.1f} at the end)" if isinstance(data.get("load_average"), dict) else "")
        + f". The process peaked at {data['peak_rss_mib']:,.0f} MiB resident.",
        "",
        "| equations | depth | trace s | trace CPU s | from_jaxpr s | build_graph s | collectives s | analysis s "
        "| analysis CPU s | analysis / trace (CPU) | us/equation |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    nan = float("nan")
    for r in data["rows"]:
        p = r["phases_s"]
        out.append(f"| {r['equations']:,} | {r['depth']} | {r['trace_s']:.2f} | {r.get('trace_cpu_s', nan):.2f} | "
                   f"{p['from_jaxpr']['median']:.3f} | {p['build_graph']['median']:.3f} | "
                   f"{p['collectives']['median']:.3f} | **{r['analysis_s']:.3f}** | "
                   f"{r.get('analysis_cpu_s', nan):.3f} | **{r.get('ratio', nan):.2f}x** | {r['us_per_equation']:.0f} |")
    out += [""]
    if "loglog_slope" in data:
        out += [f"Slope of log(time) against log(equations), least squares over all sizes: "
                f"{data['loglog_slope']:.2f} wall, {data['loglog_slope_cpu']:.2f} CPU (1.0 is linear). "
                f"Time per equation at the largest size over the smallest: {data['per_equation_growth']:.2f} wall, "
                f"{data['per_equation_growth_cpu']:.2f} CPU. Wall times rise with the machine's load; the CPU "
                "time of this single-threaded work is what an idle machine would show.", ""]
    return out
