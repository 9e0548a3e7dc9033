"""Benchmark 9's section of ``BENCHMARKS.md``: the step estimate against measured time, per chip
(``results/step_estimate.json`` from this machine's CPU, ``results/step_estimate_<chip>.json``
from a real chip; ``python -m benchmarks.step_estimate``, run alone)."""

from __future__ import annotations

from typing import Any

CHIPS_WITH_FIGURES = ("v4", "v5e", "v5p", "v6e", "a100", "h100", "h200", "b200")
"""The chips shardscope estimates for (:mod:`shardscope.costmodel.chips`)."""


def step_estimate_section(results: dict[str, dict[str, Any]]) -> list[str]:
    """One table per chip measured (the CPU first), then the chips nobody measured."""
    if not results:
        return []
    out = [
        "## 9. The step estimate against measured time",
        "",
        "`python -m benchmarks.step_estimate` (run alone; on a TPU VM it times the chip: `PYTHONPATH=<checkout> "
        "python -m benchmarks.step_estimate`). Per program, the median of the timed calls against shardscope's "
        "estimate: a roofline per instruction of the compiled module (its flops at the chip's peak for their "
        "dtype, its bytes at the memory bandwidth, the longer of the two), loops counted, plus the chip's "
        "per-call and per-iteration overheads; and XLA's own `optimal_seconds` where the backend has a cost "
        "analysis (it counts a loop body once). On the CPU the peaks are the ones `shardscope calibrate` "
        "measures on this machine (in the same run); on a TPU the chip's published ones. The CPU's bandwidth is "
        "a stream through main memory: a program whose arrays stay in the CPU's caches (the scan's carry) runs "
        "faster than its estimate, and this machine's cores are shared with other work.",
        "",
    ]
    for name in sorted(results, key=lambda n: (n != "step_estimate", n)):
        out += _chip_table(results[name])
    measured = {r["chip"]["name"] for r in results.values()}
    unchecked = [chip for chip in CHIPS_WITH_FIGURES if chip not in measured]
    if unchecked:
        out += [f"The estimate is unchecked on {', '.join(unchecked)}: no measurement of those chips here.", ""]
    return out


def _chip_table(result: dict[str, Any]) -> list[str]:
    chip = result["chip"]
    load = result["load_average"]
    where = (f"1-minute load average {load['start']:.1f} -> {load['end']:.1f}" if result["backend"] == "cpu"
             else "timed on the chip's own host (`--measured`: estimated here from the modules it compiled)")
    peaks = ", ".join(f"{dtype} {flops / 1e12:.3g} TFLOP/s" for dtype, flops in chip["peak_flops"].items()
                      if dtype != "default")
    out = [
        f"### {chip['name']} ({result['device_kind']}, jax {result['jax']})",
        "",
        f"Peaks: {peaks}; memory {chip['memory_bandwidth_Bps'] / 1e9:.3g} GB/s; "
        f"{chip['call_overhead_s'] * 1e6:.3g} us per call, {chip['iteration_overhead_s'] * 1e6:.3g} us per loop "
        f"iteration ({chip['sources'].get('overheads', '')}). Medians of {result['repeats']} calls; {where}.",
        "",
        "| program | measured, median (min-max) | estimate | compute | memory | overheads | measured / estimate "
        "| XLA's optimal_seconds |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        m = row["measured_s"]
        xla = "-" if row["xla_optimal_s"] is None else _ms(row["xla_optimal_s"])
        out.append(f"| {row['words']} | {_ms(m['median'])} ({_ms(m['min'])}-{_ms(m['max'])}) | {_ms(row['estimate_s'])} "
                   f"| {_ms(row['compute_s'])} | {_ms(row['memory_s'])} | {_ms(row['overhead_s'])} | "
                   f"{row['ratio']:.2f}x | {xla} |")
    return out + [""]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def corpus_section() -> list[str]:
    """Section 10: every program of the stored TPU corpus, measured over estimated, both ways."""
    from benchmarks.tpu_corpus_report import CORPORA, replay, stored_summary
    from benchmarks.tpu_corpus_report import markdown as corpus_table

    out = [
        "## 10. The step estimate against a real TPU v5e chip, program by program",
        "",
        "`benchmarks/tpu_corpus.py` (jax and numpy only) compiled each program on a real TPU v5e chip (the jax of the device machine), "
        "kept `compiled.as_text()`, and timed it waited on (each call blocked on, median of 20) and back to back "
        "(20 calls dispatched, one wait, per-call median over 5 rounds). `tests/fixtures/tpu_corpus/` stores the "
        "modules and times; `python -m benchmarks.tpu_corpus_report` replays every estimate "
        "(`shardscope.estimate_module(text, \"v5e\")`) without a chip, and `tests/test_tpu_corpus.py` fails when "
        "one leaves its band. Programs named `h_...` were measured after the model's rules were written and held "
        "out of its tuning (two rules came after seeing them: a fused operand sliced in a nested fusion reads its "
        "slices, and the scatter rate, the fastest measured). A second run of two programs agreed within 2%.",
        "",
    ]
    for chip in CORPORA:
        checks = replay(chip)
        found = stored_summary(chip, checks)
        low, high = found["band"]  # type: ignore[misc]
        out += [f"| chip | programs | covered by the model | within {low}-{high}x both ways | lower bounds | "
                "lower bounds held | held out |", "|---|---:|---:|---:|---:|---:|---:|",
                f"| {chip} | {found['programs']} | {found['covered']} | {found['within']} | {found['lower_bounds']} | "
                f"{found['bounds_held']} | {found['held_out']} |", "", corpus_table(checks), ""]
    out += ["Out of band, by kind: small programs (under ~1 ms back to back: a small transformer block, a 1x1 "
            "convolution, one-hot MoE) run faster back to back than the per-instruction sum, as the chip overlaps "
            "one instruction's memory with another's compute; a softmax over a large f32 array (XLA:TPU's "
            "reduction broadcast back along its axis, a `reduce-window`) takes about half as long again as its "
            "memory time; convolutions with 64 input features fill half of the 128-wide matrix unit (up to twice "
            "the estimate); an embedding gather from a table too large for on-chip memory reads its rows at about "
            "half the bandwidth.", ""]
    return out
