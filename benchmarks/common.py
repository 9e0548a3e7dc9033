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
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
QUICK_RESULTS = RESULTS / "quick"
DEMOS = ROOT / "demos"
_LOAD_AT_START = os.getloadavg()[0]


def results_dir(quick: bool) -> Path:
    """Where results go: quick runs never overwrite the committed full results."""
    directory = QUICK_RESULTS if quick else RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``--quick`` and ``--out``: the flags every benchmark module takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a smaller grid and fewer repeats")
    parser.add_argument("--out", type=Path, help="the JSON file to write (default: benchmarks/results/)")
    return parser.parse_args(argv)


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


def write_result(name: str, quick: bool, data: dict[str, Any], out: Path | None = None) -> Path:
    """Write one benchmark's JSON with the machine, the date and the mode it ran in."""
    path = out or results_dir(quick) / f"{name}.json"
    payload = {
        "benchmark": name,
        "mode": "quick" if quick else "full",
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


def python() -> str:
    """The interpreter running the benchmarks (the project's venv under ``make bench``)."""
    return sys.executable
