"""Benchmark 7's section of ``BENCHMARKS.md``: what ``shardscope check`` costs on a user's
program against JAX's own compile of it (``results/check_cost.json``, ``python -m
benchmarks.check_cost``), and the compiled-plan parse of a module of 100,000 instructions
(``results/compiled_parse.json``, ``python -m benchmarks.compiled_parse``), and a second
``check`` against the first with the compilation cache (``results/compile_cache.json``,
``python -m benchmarks.compile_cache``), and one write to that cache as it fills
(``results/cache_writes.json``, ``python -m benchmarks.cache_writes``); all run alone."""

from __future__ import annotations

from typing import Any, Callable


def check_cost_section(cost: dict[str, Any] | None, parse: dict[str, Any] | None,
                       cache: dict[str, Any] | None = None, writes: dict[str, Any] | None = None) -> list[str]:
    """The section: the two ratios against their targets, then the phases and the parse rows,
    then the second check against the first, then a cache write as the cache fills."""
    if not cost and not parse and not cache and not writes:
        return []
    out = ["## 7. What `check` costs on a user's program, and the compiled-plan parse", ""]
    if cost:
        out += _cost_lines(cost)
    if parse:
        out += _parse_lines(parse)
    if cache:
        out += _cache_lines(cache)
    if writes:
        out += _write_lines(writes)
    return out


def _write_lines(writes: dict[str, Any]) -> list[str]:
    load = writes["load_average"]
    out = [
        "### One write to the compilation cache, as it fills",
        "",
        "`python -m benchmarks.cache_writes` (run alone). A write is JAX's `LRUCache.put` of one "
        f"{writes['entry_bytes'] // 1024} KiB entry into a directory holding that many entries, with JAX's size bound "
        "on (`jax_compilation_cache_max_size`: it reads every entry's size and access time under a lock) and off "
        "(JAX's default, and shardscope's setting); shardscope bounds the cache with one pass over it when a "
        f"command starts, at most once an hour (the trim column). Medians of {writes['rounds']} rounds; 1-minute "
        f"load average {load['start']:.1f} -> {load['end']:.1f}.",
        "",
        "| entries | a write, JAX's bound on | a write, bound off | one trim |",
        "|---:|---:|---:|---:|",
    ]
    for row in writes["rows"]:
        bounded = row["bounded_put_ms"]
        bounded_cell = "- (no filelock: JAX refuses the bound)" if bounded is None else f"{bounded:.1f} ms"
        out.append(f"| {row['entries']:,} | {bounded_cell} | {row['unbounded_put_ms']:.2f} ms | "
                   f"{row['trim_ms']:.1f} ms |")
    return out + [""]


def _cache_lines(cache: dict[str, Any]) -> list[str]:
    commands = ", ".join(f"`{c}`" for c in cache["commands"].values())
    out = [
        "### The compilation cache: a second `check` of the same program",
        "",
        "`python -m benchmarks.compile_cache` (run alone). Each round empties a compilation cache directory "
        f"(`JAX_COMPILATION_CACHE_DIR`), then runs each of {commands} twice in fresh processes: the first compiles and "
        "fills the cache, the second reads the executable back; both print the same report. "
        f"{_rounds(cache)} The other benchmarks run with `SHARDSCOPE_NO_CACHE=1`.",
        "",
    ]
    out += _wall_table(cache, "| program | first `check`, median (min-max) | second `check` | second / first (median "
                              "of per-round ratios; target <= {target}x) | cache entries | cache size |",
                       ("first_wall_s", "second_wall_s"),
                       lambda row: f"{row['entries']} | {row['cache_bytes'] / 1024:,.0f} KiB")
    return out + [""]


def _cost_lines(cost: dict[str, Any]) -> list[str]:
    out = [
        "`python -m benchmarks.check_cost` (run alone; not part of `make bench`). The program is a 12-layer "
        "transformer train step with 4-step gradient accumulation (`benchmarks/transformer_step.py`), in both "
        "styles: jit with shardings (`step_shardings`) and the same under `shard_map` (`step_shard_map`); and a "
        "600-layer residual MLP unrolled by a Python loop (`unrolled_step`, `benchmarks/unrolled_step.py`), whose "
        "600 gradients one combined all-reduce sums, each of them named. Each "
        f"round runs, in fresh processes and alternating, `{_command(cost, 'check')}` and `{_command(cost, 'bare')}` "
        "(JAX alone: import the file, `jax.jit(f).lower(*args).compile()`, `as_text()`), so both wall times hold "
        f"the interpreter's start, JAX's import, the trace and XLA's compile. {_rounds(cost)}",
        "",
    ]
    out += _wall_table(cost, "| program | `check` wall, median (min-max) | bare compile wall | check / bare (median of "
                             "per-round ratios; target <= {target}x) | check peak RSS / bare | compiled collectives | exit |",
                       ("check_wall_s", "bare_wall_s"),
                       lambda row: f"{row['check_rss_mib']['median'] / row['bare_rss_mib']['median']:.2f}x | "
                                   f"{row['compiled_collectives']} | {row['exit_code']}")
    out += ["", "One `check` of each program in one process, phase by phase (seconds):", "",
            "| program | trace | jaxpr view | lower + compile | compiled plan | HLO lines |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, p in cost["phases_s"].items():
        out.append(f"| `{name}` | {p['trace']:.2f} | {p['jaxpr_view']:.2f} | {p['lower_and_compile']:.2f} | "
                   f"{p['compiled_plan']:.2f} | {p['instructions']:,} |")
    return out + [""]


def _parse_lines(parse: dict[str, Any]) -> list[str]:
    target = parse["target_s_at_100k"]
    at = parse["parse_s_at_100k"]
    row = next(r for r in parse["rows"] if r["instructions"] >= 100_000)
    paused = row["parse_collector_paused_s"]["median"]
    out = [
        f"`python -m benchmarks.compiled_parse` (run alone): {parse['model']}, compiled once "
        f"({parse['compile_s']:.1f} s); its text is then scaled by copying its computations until it holds the "
        "instructions listed. Medians of the repeats; the parse is timed with the garbage collector running (a "
        "library call leaves it alone) and paused (the CLI and the app pause it around the call).",
        "",
        f"Parse of the first module of at least 100,000 instructions ({row['instructions']:,}): **{at:.3f} s** with "
        f"the collector running, what a library call (`shardscope.inspect` in a user's test) costs (target < {target} "
        f"s: {'met' if at < target else 'missed'}); **{paused:.3f} s** paused, what `check`, `report` and the app "
        f"pay ({'met' if paused < target else 'missed'}).",
        "",
        "| instructions | parse, collector running | parse, collector paused | compiled plan |",
        "|---:|---:|---:|---:|",
    ]
    for row in parse["rows"]:
        paused = row.get("parse_collector_paused_s")
        plan = row.get("plan_s")
        out.append(f"| {row['instructions']:,} | {row['parse_s']['median']:.3f} s | "
                   f"{'-' if paused is None else format(paused['median'], '.3f') + ' s'} | "
                   f"{'-' if plan is None else format(plan['median'], '.3f') + ' s'} |")
    return out + [""]


def _command(cost: dict[str, Any], kind: str) -> str:
    commands = cost["commands"]
    first = next(iter(commands.values()))
    return first[kind]


def _wall_table(results: dict[str, Any], header: str, walls: tuple[str, str],
                rest: Callable[[dict[str, Any]], str]) -> list[str]:
    """The table of a benchmark run alone: per program, its two wall times (``walls``: the keys of
    its row), the median of their per-round ratios against ``{target}`` in ``header``, and the
    ``rest`` of its cells."""
    target = results["target_ratio"]
    columns = header.count("|") - 1
    lines = [header.format(target=target), "|---" + "|---:" * (columns - 1) + "|"]
    for name, row in results["programs"].items():
        lines.append(f"| `{name}` | {_seconds(row[walls[0]])} | {_seconds(row[walls[1]])} | {_ratio(row, target)} | "
                     f"{rest(row)} |")
    return lines


def _rounds(results: dict[str, Any]) -> str:
    """How many rounds a benchmark run alone timed, and the machine's load while they ran."""
    load = results["load_average"]
    return (f"{results['rounds']} timed rounds after one untimed round; 1-minute load average {load['start']:.1f} -> "
            f"{load['end']:.1f} on this machine's 2 shared cores.")


def _seconds(t: dict[str, float]) -> str:
    """``8.41 s (8.02-9.10)``: the median wall time and its range over the rounds."""
    return f"{t['median']:.2f} s ({t['min']:.2f}-{t['max']:.2f})"


def _ratio(row: dict[str, Any], target: float) -> str:
    """``**0.39x** (met)``: the median of the per-round ratios against the target."""
    return f"**{row['ratio_median']:.2f}x** ({'met' if row['ratio_median'] <= target else 'missed'})"
