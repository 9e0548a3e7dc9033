"""Where each all-reduce runs, on the CPU and on four TPU generations (the table in docs/tpu-targets.md).

``python -m benchmarks.target_placements`` (needs the ``tpu`` extra): the programs of
``tests/_target_programs.py`` and the linear and rnn demos' plans, traced over 8 CPU devices and
compiled for v4:2x2x2, v5e:2x4, v5p:2x2x2 and v6e:2x4; each cell lists every all-reduce, at the
entry or at its loop depth (how many while bodies run it), read by ``tests/_tpu_text.all_reduces``.
"""

from __future__ import annotations

import sys
from typing import Any

from benchmarks.common import ROOT
from benchmarks.harness import Benchmark, Column, Prose, Table

TOPOLOGIES = ("v4:2x2x2", "v5e:2x4", "v5p:2x2x2", "v6e:2x4")
PROGRAMS = ("gspmd_accumulate", "needed_in_loop", "explicit_naive", "explicit_reduced")
DEMOS = (("linear", "linear.py"), ("rnn", "rnn.py"))


def traced_cases(names: tuple[str, ...] = PROGRAMS, demos: tuple[tuple[str, str], ...] = DEMOS) -> dict[str, Any]:
    """The programs ``names`` and the plans of ``demos``, traced over the first 8 CPU devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    import _target_programs as programs
    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans
    from shardscope.config.settings import Settings

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    cases = {name: programs.PROGRAMS[name](mesh).trace() for name in names}
    for demo, file in demos:
        settings = Settings(path=ROOT / "demos" / file, devices=8)
        built = build_plans(load_demo_file(settings.path).functions[demo], settings)
        cases.update({f"{demo}_{plan}": built.functions[plan].trace(*built.args) for plan in ("naive", "deferred")})
    return cases


def cell(all_reduces: list[tuple[str, int]]) -> str:
    """``entry f32[16,16]; depth 1 tuple of 2``."""
    def one(shape: str, depth: int) -> str:
        kind = f"tuple of {shape.count('[')}" if shape.startswith("(") else shape.split("{")[0]
        return f"{'entry' if depth == 0 else f'depth {depth}'} {kind}"

    return "; ".join(one(shape, depth) for shape, depth in all_reduces)


def main(argv: list[str] | None = None) -> None:
    """Write ``target_placements.json`` and print its table (``--smoke``: its first cell on the first topology)."""
    from benchmarks.common import grid, parse_args, write_result
    from shardscope.targets.host import ensure_devices

    args = parse_args(__doc__.splitlines()[0], argv)
    topologies = grid(args, TOPOLOGIES, TOPOLOGIES, TOPOLOGIES[:1])
    ensure_devices(8)
    sys.path.insert(0, str(ROOT / "tests"))
    import jax
    from _tpu_text import all_reduces

    from shardscope.targets import compile as targets, registry

    devices = {t: registry.load_target(registry.parse_target(f"tpu:{t}")) for t in topologies}
    rows = []
    cases = traced_cases(grid(args, PROGRAMS, PROGRAMS, PROGRAMS[:1]), grid(args, DEMOS, DEMOS, ()))
    for name, traced in cases.items():
        cells = {"cpu": cell(all_reduces(traced.lower().compile().as_text()))}
        cells.update({t: cell(all_reduces(targets.compile_for_target(traced, devices[t], name).hlo_text))
                      for t in topologies})
        rows.append({"program": name, "cells": cells})
    result = {"jax": jax.__version__, "topologies": list(topologies), "rows": rows}
    write_result("target_placements", args, result)
    print("\n".join(BENCHMARK.lines(result)))


def _columns(result: dict[str, Any]) -> list[str]:
    columns = (Column("program", lambda row: row["program"], align="left"),
               *(Column(where, lambda row, where=where: row["cells"][where], align="left")
                 for where in ("cpu", *result["topologies"])))
    return Table(columns, rows=lambda r: r["rows"]).lines(result)[:-1]


BENCHMARK = Benchmark(
    name="target_placements",
    heading="5b. Where each all-reduce runs, on the CPU and on four TPU generations",
    blocks=(
        Prose(lambda result: [
            f"`python -m benchmarks.target_placements` (needs the tpu extra; jax {result['jax']}): each cell lists "
            "every all-reduce of the compiled module, at the entry or at its loop depth (how many while bodies run "
            "it). docs/tpu-targets.md quotes this table."]),
        Prose(_columns),
    ),
)

if __name__ == "__main__":
    main()
