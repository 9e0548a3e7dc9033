"""Benchmark 10: the cost model against a real TPU v5e chip's profile, instruction by instruction.

``benchmarks/profile_capture_tpu.py`` ran on the chip (jax + numpy alone) one program per
instruction kind (dots, a convolution, elementwise fusions, a reduce, a transpose, a gather, a
scatter, a sort, a loop of small dots), 10 calls each under ``jax.profiler``, and kept the trace
and each program's ``compiled.as_text()`` (``results/profile_kinds_v5e/``). Here XProf's
``hlo_stats`` gives each instruction's measured self time per run on the chip; shardscope's
per-instruction estimate (``engine.hlo.roofline.estimate_step`` of that instruction's work alone,
loops counted, overheads left out) is set beside it. It needs ``shardscope[profile]``; no chip:
the profile is stored. ``python -m benchmarks.profile_kinds`` rewrites
``results/profile_kinds_v5e.json``; rerun it after the estimate changes (nothing is re-measured).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from typing import Any

from benchmarks.common import RESULTS, ROOT, parse_args, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column
from shardscope.hardware.catalogue import chip_of
from shardscope.engine.hlo.roofline import estimate_step
from shardscope.engine.hlo.flops import unmodelled_parts
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.work import module_work
from shardscope.measure.profile_read import read_profile

STORED = RESULTS / "profile_kinds_v5e"
CORPUS_RUN4 = ROOT / "tests" / "fixtures" / "tpu_corpus" / "v5e_run4.jsonl.gz"
RUN4_PROFILE = ROOT / "tests" / "fixtures" / "tpu_corpus" / "v5e_run4_profile.json.gz"
"""Each instruction's self time per run in run 4 of the corpus (``benchmarks/tpu_corpus.py --set run4
--profile`` on the chip), read from its trace by :func:`instruction_times` (``--from-profile``)."""


def rows() -> list[dict]:
    """One row per instruction XProf timed on the chip: measured and estimated seconds per run."""
    info = json.loads((STORED / "info.json").read_text())
    texts = json.loads((STORED / "kinds.modules.json").read_text())
    chip = chip_of(info["device_kind"])
    assert chip is not None, info["device_kind"]
    profile = read_profile(STORED / "kinds.xplane.pb", stats=True)
    order = []  # program ids in the order the programs ran (the capture ran them in its table's order)
    for run in sorted(profile.module_runs, key=lambda r: r.start_us):
        if run.program_id not in order:
            order.append(run.program_id)
    programs = dict(zip(order, texts))
    out = []
    for row in profile.stats:
        program = programs.get(row.program_id)
        if program is None or row.occurrences == 0:
            continue
        module = parse(texts[program])
        work = {w.name: w for w in module_work(module).instructions}
        item = work.get(row.name)
        instruction = next((i for i in module.instructions() if i.name == row.name), None)
        unmodelled = [] if instruction is None else unmodelled_parts(module, instruction)
        estimate = None
        if item is not None and not unmodelled:  # an instruction the model cannot time has no estimate
            alone = estimate_step(dataclasses.replace(module_work(module), instructions=(item,)), chip)
            estimate = None if alone is None else alone.roofline_s / max(item.runs, 1)
        out.append({"program": program, "instruction": row.name, "category": row.category,
                    "runs": row.occurrences, "measured_s": row.self_us * 1e-6 / row.occurrences,
                    "estimate_s": estimate, "bound_by": row.bound_by,
                    "opcode": None if item is None else item.opcode, "unmodelled": ", ".join(unmodelled)})
    return out


def instruction_times(trace: Path, corpus: Path = CORPUS_RUN4, calls: int = 6,
                      only: set[str] | None = None) -> list[dict]:
    """Each instruction's self time per run in the trace ``benchmarks/tpu_corpus.py --profile`` wrote
    (of the programs named ``only``, when given: those of the corpus file the trace profiled).

    Its programs ran in the corpus file's order, each ``calls`` times (a warm call and five), among
    modules that only made their arguments: a program is the first module after the previous one
    that ran that many times and whose instructions its compiled module holds."""
    return _profiled_programs(trace, corpus, calls, only)[0]


def module_times(trace: Path, corpus: Path, calls: int = 6, only: set[str] | None = None) -> dict[str, float]:
    """Each profiled program's time on the chip per call: the median of its module's runs (the
    ``XLA Modules`` line of the trace), kernels and the gaps between them together."""
    return _profiled_programs(trace, corpus, calls, only)[1]


def _profiled_programs(trace: Path, corpus: Path, calls: int, only: set[str] | None) -> tuple[list[dict], dict[str, float]]:
    programs = [row for row in map(json.loads, gzip.decompress(corpus.read_bytes()).decode().splitlines())
                if "hlo" in row and not row.get("error") and (only is None or row["name"] in only)]
    profile = read_profile(trace, stats=True)
    starts: dict[str, list[float]] = defaultdict(list)
    for run in profile.module_runs:
        starts[run.program_id].append(run.start_us)
    held: dict[str, set[str]] = defaultdict(set)
    for stat in profile.stats:
        held[stat.program_id].add(stat.name)
    order = iter(sorted(starts, key=lambda program_id: min(starts[program_id])))
    names: dict[str, str] = {}
    for program in programs:
        written = set(_INSTRUCTION_NAME.findall(program["hlo"]))
        found = next((pid for pid in order if len(starts[pid]) == calls and held[pid] and held[pid] <= written), None)
        if found is not None:
            names[found] = program["name"]
    durations: dict[str, list[float]] = defaultdict(list)
    for run in profile.module_runs:
        if run.program_id in names and run.dur_us is not None:
            durations[names[run.program_id]].append(run.dur_us * 1e-6)
    return ([{"program": names[stat.program_id], "instruction": stat.name, "category": stat.category,
              "runs": stat.occurrences, "measured_s": stat.self_us * 1e-6 / stat.occurrences,
              "bound_by": stat.bound_by} for stat in profile.stats if stat.program_id in names and stat.occurrences],
            {name: statistics.median(times) for name, times in durations.items()})


_INSTRUCTION_NAME = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ", re.M)
CORPUS_RUN5 = ROOT / "tests" / "fixtures" / "tpu_corpus" / "v5e_run5.jsonl.gz"
RUN5_PROFILE = ROOT / "tests" / "fixtures" / "tpu_corpus" / "v5e_run5_profile.json.gz"
"""Run 5's profiled programs (``tpu_corpus.py --set run5 --profile --only ...``, its second device call):
each instruction's self time per run and each program's module time per call (``--run5-profile``)."""


def write_run5_profile(trace: Path, only: set[str]) -> None:
    """Store run 5's instruction and module times, read from its trace (the programs ``only``)."""
    instructions, modules = _profiled_programs(trace, CORPUS_RUN5, 6, only)
    RUN5_PROFILE.write_bytes(gzip.compress(json.dumps({"instructions": instructions, "modules": modules},
                                                      indent=0, sort_keys=True).encode(), mtime=0))


RUN4_SHOWN_ABOVE_S = 2e-5
"""Run 4's instructions faster than this per run are left out of its table (index arithmetic, bookkeeping)."""


def run4_rows() -> list[dict]:
    """Run 4's instructions (gathers, softmax, cumsum, convolutions, small programs), measured per run
    on the chip beside shardscope's roofline of each, from the stored instruction times."""
    corpus = {row["name"]: row for row in map(json.loads, gzip.decompress(CORPUS_RUN4.read_bytes()).decode()
                                              .splitlines()) if "hlo" in row}
    chip = chip_of(next(json.loads(line)["header"]["device_kind"] for line in
                         gzip.decompress(CORPUS_RUN4.read_bytes()).decode().splitlines() if '"header"' in line))
    assert chip is not None
    works = {name: module_work(parse(row["hlo"])) for name, row in corpus.items()}
    out = []
    for row in json.loads(gzip.decompress(RUN4_PROFILE.read_bytes())):
        if row["measured_s"] < RUN4_SHOWN_ABOVE_S:
            continue
        work = works[row["program"]]
        item = next((w for w in work.instructions if w.name == row["instruction"]), None)
        alone = None if item is None else estimate_step(dataclasses.replace(work, instructions=(item,)), chip)
        estimate = None if alone is None or item is None else alone.roofline_s / max(item.runs, 1)
        out.append({**row, "estimate_s": estimate, "opcode": None if item is None else item.opcode})
    return out


def main(argv: list[str] | None = None) -> int:
    """Write ``results/profile_kinds_v5e.json`` (every mode reads the same stored profile: nothing runs;
    ``--from-profile TRACE`` first rewrites run 4's instruction times from the trace of that run)."""
    def own(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--from-profile", type=Path, help="the profile.xplane.pb of tpu_corpus.py --profile")
        parser.add_argument("--run5-profile", type=Path, help="run 5's profile.xplane.pb (its profiled programs: "
                            "--run5-programs)")
        parser.add_argument("--run5-programs", nargs="*", default=(), help="the programs run 5's trace profiled")

    args = parse_args(__doc__.splitlines()[0], argv, own)
    if args.from_profile:
        RUN4_PROFILE.write_bytes(gzip.compress(json.dumps(instruction_times(args.from_profile), indent=0).encode(),
                                               mtime=0))
    if args.run5_profile:
        write_run5_profile(args.run5_profile, set(args.run5_programs))
    info = json.loads((STORED / "info.json").read_text())
    path = write_result("profile_kinds_v5e", args, {"device_kind": info["device_kind"], "jax": info["jax"],
                                                     "rows": rows(), "run4": run4_rows()})
    print(f"wrote {path}")
    return 0


SHOWN_ABOVE_S = 1e-6
"""Instructions faster than this per run are left out of the table (the chip's bookkeeping copies)."""


def _measured_over_estimate(row: dict[str, Any]) -> float | None:
    return row["measured_s"] / row["estimate_s"] if row["estimate_s"] else None


BENCHMARK = Benchmark(
    name="profile_kinds",
    heading="10. The cost model against the chip's profile, per instruction",
    files=("profile_kinds_*.json",),
    blocks=(
        Prose(lambda result: [
            "`benchmarks/profile_capture_tpu.py` ran one program per instruction kind on a real "
            f"{result['device_kind']} (jax {result['jax']}), 10 calls each under `jax.profiler`; "
            "`python -m benchmarks.profile_kinds` reads the stored profile with XProf's `hlo_stats` (each "
            "instruction's self time per run) and sets shardscope's roofline of that instruction beside it "
            "(overheads left out). Rerun it after the estimate changes: nothing is measured again. Collectives "
            "are not in it: the machine has one chip."]),
        Table(
            columns=(
                Column("program", lambda row: row["program"], align="left"),
                Column("instruction", lambda row: f"`{row['instruction']}`", align="left"),
                Column("XProf's category", lambda row: row["category"], align="left"),
                Column("runs", lambda row: row["runs"], digits=None),
                Column("measured per run", lambda row: row["measured_s"], unit="us", scale=1e6, digits=1),
                Column("estimate per run", lambda row: f"not modelled ({row['unmodelled']}): a lower bound"
                       if row.get("unmodelled") else row["estimate_s"], unit="us", scale=1e6, digits=1),
                ratio_column("measured / estimate", _measured_over_estimate),
                Column("bound by (XProf)", lambda row: row["bound_by"], align="left"),
            ),
            rows=lambda result: sorted((r for r in result["rows"] if r["measured_s"] >= SHOWN_ABOVE_S),
                                       key=lambda r: -r["measured_s"]),
        ),
        Prose(lambda result: [
            "Run 4 of the corpus (`python benchmarks/tpu_corpus.py OUT --set run4 --profile` on the chip: gathers "
            "of rows of 128 to 8,192 elements from tables in HBM and on the chip, take_along_axis, gathers fused "
            "with elementwise work, softmax, cumsum, and the programs that were out of band) ran each program six "
            "times more under `jax.profiler`; `tests/fixtures/tpu_corpus/v5e_run4_profile.json.gz` keeps each "
            "instruction's self time per run (`python -m benchmarks.profile_kinds --from-profile TRACE` rewrites it). "
            "The gather rates of `shardscope/hardware/chips.py` come from its `gather_fusion` rows of the programs "
            "not named `h_...`; the `h_...` rows were held out of that fit."]),
        Table(
            columns=(
                Column("program", lambda row: row["program"], align="left"),
                Column("instruction", lambda row: f"`{row['instruction']}`", align="left"),
                Column("XProf's category", lambda row: row["category"], align="left"),
                Column("measured per run", lambda row: row["measured_s"], unit="us", scale=1e6, digits=1),
                Column("estimate per run", lambda row: row["estimate_s"], unit="us", scale=1e6, digits=1),
                ratio_column("measured / estimate", _measured_over_estimate),
                Column("bound by (XProf)", lambda row: row["bound_by"], align="left"),
            ),
            rows=lambda result: result.get("run4", []),
        ),
    ),
)


if __name__ == "__main__":
    sys.exit(main())
