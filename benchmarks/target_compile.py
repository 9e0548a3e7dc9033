"""Compile time for TPU and GPU targets of 8, 64 and 256 devices (docs/tpu-targets.md; not in ``run.py``).

``python -m benchmarks.target_compile`` (needs the ``tpu`` and ``gpu`` extras; writes
``benchmarks/results/target_compile.json``, which ``python -m benchmarks.render`` puts in
``BENCHMARKS.md``; run alone, about a minute): demos/train_step.py's ``step``
written with its mesh over n devices. Per target, medians (min-max) of 5 rounds, the routes
interleaved, a new ``jax.jit`` each round (JAX caches traces, lowerings and compiles per
function): the trace over n CPU devices, ``compile_for_target`` of that trace (lowering and the
target's compile), the same program written over the target's devices (JAX's own route), and the
CPU compile of the same trace's program.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from benchmarks.harness import Benchmark, Column, Prose, Table

TARGETS = ("tpu:v5e:2x4", "gpu:h100:8", "tpu:v5p:4x4x4", "gpu:h100:8x8", "tpu:v5e:16x16", "gpu:h100:32x8")
ROUNDS = 5
MICRO_BATCHES, PER_DEVICE, D_IN, D_HIDDEN = 4, 8, 16, 32


def train_step(mesh: Any) -> tuple[Callable, tuple]:
    """demos/train_step.py's naive ``step`` over ``mesh`` (axis ``batch``), with its example arguments."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    def loss(params, x, y):
        return jnp.mean((jnp.tanh(x @ params["W1"]) @ params["W2"] - y) ** 2)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch"), P(None, "batch")), out_specs=P())
    def step(params, xs, ys):
        def body(acc, batch):
            return jax.tree.map(jnp.add, acc, jax.grad(loss)(params, *batch)), None

        grads, _ = lax.scan(body, jax.tree.map(jnp.zeros_like, params), (xs, ys))
        return jax.tree.map(lambda p, g: p - 0.1 * g / MICRO_BATCHES, params, grads)

    batch = PER_DEVICE * mesh.size
    params = {"W1": jax.ShapeDtypeStruct((D_IN, D_HIDDEN), jnp.float32),
              "W2": jax.ShapeDtypeStruct((D_HIDDEN, 1), jnp.float32)}
    xs = jax.ShapeDtypeStruct((MICRO_BATCHES, batch, D_IN), jnp.float32)
    ys = jax.ShapeDtypeStruct((MICRO_BATCHES, batch, 1), jnp.float32)
    return step, (params, xs, ys)


def _seconds(fn: Callable) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(target: str, rounds_wanted: int = ROUNDS) -> dict[str, list[float]]:
    """The four timings of ``rounds_wanted`` rounds for one target."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from shardscope.targets import compile as targets, registry

    devices = registry.load_target(registry.parse_target(target))
    cpu_mesh = Mesh(np.array(jax.devices()[: devices.count]), ("batch",))
    tpu_mesh = targets.target_mesh(devices, axis="batch")
    rounds: dict[str, list[float]] = {"trace": [], "retargeted": [], "direct": [], "cpu": []}
    for _ in range(rounds_wanted):
        step, args = train_step(cpu_mesh)
        rounds["trace"].append(_seconds(lambda: step.trace(*args)))
        traced = step.trace(*args)
        rounds["retargeted"].append(_seconds(lambda: targets.compile_for_target(traced, devices)))
        step, args = train_step(tpu_mesh)
        rounds["direct"].append(_seconds(lambda: step.trace(*args).lower().compile()))
        step, args = train_step(cpu_mesh)
        rounds["cpu"].append(_seconds(lambda: step.trace(*args).lower().compile()))
    return rounds


def main(argv: list[str] | None = None) -> None:
    """Print one line per target and write the rounds to ``benchmarks/results/target_compile.json``."""
    from benchmarks.common import grid, parse_args, write_result
    from shardscope.targets import registry
    from shardscope.targets.compilers import installed_version
    from shardscope.targets.host import ensure_devices

    args = parse_args(__doc__.splitlines()[0], argv)
    targets, rounds_wanted = grid(args, TARGETS, TARGETS, TARGETS[:1]), grid(args, ROUNDS, ROUNDS, 1)
    ensure_devices(max(registry.load_target(registry.parse_target(t)).count for t in targets))
    import jax

    print(f"jax {jax.__version__}, {rounds_wanted} rounds, median (min-max) seconds")
    cases = []
    for target in targets:
        rounds = measure(target, rounds_wanted)
        cells = ", ".join(f"{name} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" for name, v in rounds.items())
        print(f"{target}: {cells}", flush=True)
        devices = registry.load_target(registry.parse_target(target)).count
        cases.append({"target": target, "devices": devices, "rounds": rounds})
    path = write_result("target_compile", args, {"rounds_per_case": rounds_wanted, "libtpu": installed_version("libtpu"),
                                                 "cuda_plugin": installed_version("jax-cuda12-plugin"),
                                                 "cases": cases})
    print(f"wrote {path}")


ROUTES = (
    ("trace", "trace over n CPU devices"),
    ("retargeted", "compile for the target (lowering + the target's compile)"),
    ("direct", "written for the target (JAX's own route)"),
    ("cpu", "CPU compile"),
)
"""The timings of each round, in the order the table shows them."""


def _route(key: str) -> Callable[[dict], dict]:
    def cell(case: dict) -> dict:
        seconds = case["rounds"][key]
        return {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds)}
    return cell


def _described(result: dict[str, Any]) -> list[str]:
    load, versions = result["load_average"], result["machine"]["versions"]
    return [
        "`python -m benchmarks.target_compile` (needs `pip install 'shardscope[tpu,gpu]'`; writes "
        "`benchmarks/results/target_compile.json`; not part of `make bench`, run alone). demos/train_step.py's "
        "`step` (a `shard_map` over `batch`, 4 micro-batches in a `lax.scan`, 8 examples per device) with its "
        f"mesh over n devices; medians of {result['rounds_per_case']} rounds (min-max), a new `jax.jit` each "
        "round, the routes interleaved. jax "
        f"{versions.get('jax', '?')}, libtpu {result['libtpu']}, jax-cuda12-plugin {result.get('cuda_plugin', '-')}; "
        f"1-minute load average {load['start']:.1f} -> {load['end']:.1f} on this machine's 2 shared cores.",
    ]


BENCHMARK = Benchmark(
    name="target_compile",
    heading="5. Compiling for a TPU slice or GPUs without one (`--target`)",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("target", lambda c: c.get("target") or f"tpu:{c['topology']}", align="left"),
                Column("devices", lambda c: c["devices"], digits=None),
                *(Column(label, _route(key), unit="s", digits=3, better="lower") for key, label in ROUTES),
            ),
            rows=lambda r: r["cases"],
        ),
        Prose(lambda r: [
            "`shardscope report/check --target` takes the trace it already made for the CPU and compiles it for the "
            "target (`compile for the target`): nothing is traced again, and nothing runs there.",
            "",
            "Install size of the GPU compiler (`pip install 'shardscope[gpu]'`: jax-cuda12-plugin and jax-cuda12-pjrt "
            "of the installed jax, no CUDA libraries): about 290 MB to download, 478 MB installed with jax 0.10.2 "
            "(jax_plugins/xla_cuda12 458 MB, jax_cuda12_plugin 20 MB; 488 MB with jax 0.12.0.1)."]),
    ),
)


if __name__ == "__main__":
    main()
