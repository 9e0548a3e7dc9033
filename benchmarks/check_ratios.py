"""Benchmark 7c: ``shardscope check --target`` against JAX's own AOT compile at 256 and 1,024 chips.

Issue 51's bound: ``check FILE --devices N --target tpu:v5p:...`` costs at most 1.2x JAX's AOT
compile of the same program for the same slice, in wall time, CPU time and peak memory. Two
programs the project had not tuned for, each at 256 chips (``tpu:v5p:8x8x4``) and 1,024
(``tpu:v5p:8x8x16``; ``SHARDSCOPE_SCALE_CHIPS`` in both commands' environment):

- ``llama_adamw``: a Llama-3-8B-shaped FSDP x TP step with an AdamW update
  (``benchmarks/llama_adamw_model.py``, 32 scanned layers, one batch);
- ``moe``: a small Mixtral-like data x expert step, 4 layers written out
  (``benchmarks/moe_model.py``): a short compile, where what ``check`` adds to it shows most.

Each round runs ``check`` and JAX's route (``python -m benchmarks.bare_llama_target PROGRAM``: the
step built over the slice's compile-only devices, ``lower().compile()``) in fresh processes, one
after the other, the order alternating; the ratios are taken round by round and their medians
quoted, with each process's peak RSS (``wait4``) and CPU time (user + sys). No compilation cache.
Then, in one child process per chip count, one ``check`` of each program phase by phase
(:func:`benchmarks.check_at_scale.phases`): what shardscope adds, phase by phase.

Run alone, on a quiet machine (``benchmarks/check_ratios_tpu_vm.sh`` does it on a TPU VM):
``python -m benchmarks.check_ratios [--quick | --smoke] [--chips 256,1024] [--programs llama_adamw,moe]
[--no-phases] [--rounds N]``. Rows already in the JSON for other chip counts or programs are kept (one chip
count a call fits a machine lent for minutes at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from benchmarks.check_at_scale import JAX_ROUTE, PHASES, STATUSES, TARGET_RATIO, _bare_env, _shown, _summary
from benchmarks.common import ROOT, alternating_rounds, commit, grid, parse_args, python, results_dir, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column

PROGRAMS = ("llama_adamw", "moe")
CHIPS = (256, 1024)
FULL_ROUNDS, QUICK_ROUNDS, SMOKE_ROUNDS = 3, 1, 1
TOPOLOGIES = {256: "v5p:8x8x4", 1024: "v5p:8x8x16"}


def commands(program: str, chips: int, smoke: bool = False) -> dict[str, list[str]]:
    """``check`` of ``program``'s step file on its slice, and JAX's own route to the same compile."""
    devices, target = (8, "tpu:v5e:2x4") if smoke else (chips, f"tpu:{TOPOLOGIES[chips]}")
    step = ROOT / "benchmarks" / f"{program}_step.py"
    return {
        "check": [python(), "-m", "shardscope", "check", str(step), "--devices", str(devices), "--target", target,
                  "--no-cache"],
        "bare": [python(), "-m", "benchmarks.bare_llama_target", program],
    }


def _own_flags(parser: Any) -> None:
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated (default: all)")
    parser.add_argument("--chips", default=",".join(map(str, CHIPS)), help="comma-separated chip counts: 256, 1024")
    parser.add_argument("--no-phases", action="store_true", help="leave out the phase-by-phase runs")
    parser.add_argument("--rounds", type=int, help=f"rounds per row (default: {FULL_ROUNDS}, --quick {QUICK_ROUNDS})")
    parser.add_argument("--phases-at", type=int, help=argparse.SUPPRESS)  # the child that times the phases
    parser.add_argument("--stacks-at", type=int, help=argparse.SUPPRESS)  # the child that reads its thread stacks


def main(argv: list[str] | None = None) -> None:
    """Run the rounds (and the phases), merge them into ``check_ratios.json``."""
    from benchmarks.common import machine

    args = parse_args(__doc__.splitlines()[0], argv, _own_flags)
    programs = tuple(p for p in PROGRAMS if p in args.programs.split(","))
    smoke = args.mode == "smoke"
    if smoke:
        os.environ.setdefault("SHARDSCOPE_LLAMA_SIZE", "tiny")
        programs = programs[-1:]  # one program at toy size checks the benchmark runs (the suite's smoke test)
    if args.phases_at:  # the child of one chip count: its phases as one JSON line
        _print_phases(args.phases_at, programs, smoke)
        return
    if args.stacks_at:  # the child that starts the CPU devices and reads its thread stacks
        print(json.dumps(_own_thread_stacks(args.stacks_at)), flush=True)
        return
    chip_counts = (8,) if smoke else tuple(int(c) for c in args.chips.split(","))
    rounds = args.rounds or grid(args, FULL_ROUNDS, QUICK_ROUNDS, SMOKE_ROUNDS)
    path = args.out or results_dir(args.mode) / "check_ratios.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    rows, phases, here = _kept_rows(kept), dict(kept.get("phases_cpu_s", {})), machine()
    stacks = dict(kept.get("thread_stacks", {}))
    for chips in chip_counts:
        os.environ["SHARDSCOPE_SCALE_CHIPS"] = str(chips)
        if not smoke:
            stacks[_row_key("cpu_devices", chips, here)] = {**_thread_stacks(chips), "machine": here}
        for program in programs:
            rows[_row_key(program, chips, here)] = {**_rounds(program, chips, rounds, smoke), "rounds": rounds,
                                                    "machine": here, "commit": commit()}
        if not args.no_phases and not smoke:
            phases.update({f"{p}@{chips}": cpu for p, cpu in _phases_child(chips, programs).items()})
    write_result("check_ratios", args, {"rounds": rounds, "target_ratio": TARGET_RATIO, "rows": rows,
                                        "phases_cpu_s": phases, "thread_stacks": stacks, "uptime": _uptime()})
    for key, row in rows.items():
        print(f"{key}: wall {row['ratio_median']:.2f}x, CPU {row['cpu_ratio_median']:.2f}x, "
              f"peak RSS {row['rss_ratio_median']:.2f}x", flush=True)


def _row_key(program: str, chips: int, on: dict[str, Any]) -> str:
    """A row's key: the program, the chips and the machine's cores (the wall ratio depends on them)."""
    return f"{program}@{chips}/{on.get('nproc', '?')} cores"


def _kept_rows(kept: dict[str, Any]) -> dict[str, Any]:
    """The rows of an earlier run, each with the machine and the rounds it ran with (a row written
    before rows carried them: the file's own), keyed by :func:`_row_key`: a run on another machine
    adds its rows beside them."""
    rows = {}
    for row in kept.get("rows", {}).values():
        row = {"machine": kept.get("machine", {}), "rounds": kept.get("rounds"), **row}
        rows[_row_key(row["program"], row["chips"], row["machine"])] = row
    return rows


def _rounds(program: str, chips: int, rounds: int, smoke: bool) -> dict[str, Any]:
    pair = commands(program, chips, smoke)
    runs = alternating_rounds(f"{program}@{chips}", pair, rounds, envs={"bare": _bare_env()}, statuses=STATUSES)
    return {"program": program, "chips": chips, "uptime": _uptime(),
            "commands": {kind: _shown(argv) for kind, argv in pair.items()}, **_summary(runs)}


def _phases_child(chips: int, programs: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The phases' CPU times of one ``check`` of each program, in a child of ``chips`` CPU devices."""
    done = subprocess.run([python(), "-m", "benchmarks.check_ratios", "--phases-at", str(chips),
                           "--programs", ",".join(programs)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **_bare_env()}, timeout=3600)
    if done.returncode:
        raise RuntimeError(f"the phases at {chips} chips failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_phases(chips: int, programs: tuple[str, ...], smoke: bool) -> None:
    from benchmarks.check_at_scale import phases

    target = "tpu:v5e:2x4" if smoke else f"tpu:{TOPOLOGIES[chips]}"
    found = phases(8 if smoke else chips, target, programs)
    print(json.dumps(found["phases_cpu_s"]), flush=True)


STACK_KIB = 8 * 1024
"""The stack size XLA's CPU client gives each of its threads (``GetThreadOptions`` in
``xla/pjrt/cpu/cpu_client.cc``), in KiB: its mappings are told apart by that size."""


def _thread_stacks(devices: int) -> dict[str, int]:
    """The thread stacks of a fresh process that started ``devices`` CPU devices and nothing else
    (:func:`_own_thread_stacks`, in a child)."""
    done = subprocess.run([python(), "-m", "benchmarks.check_ratios", "--stacks-at", str(devices)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, **_bare_env()}, timeout=600)
    if done.returncode:
        raise RuntimeError(f"the thread stacks at {devices} devices failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _own_thread_stacks(devices: int) -> dict[str, int]:
    """This process's threads and its mappings of :data:`STACK_KIB` (each a thread's stack) with
    the RSS they hold (``/proc/self/smaps``), before and after JAX starts ``devices`` CPU devices."""
    import jax

    jax.config.update("jax_platforms", "cpu")  # the CPU devices only, as check starts them beside a slice's
    before = _stacks_now()
    jax.config.update("jax_num_cpu_devices", devices)
    assert len(jax.devices("cpu")) == devices
    after = _stacks_now()
    return {"devices": devices, **{f"{k}_before": v for k, v in before.items()}, **after}


def _stacks_now() -> dict[str, int]:
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    found = {"threads": int(status["Threads"]), "rss_kib": int(status["VmRSS"].split()[0]), "stacks": 0,
             "stacks_rss_kib": 0}
    size = 0
    for line in open("/proc/self/smaps"):
        if line.startswith("Size:"):
            size = int(line.split()[1])
            found["stacks"] += abs(size - STACK_KIB) <= 8
        elif line.startswith("Rss:") and abs(size - STACK_KIB) <= 8:
            found["stacks_rss_kib"] += int(line.split()[1])
    return found




def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return " ".join(f"{load:.2f}" for load in os.getloadavg())


def _described(result: dict[str, Any]) -> list[str]:
    rows = _kept_rows(result).values()
    machines = sorted({_machine_words(row) for row in rows})
    missing = "" if any(row["chips"] == 1024 for row in rows) else " 1,024 chips not measured yet."
    return [
        "`python -m benchmarks.check_ratios` (run alone; `benchmarks/check_ratios_tpu_vm.sh` on a quiet TPU VM): "
        "`check FILE --devices N --target tpu:v5p:... --no-cache` against JAX's AOT compile of the same step for "
        "the same slice (`python -m benchmarks.bare_llama_target PROGRAM`), for a Llama-3-8B-shaped FSDP x TP step "
        "with AdamW (`llama_adamw`) and a short-compile mixture-of-experts step (`moe`), at 256 chips "
        "(`tpu:v5p:8x8x4`) and 1,024 (`tpu:v5p:8x8x16`). Each round runs both in fresh processes, one after the "
        "other, the order alternating; the ratios are taken round by round, medians quoted (each row's rounds in "
        "its column); CPU is user + sys, peak RSS each process's own (`wait4`). Each row's `uptime` is the "
        f"machine's load when its rounds ended. Measured on {' and on '.join(machines)}: XLA compiles one program "
        "on several threads, so the wall ratio depends on the cores free (on a loaded machine it means "
        "little); the peak memory of the same compile differs between machines too (the MiB of each row)." + missing,
        *_sandbox_note(rows, result.get("thread_stacks", {})),
    ]


SANDBOX_PLATFORM = "Linux-4.4.0"
"""What ``platform.platform()`` says in a gVisor sandbox: its kernel reports itself as Linux 4.4.0."""


def _sandbox_note(rows: Any, stacks: dict[str, Any]) -> list[str]:
    """Why the rows measured in a gVisor sandbox (the TPU VM host this project borrows) carry more
    peak memory than a Linux kernel would count, with the thread stacks measured on each machine
    (``thread_stacks``): said only when such rows are there."""
    sandboxed = [row for row in rows if SANDBOX_PLATFORM in str((row.get("machine") or {}).get("platform", ""))]
    if not sandboxed:
        return []
    gaps = [row["check_rss_mib"]["median"] - row["bare_rss_mib"]["median"] for row in sandboxed if row["chips"] == 1024]
    measured = "; ".join(
        f"{_machine_words(s)}{' (gVisor)' if SANDBOX_PLATFORM in str(s['machine'].get('platform', '')) else ''}: "
        f"{s['devices']:,} devices, {s['threads']:,} threads, {s['stacks'] - s['stacks_before']:,} more 8 MiB "
        f"mappings holding {(s['stacks_rss_kib'] - s['stacks_rss_kib_before']) / 1024:,.0f} MiB more, RSS "
        f"+{(s['rss_kib'] - s['rss_kib_before']) / 1024:,.0f} MiB" for s in stacks.values())
    gap = f" (the 1,024-chip rows there: {', '.join(f'{g:,.0f}' for g in gaps)} MiB between the two peaks)" if gaps else ""
    return [
        "The 13-core rows ran on the TPU VM host this project borrows, a gVisor sandbox (its kernel reports "
        "Linux 4.4.0; no `VmHWM`), whose memory accounting is not a Linux kernel's: it gives a process private "
        "anonymous memory in 2 MiB units and counts each unit whole in its RSS (gVisor's "
        "`pkg/sentry/mm/pma.go`: `privateAllocUnit = hostarch.HugePageSize`, `addRSSLocked`), so each thread "
        "stack the process touches counts up to 2 MiB. `check --devices N` starts N simulated CPU devices, and "
        "XLA's CPU client (jaxlib 0.10.2) starts `max(cores, N)` threads plus `min(that, 256)` Eigen threads, each "
        "with an 8 MiB stack (`xla/pjrt/cpu/cpu_client.cc`: `GetPjRtCpuClient`, `GetThreadOptions`; no XLA flag, "
        "JAX option or environment variable lowers either but the device count; jaxlib 0.12 starts two more per "
        "device), while JAX's route starts one CPU device. "
        "A fresh process that starts only the CPU devices (`/proc/self/status`, `/proc/self/smaps`, against the "
        f"same process before): {measured}. So on that host most of what `check` adds to the peak{gap} is the "
        "sandbox's count of those stacks, which a Linux kernel counts in pages touched.",
    ]


def _machine_words(row: dict[str, Any]) -> str:
    on = row.get("machine") or {}
    memory = on.get("memory_gib")
    return f"{on.get('nproc', '?')} cores, {'?' if memory is None else round(memory)} GiB"


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    def order(row: dict[str, Any]) -> tuple[int, str, int]:
        return row["chips"], row["program"], -(row.get("machine") or {}).get("nproc", 0)

    return sorted(_kept_rows(result).values(), key=order)


def _phase_lines(result: dict[str, Any]) -> list[str]:
    phases = result.get("phases_cpu_s", {})
    if not phases:
        return []
    lines = ["One `check` of each program phase by phase in one process (CPU seconds, user + sys, XLA's threads "
             "included); the phases JAX's route does not run are shardscope's additions:", ""]
    for key, cpu in sorted(phases.items()):
        program = key.partition("@")[0]
        shared = sum(cpu[k] for k in JAX_ROUTE[program])
        added = {k: v for k, v in cpu.items() if k not in JAX_ROUTE[program]}
        lines.append(f"- `{key}`: " + ", ".join(f"{PHASES[k]} {v:.2f} s" for k, v in cpu.items())
                     + f"; shardscope's own {sum(added.values()):.2f} s against {shared:.2f} s of JAX's route "
                     f"({(shared + sum(added.values())) / shared:.2f}x).")
    return lines


BENCHMARK = Benchmark(
    name="check_ratios",
    heading="7c. `check --target` against JAX's AOT compile at 256 and 1,024 chips",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("program", lambda r: f"`{r['program']}`", align="left"),
                Column("chips", lambda r: f"{r['chips']:,}", align="right"),
                Column("host cores", lambda r: f"{(r.get('machine') or {}).get('nproc', '?')}", align="right"),
                Column("rounds", lambda r: f"{r.get('rounds') or len(r['ratios'])}", align="right"),
                Column("`check` wall, median (min-max)", lambda r: r["check_wall_s"], unit="s", better="lower"),
                Column("JAX's AOT", lambda r: r["bare_wall_s"], unit="s"),
                ratio_column("wall check / JAX", lambda r: r["ratio_median"], better="lower", target=TARGET_RATIO,
                             strong=True),
                Column("CPU: check, JAX", lambda r: f"{r['check_cpu_s']['median']:,.1f}, {r['bare_cpu_s']['median']:,.1f}",
                       unit="s"),
                ratio_column("CPU check / JAX", lambda r: r["cpu_ratio_median"], better="lower", target=TARGET_RATIO,
                             strong=True),
                Column("peak RSS: check, JAX", lambda r: f"{r['check_rss_mib']['median']:,.0f}, "
                       f"{r['bare_rss_mib']['median']:,.0f}", unit="MiB"),
                ratio_column("peak RSS check / JAX", lambda r: r["rss_ratio_median"], better="lower",
                             target=TARGET_RATIO, strong=True),
                Column("rounds' ratios (wall)", lambda r: ", ".join(f"{x:.2f}" for x in r["ratios"]), align="left"),
                Column("`uptime`", lambda r: r.get("uptime", "").partition("load average:")[2].strip(), align="left"),
                Column("commit", lambda r: f"`{r['commit']}`" if r.get("commit") else "-", align="left"),
            ),
            rows=_rows,
        ),
        Prose(_phase_lines),
    ),
)


if __name__ == "__main__":
    main(sys.argv[1:])
