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

import dataclasses
import json
import sys

from typing import Any

from benchmarks.common import RESULTS, parse_args, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column
from shardscope.hardware.chips import tpu_chip
from shardscope.engine.hlo.roofline import estimate_step
from shardscope.engine.hlo.flops import unmodelled_parts
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.work import module_work
from shardscope.measure.profile_read import read_profile

STORED = RESULTS / "profile_kinds_v5e"


def rows() -> list[dict]:
    """One row per instruction XProf timed on the chip: measured and estimated seconds per run."""
    info = json.loads((STORED / "info.json").read_text())
    texts = json.loads((STORED / "kinds.modules.json").read_text())
    chip = tpu_chip(info["device_kind"])
    assert chip is not None, info["device_kind"]
    profile = read_profile(STORED / "kinds.xplane.pb")
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


def main(argv: list[str] | None = None) -> int:
    """Write ``results/profile_kinds_v5e.json`` (every mode reads the same stored profile: nothing runs)."""
    args = parse_args(__doc__.splitlines()[0], argv)
    info = json.loads((STORED / "info.json").read_text())
    path = write_result("profile_kinds_v5e", args, {"device_kind": info["device_kind"], "jax": info["jax"],
                                                     "rows": rows()})
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
    ),
)


if __name__ == "__main__":
    sys.exit(main())
