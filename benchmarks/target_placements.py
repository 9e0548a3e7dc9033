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
    from shardscope.plans.settings import Settings

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
    """Print the markdown table (``--smoke``: its first cell on the first topology)."""
    from benchmarks.common import grid, parse_args
    from shardscope.targets.host import ensure_devices

    args = parse_args(__doc__.splitlines()[0], argv)
    topologies = grid(args, TOPOLOGIES, TOPOLOGIES, TOPOLOGIES[:1])
    ensure_devices(8)
    sys.path.insert(0, str(ROOT / "tests"))
    import jax
    from _tpu_text import all_reduces

    from shardscope.targets import compile as targets, registry

    devices = {t: registry.load_target(registry.parse_target(f"tpu:{t}")) for t in topologies}
    print(f"jax {jax.__version__}\n\n| program | cpu | {' | '.join(topologies)} |\n|{' --- |' * (2 + len(topologies))}")
    cases = traced_cases(grid(args, PROGRAMS, PROGRAMS, PROGRAMS[:1]), grid(args, DEMOS, DEMOS, ()))
    for name, traced in cases.items():
        row = [cell(all_reduces(traced.lower().compile().as_text()))]
        row += [cell(all_reduces(targets.compile_for_target(traced, devices[t], name).hlo_text)) for t in topologies]
        print(f"| {name} | {' | '.join(row)} |", flush=True)


if __name__ == "__main__":
    main()
