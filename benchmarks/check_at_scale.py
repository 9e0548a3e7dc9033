"""Benchmark 4c: ``shardscope check`` at real scale, against JAX's own route for the same program.

Two programs, each checked as a user checks it and compiled as JAX alone compiles it:

- ``unrolled``: the residual MLP of ``benchmarks/unrolled_step.py`` unrolled to 3,000 layers
  (``SHARDSCOPE_UNROLLED_LAYERS``), its gradients under jit: ``shardscope check FILE --json``
  against ``benchmarks/bare_compile.py`` (``jax.jit(f).lower(*args).compile()``, ``as_text()``).
- ``llama``: the Llama-3-8B-shaped FSDP x TP step of ``benchmarks/llama_step.py`` (32 scanned
  layers, 4 micro-batches): ``shardscope check FILE --devices 256 --target tpu:v5p:8x8x4 --json``
  against ``benchmarks/bare_llama_target.py`` (the step built over the slice's compile-only
  devices, ``lower(*args).compile()``, as MaxText's ahead-of-time compile does).
- ``mixtral``: the held-out program, shaped differently (``benchmarks/mixtral_step.py``: a
  Mixtral-shaped top-2 MoE step over data x expert x tp, 16 layers under a dots-saveable remat
  policy, an Adam update, no micro-batches), checked and compiled the same way
  (``python -m benchmarks.bare_llama_target mixtral``).

Each round runs both commands of a program in fresh processes, one after the other, the order
alternating from round to round; the ratio is taken round by round (side by side: the machine's
drift hits both) and its median quoted, with the peak RSS of each process (``wait4``, what
``/usr/bin/time -v`` reports) and its CPU time (user + sys: steadier than the wall on a loaded
machine, yet the same compile's CPU time still moves with the load: 87-117 s for the Llama step's
slice compile here). ``--together`` runs the two commands of a round at once, so that the load
falls on both alike. No compilation cache (``SHARDSCOPE_NO_CACHE=1``; JAX's is off
unless asked). Then, in this process, one check of each is timed phase by phase.

Run alone, on a quiet machine: ``python -m benchmarks.check_at_scale [--quick | --smoke]
[--programs llama,mixtral] [--no-phases] [--together]`` (writes ``benchmarks/results/check_at_scale.json``);
not part of ``make bench`` (a round is minutes).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from benchmarks.common import ROOT, alternating_rounds, grid, parse_args, python, stats, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table, ratio_column

TARGET_RATIO = 1.2
FULL_ROUNDS, QUICK_ROUNDS, SMOKE_ROUNDS = 3, 1, 1
UNROLLED_LAYERS, SMOKE_UNROLLED_LAYERS = "3000", "4"
PROGRAMS = ("unrolled", "llama", "mixtral")
SMOKE_PROGRAMS, SMOKE_PHASES = ("unrolled",), ("unrolled",)
"""The smallest run (``--smoke``): the rounds and the phases of the 4-layer unrolled step (5 s of CPU
for the pair). The toy Llama and Mixtral pairs took 17 s and 20 s: their route (``check --target``
against ``benchmarks.bare_llama_target``, through this module's rounds and summary) is what
``check_ratios``' smoke runs on the toy MoE step."""
STATUSES = {"check": (0, 1), "bare": (0,)}
"""The exit statuses each command may end with: ``check``'s 1 is a finding, JAX's route must succeed."""


def commands() -> dict[str, dict[str, list[str]]]:
    """Per program, ``check`` and JAX's own route (the environment sets the sizes)."""
    from benchmarks import llama_model, mixtral_model

    unrolled, llama = ROOT / "benchmarks" / "unrolled_step.py", ROOT / "benchmarks" / "llama_step.py"
    mixtral = ROOT / "benchmarks" / "mixtral_step.py"
    return {
        "unrolled": {
            "check": [python(), "-m", "shardscope", "check", str(unrolled), "--json"],
            "bare": [python(), str(ROOT / "benchmarks" / "bare_compile.py"), "unrolled_step", str(unrolled)],
        },
        "llama": {
            "check": [python(), "-m", "shardscope", "check", str(llama), "--devices", str(llama_model.DEVICES),
                      "--target", f"tpu:{llama_model.TOPOLOGY}", "--json"],
            "bare": [python(), "-m", "benchmarks.bare_llama_target"],  # as a module: it imports benchmarks.llama_model
        },
        "mixtral": {
            "check": [python(), "-m", "shardscope", "check", str(mixtral), "--devices", str(mixtral_model.DEVICES),
                      "--target", f"tpu:{mixtral_model.TOPOLOGY}", "--json"],
            "bare": [python(), "-m", "benchmarks.bare_llama_target", "mixtral"],
        },
    }


def _bare_env() -> dict[str, str]:
    """What JAX's own route needs to find the libtpu ``make`` keeps in shardscope's folder, on no
    import path: JAX's ``TPU_LIBRARY_PATH``, as for any libtpu that is not a package (nothing
    where the user set it, or a libtpu package is installed instead)."""
    from shardscope.targets.compilers import private_libtpu

    path = private_libtpu()
    return {} if path is None or "TPU_LIBRARY_PATH" in os.environ else {"TPU_LIBRARY_PATH": str(path)}


def _own_flags(parser: Any) -> None:
    parser.add_argument("--programs", default=",".join(PROGRAMS),
                        help=f"the programs to run, comma-separated (default: {','.join(PROGRAMS)})")
    parser.add_argument("--no-phases", action="store_true", help="leave out the phase-by-phase run in this process")
    parser.add_argument("--together", action="store_true",
                        help="run the two commands of a round at once: on a loaded machine the load then falls on "
                             "both alike (one after the other, each meets its own share of it)")


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and the phases, and write ``check_at_scale.json``."""
    args = parse_args(__doc__.splitlines()[0], argv, _own_flags)
    chosen = tuple(name for name in PROGRAMS if name in args.programs.split(","))
    chosen = grid(args, chosen, chosen, tuple(name for name in SMOKE_PROGRAMS if name in chosen) or chosen[:1])
    rounds = grid(args, FULL_ROUNDS, QUICK_ROUNDS, SMOKE_ROUNDS)
    smoke = args.mode == "smoke"
    # the children inherit the sizes
    os.environ.setdefault("SHARDSCOPE_UNROLLED_LAYERS", SMOKE_UNROLLED_LAYERS if smoke else UNROLLED_LAYERS)
    if smoke:
        os.environ.setdefault("SHARDSCOPE_LLAMA_SIZE", "tiny")
    from benchmarks import llama_model, mixtral_model

    runs = {name: alternating_rounds(name, pair, rounds, envs={"bare": _bare_env()}, statuses=STATUSES,
                                     together=args.together)
            for name, pair in commands().items() if name in chosen}
    programs = {name: _summary(kinds) for name, kinds in runs.items()}
    write_result("check_at_scale", args, {
        "rounds": rounds,
        "together": args.together,
        "target_ratio": TARGET_RATIO,
        "unrolled_layers": int(os.environ["SHARDSCOPE_UNROLLED_LAYERS"]),
        "llama": {"layers": llama_model.LAYERS, "devices": llama_model.DEVICES,
                  "target": f"tpu:{llama_model.TOPOLOGY}", "micro_batches": llama_model.MICRO},
        "mixtral": {"layers": mixtral_model.LAYERS, "devices": mixtral_model.DEVICES,
                    "target": f"tpu:{mixtral_model.TOPOLOGY}", "experts": mixtral_model.EXPERTS},
        "commands": {name: {kind: _shown(argv_) for kind, argv_ in pair.items()} for name, pair in commands().items()},
        "programs": programs,
        **({"phases_s": {}} if args.no_phases else phases(
            llama_model.DEVICES, f"tpu:{llama_model.TOPOLOGY}", SMOKE_PHASES if smoke else chosen)),
    })
    for name, row in programs.items():
        print(f"{name}: check {row['check_wall_s']['median']:.1f} s, JAX {row['bare_wall_s']['median']:.1f} s, "
              f"ratio {row['ratio_median']:.2f}x, CPU time {row['cpu_ratio_median']:.2f}x; "
              f"memory {row['rss_ratio_median']:.2f}x", flush=True)


def _summary(kinds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    check, bare = kinds["check"], kinds["bare"]
    ratios = [c["wall_s"] / b["wall_s"] for c, b in zip(check, bare)]
    rss = [c["max_rss_mib"] / b["max_rss_mib"] for c, b in zip(check, bare)]
    cpu = [(c["user_s"] + c["sys_s"]) / (b["user_s"] + b["sys_s"]) for c, b in zip(check, bare)]
    return {
        "check_wall_s": stats([r["wall_s"] for r in check]),
        "bare_wall_s": stats([r["wall_s"] for r in bare]),
        "check_rss_mib": stats([r["max_rss_mib"] for r in check]),
        "bare_rss_mib": stats([r["max_rss_mib"] for r in bare]),
        "ratios": ratios,
        "ratio_median": statistics.median(ratios),
        "cpu_ratios": cpu,
        "cpu_ratio_median": statistics.median(cpu),
        "check_cpu_s": stats([r["user_s"] + r["sys_s"] for r in check]),
        "bare_cpu_s": stats([r["user_s"] + r["sys_s"] for r in bare]),
        "rss_ratios": rss,
        "rss_ratio_median": statistics.median(rss),
        "exit_codes": sorted({r["returncode"] for r in check}),
    }


def phases(devices: int, target: str, names: tuple[str, ...]) -> dict[str, dict[str, dict[str, float]]]:
    """Per program, the seconds of each phase of one ``check`` in this process, as the command
    runs them (the collector paused): the trace, the jaxpr view, the CPU's lower and compile, its
    compiled plan, and for the target its lower and compile and its plan (``names``: the programs).
    ``phases_s`` holds the walls, ``phases_cpu_s`` the CPU time of the process meanwhile (user +
    sys, XLA's threads included): on a loaded machine the wall is mostly waiting for a core."""
    from shardscope.engine.compilation import READ_ONLY, compile_traced
    from shardscope.engine.hlo.compiled import plan_of
    from shardscope.engine.joined.inspection import inspect_traced
    from shardscope.engine.traceable import traceable
    from shardscope.pipeline.gc_pause import paused
    from shardscope.sources.loading import import_file
    from shardscope.sources.programs import spec_of
    from shardscope.targets.compile import compile_for_target
    from shardscope.targets.host import ensure_devices
    from shardscope.targets.registry import load_target, parse_target

    ensure_devices(devices)
    found, cpu_found = {}, {}
    programs = (("unrolled", "unrolled_step.py", "unrolled_step", None), ("llama", "llama_step.py", "train_step", target),
                ("mixtral", "mixtral_step.py", "train_step", target),
                ("llama_adamw", "llama_adamw_step.py", "train_step", target), ("moe", "moe_step.py", "train_step", target))
    for name, file, function, on in (p for p in programs if p[0] in names):
        module = import_file(ROOT / "benchmarks" / file)[0]
        spec = spec_of(getattr(module, function))
        program = traceable(getattr(module, function), spec.args, spec.kwargs)
        times: dict[str, float] = {}
        cpu: dict[str, float] = {}

        def timed(phase: str, work: Any) -> Any:
            start, start_cpu = time.perf_counter(), time.process_time()
            result = work()
            times[phase], cpu[phase] = time.perf_counter() - start, time.process_time() - start_cpu
            return result

        with paused():
            traced = timed("trace", lambda: program.function.trace(*program.args))
            inspection = timed("jaxpr_view", lambda: inspect_traced(traced, function, program.input_names, []))
            # with a target, check compiles the CPU's plan to be read, never run (READ_ONLY), as here
            compiled = timed("cpu_lower_and_compile",
                             lambda: compile_traced(traced, READ_ONLY if on is not None else None))
            timed("cpu_compiled_plan", lambda: plan_of(traced, compiled, input_names=program.input_names,
                                                       program=inspection.program,
                                                       jaxpr_collectives=inspection.collectives))
            if on is not None:
                slice_ = load_target(parse_target(on))
                compilation = timed("target_lower_and_compile", lambda: compile_for_target(traced, slice_, function))
                timed("target_compiled_plan", lambda: plan_of(traced, compiled, text=compilation.hlo_text,
                                                              input_names=program.input_names,
                                                              backend=slice_.target.platform,
                                                              program=inspection.program,
                                                              jaxpr_collectives=inspection.collectives))
        found[name], cpu_found[name] = times, cpu
        print(f"{name} phases: " + ", ".join(f"{k} {v:.2f} s ({cpu[k]:.2f} s CPU)" for k, v in times.items()),
              flush=True)
    return {"phases_s": found, "phases_cpu_s": cpu_found,
            "phases_cpu_ratio": {name: _own_ratio(name, cpu) for name, cpu in cpu_found.items()}}


def _own_ratio(name: str, cpu: dict[str, float]) -> float:
    """Every phase's CPU time over the CPU time of the phases JAX's route runs too."""
    return sum(cpu.values()) / sum(cpu[key] for key in JAX_ROUTE[name])


def _shown(argv: list[str]) -> str:
    return " ".join(a.replace(str(ROOT) + "/", "") if a.startswith(str(ROOT)) else ("python" if a == python() else a)
                    for a in argv)


JAX_ROUTE = {
    "unrolled": ("trace", "cpu_lower_and_compile"),
    "llama": ("trace", "target_lower_and_compile"),
    "mixtral": ("trace", "target_lower_and_compile"),
    "llama_adamw": ("trace", "target_lower_and_compile"),
    "moe": ("trace", "target_lower_and_compile"),
}
"""The phases JAX's own route runs too (the trace, and the one compile it makes): every other
phase of a ``check`` is what shardscope adds."""
PHASES = {
    "trace": "trace",
    "jaxpr_view": "jaxpr view",
    "cpu_lower_and_compile": "CPU lower + compile",
    "cpu_compiled_plan": "CPU compiled plan",
    "target_lower_and_compile": "target lower + compile",
    "target_compiled_plan": "target compiled plan",
}
DESCRIBED = {
    "unrolled": "a residual MLP unrolled by a Python loop to {layers:,} layers (`benchmarks/unrolled_step.py` with "
                "`SHARDSCOPE_UNROLLED_LAYERS={layers}` in the environment of both commands), its gradients under "
                "jit; JAX's route is `jax.jit(f).lower(*args).compile()`",
    "llama": "a Llama-3-8B-shaped FSDP x TP train step ({layers} scanned layers, {micro} micro-batches; "
             "`benchmarks/llama_model.py`) checked for `{target}` over {devices} CPU devices; JAX's route builds the "
             "same step over the slice's compile-only devices and compiles it (`lower().compile()`, as MaxText's "
             "ahead-of-time compile does)",
    "mixtral": "the held-out program, a Mixtral-shaped top-2 MoE train step ({layers} scanned layers of {experts} "
               "experts under a dots-saveable remat policy, data x expert x tp, an Adam update; "
               "`benchmarks/mixtral_model.py`) checked for `{target}` over {devices} CPU devices; JAX's route as the "
               "Llama step's (`python -m benchmarks.bare_llama_target mixtral`)",
}


COUNTED = {1: "One program", 2: "Two programs", 3: "Three programs"}


def _described(scale: dict[str, Any]) -> list[str]:
    load = scale["load_average"]
    sizes = {"unrolled": {"layers": scale["unrolled_layers"]},
             "llama": {"layers": scale["llama"]["layers"], "micro": scale["llama"]["micro_batches"],
                       "target": scale["llama"]["target"], "devices": scale["llama"]["devices"]},
             "mixtral": {**scale.get("mixtral", {})}}
    return [
        "`python -m benchmarks.check_at_scale` (run alone; not part of `make bench`). "
        f"{COUNTED.get(len(scale['programs']), len(scale['programs']))}: "
        + "; and ".join(DESCRIBED[name].format(**sizes[name]) for name in scale["programs"]) + ". "
        f"Each of {scale['rounds']} rounds runs both commands of a program in fresh processes, "
        + ("at once (the machine's load falls on both alike)" if scale.get("together") else
           "one after the other, the order alternating")
        + "; the ratio is taken round by round (side by side) and its median quoted, of the walls "
        "and of the CPU times (user + sys, steadier on a loaded machine); peak RSS is each process's own (`wait4`, as `/usr/bin/time -v` reports it). No compilation cache. 1-minute load average "
        f"{load['start']:.1f} -> {load['end']:.1f} on this machine's 2 shared cores.",
    ]


def _rows(scale: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": name, "commands": scale["commands"][name], **row} for name, row in scale["programs"].items()]


def _phase_rows(scale: dict[str, Any]) -> list[dict[str, Any]]:
    """Each program's walls, then its CPU times where the run kept them."""
    cpu = scale.get("phases_cpu_s", {})
    rows = []
    for name, p in scale.get("phases_s", {}).items():
        rows.append({"name": name, "measure": "wall" if name in cpu else "", **p})
        if name in cpu:
            rows.append({"name": name, "measure": "CPU", **cpu[name]})
    return rows


def _phase_label(row: dict[str, Any]) -> str:
    """``llama``, or ``llama, CPU`` where the row is one of a program's two."""
    return f"`{row['name']}`" + (f", {row['measure']}" if row["measure"] else "")


def _phase_columns(scale: dict[str, Any]) -> list[str]:
    phases = scale.get("phases_s", {})
    shown = [key for key in PHASES if any(key in p for p in phases.values())]
    table = Table(
        intro=lambda s: "One `check` of each program in one process, phase by phase (the collector paused, as the "
                        "command runs them); CPU is the process's user + sys time meanwhile, XLA's threads included:",
        columns=(Column("program", _phase_label, align="left"),
                 *(Column(PHASES[key], lambda r, key=key: r.get(key), unit="s", better="lower") for key in shown)),
        rows=_phase_rows,
    )
    return table.lines(scale)[:-1]


def _difference(scale: dict[str, Any]) -> list[str]:
    """Which phase JAX's route does not run costs each program's check the most, in words."""
    phases = scale.get("phases_s", {})
    if not phases:
        return []
    out = ["What the difference is made of: the phases JAX's route does not run, against the difference "
           "of the median walls (the rest is the spread of XLA's compile between processes on a shared machine):", ""]
    for name, p in phases.items():
        added = {key: seconds for key, seconds in p.items() if key not in JAX_ROUTE[name]}
        costliest = max(added, key=lambda key: added[key])
        row, walls = scale["programs"].get(name), ""
        if row is not None:
            walls = (f" The median walls differ by {row['check_wall_s']['median'] - row['bare_wall_s']['median']:.1f} s; "
                     f"the compile both routes make ({PHASES[JAX_ROUTE[name][1]]}) took {p[JAX_ROUTE[name][1]]:.1f} s "
                     "in the phase run.")
        out.append(f"- `{name}`: shardscope's own phases take {sum(added.values()):.2f} s of the check; the costliest "
                   f"is the {PHASES[costliest]} ({added[costliest]:.2f} s).{walls}{_cpu_difference(scale, name)}")
    return out


def _cpu_difference(scale: dict[str, Any], name: str) -> str:
    """The same in CPU time, which a loaded machine's waiting for a core leaves out: what
    shardscope's own phases add to the phases JAX's route runs too, and the commands' CPU times."""
    cpu = scale.get("phases_cpu_s", {}).get(name)
    if not cpu:
        return ""
    shared = sum(cpu[key] for key in JAX_ROUTE[name])
    added = sum(seconds for key, seconds in cpu.items() if key not in JAX_ROUTE[name])
    row, commands = scale["programs"].get(name), ""
    if row is not None:
        commands = (f" The commands' median CPU times differ by "
                    f"{row['check_cpu_s']['median'] - row['bare_cpu_s']['median']:.1f} s "
                    f"({row['check_cpu_s']['median']:.1f} s against {row['bare_cpu_s']['median']:.1f} s).")
    return (f" In CPU time, shardscope's own phases take {added:.2f} s against {shared:.1f} s for the phases JAX's "
            f"route runs too ({' and '.join(PHASES[key] for key in JAX_ROUTE[name])}): "
            f"{scale['phases_cpu_ratio'][name]:.2f}x.{commands}")


BENCHMARK = Benchmark(
    name="check_at_scale",
    heading="7b. `check` at real scale, against JAX's own route",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("program", lambda r: f"`{r['name']}`", align="left"),
                Column("command", lambda r: f"`{r['commands']['check']}` vs `{r['commands']['bare']}`", align="left"),
                Column("`check` wall, median (min-max)", lambda r: r["check_wall_s"], unit="s", better="lower"),
                Column("JAX's route", lambda r: r["bare_wall_s"], unit="s"),
                ratio_column("check / JAX, median of per-round ratios", lambda r: r["ratio_median"], better="lower",
                             target=TARGET_RATIO, strong=True),
                ratio_column("rounds", lambda r: {"median": statistics.median(r["ratios"]), "min": min(r["ratios"]),
                                                  "max": max(r["ratios"])}),
                ratio_column("CPU time check / JAX, median", lambda r: r.get("cpu_ratio_median"), better="lower",
                             target=TARGET_RATIO),
                Column("peak RSS: check, JAX", lambda r: f"{r['check_rss_mib']['median']:,.0f}, "
                       f"{r['bare_rss_mib']['median']:,.0f}", unit="MiB"),
                ratio_column("peak RSS check / JAX", lambda r: r["rss_ratio_median"], better="lower",
                             target=TARGET_RATIO, strong=True),
            ),
            rows=_rows,
        ),
        Prose(_phase_columns),
        Prose(_difference),
    ),
)


if __name__ == "__main__":
    main()
