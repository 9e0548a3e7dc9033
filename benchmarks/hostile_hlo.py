"""Benchmark 11: hostile module text against ``check --xla-dump`` and ``shardscope.estimate_module``.

The HLO text is an input format: any file a user points ``check --xla-dump`` at, any string given
to ``shardscope.estimate_module``. Cases are made from real dumps (the CPU dump of
``tests/fixtures/xla_dump/cpu_jax-0.12.0.1`` and the TPU v5e dump of ``tests/fixtures/xla_dump/tpu_v5e``):

- **hostile**: hand-made cases, each one way a text can be broken (deep nesting, cycles, huge
  numbers, broken numbers, duplicate names, long lines and strings, NUL bytes, special files,
  ``estimate_module``'s arguments);
- **boundaries**: a module cut at every computation boundary (after each computation, before
  each header, inside each header);
- **truncations**: a module cut at random points;
- **mutations**: small random edits of a module (a character flipped, deleted or inserted, a
  token renamed to another of the module's names, deleted or repeated, a line deleted, repeated
  or moved, a number replaced by a broken or huge one).

Each case runs in a worker process under a memory cap (``RLIMIT_AS``) and a limit of CPU time: the CLI
(``shardscope.cli.main(["check", "--xla-dump", FILE])`` in the worker, its output captured) and
the API (``estimate_module(text, "v5e")``). What is counted: a refusal (exit 2 with one
``shardscope: error:`` line; a ``ShardscopeError`` through the API), a plan (exit 0 or 1; an
estimate), a traceback (any other exception), a hang (the CPU limit, or ten times it in wall
time for a read that blocks), memory (``MemoryError``, or the worker killed).
A hand-made case, a boundary and a truncation must be refused; a mutation may still be a module
(a renamed metadata string is one), so only tracebacks, hangs and memory count against it, and
how many mutations turned the real module's exit 1 into exit 0 is said beside.

Run alone: ``python -m benchmarks.hostile_hlo [--quick | --smoke] [--workers N] [--mutations N]``. The
cases are made by :mod:`benchmarks.hlo_cases`, which ``tests/test_hlo_fuzz.py`` and
``tests/test_hlo_hostile.py`` use too (a few hundred cases, in the suite).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import multiprocessing.connection
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

from benchmarks.common import grid as grid_of, parse_args, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table
from benchmarks.hlo_cases import DUMP_NAME, FAMILIES, Case, every_case, make_special

FULL = {"truncations": 800, "mutations": 37_435, "limit_s": 120, "mutation_limit_s": 30, "memory_gib": 3}
QUICK = {"truncations": 200, "mutations": 2_000, "limit_s": 60, "mutation_limit_s": 30, "memory_gib": 3}
SMOKE = {"truncations": 4, "mutations": 8, "limit_s": 60, "mutation_limit_s": 60, "memory_gib": 3, "hostile": 5,
         "controls": 2, "boundaries": 6, "workers": 1}
"""A few cases of each family in one worker: the hand-made ones are the five kinds of deep nesting at
1,000 levels (the twelve it ran before reached 100,000 levels: 12 s of the worker's CPU for one case;
``tests/test_hlo_hostile.py`` reads the deepest)."""
MUST_REFUSE = frozenset({"hostile", "special files", "arguments", "boundaries", "truncations"})
MUST_PLAN = frozenset({"controls"})
OUTCOMES = ("refused", "plan", "traceback", "hang", "memory")


def _site(exc: BaseException) -> str:
    """Where an exception was raised: the innermost frame in shardscope, ``file:line``."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/shardscope/" in f.filename] or frames
    frame = ours[-1] if ours else None
    where = f"{frame.filename.rsplit('/shardscope/', 1)[-1]}:{frame.lineno}" if frame else "?"
    return f"{type(exc).__name__} at {where}"


def _run_cli(path: Path) -> dict[str, Any]:
    from shardscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["check", "--xla-dump", str(path)])
    except MemoryError as exc:
        return {"outcome": "memory", "site": _site(exc)}
    except BaseException as exc:  # noqa: BLE001 - what escaped the CLI is what is counted
        return {"outcome": "traceback", "site": _site(exc)}
    text = err.getvalue()
    errors = [line for line in text.splitlines() if line.startswith("shardscope: error:")]
    if status == 2 and len(errors) == 1 and "Traceback" not in text:
        return {"outcome": "refused", "message": errors[0][len("shardscope: error: "):][:300], "status": 2}
    if status in (0, 1):
        return {"outcome": "plan", "status": status}
    return {"outcome": "traceback", "site": f"exit {status}: {text[-300:]}"}


def _run_api(text: Any, chip: Any) -> dict[str, Any]:
    import shardscope
    from shardscope.errors import ShardscopeError

    try:
        estimate = shardscope.estimate_module(text, chip)
    except ShardscopeError as exc:
        return {"outcome": "refused", "message": str(exc).splitlines()[0][:300],
                "value_error": isinstance(exc, ValueError), "type_error": isinstance(exc, TypeError)}
    except MemoryError as exc:
        return {"outcome": "memory", "site": _site(exc)}
    except BaseException as exc:  # noqa: BLE001
        return {"outcome": "traceback", "site": _site(exc)}
    return {"outcome": "plan", "estimate": estimate.line()[:200]}


def _worker(connection: Any, memory_bytes: int) -> None:
    """Run cases sent over ``connection`` until it closes, each in a fresh folder."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    import shardscope.cli  # noqa: F401 - imported once, before the first case's clock starts
    import shardscope.pipeline.xla_dump  # noqa: F401
    import shardscope.costmodel.estimate  # noqa: F401

    connection.send("ready")
    while True:
        try:
            case = connection.recv()
        except EOFError:
            return
        with tempfile.TemporaryDirectory() as folder:
            result: dict[str, Any] = {}
            if case.family == "arguments":
                result["api"] = _run_api(case.argument, case.chip)
            elif case.special is not None:
                result["cli"] = _run_cli(make_special(case.special, Path(folder)))
                if case.special == "a file that cannot be read":  # readable again, for the folder's removal
                    Path(folder, "dump", DUMP_NAME).chmod(0o600)
            else:
                path = Path(folder) / DUMP_NAME
                path.write_text(case.text or "", errors="surrogatepass")
                result["cli"] = _run_cli(path)
                result["api"] = _run_api(case.text, case.chip)
        connection.send(result)


WALL_FACTOR = 10
"""A case that uses no CPU for this many times its limit (a blocked read) hangs too."""


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) the process ``pid`` has used, from ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pool:
    """Worker processes that run one case each at a time, each case under a time limit."""

    def __init__(self, workers: int, memory_bytes: int) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.memory_bytes = memory_bytes
        self.slots = [self._start() for _ in range(workers)]

    def _start(self) -> tuple[Any, Any]:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker, args=(child, self.memory_bytes), daemon=True)
        process.start()
        child.close()
        assert parent.recv() == "ready"
        return process, parent

    def run(self, cases: Iterator[Case], limit_of: Any, done: Any) -> None:
        """Run every case; ``done(case, result)`` for each, in completion order. A case hangs when its
        worker spends more than its limit in CPU time on it (the machine's load does not count), or
        :data:`WALL_FACTOR` times its limit in wall time (a read that blocks uses no CPU)."""
        busy: dict[int, tuple[Case, float, float]] = {}
        pending = iter(cases)
        exhausted = False
        while True:
            for k, (process, connection) in enumerate(self.slots):
                if k not in busy and not exhausted:
                    case = next(pending, None)
                    if case is None:
                        exhausted = True
                        continue
                    connection.send(case)
                    busy[k] = (case, time.monotonic(), _cpu_seconds(process.pid))
            if not busy:
                return
            ready = multiprocessing.connection.wait([self.slots[k][1] for k in busy], timeout=0.2)
            for k in list(busy):
                process, connection = self.slots[k]
                case, started, cpu_started = busy[k]
                if connection in ready:
                    try:
                        result = connection.recv()
                    except EOFError:  # the worker died (the memory cap's kill, a crash)
                        result = {"cli": {"outcome": "memory", "site": "the worker died"}}
                        self.slots[k] = self._restart(k)
                    result["seconds"] = _cpu_seconds(process.pid) - cpu_started
                    del busy[k]
                    done(case, result)
                elif (_cpu_seconds(process.pid) - cpu_started > limit_of(case)
                      or time.monotonic() - started > WALL_FACTOR * limit_of(case)):
                    self.slots[k] = self._restart(k)
                    del busy[k]
                    hang = {"outcome": "hang", "site": f"over {limit_of(case)} s"}
                    done(case, {"cli": hang} if case.family != "arguments" else {"api": hang})

    def _restart(self, k: int) -> tuple[Any, Any]:
        process, connection = self.slots[k]
        process.kill()
        process.join()
        connection.close()
        return self._start()

    def close(self) -> None:
        for process, connection in self.slots:
            connection.close()
            process.join(5)
            if process.is_alive():
                process.kill()


def main(argv: list[str] | None = None) -> None:
    """Run every case and write ``hostile_hlo.json``: counts by family, surface and outcome."""
    args = parse_args(__doc__.splitlines()[0], argv, lambda p: (
        p.add_argument("--workers", type=int, help="worker processes (default 2; 1 with --smoke)"),
        p.add_argument("--seed", type=int, default=0, help="the random cases' seed"),
        p.add_argument("--mutations", type=int, help="how many mutations (default: the mode's)"),
        p.add_argument("--truncations", type=int, help="how many random truncations (default: the mode's)"),
        p.add_argument("--family", action="append", choices=FAMILIES, help="run only this family (repeatable)")))
    grid = dict(grid_of(args, FULL, QUICK, SMOKE))
    grid.update({key: getattr(args, key) for key in ("mutations", "truncations") if getattr(args, key) is not None})
    families = tuple(args.family or FAMILIES)
    grid["families"] = list(families)
    counts: dict[str, dict[str, dict[str, int]]] = {}
    failures: dict[str, list[dict[str, str]]] = {}
    statuses: dict[str, list[tuple[str, int | None]]] = {}
    slowest: dict[str, float] = {}
    started = time.monotonic()
    finished = [0]

    def done(case: Case, result: dict[str, Any]) -> None:
        finished[0] += 1
        if finished[0] % 500 == 0:
            print(f"{finished[0]:,} cases in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        for surface in ("cli", "api"):
            outcome = result.get(surface)
            if outcome is None:
                continue
            family = counts.setdefault(case.family, {}).setdefault(surface, dict.fromkeys(OUTCOMES, 0))
            family[outcome["outcome"]] += 1
            must_plan = case.family in MUST_PLAN or case.valid or (
                case.special == "a file that cannot be read" and os.geteuid() == 0)
            bad = outcome["outcome"] in ("traceback", "hang", "memory") or (
                case.family in MUST_REFUSE and not must_plan and outcome["outcome"] == "plan") or (
                must_plan and outcome["outcome"] != "plan")
            if bad:
                failures.setdefault(f"{case.family}/{surface}", []).append(
                    {"case": case.name, "outcome": outcome["outcome"], "site": outcome.get("site", "")})
        cli = result.get("cli", {})
        if case.base:
            statuses.setdefault(case.base, []).append((case.family, cli.get("status"), case.name))
        slowest[case.family] = max(slowest.get(case.family, 0.0), result.get("seconds", 0.0))

    pool = Pool(args.workers or grid.get("workers", 2), grid["memory_gib"] * 2**30)
    try:
        limit = lambda case: grid["mutation_limit_s"] if case.family == "mutations" else grid["limit_s"]  # noqa: E731
        pool.run(every_case(grid, args.seed, families), limit, done)
    finally:
        pool.close()
    changed = {"exit 1 to 0": 0, "mutations": 0}
    passed: list[str] = []  # the mutations of a module whose check fails that pass it
    for found in statuses.values():
        base = next((status for family, status, _ in found if family == "controls"), None)
        mutated = [(status, name) for family, status, name in found if family == "mutations"]
        if base == 1:
            changed["mutations"] += len(mutated)
            changed["exit 1 to 0"] += sum(status == 0 for status, _ in mutated)
            passed += [name for status, name in mutated if status == 0]
    share = changed["exit 1 to 0"] / changed["mutations"] if changed["mutations"] else 0.0
    sites: dict[str, int] = {}
    for rows in failures.values():
        for row in rows:
            sites[row["site"]] = sites.get(row["site"], 0) + 1
    write_result("hostile_hlo", args, {
        "grid": grid,
        "seconds": time.monotonic() - started,
        "counts": counts,
        "exit_1_to_0": changed,
        "exit_1_to_0_share": share,
        "exit_1_to_0_cases": passed[:40],
        "slowest_case_s": slowest,
        "sites": dict(sorted(sites.items(), key=lambda kv: -kv[1])),
        "failures": {key: rows[:40] for key, rows in failures.items()},
        "failure_counts": {key: len(rows) for key, rows in failures.items()},
    })


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for family in FAMILIES:
        for surface, label in (("cli", "check --xla-dump"), ("api", "estimate_module")):
            found = result["counts"].get(family, {}).get(surface)
            if found:
                rows.append({"family": family, "surface": label, "cases": sum(found.values()), **found,
                             "wrong": result["failure_counts"].get(f"{family}/{surface}", 0)})
    return rows


def _described(result: dict[str, Any]) -> list[str]:
    grid, changed, share = result["grid"], result["exit_1_to_0"], result["exit_1_to_0_share"]
    return [
        f"`python -m benchmarks.hostile_hlo` (run alone, {result['seconds'] / 60:.0f} min): every case in a worker "
        f"process under a {grid['memory_gib']} GiB memory cap and a limit of CPU time ({grid['limit_s']} s a case, "
        f"{grid['mutation_limit_s']} s a mutation; {WALL_FACTOR} times that in wall time, for a read that blocks), "
        "through the CLI and the API. A hand-made case, a cut at a "
        "computation boundary and a random truncation must be refused (exit 2 with one message; a ShardscopeError); "
        "a mutation may still be a module, so only tracebacks, hangs and memory count against it. "
        f"**{sum(result['failure_counts'].values())}** cases went wrong.",
        "",
        f"{changed['exit 1 to 0']:,} of {changed['mutations']:,} mutations of a module whose check exits 1 (the CPU "
        f"dump: a deferrable all-reduce in its loop) ({share:.1%}) exited 0.",
    ]


BENCHMARK = Benchmark(
    name="hostile_hlo",
    heading="11. Hostile module text: check --xla-dump and estimate_module",
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("family", lambda r: r["family"], align="left"),
                Column("surface", lambda r: r["surface"], align="left"),
                Column("cases", lambda r: r["cases"], digits=None),
                Column("refused", lambda r: r["refused"], digits=None),
                Column("plan", lambda r: r["plan"], digits=None),
                Column("traceback", lambda r: r["traceback"], digits=None, better="lower"),
                Column("hang", lambda r: r["hang"], digits=None, better="lower"),
                Column("memory", lambda r: r["memory"], digits=None, better="lower"),
                Column("wrong", lambda r: r["wrong"], digits=None, better="lower", strong=True),
            ),
            rows=_rows,
        ),
    ),
)


if __name__ == "__main__":
    main()
