"""``BENCHMARKS.md`` from the JSON results: every benchmark's declared section, one renderer.

Each benchmark module declares its section (:class:`benchmarks.harness.Benchmark`: its tables'
columns, units and which way is better, and the sentences around them); this module puts them in
order, with the machine, the summary of the targets and where the misses come from. Every number
in the file comes from the JSON results (run ``python -m benchmarks.render`` to rewrite it from
existing results without measuring again): a figure typed here would not change when the results do.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import QUICK_RESULTS, RESULTS, ROOT
from benchmarks.harness import ARROWS, Benchmark, SummaryRow

SECTIONS = ("plans_at_scale", "tool_cost", "app_start", "scaling", "layouts", "cross_process", "target_compile",
            "target_placements", "what_if_gain", "verdict_stability", "check_cost", "compiled_parse", "compile_cache", "cache_writes",
            "check_at_scale", "check_ratios", "dispatch_steps", "step_estimate", "tpu_corpus_report", "profile_kinds", "hostile_hlo", "layout_anchors")
"""The benchmarks in the order of their sections in ``BENCHMARKS.md``."""


def benchmarks() -> list[Benchmark]:
    """Every benchmark's declaration (``BENCHMARK`` of its module), in the file's order."""
    return [importlib.import_module(f"benchmarks.{name}").BENCHMARK for name in SECTIONS]

def _rows_at_1024(ratios: dict[str, Any] | None, ratio: str, cores: int | None = None) -> str:
    """Section 7c's 1,024-chip rows measured at a named commit (on ``cores`` cores, else each
    named with its cores): each program's ``ratio`` (``ratio_median``: wall, ``cpu_ratio_median``: CPU)."""
    def cores_of(row: dict[str, Any]) -> int:
        return (row.get("machine") or {}).get("nproc", 0)

    rows = [r for r in (ratios or {}).get("rows", {}).values()
            if r.get("commit") and r["chips"] == 1024 and cores in (None, cores_of(r))]
    return ", ".join(f"`{r['program']}` {r[ratio]:.2f}x" + ("" if cores else f" on {cores_of(r)} cores")
                     for r in sorted(rows, key=lambda r: (r["program"], -cores_of(r))))


def _beside_rows(ratios: dict[str, Any] | None) -> str:
    """What section 7c's rows measured since the CPU compiles beside the slice (the rows of that commit on)."""
    walls = _rows_at_1024(ratios, "ratio_median")
    return f" In this run `check` at 1,024 chips took, of JAX's route's wall time: {walls} (section 7c)." if walls else ""


def _ratios_2_cores(ratios: dict[str, Any] | None) -> str:
    """Section 7c's 1,024-chip rows measured on 2 cores with their commit (a9a1e46 on): their CPU time."""
    cpu = _rows_at_1024(ratios, "cpu_ratio_median", cores=2)
    return f" In this run `check` at 1,024 chips on 2 cores took, of JAX's route's CPU time: {cpu} (section 7c)." if cpu else ""


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
    llama_cpu = ""
    if "llama" in scale:
        own = (scale_result or {}).get("phases_cpu_ratio", {}).get("llama")
        phases = f", and its phases in one process {own:.2f}x" if own is not None else ""
        llama_cpu = (f" In this run the Llama-shaped step's `check --target` took {scale['llama']['cpu_ratio_median']:.2f}x "
                     f"the CPU time of JAX's route{phases} (section 7b).")
    return [
        "`shardscope/engine/pytree_paths.py` (5321096): the gradients of one line's values (the layers of a Python "
        "loop) are told apart by the program outputs they reach with the candidates' paths indexed once per line "
        "(`told_apart_by_outputs`); each gradient read every candidate's path again, quadratic in the layers and "
        "most of what `check` added to XLA's compile of a deep unrolled stack under cProfile "
        "(`tests/test_naming_cost.py` counts the paths read)." + unrolled,
        "`shardscope/pipeline/check.py`, `targets/plans.py` (81c6711): with `--target`, each target's compile "
        "comes before the CPU's, while only the trace is held: a slice's compile of a large step is the process's "
        "peak of memory, and the CPU's executable and its parsed module were alive beside it." + llama,
        "`shardscope/pipeline/one_program.py`, `engine/compile_log.py` (b59ca99): with `--target`, `check` compiles "
        "for the CPU in a thread of its own beside the slice's compile, not before it: the CPU's compile, its plan "
        "and its freed memory given back, most of what `check` added to the wall time at 1,024 chips on 13 cores "
        "(a timeline of the command, function by function), now run while the slice's longer compile does. "
        "Both compiles redirect descriptor 2 through one pipe: XLA's log lines name the thread that wrote them, and "
        "the CPU's are those its backend's threads (seen as it starts) and its compiling thread write "
        "(`tests/test_compiles_beside.py`)." + _beside_rows(results.get("check_ratios")),
        "`shardscope/engine/hlo/names.py`, `engine/hlo/compiled.py` (a9a1e46, 4b5060d): reading a plan at 1,024 "
        "devices. A collective's value was followed forward to the outputs it reaches once per collective, each "
        "walk working out again where every instruction on its way sends it; each step is now worked out once per "
        "module (`CollectiveNamer._step`), as the optimizer update that a step's hundreds of collectives all flow "
        "into is. Replica groups of up to a million ids are decoded and named after the mesh's axes once per text "
        "(while its module is read), and a collective-permute's axes are one numpy pass; the plans read are the "
        "same, to the byte (`check --json` of the 1,024-chip `llama_adamw` step before and after)." + _ratios_2_cores(results.get("check_ratios")),
        "`shardscope/render/check.py`, `render/targets.py` (c307a13): `check --json` renders each target plan once. "
        "It rendered each program's plans on the targets, then all of them again for `targets`, and a plan's "
        "verdict, savings and step estimate each costed every collective's replica groups on the target's "
        "interconnect: the Llama-shaped step's plan on 256 chips was costed 8 times (about 190,000 group costs, most "
        "of the JSON's CPU time), now twice (`tests/test_target_json_cost.py` counts them)." + llama_cpu,
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
    for benchmark in benchmarks():
        result = benchmark.load(directory)
        if result is not None:
            found[benchmark.name] = result
    return found


def render(results: dict[str, Any], failures: dict[str, str] | None = None, elapsed_s: float | None = None) -> str:
    """The whole of ``BENCHMARKS.md``."""
    failures = failures or {}
    declared = benchmarks()
    in_make_bench = {b.name: results[b.name] for b in declared if b.in_make_bench and b.name in results}
    out: list[str] = ["# shardscope benchmarks", ""]
    if not in_make_bench:
        return "\n".join(out + ["No results yet: run `make bench`.", ""])
    out += [
        "What the deferred plan buys at scale, and what shardscope itself costs, measured on one "
        "machine. Ratios come from runs taken side by side (interleaved) in one process or one "
        "round; absolute times are context only: this machine has 2 cores shared with other work. "
        f"In the tables' headers, {ARROWS['lower']} marks a column where lower is better and "
        f"{ARROWS['higher']} one where higher is better.",
        "",
    ]
    if any(r["mode"] == "quick" for r in in_make_bench.values()):
        out += ["**Quick mode** (`make bench-quick`): fewer cells and repeats; not the published numbers.", ""]
    out += _machine(next(iter(in_make_bench.values())), in_make_bench, elapsed_s)
    out += _rerun(elapsed_s)
    out += _summary(declared, results)
    for benchmark in declared:
        out += benchmark.lines(results.get(benchmark.name), failures.get(benchmark.name))
    out += _misses(declared, results)
    out += ["## Changes made for these targets", ""]
    out += [f"- {c}" for c in core_changes(results, results.get("check_at_scale"))] + [""]
    return "\n".join(out)


def _summary(declared: list[Benchmark], results: dict[str, Any]) -> list[str]:
    rows: list[SummaryRow] = [row for b in declared if b.summary and b.name in results for row in b.summary(results[b.name])]
    out = ["## Summary", "", "| what | target | measured (median) | verdict |", "|---|---|---|---|"]
    out += [f"| {r.what} | {r.target} | {r.measured} | {r.verdict} |" for r in rows]
    return out + [""]


def _misses(declared: list[Benchmark], results: dict[str, Any]) -> list[str]:
    """Why the missed targets are missed: each benchmark's own account, with this run's numbers."""
    out = ["## Where the misses come from", ""]
    for b in declared:
        if b.misses and b.name in results:
            lines = b.misses(results[b.name])
            out += lines + ([""] if lines and lines[-1] else [])
    if len(out) == 2:
        out += ["Every target above was met in this run.", ""]
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
