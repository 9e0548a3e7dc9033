"""The step estimate against a real TPU v5e chip, replayed without one.

``tests/fixtures/tpu_corpus/v5e_run*.jsonl.gz`` hold, per program, the module the chip compiled
(``compiled.as_text()``) and its measured time per call, waited on and back to back
(``benchmarks/tpu_corpus.py`` on the chip; the programs whose name starts with ``h_`` were
measured after the model's rules were written and held out of its tuning). Run 4's
``v5e_run4_profile.json.gz`` keeps each of its instructions' time under ``jax.profiler``. The
expected side of every comparison is the chip's measurement, never shardscope's output.

Each program whose instructions the model covers must stay within 0.8-1.25x of its measured
time both ways, except the programs ``checked.json`` lists as out of band (named there, and
each one here: a program that leaves its band, or one that comes back into it, fails until the
summary is rewritten with ``python -m benchmarks.tpu_corpus_report --write``). A program with
instructions the model cannot time is a lower bound, and its measured time must be at least the
estimate.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Iterator, Mapping
from math import prod

import pytest

from benchmarks.tpu_corpus_report import CORPUS, corpus_files, replay, stored_summary
from shardscope.hardware.checked import CHECKED_FILE, checked_summaries
from shardscope.hardware.catalogue import chip_of
from shardscope.costmodel.corpus import BAND, Check, load, read_lines

STORED = json.loads(CHECKED_FILE.read_text())["v5e"]
PROGRAMS = {program.name: program for program in load(corpus_files("v5e"))}
"""The stored programs by name, read (not estimated): what the tests are parametrized by."""


class _Replayed(Mapping[str, Check]):
    """Each stored program's check (its estimate against its measurement), by name, replayed on
    first use: every xdist worker collects this module, and the replay (2.6 s of CPU) is paid
    only by the one that runs its tests."""

    @functools.cached_property
    def _checks(self) -> dict[str, Check]:
        return {c.program.name: c for c in replay("v5e")}

    def __getitem__(self, name: str) -> Check:
        return self._checks[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._checks)

    def __len__(self) -> int:
        return len(self._checks)


CHECKS = _Replayed()
MISSES = set(STORED["misses"])


def test_the_corpus_holds_at_least_25_programs_of_the_kinds_users_run():
    rows = [json.loads(line) for path in corpus_files("v5e") for line in read_lines(path)]
    header = next(row["header"] for row in rows if "header" in row)
    assert header["device_kind"] == "TPU v5 lite" and header["platform"] == "tpu"
    assert len(CHECKS) >= 25
    assert sorted(CHECKS) == sorted(PROGRAMS)  # every stored program is estimated: the tests' names are all of them
    kinds = {c.program.kind for c in CHECKS.values()}
    assert {"transformer", "attention", "mlp", "conv", "gather", "scatter", "vocab", "norm", "optimizer", "moe",
            "sort", "topk", "rng", "loop", "precision", "int8", "decode", "clip", "scan-op", "overhead"} <= kinds
    assert sum(c.program.held_out for c in CHECKS.values()) >= 20


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_program_stays_in_its_band_or_is_a_lower_bound_that_holds(name):
    check = CHECKS[name]
    low, high = BAND
    ratios = (check.program.waited_s / check.estimate.seconds,
              check.program.dispatched_s / check.estimate.dispatched_seconds)
    if check.estimate.lower_bound:
        assert check.estimate.unmodelled, "a lower bound names what it does not model"
        assert all(r >= low for r in ratios), f"{name}: a lower bound above the measured time: {ratios}"
        return
    within = all(low <= r <= high for r in ratios)
    assert within == (name not in MISSES), f"{name}: measured/estimate {ratios[0]:.2f}x waited, {ratios[1]:.2f}x " \
                                           f"back to back; checked.json says {'out of' if name in MISSES else 'in'} band"


def _rounded(value: object) -> object:
    """``value`` with every float rounded to 12 significant digits (Python 3.12's ``sum`` of floats
    is compensated: the last digits of a ratio differ between the two JAX environments)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def test_the_stored_summary_is_what_the_corpus_gives_and_every_v5e_estimate_says_it():
    assert _rounded(stored_summary("v5e", list(CHECKS.values()))) == _rounded(STORED)
    assert checked_summaries()["v5e"] == STORED
    words = chip_of("TPU v5 lite").checked
    covered = sum(not c.estimate.lower_bound for c in CHECKS.values())
    within = sum(c.holds for c in CHECKS.values() if not c.estimate.lower_bound)
    assert f"{within} of {covered} programs it covers within 0.8-1.25x" in words
    assert words.startswith("checked on a v5e chip")
    assert chip_of("TPU v5").checked == ""  # v5p: no chip measured


def test_sorts_top_k_and_unknown_trip_counts_are_lower_bounds_that_name_them():
    assert CHECKS["sort_16m"].estimate.unmodelled == (("sort", 1),)
    assert CHECKS["topk_vocab"].estimate.unmodelled == (("top-k", 1),)
    assert CHECKS["while_unknown_trips"].estimate.unmodelled == (("while loop of unknown trip count", 1),)
    line = CHECKS["sort_16m"].estimate.line()
    assert re.search(r"step estimate at least ~[\d.]+ \w+ per call waited on, ~[\d.]+ \w+ back to back", line)
    assert "a lower bound: 1 sort not modelled" in line


def test_f32_matmuls_take_one_three_and_six_bf16_passes_by_precision_as_measured():
    """4096^3 f32 at DEFAULT, HIGH, HIGHEST: the measured back-to-back times grow ~1:3:6."""
    measured = [CHECKS[f"matmul_f32_{p}"].program.dispatched_s for p in ("default", "high", "highest")]
    assert 2.5 < measured[1] / measured[0] < 3.5 and 5 < measured[2] / measured[0] < 7
    compute = [CHECKS[f"matmul_f32_{p}"].estimate.compute_s for p in ("default", "high", "highest")]
    flops = 2 * 4096**3
    assert compute == pytest.approx([flops / 197e12, 3 * flops / 197e12, 6 * flops / 197e12], rel=1e-9)


def test_every_program_out_of_its_band_says_why():
    assert set(STORED["why_out_of_band"]) == MISSES
    assert all(why != "unexplained" for why in STORED["why_out_of_band"].values())


GATHERS = sorted(name for name, program in PROGRAMS.items() if program.kind == "gather")


def test_gathers_of_every_width_table_and_form_are_in_their_band_held_out_ones_too():
    """Rows of 128 to 8,192 elements from tables in HBM and on the chip, f32 and bf16, take_along_axis,
    gathers fused with elementwise work: the rates were fitted on the programs not named ``h_``."""
    held_out = [name for name in GATHERS if CHECKS[name].program.held_out]
    assert len(GATHERS) >= 25 and len(held_out) >= 8
    assert all(CHECKS[name].holds and not CHECKS[name].estimate.lower_bound for name in GATHERS)


def _profiled() -> dict[tuple[str, str], float]:
    """Each run-4 instruction's self time per run on the chip (jax.profiler)."""
    rows = json.loads(gzip.decompress((CORPUS / "v5e_run4_profile.json.gz").read_bytes()))
    return {(row["program"], row["instruction"]): row["measured_s"] for row in rows}


def _rows_and_pieces(hlo: str) -> tuple[int, int, int, bool]:
    """From the module text alone: the gather's indices, its 128-element pieces, its bytes written,
    and whether its table is a parameter in HBM (no ``S(1)`` in the gather's operand's layout)."""
    gather = re.search(r"= (\w+)\[([\d,]*)\]\{[^}]*\} gather\(%(\S+), .*slice_sizes=\{([\d,]+)\}", hlo)
    assert gather is not None
    out = [int(d) for d in gather.group(2).split(",") if d]
    sizes = [int(d) for d in gather.group(4).split(",")]
    table = re.search(rf"%{re.escape(gather.group(3))} = \w+\[[\d,]*\]\{{([^}}]*)\}} parameter", hlo)
    rows = prod(out) // prod(sizes)
    root = re.search(r"%gather_fusion = \w+\[[\d,]*\]\{([^}]*)\}", hlo)
    written = 0 if root is None or "S(1)" in root.group(1) else prod(out) * {"bf16": 2, "f32": 4}[gather.group(1)]
    return rows, rows * -(-sizes[-1] // 128), written, table is not None and "S(1)" not in table.group(1)


@pytest.mark.parametrize("name", [n for n in GATHERS if n.startswith(("gather_rows", "h_gather_rows"))])
def test_a_row_gathers_measured_time_is_its_rows_and_pieces_at_the_stated_rates(name):
    """The chip's time for the gather fusion (its profile) against 8.4 ns a row + 1.12 ns a
    128-element piece + its writes at 0.85 x 819 GB/s, counted here from the module's text: within
    10% on each fitted program, 10% on each held-out one."""
    rows, pieces, written, in_hbm = _rows_and_pieces(CHECKS[name].program.hlo)
    assert in_hbm
    rule = rows * 8.4e-9 + pieces * 1.12e-9 + written / (819e9 * 0.85)
    measured = _profiled()[(name, "gather_fusion")]
    assert 0.9 <= measured / rule <= 1.1, f"{name}: measured {measured * 1e6:.1f} us, rule {rule * 1e6:.1f} us"


DEPTHWISE = """HloModule depthwise, entry_computation_layout={(bf16[8,32,32,128]{3,2,1,0}, bf16[3,3,1,128]{3,2,1,0})->bf16[8,32,32,128]{3,2,1,0}}

ENTRY %main (x: bf16[8,32,32,128], w: bf16[3,3,1,128]) -> bf16[8,32,32,128] {
  %x = bf16[8,32,32,128]{3,2,1,0} parameter(0)
  %w = bf16[3,3,1,128]{3,2,1,0} parameter(1)
  ROOT %conv = bf16[8,32,32,128]{3,2,1,0} convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=128
}
"""


def _ratios(names: list[str]) -> list[float]:
    """Each program's measured time over its estimate, waited on and back to back (the fixture's times)."""
    return [r for name in names for r in (CHECKS[name].program.waited_s / CHECKS[name].estimate.seconds,
                                          CHECKS[name].program.dispatched_s / CHECKS[name].estimate.dispatched_seconds)]


def test_a_depthwise_convolution_says_the_estimate_may_be_off_by_what_the_corpus_measured():
    from shardscope import estimate_module
    low, high = min(_ratios(["depthwise_conv"])), max(_ratios(["depthwise_conv"]))
    estimate = estimate_module(DEPTHWISE, "v5e")
    assert (f"may be off: 1 grouped convolution (feature_group_count > 1), measured at {low:.2f}-{high:.2f}x the "
            f"estimate on v5e across 1 corpus program, 1 of them out of band") in estimate.line()
    assert estimate.to_json()["outside_band"] == [
        {"kind": "grouped convolution", "count": 1, "measured": [pytest.approx(low), pytest.approx(high)],
         "programs": 1, "out_of_band": 1}]
    unchecked = estimate_module(DEPTHWISE, "v5p")  # no corpus measured on v5p: nothing said
    assert unchecked.outside_band == () and "may be off" not in unchecked.line()


def test_in_band_programs_are_not_flagged_but_those_of_many_arrays_or_a_cumsum_over_outer_dimensions():
    """Every program out of its band holds a flagged kind; of those in band, only the calls of 60 to
    960 arrays and the one cumsum over an outer dimension that ran at its estimate."""
    flagged = {name for name, c in CHECKS.items() if c.outside_band}
    assert MISSES <= flagged
    in_band = flagged - MISSES
    assert in_band == {"h_cumsum_bf16_axis0", "clip_norm_30_d1024", "clip_norm_480_d256", "clip_norm_120_d128",
                       "h_clip_norm_240_d384", "args_in_480", "args_out_480", "args_inout_120"}
    assert dict(CHECKS["h_cumsum_bf16_axis0"].outside_band) == {"prefix sum": 1}
    assert dict(CHECKS["clip_norm_480_d256"].outside_band) == {"many arrays": 960}
    assert CHECKS["conv3x3_fwd"].estimate.outside_band == ()
    assert "may be off" not in CHECKS["conv3x3_fwd"].estimate.line()
    assert STORED["outside_band"]["prefix sum"]["programs"] == 6 and STORED["outside_band"]["prefix sum"]["out_of_band"] == 5


ON_CHIP_DECODES = ["decode_gqa_b8_s4096_l8", "decode_gqa_b32_s2048_l8", "h_decode_gqa_b16_s4096_l6"]
MANY_ARRAYS = ["clip_norm_120_d512", "clip_norm_30_d1024", "clip_norm_480_d256", "clip_norm_120_d128",
               "h_clip_norm_240_d384", "global_norm_120_d512", "args_in_480", "args_out_480", "args_inout_120",
               "args_inout_30"]


@pytest.mark.parametrize("kind, names", [
    ("grouped convolution", ["depthwise_conv"]),
    ("strided convolution", ["conv_stride2_1x1", "h_conv_stride2_3x3_fwd"]),
    ("narrow convolution", ["h_conv5x5_grad", "h_conv_stride2_3x3_fwd"]),
    ("prefix sum", ["cumsum_f32", "cumsum_f32_axis0", "cumsum_bf16_axis1", "h_cumsum_bf16_axis0",
                    "cumsum_f32_rows_256x65536", "h_cumsum_f32_rows_2048x2048"]),
    ("on-chip update", ON_CHIP_DECODES),
    ("many arrays", MANY_ARRAYS),
])
def test_each_kinds_range_is_the_measured_over_estimated_ratios_of_the_programs_holding_it(kind, names):
    assert {name for name, c in CHECKS.items() if kind in dict(c.outside_band)} == set(names)
    stored = STORED["outside_band"][kind]
    assert stored["measured"] == [pytest.approx(min(_ratios(names))), pytest.approx(max(_ratios(names)))]
    assert stored["programs"] == len(names) and stored["out_of_band"] == len(set(names) & MISSES)


def _on_chip_updates(name: str) -> list[int]:
    """The bytes of each bf16 dynamic-update-slice laid out in S(1), read from the module text."""
    found = re.findall(r"= bf16\[([\d,]+)\]\{[^}]*S\(1\)\} dynamic-update-slice\(", CHECKS[name].program.hlo)
    return [prod(int(d) for d in dims.split(",")) * 2 for dims in found]


def test_the_decode_steps_flagged_keep_their_kv_cache_on_the_chip_and_the_others_do_not():
    """Each flagged decode step updates a cache slice of 32 MiB or more in S(1); the two decode
    steps in band (a cache too large to keep on the chip) update none of 16 MiB or more there."""
    for name in ON_CHIP_DECODES:
        assert max(_on_chip_updates(name)) >= 32 * 2**20
    for name in ("decode_mha_b8_s4096_l4", "decode_gqa_b8_s8192_l4_d4096"):
        assert not [b for b in _on_chip_updates(name) if b >= 16 * 2**20] and CHECKS[name].holds


def _run5_profile() -> dict:
    """Run 5's profiled programs: each instruction's time per run and each module's time per call."""
    return json.loads(gzip.decompress((CORPUS / "v5e_run5_profile.json.gz").read_bytes()))


@pytest.mark.parametrize("name", ["cumsum_f32_16m", "cumsum_bf16_16m", "cumsum_f32_1m", "h_cumsum_f32_4m"])
def test_a_cumsum_over_a_vector_takes_its_taps_at_the_measured_window_rate(name):
    """XLA:TPU writes a vector's cumsum as a reduce-window of 128 taps along the second-minor
    dimension of a {0,1} layout (``size=1x128 pad=0_0x127_0``): its profiled time is its taps
    (elements x 128, counted here from the text) at 0.667e12 a second, within 10% (the held-out 4M too)."""
    hlo = CHECKS[name].program.hlo
    window = re.search(r"%reduce-window = \w+\[(\d+),128\]\{0,1:[^}]*\} reduce-window\(.*size=1x128 pad=0_0x127_0", hlo)
    assert window is not None
    taps = int(window.group(1)) * 128 * 128
    measured = next(row["measured_s"] for row in _run5_profile()["instructions"]
                    if row["program"] == name and row["instruction"] == "reduce-window")
    assert 0.9 <= measured / (taps / 0.667e12) <= 1.1
    assert CHECKS[name].holds and "prefix sum" not in dict(CHECKS[name].outside_band)


def _arrays(hlo: str) -> tuple[int, int]:
    """The arguments and results of a module's call, counted from its ENTRY's signature."""
    signature = re.search(r"^ENTRY %\S+ \((.*)\) -> (.*) \{$", hlo, re.M)
    assert signature is not None
    return (len(re.findall(r"\w+\[[\d,]*\]", signature.group(1))),
            len(re.findall(r"\w+\[[\d,]*\]", signature.group(2))))


def test_the_per_array_costs_are_what_calls_of_480_small_arrays_measured():
    """480 arguments in and one result out, one argument in and 480 results out: waited on, the
    call's time beyond the chip's module time (profiled) and the 0.59 ms of a one-array call is
    1.14 us an argument and 5.86 us a result; back to back, beyond 0.13 ms, 1.09 us and 4.28 us
    (within 10%: they were fitted on these two programs)."""
    modules = _run5_profile()["modules"]
    for name in ("args_in_480", "args_out_480"):
        program = CHECKS[name].program
        arguments, results = _arrays(program.hlo)
        assert sorted((arguments, results)) == [1, 480]
        waited = program.waited_s - modules[name] - 5.9e-4
        assert 0.9 <= waited / (1.14e-6 * arguments + 5.86e-6 * results) <= 1.1
        assert 0.9 <= (program.dispatched_s - 1.3e-4) / (1.09e-6 * arguments + 4.28e-6 * results) <= 1.1


def test_kernels_of_near_zero_work_cost_what_the_chip_says_a_kernel_costs():
    """Calls of 30-480 small arrays move under 0.5 MB: their module time on the chip (profiled) is
    their kernels' fixed cost. Per kernel (every ENTRY instruction but parameters, constants,
    tuples, bitcasts and the starts and ends of asynchronous copies, counted here from the text) it
    is 0.33-0.36 us, within 1.35x of the 0.27 us fitted over nine programs whose larger kernels
    overlap it in part."""
    modules = _run5_profile()["modules"]
    free = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast", "custom-call")
    for name in ("args_in_480", "args_inout_120", "args_inout_30"):
        entry = CHECKS[name].program.hlo.split("\nENTRY ", 1)[1]
        opcodes = re.findall(r"^  (?:ROOT )?%\S+ = (?:\([^=]*\)|\S+) ([a-z-]+)\(", entry, re.M)
        kernels = [op for op in opcodes if op not in free and not op.endswith(("-start", "-done"))]
        assert len(kernels) >= 30 and modules[name] < 4e-4
        assert 1.0 <= modules[name] / len(kernels) / 0.27e-6 <= 1.35, (name, len(kernels))


def test_xlas_own_cycles_are_read_from_each_instruction_at_the_chips_clock():
    """The corpus report's second opinion (BENCHMARKS 9b, the anchors' section 11): XLA:TPU's
    ``estimated_cycles`` of each instruction, times its runs, at v5e's clock. Counted here from the
    module's text by hand: a 4096^3 bf16 matmul (one fusion, no loop) and a while loop of 3 trips
    over a body whose every instruction's cycles count 3 times."""
    from benchmarks.tpu_corpus_report import module_cycles

    clock = 1.97e14 / (2 * 4 * 128 * 128)  # v5e's bf16 peak over 4 MXUs of 128x128 multiply-adds: 1.503 GHz
    matmul = PROGRAMS["matmul_bf16_4096"].hlo
    cycles = [int(n) for n in re.findall(r'"estimated_cycles":"(\d+)"', matmul)]
    assert len(cycles) == 1  # the ROOT fusion's: parameters and the prefetch copy carry none
    found = module_cycles(matmul, "v5e")
    assert found["xla_s"] == pytest.approx(cycles[0] / clock)
    assert 0 < found["covered_s"] <= found["roofline_s"]
    # 2 * 4096^3 flops at the bf16 peak is the least time the matmul can take: XLA's cycles agree within 10%
    assert found["xla_s"] == pytest.approx(2 * 4096**3 / 1.97e14, rel=0.10)

    # lax.fori_loop(0, 1000, ...): its condition compares the counter (from 0, step 1) with 1000
    looped = PROGRAMS["fori_small_matmuls"].hlo
    blocks = {m.group(1): m.group(2) for m in re.finditer(r"^(?:ENTRY )?%([\w.-]+) \([^\n]*\{\n(.*?)\n\}", looped, re.S | re.M)}
    (condition, body), = re.findall(r"condition=%([\w.-]+), body=%([\w.-]+)", looped)  # one loop, not nested
    trips = int(re.search(r"constant\((\d+)\)", blocks[condition]).group(1))
    assert trips == 1000 and "direction=LT" in blocks[condition]
    def cycles_in(block: str) -> int:
        return sum(int(c) for c in re.findall(r'"estimated_cycles":"(\d+)"', block))
    entry = next(text for name, text in blocks.items() if name.startswith("main"))
    assert cycles_in(blocks[body]) > 0
    assert cycles_in(looped) == cycles_in(blocks[body]) + cycles_in(entry)  # no cycles elsewhere
    expected = (trips * cycles_in(blocks[body]) + cycles_in(entry)) / clock
    assert module_cycles(looped, "v5e")["xla_s"] == pytest.approx(expected)
