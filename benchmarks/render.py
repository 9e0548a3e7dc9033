"""``BENCHMARKS.md`` from the JSON results: tables, a text chart, targets met or missed.

Every number in the file comes from the JSON results (run ``python -m benchmarks.render`` to
rewrite it from existing results without measuring again). The sentences around them say how the
numbers were taken, which changes were made for the targets, and where profiling found the time
of a missed target; they carry no figures of their own, since a figure typed here would not
change when the results do.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import (render_check_cost, render_costs, render_cross, render_dispatches, render_format as fmt,
                        render_plans, render_scale, render_step_estimate, render_targets, render_what_if)
from benchmarks.common import QUICK_RESULTS, RESULTS, ROOT

NAMES = ("plans_at_scale", "tool_cost", "app_start", "scaling", "cross_process")

def core_changes(results: dict[str, Any], scale_result: dict[str, Any] | None = None) -> list[str]:
    """The changes made to shardscope for these targets, each with what this run measured of it
    (``scale_result``: benchmark 4c's, run alone)."""
    scaling, tool = results.get("scaling"), results.get("tool_cost")
    from_jaxpr = ""
    if scaling:
        row = min(scaling["rows"], key=lambda r: abs(r["equations"] - 10_000))
        phase = row.get("phases_s", {}).get("from_jaxpr")
        if phase:
            from_jaxpr = f" In this run `from_jaxpr` takes {phase['median']:.2f} s at {row['equations']:,} equations."
    analysis = ""
    if scaling:
        row = min(scaling["rows"], key=lambda r: abs(r["equations"] - 10_000))
        analysis = (f" In this run the analysis takes {row['analysis_s']:.2f} s at {row['equations']:,} equations "
                    f"(the scaling table).")
    report = ""
    if tool:
        imports = tool.get("top_level_imports_s", {}).get("report", {})
        networkx = ("networkx is among its imports over 10 ms" if any(m.startswith("networkx") for m in imports)
                    else "networkx is not among its imports over 10 ms")
        report = (f" In this run `report` takes {tool['ratios']['report_over_bare']['wall_median']:.2f}x the wall time "
                  f"of bare JAX and {networkx} (`-X importtime`).")
    scale = (scale_result or {}).get("programs", {})
    unrolled = (f" In this run `check` of the unrolled stack took {scale['unrolled']['ratio_median']:.2f}x the wall "
                "time of JAX's route (section 7b)." if "unrolled" in scale else "")
    llama = (f" In this run the Llama-shaped step's `check --target` peaked at {scale['llama']['rss_ratio_median']:.2f}x "
             "the memory of JAX's route (section 7b)." if "llama" in scale else "")
    return [
        "`shardscope/engine/pytree_paths.py` (5321096): the gradients of one line's values (the layers of a Python "
        "loop) are told apart by the program outputs they reach with the candidates' paths indexed once per line "
        "(`told_apart_by_outputs`); each gradient read every candidate's path again, quadratic in the layers and "
        "most of what `check` added to XLA's compile of a deep unrolled stack under cProfile "
        "(`tests/test_naming_cost.py` counts the paths read)." + unrolled,
        "`shardscope/pipeline/check.py`, `targets/plans.py` (81c6711): with `--target`, each target's compile "
        "comes before the CPU's, while only the trace is held: a slice's compile of a large step is the process's "
        "peak of memory, and the CPU's executable and its parsed module were alive beside it." + llama,
        "`shardscope/jaxpr_model.py` (then `program.py`, d20acbe): `_value` caches each dtype's name and item size "
        "(`functools.lru_cache`): `str(np.dtype)` ran for every variable and was a large part of "
        "`from_jaxpr` under cProfile." + from_jaxpr,
        "`shardscope/analysis.py`, `dataflow.py`, `cli.py` (a929234): `PlanResult.graph` is a cached property "
        "and `analyze(..., graphs=False)` leaves it unbuilt; `report` and `diff` pass it and no longer import "
        "networkx. The app still gets its graphs built in its worker (the default)." + report,
        "`shardscope/app/plan_tree.py`, `plans_view.py`, `text_rows.py` (218589c): a key press no longer lays "
        "out the whole screen. Opening a tree node changed the tree's `virtual_size`, a Textual reactive that "
        "asks for a layout of every widget (most of what `n` cost under cProfile); `PlanTree` redeclares it without layout and updates its scrollbars itself (a scrollbar "
        "that appears still lays out). Plan headers have a fixed height (a hint line until `n`), and headers "
        "and details render through `TextRows` (one row per line, cut with an ellipsis) instead of a "
        "`Static` relaid out on every update; the n/N pairing is computed once per analysis.",
        "`shardscope/app/plan_tree.py`, `plans_view.py`, `text_rows.py` (9b15ae5): what a key press redraws is "
        "only what changed. `Tree` caches drawn lines by line number and forgets them all whenever a node is "
        "added, which `n` does in every tree; `PlanTree` keeps them by node (and the node's cursor, hover and "
        "guide state) and only renumbers the mouse meta of a line that moved. Component styles are kept until "
        "the styles change (`Widget` dropped them on every refresh), `Tree._build` looks the view's width up once "
        "instead of once a line, and a gap's collective counts come from running totals (a bisection, not a scan "
        "of every collective of the plan). A header repaints only its changed line; the details line repaints in "
        "the cursor's own frame (`down` painted twice, a frame apart); the n/N pairing is made when the plans "
        "show, not on the first `n`.",
        "`shardscope/app/plan_tree.py`, `plans_view.py` (6e00075, f861189, f236eac): the first `n` or `N` "
        "costs what a later `n` does. When the plans show, the n/N pairing is made and each tree opens the "
        "paths to its collectives of the first and the last step (`PlanTree.open_path`); while the app is "
        "then idle, each tree draws the screenfuls of lines the first `n` and the first `N` scroll into "
        "view, as they will look with the cursor on the collective (`PlanTree.draw_ahead`, one tree per "
        "idle turn), and the trees are frozen out of the cyclic GC with the analysis. The first `n` or `N` "
        "then only moves the cursors, and finds all but the cursor's own line drawn. The plan trees also "
        "draw no scrollbar: Textual redraws a scrollbar whole whenever its tree scrolls, which was about "
        "40% of a key that scrolls all three trees."
        + (f" In this run the lines were drawn ahead {k_drawn:.0f} ms after the analysis arrived (median)."
           if (k_drawn := _first_moves_drawn_ms(results)) is not None else ""),
        "`shardscope/app/plan_tree.py` (7c64804, 0c226cc): a line scrolled into view is not finished again. "
        "Textual's styles cache keeps each widget's finished lines (background, line filters) by row and "
        "drops them whenever the widget scrolls, so every visible line of every tree went through it again "
        "on `n`, even when its node's line was kept. `PlanTree.render_lines` keeps the finished lines by node "
        "instead; they carry no row number in their mouse meta (clicks and hover find the row from the mouse's "
        "position). Scrolling also no longer refreshes the trees' zero-width scrollbars: a refresh of a widget "
        "that is not on screen made the compositor rebuild its map of the whole screen on every `n`.",
        "`shardscope/app/app.py` (5569189): the other tabs' views are imported when the first run ends "
        "(or when the user opens one of them), not in a second thread alongside the first run's import of "
        "JAX, which both held the GIL: the `loading` stage of the first run got shorter (the stage table above).",
        "`shardscope/gc_pause.py` (64ce1c4): the engine reads a traced program with Python's "
        "cyclic garbage collector paused (`from_jaxpr`, `collectives`, `build_graph`, `inspect_traced`, "
        "`PlanResult.from_inspection`). Everything it allocates stays alive, yet the collector's full passes "
        "over every tracked object in the process were 40-45% of the analysis time under cProfile; the "
        "collector resumes when the outermost phase ends." + analysis,
        "`shardscope/jaxpr_model.py` (9d44da6): a variable's `Value` is made once and shared by all its uses "
        "(it was made again at each use), a value's type text is kept once made, and `jax.extend.core` is looked "
        "up once instead of by an import statement on every call.",
        "`shardscope/valueflow.py` (a49172a): a loop body's carry inputs are listed once per block "
        "(`BlockFacts.carries`) instead of once per collective: the deferrable search was quadratic in "
        "the program's size (the `collectives` column of the scaling table).",
    ]


def _first_moves_drawn_ms(results: dict[str, Any]) -> float | None:
    drawn = results.get("app_start", {}).get("keys", {}).get("first_moves_drawn_s")
    return None if drawn is None else drawn["median"] * 1e3


def load(directory: Path) -> dict[str, Any]:
    """The results found in ``directory``, by benchmark name."""
    found = {}
    for name in NAMES:
        path = directory / f"{name}.json"
        if path.is_file():
            found[name] = json.loads(path.read_text())
    layouts = directory / "layouts.json"  # run alone (python -m benchmarks.layouts): a list of cases
    if layouts.is_file():
        found["layouts"] = json.loads(layouts.read_text())
    targets = directory / "target_compile.json"  # run alone (python -m benchmarks.target_compile)
    if targets.is_file():
        found["target_compile"] = json.loads(targets.read_text())
    what_if = directory / "what_if_gain.json"  # run alone (python -m benchmarks.what_if_gain)
    if what_if.is_file():
        found["what_if_gain"] = json.loads(what_if.read_text())
    for alone in ("check_cost", "check_at_scale", "compiled_parse", "compile_cache", "cache_writes", "dispatch_steps"):  # run alone (python -m benchmarks.NAME)
        path = directory / f"{alone}.json"
        if path.is_file():
            found[alone] = json.loads(path.read_text())
    for path in sorted(directory.glob("step_estimate*.json")):  # run alone (python -m benchmarks.step_estimate)
        found[path.stem] = json.loads(path.read_text())  # this machine's CPU, and step_estimate_<chip> from a chip
    return found


def render(results: dict[str, Any], failures: dict[str, str] | None = None, elapsed_s: float | None = None) -> str:
    """The whole of ``BENCHMARKS.md``."""
    failures = failures or {}
    layouts = results.get("layouts")
    target_compile = results.get("target_compile")
    what_if = results.get("what_if_gain")
    check_cost, compiled_parse = results.get("check_cost"), results.get("compiled_parse")
    compile_cache, cache_writes = results.get("compile_cache"), results.get("cache_writes")
    dispatch_steps, check_at_scale = results.get("dispatch_steps"), results.get("check_at_scale")
    step_estimates = {name: r for name, r in results.items() if name.startswith("step_estimate")}
    results = {name: r for name, r in results.items() if name in NAMES}
    any_result = next(iter(results.values()), None)
    out: list[str] = ["# shardscope benchmarks", ""]
    if any_result is None:
        return "\n".join(out + ["No results yet: run `make bench`.", ""])
    quick = any(r["mode"] == "quick" for r in results.values())
    out += [
        "What the deferred plan buys at scale, and what shardscope itself costs, measured on one "
        "machine. Ratios come from runs taken side by side (interleaved) in one process or one "
        "round; absolute times are context only: this machine has 2 cores shared with other work.",
        "",
    ]
    if quick:
        out += ["**Quick mode** (`make bench-quick`): fewer cells and repeats; not the published numbers.", ""]
    out += _machine(any_result, results, elapsed_s)
    out += _rerun(elapsed_s)
    out += _summary(results)
    out += render_plans.plans_section(results.get("plans_at_scale"), failures.get("plans_at_scale"))
    out += render_costs.tool_cost_section(results.get("tool_cost"), failures.get("tool_cost"))
    out += render_costs.app_start_section(results.get("app_start"), failures.get("app_start"))
    out += render_costs.scaling_section(results.get("scaling"), failures.get("scaling"))
    out += _layouts_section(layouts)
    out += render_cross.cross_process_section(results.get("cross_process"), failures.get("cross_process"))
    out += render_targets.target_compile_section(target_compile)
    out += render_what_if.what_if_section(what_if)
    out += render_check_cost.check_cost_section(check_cost, compiled_parse, compile_cache, cache_writes)
    out += render_scale.check_at_scale_section(check_at_scale)
    out += render_dispatches.dispatch_section(dispatch_steps)
    out += render_step_estimate.step_estimate_section(step_estimates)
    out += render_step_estimate.corpus_section()
    out += _misses(results)
    out += ["## Changes made for these targets", ""] + [f"- {c}" for c in core_changes(results, check_at_scale)] + [""]
    return "\n".join(out)


def _layouts_section(cases: list[dict] | None) -> list[str]:
    """FSDP and a 2-D mesh, from ``results/layouts.json`` (``python -m benchmarks.layouts``, run alone)."""
    if not cases:
        return []
    from benchmarks.layouts import markdown

    loads = [c["load_average_1min"] for c in cases]
    out = [
        "## 3. Training layouts: FSDP and a 2-D mesh (naive vs deferred vs reduced)",
        "",
        "`python -m benchmarks.layouts` (writes `benchmarks/results/layouts.json`; not part of `make bench`, "
        f"run alone). 8 simulated CPU devices, 2 chunks per device; 1-minute load average {min(loads):.1f}-"
        f"{max(loads):.1f} on this machine's cores while it ran: the counts and the memory are exact and "
        "deterministic, the times are not worth more than their per-round ratios.",
        "",
        markdown(cases),
        "",
    ]
    out += [f"- {c['demo']}, {c['mesh']}: {c['comparison']}." for c in cases]
    extra = []
    for c in cases:
        naive, deferred = c["plans"].get("naive"), c["plans"].get("deferred")
        if naive and deferred and naive["temp_bytes"]:
            more = deferred["temp_bytes"] - naive["temp_bytes"]
            extra.append(f"{c['demo']} on {c['mesh']}: {abs(more) / 1e3:.0f} kB ({more / naive['temp_bytes']:+.0%}) "
                         f"{'more' if more >= 0 else 'fewer'} temporaries per device in the deferred plan")
    out += [
        "",
        "What the table shows: on the FSDP demo the deferred plan halves the collective runs and bytes per call "
        "(one `all_gather` and one `reduce_scatter` per sharded leaf per call instead of per chunk), and may pay "
        "for it in memory: the whole gathered leaves and their gradient accumulators live on every device for "
        "the entire loop, though XLA's buffer assignment decides how much (" + "; ".join(extra) + "). The reduced "
        "plan is not built for sharded parameters (a gathered leaf already varies over the axis it is reduced "
        "over, and JAX refuses a value that is both varying and reduced), so the FSDP rows list it as "
        "unavailable with that reason; on replicated parameters (mlp.py) it runs as many collectives as "
        "deferred, `unreduced_psum` instead of `psum_invariant`.",
        "",
    ]
    return out


def _machine(result: dict, results: dict, elapsed_s: float | None) -> list[str]:
    m = result["machine"]
    v = m["versions"]
    dates = sorted(r["date"] for r in results.values())
    rows = [
        ("date (UTC)", f"{dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else dates[0]),
        ("CPU", f"{m['cpu']}, nproc {m['nproc']}"),
        ("memory", f"{m['memory_gib']} GiB"),
        ("platform", m["platform"]),
        ("versions", ", ".join(f"{k} {v[k]}" for k in ("python", "jax", "jaxlib", "textual", "numpy", "networkx"))),
    ]
    loads = ", ".join(f"{name} {r['load_average']['start']:.1f} -> {r['load_average']['end']:.1f}"
                      for name, r in results.items() if "load_average" in r)
    if loads:
        rows.append(("1-min load average (start -> end)", loads))
    if elapsed_s is not None:
        rows.append(("whole run", f"{elapsed_s / 60:.1f} min"))
    return ["## Machine", "", "| | |", "|---|---|"] + [f"| {k} | {val} |" for k, val in rows] + [""]


def _rerun(elapsed_s: float | None) -> list[str]:
    took = f" ({elapsed_s / 60:.0f} min in this run)" if elapsed_s else ""
    return [
        "## How to rerun",
        "",
        "```",
        f"make bench          # everything{took}; writes benchmarks/results/*.json and this file",
        "make bench-quick    # a smaller grid; writes benchmarks/results/quick/ (not committed)",
        ".venv/bin/python -m benchmarks.plans_at_scale [--quick]   # one benchmark alone (also tool_cost,",
        "                                                          # app_start, scaling); then:",
        ".venv/bin/python -m benchmarks.render                     # rewrite this file from the JSON",
        ".venv/bin/python -m benchmarks.check_at_scale --smoke     # any benchmark's smallest cell, once: it still",
        "                                                          # runs (tests/test_benchmark_smoke.py runs each)",
        "```",
        "",
        "Each benchmark runs in its own process (the CPU device count is fixed when JAX starts).",
        "",
    ]


def _summary(results: dict) -> list[str]:
    rows = []
    plans = results.get("plans_at_scale")
    if plans:
        cell = fmt.find(plans["cells"], model="linear", M=fmt.CLAIM["M"], chunks_per_device=fmt.CLAIM["chunks"])
        if cell:
            ratios = [c["naive_over_deferred"] for c in [cell, *plans.get("claim_checks", [])]]
            ratio = statistics.median(ratios)
            spread = f" (range {min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} builds)" if len(ratios) > 1 else ""
            rows.append((f"naive/deferred, M=1e6, {fmt.CLAIM['chunks']} chunks/device, 8 devices",
                         f"earlier claim {fmt.CLAIM['ratio']}x", f"{ratio:.2f}x{spread}",
                         fmt.claim_verdict(ratio, min(ratios), max(ratios))))
    tool = results.get("tool_cost")
    if tool:
        r = tool["ratios"]["report_over_bare"]["wall_median"]
        rows.append(("`shardscope report --json` wall time over bare JAX", f"<= {tool['target_ratio']}x",
                     f"{r:.2f}x", fmt.verdict(r <= tool["target_ratio"], r / tool["target_ratio"])))
    app = results.get("app_start")
    if app:
        t = app["targets_s"]
        fp, res = app["first_paint_s"]["median"], app["results_s"]["median"]
        rows.append(("app first paint (demos/linear.py)", f"< {t['first_paint']} s", f"{fp:.2f} s",
                     fmt.verdict(fp < t["first_paint"], fp / t["first_paint"])))
        rows.append(("app first results (demos/linear.py)", f"< {t['results']} s", f"{res:.2f} s",
                     fmt.verdict(res < t["results"], res / t["results"])))
        keys = app["keys"]
        for name, label in (("n", "later `n`"), ("down", "`down`")):
            paint = keys["presses"][name]["paint_s"]
            if paint:
                rows.append((f"key to paint in the Plans tree at {keys['equations']:,} equations: {label}",
                             f"< {t['key'] * 1e3:.0f} ms", f"{paint['median'] * 1e3:.1f} ms",
                             fmt.verdict(paint["median"] < t["key"], paint["median"] / t["key"])))
        first = keys["presses"]["first_n"]["paint_s"]
        if first:
            apps = keys.get("first_n_apps")
            rows.append((f"first `n` there (every tree to the first collective{f'; {apps} fresh apps' if apps else ''})",
                         f"< {t['key'] * 1e3:.0f} ms",
                         f"{first['median'] * 1e3:.0f} ms", fmt.verdict(first["median"] < t["key"], first["median"] / t["key"])))
        first_back = keys["presses"].get("first_N", {}).get("paint_s")
        if first_back:
            rows.append((f"first `N` there (every tree to the last collective; {keys['first_capital_n_apps']} fresh apps)",
                         f"< {t['key'] * 1e3:.0f} ms", f"{first_back['median'] * 1e3:.0f} ms",
                         fmt.verdict(first_back["median"] < t["key"], first_back["median"] / t["key"])))
    scaling = results.get("scaling")
    if scaling:
        row = min(scaling["rows"], key=lambda r: abs(r["equations"] - 10_000))
        rows.append((f"analysis time at {row['equations']:,} equations", f"< {scaling['target_s_at_10k']} s",
                     f"{row['analysis_s']:.2f} s",
                     fmt.verdict(row["analysis_s"] < scaling["target_s_at_10k"], row["analysis_s"] / scaling["target_s_at_10k"])))
        slope = scaling.get("loglog_slope")
        if slope is not None:
            first, last = scaling["rows"][0], scaling["rows"][-1]
            rows.append((f"linear scaling, {first['equations']:,} to {last['equations']:,} equations: "
                         "slope of log time vs log size (wall, CPU)", "1.0",
                         f"{slope:.2f}, {scaling['loglog_slope_cpu']:.2f}",
                         "met" if slope <= 1.15 else f"**missed**: superlinear (slope {slope:.2f})"))
    out = ["## Summary", "", "| what | target | measured (median) | verdict |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return out + [""]


def _misses(results: dict) -> list[str]:
    """Why the missed targets are missed: profiles taken while writing these benchmarks, with this run's numbers."""
    out = ["## Where the misses come from", ""]
    app = results.get("app_start")
    if app:
        k, t = app["keys"], app["targets_s"]["key"]
        presses = k["presses"]
        timed = [name for name in ("first_n", "first_N", "n", "down") if name in presses]
        slow = [name for name in timed if presses[name]["paint_s"] and presses[name]["paint_s"]["median"] >= t]
        spikes = [name for name in timed if presses[name]["gc_pause_s"]["max"] >= t]
        if slow or spikes:
            out += [f"**Keys in the Plans tree** ({k['equations']:,} equations; profiled with pyinstrument and "
                    "cProfile around the Pilot presses):", ""]
        if {"first_n", "first_N", "n"} & set(slow):
            which = " and ".join(label for name, label in (("first_n", "the first `n`"), ("first_N", "the first `N`"),
                                                           ("n", "a later `n`")) if name in slow)
            out.append(
                f"- {which[0].upper() + which[1:]} does little work in shardscope: the path is open and the "
                "lines are drawn ahead (first `n` or `N`) or kept by node (later ones); `PlansView.step_collective` is "
                "a few ms of the press. The rest is Textual repainting the trees it scrolled (each visible line "
                "goes through `StylesCache.render_line`, even the ones kept by node), the headers and details, "
                "through the compositor (`Compositor._render_chops` renders every widget that overlaps the "
                "changed area, containers included). The bare-`Tree` scrolling row is the floor of one tree's "
                f"repaint. Here the first `n` took {presses['first_n']['paint_s']['median'] * 1e3:.0f} ms to "
                f"paint, {presses['first_n']['cpu_s']['median'] * 1e3:.0f} ms CPU: compare the load average "
                "below with the run's.")
        if "down" in slow:
            out.append(
                "- `down` scrolls the tree once the cursor is at the bottom edge, and a scrolled Textual `Tree` "
                "re-renders every visible line: the bare-`Tree` scrolling row is the floor of that.")
        if spikes:
            worst = max(presses[name]["gc_pause_s"]["max"] for name in spikes)
            out.append(
                "- Spikes: Python's cyclic garbage collector. A full (generation 2) collection scans every object "
                "alive"
                + (f" ({k['gc_tracked_objects']:,} still tracked with this analysis on screen, "
                   f"{k.get('gc_frozen_objects', 0):,} frozen)" if "gc_tracked_objects" in k else "")
                + f"; the worst pause during a key here was {worst * 1e3:.0f} ms although the app freezes the "
                "analysis out of the collector (fc7cef5).")
        if slow or spikes:
            out.append("")
        start = app["first_paint_s"]["median"], app["results_s"]["median"]
        if start[0] >= app["targets_s"]["first_paint"] or start[1] >= app["targets_s"]["results"]:
            bare = app.get("bare_textual_first_paint_s", {}).get("median")
            out += [
                "**App start**: before the first paint the process imports Python, Textual and the app and "
                "composes the screen (JAX waits for the worker)"
                + (f"; a bare Textual app paints at {bare:.2f} s in the same rounds" if bare else "")
                + ". After it the worker imports JAX and starts the 8 CPU devices (`loading` to `tracing` in "
                "the stage table), compiles three programs and times 20 rounds of them; all of it shares the GIL "
                "with the UI thread. On a busy machine every part stretches (see the load averages above).",
                "",
            ]
    tool = results.get("tool_cost")
    if tool and tool["ratios"]["report_over_bare"]["wall_median"] > tool["target_ratio"]:
        report_imports = tool.get("top_level_imports_s", {}).get("report", {})
        networkx = report_imports.get("shardscope.engine.jaxpr.dataflow")
        out += [
            "**`shardscope report` over bare JAX** (pyinstrument of the report): beyond JAX's own import, "
            "the extra time is compiling, timing and checking the unchunked reference (the `--with-reference` "
            "row) and shardscope's imports (table above)"
            + (f"; networkx was still imported ({networkx:.2f} s under `-X importtime`)" if networkx else "")
            + ".",
            "",
        ]
    if len(out) == 2:
        out += ["Every target above was met in this run.", ""]
    return out


def save_run(quick: bool, elapsed_s: float, failures: dict[str, str]) -> None:
    """Remember how long the last whole run took and what failed (``run.json``)."""
    directory = QUICK_RESULTS if quick else RESULTS
    (directory / "run.json").write_text(json.dumps({"elapsed_s": elapsed_s, "failures": failures}, indent=1) + "\n")


def write(quick: bool, failures: dict[str, str] | None = None, elapsed_s: float | None = None) -> Path:
    """Render the results of one mode into its ``BENCHMARKS.md`` (the last whole run's time if not given)."""
    directory = QUICK_RESULTS if quick else RESULTS
    run = directory / "run.json"
    if elapsed_s is None and run.is_file():
        saved = json.loads(run.read_text())
        elapsed_s, failures = saved["elapsed_s"], failures or saved["failures"]
    target = directory / "BENCHMARKS.md" if quick else ROOT / "BENCHMARKS.md"
    target.write_text(render(load(directory), failures, elapsed_s))
    return target


if __name__ == "__main__":
    print(write("--quick" in sys.argv[1:]))
