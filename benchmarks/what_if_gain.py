"""Benchmark 5: what ``check --what-if``'s rewrite buys, measured and projected.

For each program, the one ``check --what-if`` runs: the program as ``check`` inspects it, its
flagged findings rewritten and checked (:meth:`shardscope.engine.joined.inspection.Inspection.what_if`),
then the original and the verified rewrite timed interleaved on the same placed arguments
(:func:`shardscope.pipeline.what_if.measure_what_if`: warm-up, then ``ROUNDS`` rounds, the order
rotating; the speedup is the median of the per-round ratios, its spread their interquartile
range, and a spread that contains 1 is "no measurable difference"). Both compiled plans are
projected onto :data:`PRESET` with :data:`DEVICES` devices in the ring (communication only).
Where a hand-written fix exists (``step_fixed``; for the transformer's ``shard_map`` step, the
fix written below as a user writes it), the original, the rewrite and the hand fix are then
timed again, the three interleaved, so that the rewrite is compared with what a user would
write, not only with the original.

Programs: ``demos/train_step.py``'s ``step`` (4 micro-batches under ``shard_map``) and the
12-layer transformer step of benchmark 4a (``benchmarks/transformer_step.py``) in both styles.
Run alone, on a quiet machine: ``python -m benchmarks.what_if_gain [--quick | --smoke]`` (writes
``benchmarks/results/what_if_gain.json``); not part of ``make bench``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from benchmarks.common import DEMOS, ROOT, grid, parse_args, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table

from shardscope.costmodel.interconnects import format_seconds

PROGRAMS = ((DEMOS / "train_step.py", "step"), (ROOT / "benchmarks" / "transformer_step.py", "step_shard_map"),
            (ROOT / "benchmarks" / "transformer_step.py", "step_shardings"))
ROUNDS = {"train_step.py": 50, "transformer_step.py": 15}
QUICK_ROUNDS = 5
PRESET, DEVICES = "ib-ndr", 64
CPU_DEVICES = 8


def hand_fix(module: Any, name: str) -> Callable | None:
    """The fix a user writes for ``name`` of ``module``: the file's own, or the transformer's
    ``shard_map`` step with the parameters cast to varying before the scan and one psum after."""
    if hasattr(module, f"{name}_fixed"):
        return getattr(module, f"{name}_fixed")
    if name != "step_shard_map":
        return None
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    @jax.jit
    @jax.shard_map(mesh=module.mesh, in_specs=(P(), P(None, "data")), out_specs=P(), axis_names={"data"})
    def step_shard_map_fixed(params, batches):
        local = jax.tree.map(lambda p: lax.pcast(p, "data", to="varying"), params)
        scale = 1.0 / module.mesh.shape["data"]

        def body(acc, tokens):
            return jax.tree.map(jnp.add, acc, jax.grad(lambda p, t: module.loss(p, t) * scale)(local, tokens)), None

        zeros = jax.tree.map(lambda p: lax.pcast(jnp.zeros_like(p), "data", to="varying"), params)
        grads = lax.psum(lax.scan(body, zeros, batches)[0], "data")
        return jax.tree.map(lambda p, g: p - 1e-3 * g / module.MICRO, params, grads)

    return step_shard_map_fixed


def against_hand_fix(what_if: Any, rewrite: Any, fixed: Callable, rounds: int) -> dict[str, Any]:
    """The original, the rewrite and the hand fix timed interleaved; their largest output difference."""
    import jax
    import numpy as np

    from shardscope.measure.speedup import speedup_of
    from shardscope.measure.timing import time_interleaved

    subject, program = what_if.subject, rewrite.program
    args, kwargs = subject.run_arguments
    placed = program.place(args, kwargs)
    hand = fixed.trace(*args, **kwargs).lower().compile()
    calls = {"original": lambda: subject.compiled(*args, **kwargs),
             "rewrite": lambda: program.compiled(*placed[0], **placed[1]),
             "hand": lambda: hand(*args, **kwargs)}
    times = time_interleaved(calls, (), rounds)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in
               zip(jax.tree.leaves(calls["hand"]()), jax.tree.leaves(calls["rewrite"]())))

    def ratio(baseline: str, candidate: str) -> dict[str, Any]:
        s = speedup_of(times[baseline].samples, times[candidate].samples)
        return {"median": s.median, "low": s.low, "high": s.high, "rounds": s.rounds, "verdict": s.verdict}

    return {"run_ms": {k: t.median * 1e3 for k, t in times.items()}, "hand_over_original": ratio("original", "hand"),
            "rewrite_over_hand": ratio("hand", "rewrite"), "max_abs_diff_rewrite_vs_hand": diff,
            "hand_temp_bytes": hand.memory_analysis().temp_size_in_bytes}


def measure(path: Any, name: str, rounds: int) -> dict[str, Any]:
    """One program's what-if, every rewrite with its checks, totals, times and projection."""
    from shardscope.costmodel.interconnects import preset
    from shardscope.pipeline.what_if import ORIGINAL, REWRITTEN, measure_what_if
    import shardscope.whatif.what_if  # noqa: F401  # Inspection.what_if registers itself on import
    from shardscope.pipeline.one_program import inspect_program, user_program
    from shardscope.sources.loading import import_file, marked_functions

    module, _ = import_file(path)
    program = marked_functions(module, path)[0][name]
    start = time.perf_counter()
    inspection = inspect_program(user_program(program.fn, program.spec.args, program.spec.kwargs, name))
    what_if = inspection.what_if()
    built_s = time.perf_counter() - start
    measured = measure_what_if(what_if, rounds, preset(PRESET), DEVICES)
    rewrites = []
    for m in measured:
        r = m.rewrite
        row: dict[str, Any] = {"summary": r.summary(), "status": r.status, "reason": r.reason,
                               "outputs_match": r.outputs_match, "values": len(r.values),
                               "runs_per_call": [m.before.runs.value, m.after and m.after.runs.value],
                               "bytes_per_call": [m.before.bytes.value, m.after and m.after.bytes.value],
                               "temp_bytes": [m.before.memory.get("temp_size_in_bytes"),
                                              m.after and m.after.memory.get("temp_size_in_bytes")]}
        if m.times is not None:
            row["run_ms"] = [m.times[ORIGINAL].median * 1e3, m.times[REWRITTEN].median * 1e3]
            row["speedup"] = {"median": m.speedup.median, "low": m.speedup.low, "high": m.speedup.high,
                              "rounds": m.speedup.rounds, "verdict": m.speedup.verdict}
        if m.projected is not None:
            row["projected_comm_s"] = [p.comm_s_per_call for p in m.projected]
            row["projected_ratio"] = m.projected_ratio
        fixed = hand_fix(module, name)
        if r.verified and fixed is not None:
            row["hand_fix"] = against_hand_fix(what_if, r, fixed, rounds)
        rewrites.append(row)
    return {"file": str(path.relative_to(ROOT)), "function": name, "rounds": rounds,
            "inspect_and_rewrite_s": built_s, "rewrites": rewrites}


def main(argv: list[str] | None = None) -> None:
    """Measure every program and write ``what_if_gain.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    import jax

    jax.config.update("jax_num_cpu_devices", CPU_DEVICES)  # before any array exists
    cases = []
    for path, name in grid(args, PROGRAMS, PROGRAMS, PROGRAMS[:1]):
        rounds = grid(args, ROUNDS[path.name], QUICK_ROUNDS, 2)
        cases.append(measure(path, name, rounds))
        print(f"{path.name}:{name}: {cases[-1]['rewrites']}", flush=True)
    write_result("what_if_gain", args, {"preset": PRESET, "devices": DEVICES, "cpu_devices": CPU_DEVICES,
                                        "load_average_1min": os.getloadavg()[0], "cases": cases})


def _described(result: dict[str, Any]) -> list[str]:
    load = result["load_average"]
    return [
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
    ]


def _rewrites(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"case": case, **r} for case in result["cases"] for r in case["rewrites"]]


def _pair(values: list[int | None]) -> str:
    return " -> ".join("?" if v is None else f"{v:,}" for v in values)


def _speedup(r: dict[str, Any]) -> str:
    s = r.get("speedup")
    return "not timed" if s is None else (
        f"**{s['median']:.2f}x** ({s['low']:.2f}-{s['high']:.2f}x), {s['rounds']}: {s['verdict']}")


def _projected(r: dict[str, Any]) -> str | None:
    if not r.get("projected_comm_s") or None in r["projected_comm_s"]:
        return None
    before, after = r["projected_comm_s"]
    return f"{format_seconds(before)} -> {format_seconds(after)} ({r['projected_ratio']:.2f}x)"


def _ratio(s: dict[str, Any]) -> str:
    return f"{s['median']:.2f}x ({s['low']:.2f}-{s['high']:.2f}x), {s['rounds']} rounds: {s['verdict']}"


def _reading(r: dict[str, Any]) -> str:
    """What one program's rows say, in words chosen from the verdicts (no figures of its own)."""
    h = r["hand_fix"]
    same = h["rewrite_over_hand"]["verdict"] == "no measurable difference"
    gain = h["hand_over_original"]["verdict"]
    head = f"`{r['case']['function']}`: the rewrite is " + ("not told apart from the hand fix" if same else
                                                          f"{h['rewrite_over_hand']['verdict']} than the hand fix")
    if gain == "faster":
        return head + "; both are faster than the original here."
    if gain == "no measurable difference":
        return (head + "; on this CPU neither is told apart from the original (the "
                "all-reduces saved are too small a part of the step's time here to measure); the saving shows in the "
                "projected communication.")
    return head + f"; the hand fix is {gain} than the original here."


def _program(r: dict[str, Any]) -> str:
    return f"`{r['case']['file']}` `{r['case']['function']}`"


def _hand_fixes(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in _rewrites(result) if r.get("hand_fix")]


BENCHMARK = Benchmark(
    name="what_if_gain",
    heading="6. What the what-if rewrite buys (`check --what-if`)",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("program", _program, align="left"),
                Column("status", lambda r: r["status"], align="left"),
                Column("compiled runs/call", lambda r: _pair(r["runs_per_call"]), better="lower"),
                Column("bytes/call", lambda r: _pair(r["bytes_per_call"]), better="lower"),
                Column("temporaries/device", lambda r: _pair(r["temp_bytes"]), better="lower"),
                Column("run median", lambda r: f"{r['run_ms'][0]:.2f} -> {r['run_ms'][1]:.2f}" if "run_ms" in r
                       else None, unit="ms", better="lower"),
                Column("speedup (IQR), rounds", _speedup, better="higher", align="left"),
                Column("projected communication/call", _projected, better="lower"),
            ),
            rows=_rewrites,
        ),
        Prose(lambda result: [f"- `{r['case']['function']}`: {r['summary']}." for r in _rewrites(result)]),
        Table(
            intro=lambda result: (
                "Against the fix a user writes (`step_fixed`; for the transformer's `shard_map` step the same cast "
                "before the scan and `psum` after it, written in `benchmarks/what_if_gain.py`): original, rewrite and "
                "hand fix timed again, the three interleaved."),
            columns=(
                Column("program", _program, align="left"),
                Column("run median: original / rewrite / hand fix", lambda r: " / ".join(
                    f"{r['hand_fix']['run_ms'][k]:.2f}" for k in ("original", "rewrite", "hand")), unit="ms",
                    better="lower"),
                Column("hand fix over original", lambda r: _ratio(r["hand_fix"]["hand_over_original"]), align="left"),
                Column("rewrite over hand fix", lambda r: _ratio(r["hand_fix"]["rewrite_over_hand"]), align="left"),
                Column("largest output difference, rewrite vs hand fix",
                       lambda r: f"{r['hand_fix']['max_abs_diff_rewrite_vs_hand']:.1e}", better="lower"),
                Column("temporaries/device: rewrite, hand fix",
                       lambda r: f"{r['temp_bytes'][1]:,} B, {r['hand_fix']['hand_temp_bytes']:,} B", better="lower"),
            ),
            rows=_hand_fixes,
        ),
        Prose(lambda result: [f"- {_reading(r)}" for r in _hand_fixes(result)]),
    ),
)


if __name__ == "__main__":
    main()
