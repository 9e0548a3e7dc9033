"""Where each all-reduce runs, on the CPU and on four TPU generations (the table in docs/tpu-targets.md).

``python -m benchmarks.target_placements`` (needs the ``tpu`` extra): the programs of
``tests/_target_programs.py`` and the linear and rnn demos' plans, traced over 8 CPU devices and
compiled for v4:2x2x2, v5e:2x4, v5p:2x2x2 and v6e:2x4; each cell lists every all-reduce, at the
entry or at its loop depth (how many while bodies run it), read by ``tests/test_targets.all_reduces``.
"""

from __future__ import annotations

import sys
from typing import Any

from benchmarks.common import ROOT

TOPOLOGIES = ("v4:2x2x2", "v5e:2x4", "v5p:2x2x2", "v6e:2x4")
PROGRAMS = ("gspmd_accumulate", "needed_in_loop", "explicit_naive", "explicit_reduced")
DEMOS = (("linear", "linear.py"), ("rnn", "rnn.py"))


def traced_cases() -> dict[str, Any]:
    """Every program and plan, traced over the first 8 CPU devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    import _target_programs as programs
    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans
    from shardscope.plans.settings import Settings

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    cases = {name: programs.PROGRAMS[name](mesh).trace() for name in PROGRAMS}
    for demo, file in DEMOS:
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


def main() -> None:
    """Print the markdown table."""
    from shardscope.targets.host import ensure_devices

    ensure_devices(8)
    sys.path.insert(0, str(ROOT / "tests"))
    import jax
    from test_targets import all_reduces

    from shardscope.targets import compile as targets, registry

    devices = {t: registry.load_target(registry.parse_target(f"tpu:{t}")) for t in TOPOLOGIES}
    print(f"jax {jax.__version__}\n\n| program | cpu | {' | '.join(TOPOLOGIES)} |\n|{' --- |' * (2 + len(TOPOLOGIES))}")
    for name, traced in traced_cases().items():
        row = [cell(all_reduces(traced.lower().compile().as_text()))]
        row += [cell(all_reduces(targets.compile_for_target(traced, devices[t], name).hlo_text)) for t in TOPOLOGIES]
        print(f"| {name} | {' | '.join(row)} |", flush=True)


if __name__ == "__main__":
    main()
