"""Benchmark 4b: parsing a large compiled module, and building its compiled plan.

The module is a real one: ``benchmarks/transformer_step.py``'s ``step_shardings`` (a 12-layer
transformer train step with 4-step gradient accumulation
under jit with shardings, params replicated, batch sharded over ``data`` of a 4x2 mesh),
compiled on 8 CPU devices (about 29,000 HLO instructions, one compile of about 6 s). It is
then scaled: its computations are copied with renamed instructions until the text holds at
least 100,000 instructions (the target: the parse under 0.5 s there). Each phase is the median
of a few repeats, ``hlo_text.parse`` and ``compiled.compiled_plan`` timed separately. The engine
leaves the caller's garbage collector alone (a library call must not switch it off), so the
parse is timed both ways, interleaved: with the collector running (what a library call costs)
and inside ``gc_pause.paused()`` (what a caller that owns the process, the CLI or the app, gets
by pausing it around the call).

Run alone: ``python -m benchmarks.compiled_parse [--quick | --smoke]``. Not part of ``make bench``
(the compile alone takes longer than the other quick benchmarks).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from typing import Any, Callable

from benchmarks.common import grid as grid_of, parse_args, peak_rss_mib, stats, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table

TARGET_S_AT_100K = 0.5
FULL = {"repeats": 7, "target_instructions": (100_000, 200_000)}
QUICK = {"repeats": 3, "target_instructions": (100_000,)}
SMOKE = {"repeats": 1, "target_instructions": (2_000,), "layers": "1"}
"""A one-layer transformer (``SHARDSCOPE_TRANSFORMER_LAYERS``, about 1,050 instructions) copied once (the
copying and the parse at 100,000 instructions took 10 of the smoke run's 13 s of CPU there)."""


def main(argv: list[str] | None = None) -> None:
    """Compile the transformer step once, time the parse at each size, write ``compiled_parse.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    grid = grid_of(args, FULL, QUICK, SMOKE)
    if "layers" in grid:  # before the program file is imported
        os.environ.setdefault("SHARDSCOPE_TRANSFORMER_LAYERS", grid["layers"])
    from shardscope.targets.host import ensure_devices

    ensure_devices(8)
    compile_s, text = transformer_module()
    rows = [measure(text, 1, grid["repeats"])]
    base = rows[0]["instructions"]
    for target in grid["target_instructions"]:
        copies = -(-target // base)
        rows.append(measure(scaled(text, copies), copies, grid["repeats"]))
    at_100k = next((r for r in rows if r["instructions"] >= 100_000), rows[-1])
    write_result("compiled_parse", args, {
        "model": model_description(),
        "compile_s": compile_s,
        "target_s_at_100k": TARGET_S_AT_100K,
        "parse_s_at_100k": at_100k["parse_s"]["median"],
        "rows": rows,
        "peak_rss_mib": peak_rss_mib(),
    })


def model_description() -> str:
    """The program's model in words, from the program file's own constants."""
    from benchmarks import transformer_step as t

    return (f"{t.LAYERS}-layer transformer (d={t.WIDTH}, {t.HEADS} heads, ffn {t.FFN}, {t.TOKENS} tokens, batch "
            f"{t.BATCH}), {t.MICRO} micro-batches under jit with shardings, mesh data=4 x model=2 (CPU): "
            "benchmarks/transformer_step.py's step_shardings")


def transformer_module() -> tuple[float, str]:
    """``(compile seconds, compiled text)`` of ``benchmarks/transformer_step.py``'s
    ``step_shardings``, the program benchmark 4a checks (the same model, not a copy of it)."""
    from benchmarks import transformer_step as program  # builds its mesh at import: after ensure_devices

    start = time.perf_counter()
    compiled = program.step_shardings.lower(program.params, program.batches).compile()
    return time.perf_counter() - start, compiled.as_text()


_NAME = re.compile(r"%([\w.\-]+)")


def scaled(text: str, copies: int) -> str:
    """``text`` with every computation repeated ``copies`` times under new names (one ENTRY)."""
    first = re.search(r"^(ENTRY )?%[\w.\-]+ .*\{$", text, re.M).start()
    head, body = text[:first], text[first:]
    parts = [body]
    for n in range(1, copies):
        parts.append(_NAME.sub(lambda m: f"%{m.group(1)}.copy{n}", body.replace("ENTRY %", "%")))
    return head + "\n".join(parts)


def measure(text: str, copies: int, repeats: int) -> dict:
    """Median parse and plan times of ``text``."""
    from shardscope.engine.hlo import compiled
    from shardscope.engine.hlo import text as hlo_text
    from shardscope.pipeline.gc_pause import paused

    module = hlo_text.parse(text)
    parse_s, paused_s, plan_s = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        hlo_text.parse(text)
        parse_s.append(time.perf_counter() - start)
        with paused():
            start = time.perf_counter()
            hlo_text.parse(text)
            paused_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        plan = compiled.compiled_plan(text)
        plan_s.append(time.perf_counter() - start)
    return {
        "copies": copies,
        "instructions": module.instruction_count,
        "characters": len(text),
        "collectives": len(plan.collectives),
        "parse_s": stats(parse_s),
        "parse_collector_paused_s": stats(paused_s),
        "plan_s": stats(plan_s),
        "parse_us_per_instruction": statistics.median(parse_s) / module.instruction_count * 1e6,
    }


def _described(parse: dict[str, Any]) -> list[str]:
    target, at = parse["target_s_at_100k"], parse["parse_s_at_100k"]
    row = next((r for r in parse["rows"] if r["instructions"] >= 100_000), parse["rows"][-1])  # smoke: the largest
    which = ("the first module of at least 100,000 instructions" if row["instructions"] >= 100_000
             else "the largest module, under 100,000 instructions")
    paused = row["parse_collector_paused_s"]["median"]
    return [
        f"`python -m benchmarks.compiled_parse` (run alone): {parse['model']}, compiled once "
        f"({parse['compile_s']:.1f} s); its text is then scaled by copying its computations until it holds the "
        "instructions listed. Medians of the repeats; the parse is timed with the garbage collector running (a "
        "library call leaves it alone) and paused (the CLI and the app pause it around the call).",
        "",
        f"Parse of {which} ({row['instructions']:,}): **{at:.3f} s** with "
        f"the collector running, what a library call (`shardscope.inspect` in a user's test) costs (target < {target} "
        f"s: {'met' if at < target else 'missed'}); **{paused:.3f} s** paused, what `check`, `report` and the app "
        f"pay ({'met' if paused < target else 'missed'}).",
    ]


def _median(key: str) -> Callable[[dict], float | None]:
    return lambda row: None if row.get(key) is None else row[key]["median"]


BENCHMARK = Benchmark(
    name="compiled_parse",
    heading="The compiled-plan parse of a large module",
    level=3,
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("instructions", lambda r: r["instructions"], digits=None),
                Column("parse, collector running", _median("parse_s"), unit="s", digits=3, better="lower"),
                Column("parse, collector paused", _median("parse_collector_paused_s"), unit="s", digits=3,
                       better="lower"),
                Column("compiled plan", _median("plan_s"), unit="s", digits=3, better="lower"),
            ),
            rows=lambda parse: parse["rows"],
        ),
    ),
)


if __name__ == "__main__":
    main()
