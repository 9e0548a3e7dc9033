"""Benchmark 5's section of ``BENCHMARKS.md``: what ``check --what-if``'s rewrites buy, from
``results/what_if_gain.json`` (``python -m benchmarks.what_if_gain``, run alone)."""

from __future__ import annotations

from typing import Any

from shardscope.costmodel.interconnects import format_seconds


def what_if_section(result: dict[str, Any] | None) -> list[str]:
    """The section: how it was measured, one table row per rewrite, and what the rows say."""
    if not result:
        return []
    load = result["load_average"]
    out = [
        "## 6. What the what-if rewrite buys (`check --what-if`)",
        "",
        "`python -m benchmarks.what_if_gain` (writes `benchmarks/results/what_if_gain.json`; not part of `make bench`, "
        f"run alone; {result['cpu_devices']} simulated CPU devices; 1-minute load average {load['start']:.1f} -> "
        f"{load['end']:.1f} on this machine's 2 cores while it ran). Each program is inspected as `check` inspects it, "
        "its flagged findings rewritten and checked (compiled plan and outputs), then the original and the verified "
        "rewrite are timed interleaved on the same placed arguments: warm-up, then the rounds listed, the order "
        "rotating each round. The speedup is the median of the per-round ratios (original over rewrite), the range "
        "their interquartile range; a range that contains 1 is no measurable difference. Run times are medians. "
        f"The projection puts both compiled plans' collectives on a ring of {result['devices']} devices over "
        f"`{result['preset']}` (communication only, the analysed per-device program). The same numbers for one "
        "program: `shardscope check FILE --function NAME --what-if --repeats N --project "
        f"{result['preset']}:{result['devices']}`.",
        "",
        "| program | status | compiled runs/call | bytes/call | temporaries/device | run median, ms | speedup (IQR), rounds "
        f"| projected communication/call ({result['preset']}, {result['devices']} devices) |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    for case in result["cases"]:
        for r in case["rewrites"]:
            out.append(_row(case, r))
    out += ["", *_notes(result), ""]
    out += _hand_fix_table(result)
    return out


def _hand_fix_table(result: dict[str, Any]) -> list[str]:
    """The verified rewrites timed again beside the fix a user writes, the three interleaved."""
    rows = [(case, r) for case in result["cases"] for r in case["rewrites"] if r.get("hand_fix")]
    if not rows:
        return []
    out = ["Against the fix a user writes (`step_fixed`; for the transformer's `shard_map` step the same cast "
           "before the scan and `psum` after it, written in `benchmarks/what_if_gain.py`): original, rewrite and "
           "hand fix timed again, the three interleaved.",
           "",
           "| program | run median, ms: original / rewrite / hand fix | hand fix over original | rewrite over hand fix "
           "| largest output difference, rewrite vs hand fix | temporaries/device: rewrite, hand fix |",
           "|---|---:|---|---|---:|---:|"]
    readings: list[str] = []
    for case, r in rows:
        h = r["hand_fix"]
        out_sentence = _reading(case, r)
        ms = h["run_ms"]
        out.append(f"| `{case['file']}` `{case['function']}` | {ms['original']:.2f} / {ms['rewrite']:.2f} / "
                   f"{ms['hand']:.2f} | {_ratio(h['hand_over_original'])} | {_ratio(h['rewrite_over_hand'])} | "
                   f"{h['max_abs_diff_rewrite_vs_hand']:.1e} | {r['temp_bytes'][1]:,} B, {h['hand_temp_bytes']:,} B |")
        readings.append(out_sentence)
    return out + [""] + [f"- {sentence}" for sentence in readings] + [""]


def _reading(case: dict[str, Any], r: dict[str, Any]) -> str:
    """What one program's rows say, in words chosen from the verdicts (no figures of its own)."""
    h = r["hand_fix"]
    same = h["rewrite_over_hand"]["verdict"] == "no measurable difference"
    gain = h["hand_over_original"]["verdict"]
    head = f"`{case['function']}`: the rewrite is " + ("not told apart from the hand fix" if same else
                                                    f"{h['rewrite_over_hand']['verdict']} than the hand fix")
    if gain == "faster":
        return head + "; both are faster than the original here."
    if gain == "no measurable difference":
        return (head + "; on this CPU neither is told apart from the original (the "
                "all-reduces saved are too small a part of the step's time here to measure); the saving shows in the "
                "projected communication.")
    return head + f"; the hand fix is {gain} than the original here."


def _ratio(s: dict[str, Any]) -> str:
    return f"{s['median']:.2f}x ({s['low']:.2f}-{s['high']:.2f}x), {s['rounds']} rounds: {s['verdict']}"


def _row(case: dict[str, Any], r: dict[str, Any]) -> str:
    name = f"`{case['file']}` `{case['function']}`"
    runs, moved, temp = (_pair(r[k]) for k in ("runs_per_call", "bytes_per_call", "temp_bytes"))
    times = "-" if "run_ms" not in r else f"{r['run_ms'][0]:.2f} -> {r['run_ms'][1]:.2f}"
    s = r.get("speedup")
    speedup = "not timed" if s is None else (
        f"**{s['median']:.2f}x** ({s['low']:.2f}-{s['high']:.2f}x), {s['rounds']}: {s['verdict']}")
    projected = "-"
    if r.get("projected_comm_s") and None not in r["projected_comm_s"]:
        before, after = r["projected_comm_s"]
        projected = f"{format_seconds(before)} -> {format_seconds(after)} ({r['projected_ratio']:.2f}x)"
    return f"| {name} | {r['status']} | {runs} | {moved} | {temp} | {times} | {speedup} | {projected} |"


def _pair(values: list[int | None]) -> str:
    return " -> ".join("?" if v is None else f"{v:,}" for v in values)


def _notes(result: dict[str, Any]) -> list[str]:
    """One line per rewrite: what it moved and why it is (or is not) a saving."""
    return [f"- `{case['function']}`: {r['summary']}." for case in result["cases"] for r in case["rewrites"]]
