"""What every benchmark shares: the command line, the machine, statistics and the JSON file."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
QUICK_RESULTS = RESULTS / "quick"
SMOKE_RESULTS = QUICK_RESULTS / "smoke"
DEMOS = ROOT / "demos"
_LOAD_AT_START = os.getloadavg()[0]


def results_dir(mode: str) -> Path:
    """Where results go: quick and smoke runs never overwrite the committed full results."""
    directory = {"full": RESULTS, "quick": QUICK_RESULTS, "smoke": SMOKE_RESULTS}[mode]
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def parse_args(description: str, argv: Sequence[str] | None = None,
               own: Callable[[argparse.ArgumentParser], object] | None = None) -> argparse.Namespace:
    """``--quick``, ``--smoke`` and ``--out``: the flags every benchmark module takes (``own`` adds
    a module's own).

    The namespace's ``mode`` is ``full``, ``quick`` or ``smoke``: :func:`grid` picks the cells by it
    and :func:`write_result` records it.
    """
    parser = argparse.ArgumentParser(description=description)
    if own is not None:
        own(parser)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a smaller grid and fewer repeats")
    size.add_argument("--smoke", action="store_true",
                      help="the smallest cell, once: checks that the benchmark still runs (its figures mean "
                           "nothing); the test suite runs every benchmark so (tests/test_benchmark_smoke.py)")
    parser.add_argument("--out", type=Path, help="the JSON file to write (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    args.mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    return args


def grid(args: argparse.Namespace, full: Any, quick: Any, smoke: Any) -> Any:
    """The cells (or rounds) of the mode the command line asked for."""
    return {"full": full, "quick": quick, "smoke": smoke}[args.mode]


def machine() -> dict[str, Any]:
    """The machine and the versions the numbers were measured with."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gib": memory_gib,
        "cpu": cpu,
        "platform": platform.platform(),
        "versions": {name: _version(name) for name in ("python", "jax", "jaxlib", "textual", "numpy", "networkx")},
    }


def _version(name: str) -> str | None:
    if name == "python":
        return platform.python_version()
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def stats(samples: Sequence[float]) -> dict[str, float]:
    """Median, min and max of a list of samples (with the samples themselves)."""
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
        "samples": list(samples),
    }


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_result(name: str, args: argparse.Namespace, data: Any) -> Path:
    """Write one benchmark's JSON (to ``args.out``, else its mode's folder) with the machine, the
    date and the mode it ran in; a list of cases (``layouts``) is written as it is."""
    path = args.out or results_dir(args.mode) / f"{name}.json"
    if isinstance(data, list):
        path.write_text(json.dumps(data, indent=1))
        return path
    payload = {
        "benchmark": name,
        "mode": args.mode,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        # other work on the machine: the 1-minute load average when this benchmark started and ended
        "load_average": {"start": _LOAD_AT_START, "end": os.getloadavg()[0]},
        **data,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
    return path


FRESH_COMPILES = {"SHARDSCOPE_NO_CACHE": "1"}
"""The environment a timed ``shardscope`` command runs in: no compilation cache."""


def run_child(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 900) -> dict[str, Any]:
    """Run a process to completion: its wall time, its own peak RSS (from ``wait4``) and output.

    Output goes through temporary files so the child can be reaped with ``os.wait4``, which
    gives that one child's resource usage (``RUSAGE_CHILDREN`` would be a maximum over all).
    A ``shardscope`` command compiles afresh (``SHARDSCOPE_NO_CACHE=1``) unless ``env`` says
    otherwise: the benchmarks time XLA's compile, never a read of the compilation cache.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), cwd=ROOT, stdout=out, stderr=err, env={**os.environ, **FRESH_COMPILES, **(env or {})})
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise RuntimeError(f"{' '.join(argv)} timed out after {timeout} s")
            time.sleep(0.005)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "wall_s": wall,
            "max_rss_mib": usage.ru_maxrss / 1024,
            "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime,
            "returncode": proc.returncode,
            "stdout": out.read(),
            "stderr": err.read(),
        }


def alternating_rounds(label: str, commands: dict[str, list[str]], rounds: int, *,
                       envs: dict[str, dict[str, str]] | None = None, statuses: dict[str, tuple[int, ...]] | None = None,
                       together: bool = False, timeout: float = 1800) -> dict[str, list[dict[str, Any]]]:
    """Each command of ``commands`` (by kind) in a fresh process, ``rounds`` times: :func:`run_child`'s
    record of every run, by kind, in round order.

    A round runs them one after the other, in the order given and reversed every other round (so
    that neither always meets the machine first), or all at once with ``together`` (the load then
    falls on all alike). ``envs`` adds to a kind's environment; a kind may exit with one of its
    ``statuses`` (default 0 only), any other raises with the end of its stderr. Each run is printed
    as ``round i/n LABEL KIND: wall, CPU, peak RSS``.
    """
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in commands}
    for i in range(rounds):
        order = list(commands)[:: -1 if i % 2 else 1]
        for kind, result in zip(order, _run_round([commands[kind] for kind in order],
                                                  [(envs or {}).get(kind) for kind in order], together, timeout)):
            if result["returncode"] not in (statuses or {}).get(kind, (0,)):
                raise RuntimeError(f"{label} {kind} exited with {result['returncode']}:\n{result['stderr'][-3000:]}")
            runs[kind].append(result)
            print(f"round {i + 1}/{rounds} {label} {kind}: {result['wall_s']:.1f} s, "
                  f"{result['user_s'] + result['sys_s']:.1f} s CPU, {result['max_rss_mib']:.0f} MiB", flush=True)
    return runs


def _run_round(argvs: list[list[str]], envs: list[dict[str, str] | None], together: bool,
               timeout: float) -> list[dict[str, Any]]:
    """Each command run to completion with its environment's additions: one after the other, or
    all at once."""
    if not together:
        return [run_child(argv, env=env, timeout=timeout) for argv, env in zip(argvs, envs)]
    with ThreadPoolExecutor(len(argvs)) as pool:  # each thread waits on its own child (wait4 by pid)
        return list(pool.map(lambda pair: run_child(pair[0], env=pair[1], timeout=timeout), zip(argvs, envs)))


def python() -> str:
    """The interpreter running the benchmarks (the project's venv under ``make bench``)."""
    return sys.executable


COMMIT_ENV = "SHARDSCOPE_BENCH_COMMIT"
"""The commit a run measures, for a copy of the tree without its git history (a borrowed machine)."""


def commit() -> str | None:
    """The commit a result was measured on: :data:`COMMIT_ENV`, else the checkout's HEAD."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None
