"""A profile JAX's profiler wrote, read: each run of each compiled instruction on each device.

``jax.profiler.start_trace(DIR)`` (or XProf's capture on a slice) writes
``DIR/plugins/profile/<run>/<host>.xplane.pb``, one file per host. XProf's converter
(``xprof``, the extra ``shardscope[profile]``) turns them into trace events offline, with no
server: each file is copied into a temporary folder first (the converter writes caches beside
what it reads, and a user's profile, a ``gs://`` bucket or a test's fixture stays untouched).

Two timelines are read (checked on XLA:CPU and a TPU v5e chip, JAX 0.10.2; GPU unverified):

- **an accelerator** (a ``/device:TPU:0`` process): its ``XLA Modules`` line holds each run of
  a compiled module (``jit_step(8169850638403772900)``: the module's name and program id), its
  ``XLA Ops`` line each instruction's run, named as the module text names it;
- **XLA:CPU** (a ``/host:CPU`` process): ``[3] CommonPjRtLoadedExecutable::Execute (jit_step)``
  dispatches device 3's run, which runs on a thread of the client's pool, not always the one
  that dispatched it nor the same one every call. An event belongs to the module dispatched last
  before it and to the call whose dispatch came last (calls waited on one by one, as
  ``--profile`` runs them). In one call a thread's events are mostly one device's run
  (``cpu thread 0`` ...), but a thread can also take another device's run while the first waits
  at a rendezvous: counts per call are exact, per thread they are not (the mapping reads each
  thread's mean run time).

``hlo_stats`` (accelerators only; empty on the CPU) adds, per instruction, its framework
``op_name``, occurrences and self time, what bounds it: the fallback when names differ and the
measured side of the cost model's check.
"""

from __future__ import annotations

import bisect
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from shardscope.errors import ShardscopeError
from shardscope.native_stderr import stderr_caught

PROFILE_EXTRA = "shardscope[profile]"
"""The extra that installs XProf's converter."""

INSTALL_HINT = f'pip install "{PROFILE_EXTRA}" (it installs xprof, XProf\'s own package)'

SUFFIX = ".xplane.pb"

_CPU_EXECUTE = re.compile(r"^\[(\d+)\] CommonPjRtLoadedExecutable::Execute \((.+)\)$")
_MODULE_RUN = re.compile(r"^(.+?)\((\d+)\)$")
_OPS_LINES = ("XLA Ops", "Async XLA Ops")
_MODULES_LINE = "XLA Modules"


class ProfileError(ShardscopeError):
    """A profile that cannot be read: none there, a truncated file, a converter or gcsfs missing."""


@dataclass(frozen=True)
class OpRun:
    """One run of one instruction: on ``device`` (on XLA:CPU, the client's thread that ran it,
    mostly one simulated device's program in that call), in the module's ``call``-th run (0 first);
    ``start_us``/``dur_us`` its place on the timeline, in microseconds."""

    device: str
    module: str
    program_id: str
    call: int
    name: str
    start_us: float
    dur_us: float

    @property
    def end_us(self) -> float:
        """When it ended, in microseconds."""
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class ModuleRun:
    """One run of a compiled module on one device: an accelerator's ``XLA Modules`` line (its
    duration is the run's), or XLA:CPU's ``[d] Execute (module)`` (``dur_us`` None: the
    dispatch, not the run)."""

    device: str
    module: str
    program_id: str
    start_us: float
    dur_us: float | None


@dataclass(frozen=True)
class HloStat:
    """One row of XProf's ``hlo_stats``: an instruction of a program, its framework ``op_name``,
    how often it ran on the profiled devices and its average self time (microseconds)."""

    program_id: str
    name: str
    category: str
    op_name: str
    occurrences: int
    total_us: float
    self_us: float
    bound_by: str
    source: str


@dataclass(frozen=True)
class Profile:
    """What a profile holds: every instruction run on every device, the modules' runs, and
    XProf's per-instruction statistics where the platform gives them."""

    source: str
    hosts: tuple[str, ...]
    ops: tuple[OpRun, ...]
    module_runs: tuple[ModuleRun, ...] = ()
    stats: tuple[HloStat, ...] = ()

    @property
    def modules(self) -> tuple[str, ...]:
        """The names of the compiled modules that ran, in order of their first event."""
        named = sorted([(r.start_us, r.module) for r in self.module_runs] + [(o.start_us, o.module) for o in self.ops])
        return tuple(dict.fromkeys(module for _, module in named))

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices with events, sorted."""
        return tuple(sorted({op.device for op in self.ops}))


def require_converter() -> None:
    """Raise a :class:`ProfileError` naming the extra when XProf's converter is not installed."""
    try:
        import xprof.convert.raw_to_tool_data  # noqa: F401  (only whether it imports)
    except ImportError as exc:
        raise ProfileError("Reading a JAX profile needs XProf's converter, and xprof is not installed.",
                           INSTALL_HINT) from exc


def profile_files(location: str | Path) -> list[Path]:
    """The ``.xplane.pb`` files of ``location``, local: a ``plugins/profile/<run>`` folder, the
    folder ``start_trace`` was given (its newest run), or one ``.xplane.pb`` file."""
    path = Path(location)
    if not path.exists():
        raise ProfileError(f"{location}: no such file or folder.", "give the folder jax.profiler.start_trace wrote into")
    if path.is_file():
        if not path.name.endswith(SUFFIX):
            raise ProfileError(f"{location} is not a profile ({SUFFIX} file).",
                               "give its plugins/profile/<run> folder or one .xplane.pb file")
        return [path]
    here = sorted(path.glob("*" + SUFFIX))
    if here:
        return here
    runs = sorted({p.parent for p in path.glob("**/*" + SUFFIX)}, key=lambda p: p.name)
    if runs:
        return sorted(runs[-1].glob("*" + SUFFIX))  # the newest run: start_trace names them by date
    if not any(path.iterdir()):
        raise ProfileError(f"{location} is empty: no profile in it.",
                           "capture one with jax.profiler.start_trace(DIR) ... stop_trace(), then pass DIR")
    raise ProfileError(f"{location} holds no profile: no {SUFFIX} file in it or under plugins/profile/.",
                       "pass the folder given to jax.profiler.start_trace, or its plugins/profile/<run> folder")


def fetched(location: str, into: Path) -> Path:
    """A ``gs://`` profile folder (or file) copied into ``into`` (gcsfs reads it); a local path as it is."""
    if not location.startswith("gs://"):
        return Path(location)
    try:
        import gcsfs
    except ImportError as exc:
        raise ProfileError(f"Reading {location} needs gcsfs, which is not installed.",
                           f'pip install gcsfs (the full {PROFILE_EXTRA} brings it), or copy the folder '
                           "locally: gsutil -m cp -r ...") from exc
    fs = gcsfs.GCSFileSystem()
    try:
        names = [n for n in fs.find(location) if n.endswith(SUFFIX)] if fs.isdir(location) else [location]
        for name in names:
            target = into / Path(name).parent.name / Path(name).name  # <run>/<host>.xplane.pb, as profile_files reads
            target.parent.mkdir(parents=True, exist_ok=True)
            fs.get(name, str(target))
    except Exception as exc:  # gcsfs's own errors: credentials, a missing bucket
        raise ProfileError(f"Could not read {location}: {exc}", "check the path and your Google Cloud credentials") from exc
    return into


def read_profile(location: str | Path) -> Profile:
    """The :class:`Profile` at ``location`` (a local or ``gs://`` folder, or one ``.xplane.pb``)."""
    require_converter()
    with tempfile.TemporaryDirectory(prefix="shardscope-profile-") as scratch:
        local = fetched(str(location), Path(scratch) / "fetched")
        files = profile_files(local)
        copies = Path(scratch) / "copies"
        copies.mkdir()
        paths = [str(shutil.copy(f, copies / f.name)) for f in files]  # the converter writes beside what it reads
        hosts = tuple(f.name[: -len(SUFFIX)] for f in files)
        ops: list[OpRun] = []
        runs: list[ModuleRun] = []
        stats: list[HloStat] = []
        for host, path in zip(hosts, paths):  # one file per host: devices named by their host
            host_ops, host_runs = _timeline(_trace_events([path], str(location)), host if len(hosts) > 1 else "")
            ops.extend(host_ops)
            runs.extend(host_runs)
            stats.extend(_hlo_stats([path]))
    if not ops:
        raise ProfileError(f"{location} holds no run of a compiled program.",
                           "profile while the program runs: start_trace, call the step, block_until_ready, stop_trace")
    return Profile(str(location), hosts, tuple(ops), tuple(runs), tuple(stats))


def _convert(paths: list[str], tool: str) -> bytes | str | None:
    """XProf's conversion of ``paths`` for ``tool`` (None when it failed); the converter's C++
    log lines (dozens per call, on descriptor 2) kept off the terminal."""
    from xprof.convert import raw_to_tool_data  # the extra's: checked by require_converter

    with stderr_caught():  # its lines dropped
        data, _ = raw_to_tool_data.xspace_to_tool_data(paths, tool, {"use_saved_result": False})
    return data


def _trace_events(paths: list[str], location: str) -> list[dict]:
    """The trace events of ``paths`` (XProf's full trace viewer JSON: no event dropped), or a
    ProfileError for a file the converter cannot read (truncated, not a profile)."""
    data = _convert(paths, "trace_viewer")
    try:
        events = json.loads(data)["traceEvents"] if data else None
    except (ValueError, KeyError):
        events = None
    if events is None:
        raise ProfileError(f"{location}: XProf could not read the profile (a truncated or damaged {SUFFIX}).",
                           "capture it again and let stop_trace() return before copying the folder")
    return events


def _hlo_stats(paths: list[str]) -> tuple[HloStat, ...]:
    """XProf's ``hlo_stats`` rows (none on the CPU, nor when the tool fails)."""
    data = _convert(paths, "hlo_stats")
    try:
        table = json.loads(data) if data else {}
    except ValueError:
        return ()
    if isinstance(table, list):  # some versions wrap the table in a list
        table = table[0] if table else {}
    columns = [c["id"] for c in table.get("cols", [])]
    rows = []
    for row in table.get("rows", []):
        cell = dict(zip(columns, (c.get("v") for c in row["c"])))
        rows.append(HloStat(str(cell.get("program_id", "")), str(cell.get("hlo_op_name", "")),
                            str(cell.get("category", "")), str(cell.get("tf_op_name", "") or "").rstrip(":"),
                            int(cell.get("occurrences") or 0), float(cell.get("total_time") or 0.0),
                            float(cell.get("total_self_time") or 0.0), str(cell.get("bound_by", "") or ""),
                            _source_of(str(cell.get("source_info", "") or ""))))
    return tuple(rows)


def _source_of(cell: str) -> str:
    """``file.py:22`` from hlo_stats's source cell (an HTML title listing the frames, innermost first)."""
    found = re.search(r"title='([^:'\n]+):(\d+)", cell)
    return f"{Path(found.group(1)).name}:{found.group(2)}" if found else ""


def _timeline(events: Iterable[dict], host: str) -> tuple[list[OpRun], list[ModuleRun]]:
    """Each instruction's runs per device, and each module's runs, of one host's events."""
    events = list(events)
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lines: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("ph") == "X":
            lines.setdefault((e["pid"], e.get("tid")), []).append(e)
    timeline = _Timeline(host)
    for (pid, tid), line in sorted(lines.items(), key=lambda item: str(item[0])):
        line.sort(key=lambda e: (e["ts"], -e.get("dur", 0.0)))
        process = processes.get(pid, str(pid))
        reader = _READERS.get(_process_kind(process))
        if reader is not None:
            reader(timeline, process, threads.get((pid, tid), ""), line)
    return timeline.placed(), timeline.runs


class _Timeline:
    """One host's runs as they are read: accelerators' ops are placed in their module runs
    afterwards, CPU ops in the module whose dispatch started last before them."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.runs: list[ModuleRun] = []
        self.device_ops: list[OpRun] = []
        self.cpu_lines: list[list[dict]] = []

    def device(self, name: str) -> str:
        """``name`` on this host (``host/TPU:0``; the host left out for a single-host profile)."""
        return f"{self.host}/{name}" if self.host else name

    def placed(self) -> list[OpRun]:
        """Every op with its module: an accelerator's by the run that holds it on its device; a CPU
        thread's by the last dispatch before it (each thread that runs ops is one device)."""
        return _placed_in_runs(self.device_ops, self.runs) + self._cpu_ops()

    def _cpu_ops(self) -> list[OpRun]:
        # a call of a module starts at its first dispatch ([0] ... [n-1] come together); each
        # thread's events in one call are one device's run of it (its collectives block the
        # thread until every device arrives, so no thread runs two devices' runs of one call)
        dispatches = sorted((r.start_us, r.module) for r in self.runs if r.dur_us is None)
        calls = _call_starts(self.runs)
        starts = [start for start, _ in dispatches]
        ops = []
        lanes = [line for line in self.cpu_lines if any(_module_before(e, starts, dispatches) for e in line)]
        for lane, line in enumerate(lanes):
            device = self.device(f"cpu thread {lane}")
            for e in line:
                module = _module_before(e, starts, dispatches)
                if module and not e["name"].startswith("end: "):
                    call = bisect.bisect_right(calls[module], float(e["ts"])) - 1
                    ops.append(OpRun(device, module, "", call, e["name"], float(e["ts"]), float(e.get("dur", 0.0))))
        return ops


def _call_starts(runs: list[ModuleRun]) -> dict[str, list[float]]:
    """Each module's call start times on the CPU: the first of the call's dispatches to its
    devices (the j-th dispatch to each device is the j-th call's)."""
    by_module: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        if run.dur_us is None:
            by_module.setdefault(run.module, {}).setdefault(run.device, []).append(run.start_us)
    out = {}
    for module, by_device in by_module.items():
        times = [sorted(starts) for starts in by_device.values()]
        out[module] = [min(starts[j] for starts in times if j < len(starts)) for j in range(max(map(len, times)))]
    return out


def _module_before(event: dict, starts: list[float], dispatches: list[tuple[float, str]]) -> str:
    """The module whose dispatch started last before ``event`` ("" before any)."""
    k = bisect.bisect_right(starts, float(event["ts"]))
    return dispatches[k - 1][1] if k else ""


def _process_kind(process: str) -> str:
    """``device`` for an accelerator's process, ``cpu`` for the host's."""
    return "device" if "/device:" in process and "Megascale" not in process else "cpu" if "/host:CPU" in process else ""


def _read_device(timeline: _Timeline, process: str, thread: str, line: list[dict]) -> None:
    """An accelerator's lines: its module runs and its ops (placed in runs afterwards)."""
    device = timeline.device(process.rpartition("/device:")[2])
    if thread == _MODULES_LINE:
        for e in line:
            found = _MODULE_RUN.match(e["name"])
            module, program = (found.group(1), found.group(2)) if found else (e["name"], "")
            timeline.runs.append(ModuleRun(device, module, program, float(e["ts"]), float(e.get("dur", 0.0))))
    elif thread in _OPS_LINES:
        timeline.device_ops.extend(OpRun(device, "", "", -1, e["name"], float(e["ts"]), float(e.get("dur", 0.0)))
                                   for e in line)


def _read_cpu(timeline: _Timeline, process: str, thread: str, line: list[dict]) -> None:
    """A CPU thread: its ``[d] Execute (module)`` dispatches, and its events (ops once placed)."""
    for e in line:
        found = _CPU_EXECUTE.match(e["name"])
        if found:
            timeline.runs.append(ModuleRun(timeline.device(f"cpu:{found.group(1)}"), found.group(2), "", float(e["ts"]), None))
    timeline.cpu_lines.append(line)


def _placed_in_runs(ops: list[OpRun], runs: list[ModuleRun]) -> list[OpRun]:
    """Each accelerator op given the module run that holds it on its device (ops outside every run dropped)."""
    by_device: dict[str, list[tuple[ModuleRun, int]]] = {}  # each run, with its call (the module's runs before it)
    counts: dict[tuple[str, str], int] = {}
    for run in sorted(runs, key=lambda r: r.start_us):
        if run.dur_us is not None:
            key = (run.device, run.module)
            by_device.setdefault(run.device, []).append((run, counts.get(key, 0)))
            counts[key] = counts.get(key, 0) + 1
    starts = {device: [run.start_us for run, _ in held] for device, held in by_device.items()}
    placed = []
    for op in ops:
        k = bisect.bisect_right(starts.get(op.device, []), op.start_us) - 1
        if k < 0:
            continue
        holder, call = by_device[op.device][k]
        if op.start_us <= holder.start_us + (holder.dur_us or 0.0):
            placed.append(OpRun(op.device, holder.module, holder.program_id, call, op.name, op.start_us, op.dur_us))
    return placed


_READERS: dict[str, Callable[[_Timeline, str, str, list[dict]], None]] = {
    "device": _read_device,
    "cpu": _read_cpu,
}
"""How each kind of process's lines are read (a platform's own timeline layout)."""
