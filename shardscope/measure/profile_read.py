"""A profile JAX's profiler wrote, read: each run of each compiled instruction on each device,
and the execution (the call of the module) it belongs to.

``jax.profiler.start_trace(DIR)`` (or XProf's capture on a slice) writes
``DIR/plugins/profile/<run>/<host>.xplane.pb``, one file per host (:mod:`profile_files` finds
them). Each file is read with JAX's own reader (``jax.profiler.ProfileData``, in jaxlib: no
converter, nothing written beside the file), as the runtime recorded it:

- **XLA:CPU** (JAX 0.10.2 and 0.12 checked): each instruction's run on a ``/host:CPU`` thread is
  an event whose stats name its module (``hlo_module``), its instruction (``hlo_op``), the
  device (``device_ordinal``: the device's id, unique across processes) and the execution
  (``run_id``: one launch of the module over all its devices, the same id in every process of a
  job). Each op belongs to the execution that ran it, however far ahead the loop dispatched. The
  dispatch, ``CommonPjRtLoadedExecutable::Execute (jit_step)``, carries the same ``run_id`` and
  how many devices the program spans (``num_partitions`` x ``num_replicas``) and this process
  holds (``num_addressable_devices``).
- **An accelerator** (a ``/device:TPU:0`` plane; checked on a v5e chip): its ``XLA Modules`` line
  holds each run of a module (``jit_step(8169850638403772900)``: name and program id, with its
  ``run_id``), its ``XLA Ops`` lines each instruction's run, named by the instruction's text as
  the module prints it (``%fusion.3 = f32[4,64]{1,0} fusion(...)``): an op belongs to the module
  run that holds it on its device's timeline. The plane names the chip (``device_type_string``:
  ``TPU v5 Lite``).
- **A GPU** (unverified: nobody has run one here): its raw planes hold kernels, not these lines;
  XProf's converter (``shardscope[profile]``) derives the same ``XLA Modules`` and ``XLA Ops``
  lines, which are read as a TPU's.

``hlo_stats`` (XProf's per-instruction table, accelerators only) is read when asked
(:func:`read_profile` ``stats=True``: the cost model's benchmarks), with XProf's converter.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from shardscope.activities import temporary_folder
from shardscope.measure.profile_files import PROFILE_EXTRA, SUFFIX, ProfileError, fetched, profile_files
from shardscope.native_stderr import stderr_caught

if TYPE_CHECKING:
    from jax.profiler import ProfileData

__all__ = ["Execution", "HloStat", "ModuleRun", "OpRun", "Profile", "ProfileError", "read_profile",
           "require_converter", "PROFILE_EXTRA", "SUFFIX"]

INSTALL_HINT = f'pip install "{PROFILE_EXTRA}" (it installs xprof, XProf\'s own package)'

_CPU_EXECUTE = re.compile(r"^(?:\[\d+\] )?CommonPjRtLoadedExecutable::Execute \((.+)\)$")
_MODULE_RUN = re.compile(r"^(.+?)\((\d+)\)$")
_INSTRUCTION = re.compile(r"^%?([\w.\-]+) = ")
_OPS_LINES = ("XLA Ops",)
"""An accelerator's line of instruction runs (its ``Async XLA Ops`` line repeats each async start
as the window to its done, under the start's name: the windows are read from the two ends)."""
_MODULES_LINE = "XLA Modules"
_NS_PER_US = 1e3


@dataclass(frozen=True)
class OpRun:
    """One run of one instruction on ``device``, in the execution ``call`` of ``module`` (the
    launch's run id, as the runtime recorded it); ``start_us``/``dur_us`` its place on its host's
    timeline. ``text`` is the instruction as the profile prints it, where it does (an
    accelerator's ops: shapes and operands), else ""."""

    device: str
    module: str
    program_id: str
    call: str
    name: str
    start_us: float
    dur_us: float
    text: str = ""

    @property
    def end_us(self) -> float:
        """When it ended, in microseconds."""
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class ModuleRun:
    """One run of a compiled module on one accelerator device: an ``XLA Modules`` event, whose
    duration is the run's; ``call`` its run id."""

    device: str
    module: str
    program_id: str
    call: str
    start_us: float
    dur_us: float


@dataclass(frozen=True)
class Execution:
    """One launch of a module as its host dispatched it (``Execute (jit_step)``): ``call`` its run
    id, ``devices`` the devices the program spans (all processes), ``here`` those of this host."""

    host: str
    module: str
    call: str
    start_us: float
    devices: int
    here: int


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
    """What a profile holds: every instruction run on every device with its execution, the
    accelerators' module runs, the hosts' dispatches, and what the profile says of the machine
    (``platform``: ``cpu``, ``tpu`` or ``gpu``; ``device_kind``: ``TPU v5 Lite``; the JAX that
    wrote it). ``note`` says which run of a folder was read when there was a choice."""

    source: str
    hosts: tuple[str, ...]
    ops: tuple[OpRun, ...]
    module_runs: tuple[ModuleRun, ...] = ()
    stats: tuple[HloStat, ...] = ()
    executions: tuple[Execution, ...] = ()
    platform: str = "cpu"
    device_kind: str = ""
    jax_version: str = ""
    note: str = ""
    run: str = ""

    @property
    def modules(self) -> tuple[str, ...]:
        """The names of the compiled modules that ran, in order of their first event."""
        named = sorted([(r.start_us, r.module) for r in self.module_runs] + [(o.start_us, o.module) for o in self.ops])
        return tuple(dict.fromkeys(module for _, module in named))

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices with events, sorted."""
        return tuple(sorted({op.device for op in self.ops}))

    def machine(self) -> str:
        """``TPU v5 Lite``, ``CPU``: what ran the profiled program, in words."""
        return self.device_kind or self.platform.upper()


def require_converter() -> None:
    """Raise a :class:`ProfileError` naming the extra when XProf's converter is not installed."""
    try:
        import xprof.convert.raw_to_tool_data  # noqa: F401  (only whether it imports)
    except ImportError as exc:
        raise ProfileError("Reading this profile needs XProf's converter, and xprof is not installed.",
                           INSTALL_HINT) from exc


def read_profile(location: str | Path, stats: bool = False) -> Profile:
    """The :class:`Profile` at ``location`` (a local or ``gs://`` folder, or one ``.xplane.pb``);
    ``stats`` adds XProf's ``hlo_stats`` rows (it needs ``shardscope[profile]``)."""
    text = str(location)
    if not text.startswith("gs://"):
        return _read_files(profile_files(location), text, stats)
    with tempfile.TemporaryDirectory(prefix="shardscope-profile-") as scratch, temporary_folder(scratch):
        return _read_files(profile_files(fetched(text, Path(scratch) / "fetched")), text, stats)


def _read_files(found, location: str, stats: bool) -> Profile:  # found: ProfileFiles
    """Every host's file of one run read together."""
    hosts = tuple(f.name[: -len(SUFFIX)] for f in found.files)
    several = len(hosts) > 1
    reader = _Reader()
    for host, path in zip(hosts, found.files):
        reader.read(_planes(path, location), host if several else "", path)
    if not reader.ops:
        raise ProfileError(f"{location} holds no run of a compiled program.",
                           "profile while the program runs: start_trace, call the step, block_until_ready, stop_trace")
    if reader.platform == "cpu" and any(not op.call for op in reader.ops):
        raise ProfileError(f"{location}: its instructions' runs carry no run id, so its calls cannot be told apart "
                           "(a JAX older than 0.10.2 wrote it?).", "profile the run with JAX 0.10.2 or newer")
    rows = _hlo_stats(found.files) if stats and reader.platform != "cpu" else ()
    return Profile(location, hosts, tuple(reader.ops), tuple(reader.module_runs), rows, tuple(reader.executions),
                   reader.platform, reader.device_kind, reader.jax_version, found.note, found.run)


@dataclass
class _Event:
    """One event of a line: its name, place in microseconds and stats."""

    name: str
    start_us: float
    dur_us: float
    stats: dict[str, object]


@dataclass
class _Plane:
    """One plane of an XSpace (a device, the host's threads, the metadata): its lines' events."""

    name: str
    stats: dict[str, object]
    lines: dict[str, list[_Event]] = field(default_factory=dict)


def _planes(path: Path, location: str) -> list[_Plane]:
    """``path``'s planes, read with JAX's reader; a file that is not a whole XSpace: one message."""
    from jax.profiler import ProfileData  # jaxlib's reader: imported by the commands that read a profile

    with warnings.catch_warnings():  # jaxlib's types on Python 3.13: "event_stats has no __module__", once
        warnings.filterwarnings("ignore", "builtin type .* has no __module__ attribute", DeprecationWarning)
        return _read_planes(ProfileData, path, location)


def _read_planes(reader: "type[ProfileData]", path: Path, location: str) -> list[_Plane]:
    """:func:`_planes`' reading, under its warnings filter."""
    try:
        space = reader.from_file(str(path))
    except (RuntimeError, OSError, ValueError) as exc:
        raise ProfileError(f"{location}: {path.name} is not a profile JAX can read (a truncated or damaged "
                           f"{SUFFIX}: {str(exc).strip()}).",
                           "capture it again and let stop_trace() return before copying the folder") from None
    planes = []
    for plane in space.planes:
        read = _Plane(plane.name, dict(plane.stats))
        keep_stats = plane.name == "/host:CPU" or plane.name.startswith("/device:")
        for line in plane.lines:
            events = read.lines.setdefault(line.name, [])
            for event in line.events:
                events.append(_Event(event.name, event.start_ns / _NS_PER_US, event.duration_ns / _NS_PER_US,
                                     dict(event.stats) if keep_stats else {}))
        planes.append(read)
    return planes


class _Reader:
    """The hosts' planes read into ops, module runs and executions, one host after another."""

    def __init__(self) -> None:
        self.ops: list[OpRun] = []
        self.module_runs: list[ModuleRun] = []
        self.executions: list[Execution] = []
        self.platform = "cpu"
        self.device_kind = ""
        self.jax_version = ""

    def read(self, planes: list[_Plane], host: str, path: Path) -> None:
        """One host's planes (``host`` "" for a single-host profile)."""
        device_planes = [p for p in planes if p.name.startswith("/device:") and "CUSTOM" not in p.name]
        for plane in planes:
            if plane.name == "/host:metadata":
                self.jax_version = self.jax_version or str(plane.stats.get("jax_version", ""))
            elif plane.name == "/host:CPU":
                self._host(plane, host)
        if device_planes and not any(_MODULES_LINE in p.lines for p in device_planes):
            device_planes = _derived_planes(path, device_planes)  # a GPU's kernels: XProf derives the lines
        for plane in device_planes:
            self._device(plane, host)

    def _host(self, plane: _Plane, host: str) -> None:
        """The host's threads: its dispatches, and (XLA:CPU) every instruction's run."""
        for events in plane.lines.values():
            for e in events:
                found = _CPU_EXECUTE.match(e.name)
                if found and "run_id" in e.stats and "num_partitions" in e.stats:
                    devices = _int(e.stats.get("num_partitions")) * max(_int(e.stats.get("num_replicas")), 1)
                    self.executions.append(Execution(host, found.group(1), str(e.stats["run_id"]), e.start_us,
                                                     devices, _int(e.stats.get("num_addressable_devices"))))
                elif "hlo_op" in e.stats and "hlo_module" in e.stats:
                    device = f"cpu:{e.stats.get('device_ordinal', '?')}"
                    self.ops.append(OpRun(f"{host}/{device}" if host else device, str(e.stats["hlo_module"]),
                                          str(e.stats.get("program_id", "")), str(e.stats.get("run_id", "")),
                                          str(e.stats["hlo_op"]), e.start_us, e.dur_us))

    def _device(self, plane: _Plane, host: str) -> None:
        """An accelerator's plane: its module runs, and its ops placed in the runs that hold them."""
        name = plane.name.removeprefix("/device:")
        device = f"{host}/{name}" if host else name
        self.platform = name.split(":")[0].lower().replace("cuda", "gpu")
        self.device_kind = self.device_kind or str(plane.stats.get("device_type_string", ""))
        runs = []
        for e in plane.lines.get(_MODULES_LINE, []):
            found = _MODULE_RUN.match(e.name)
            module, program = (found.group(1), found.group(2)) if found else (e.name, "")
            runs.append(ModuleRun(device, module, program, str(e.stats.get("run_id", "")), e.start_us, e.dur_us))
        runs.sort(key=lambda r: r.start_us)
        self.module_runs.extend(runs)
        ops = sorted((e for line in _OPS_LINES for e in plane.lines.get(line, [])), key=lambda e: e.start_us)
        self.ops.extend(_placed(ops, runs, device))


def _placed(ops: list[_Event], runs: list[ModuleRun], device: str) -> list[OpRun]:
    """Each op given the module run that holds it on its device (ops outside every run dropped);
    a run without a run id is named by its module's count of runs before it on the device."""
    placed, k = [], -1
    ordinal: Counter[str] = Counter()
    calls: list[str] = []
    for run in runs:
        calls.append(run.call or f"#{ordinal[run.module]}")
        ordinal[run.module] += 1
    for e in ops:
        while k + 1 < len(runs) and runs[k + 1].start_us <= e.start_us:
            k += 1
        if k < 0 or e.start_us > runs[k].start_us + runs[k].dur_us:
            continue
        found = _INSTRUCTION.match(e.name)
        name = found.group(1) if found else e.name
        placed.append(OpRun(device, runs[k].module, runs[k].program_id, calls[k], name, e.start_us, e.dur_us,
                            e.name if found else ""))
    return placed


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _derived_planes(path: Path, planes: list[_Plane]) -> list[_Plane]:
    """The device planes with XProf's derived ``XLA Modules`` and ``XLA Ops`` lines (its trace
    viewer's), for a platform whose raw planes hold kernels only (a GPU's)."""
    require_converter()
    events = _trace_events([path])
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    by_name = {p.name: _Plane(p.name, p.stats) for p in planes}
    for e in events:
        plane = by_name.get(processes.get(e.get("pid"), ""))
        if e.get("ph") == "X" and plane is not None:
            line = threads.get((e["pid"], e.get("tid")), "")
            args = e.get("args") or {}
            name = str(args.get("long_name") or e["name"]) if line in _OPS_LINES else str(e["name"])
            plane.lines.setdefault(line, []).append(_Event(name, float(e["ts"]), float(e.get("dur", 0.0)), dict(args)))
    return list(by_name.values())


def _convert(paths: list[Path], tool: str) -> bytes | str | None:
    """XProf's conversion of ``paths`` for ``tool`` (None when it failed), each file copied into a
    temporary folder first (the converter writes caches beside what it reads), which an interrupt
    removes; the converter's C++ log lines (dozens per call, on descriptor 2) kept off the terminal."""
    from xprof.convert import raw_to_tool_data  # the extra's: checked by require_converter

    with tempfile.TemporaryDirectory(prefix="shardscope-profile-") as scratch, temporary_folder(scratch):
        copies = [str(shutil.copy(p, Path(scratch) / p.name)) for p in paths]
        with stderr_caught():  # its lines dropped
            data, _ = raw_to_tool_data.xspace_to_tool_data(copies, tool, {"use_saved_result": False})
    return data


def _trace_events(paths: list[Path]) -> list[dict]:
    """XProf's trace events of ``paths`` (its full trace viewer JSON), or a ProfileError."""
    data = _convert(paths, "trace_viewer")
    try:
        events = json.loads(data)["traceEvents"] if data else None
    except (ValueError, KeyError):
        events = None
    if events is None:
        raise ProfileError(f"XProf could not read {', '.join(p.name for p in paths)} (a truncated or damaged {SUFFIX}).",
                           "capture it again and let stop_trace() return before copying the folder")
    return events


def _hlo_stats(paths: Iterable[Path]) -> tuple[HloStat, ...]:
    """XProf's ``hlo_stats`` rows (none on the CPU, nor when the tool fails)."""
    require_converter()
    rows = []
    for path in paths:
        data = _convert([path], "hlo_stats")
        try:
            table = json.loads(data) if data else {}
        except ValueError:
            continue
        if isinstance(table, list):  # some versions wrap the table in a list
            table = table[0] if table else {}
        columns = [c["id"] for c in table.get("cols", [])]
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
