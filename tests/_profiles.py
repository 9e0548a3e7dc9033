"""The stored CPU profiles of ``_profiled_trainer.py`` (``fixtures/profiles/capture_cpu.py``), and
the numbers a user would compute from one by hand, for the profile tests.

The hand computation reads the trace with XProf's own converter (its trace viewer's JSON, not
the reader shardscope uses) and follows what the runtime recorded, written out here: each event
of an instruction names its module (``hlo_module``), its execution (``run_id``) and its device
(``device_ordinal``); a call is one run id whose dispatch (``Execute (module)``) is in the trace
and that every device ran; a device's time in a call runs from its first instruction's start to
its last one's end; a collective's time in a call is the sum of its runs on the slowest device.
The first call is set apart and the rest give medians.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "profiles"


def stored(case: str, into: Path) -> Path:
    """The stored profile ``case`` of this JAX version, unpacked into ``into`` (the folder given
    to ``start_trace``: ``plugins/profile/<run>/<host>.xplane.pb``)."""
    source = FIXTURES / f"cpu_jax-{metadata.version('jax')}" / case
    target = into / case
    for packed in source.rglob("*.xplane.pb.gz"):
        out = target / packed.relative_to(source).with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(gzip.decompress(packed.read_bytes()))
    return target


@dataclass(frozen=True)
class ByHand:
    """What the trace says of one module, computed here: its whole calls, the first call's step
    time and the medians of the others' (microseconds), a collective's runs per call on each
    device, and its time per call on the slowest device."""

    calls: int
    devices: int
    first_step_us: float
    step_us: float
    fastest_step_us: float
    runs_per_call: set[int]
    collective_us: float


def trace_events(xplane: Path) -> list[dict]:
    """XProf's trace-viewer events of one ``.xplane.pb`` (copied first: it writes caches beside)."""
    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory() as scratch:
        copy = shutil.copy(xplane, Path(scratch) / xplane.name)
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "trace_viewer", {"use_saved_result": False})
    return json.loads(data)["traceEvents"]


def module_calls(folder: Path, module: str) -> dict[str, dict[str, list[dict]]]:
    """XProf's events of ``module`` in the profile at ``folder`` (every host's file), by call (its
    ``run_id``, of the calls dispatched there) and by device: each device's events of that call."""
    events = [e for f in sorted(folder.rglob("*.xplane.pb")) for e in trace_events(f) if e.get("ph") == "X"]
    dispatched = {e["args"]["run_id"] for e in events if e["name"] == f"CommonPjRtLoadedExecutable::Execute ({module})"}
    calls: dict[str, dict[str, list[dict]]] = {}
    for e in events:
        args = e.get("args", {})
        if args.get("hlo_module") == module and args.get("run_id") in dispatched:
            calls.setdefault(args["run_id"], {}).setdefault(args["device_ordinal"], []).append(e)
    return calls


def by_hand(folder: Path, module: str, collective: str) -> ByHand:
    """The numbers of ``module`` and its ``collective`` in the profile at ``folder`` (every host's file)."""
    calls = module_calls(folder, module)
    devices = max(len(per_device) for per_device in calls.values())
    whole = sorted((k for k, per_device in calls.items() if len(per_device) == devices),
                   key=lambda k: min(e["ts"] for line in calls[k].values() for e in line))
    steps, fastest, spent, runs = [], [], [], set()
    for key in whole:
        spans = [max(e["ts"] + e["dur"] for e in line) - min(e["ts"] for e in line) for line in calls[key].values()]
        steps.append(max(spans))
        fastest.append(min(spans))
        spent.append(max(sum(e["dur"] for e in line if e["name"] == collective) for line in calls[key].values()))
        runs |= {sum(1 for e in line if e["name"] == collective) for line in calls[key].values()}
    return ByHand(len(whole), devices, steps[0], statistics.median(steps[1:]), statistics.median(fastest[1:]), runs,
                  statistics.median(spent[1:]))
