"""The Timings tab's projection costs each compiled collective on its own replica group by
default, as ``report --project PRESET`` does; a device count picked from the keyboard puts every
collective on one ring of that many devices, as ``--project PRESET:DEVICES`` does.

demos/fsdp.py on a data=4 x model=2 mesh, its batch over both axes: XLA:CPU compiles all-reduces
over all 8 devices and over ``model`` (2), reduce-scatters and all-gathers over ``data`` (4).
The expected seconds are derived here from the module JAX compiles for each plan (each
collective's result shape, replica groups and the while loop's known trip count, read from the
text) with NCCL's ring formulas, never from shardscope's own projection.
"""

from __future__ import annotations

import json
import math
import re

import jax
import pytest
from _tpu_text import replica_group_size
from app_support import DEMOS, SIZE, eventually, make_app, press, run, settle
from textual.widgets import Select

from shardscope.app.views.projection import ProjectionPanel
from shardscope.config.mesh import Mesh
from shardscope.config.settings import Settings
from shardscope.costmodel.interconnects import format_seconds, preset
from shardscope.plans.registry import build_plans
from shardscope.sources.loading import load_demo_file

MESH = "data=4,model=2"
LINK = preset("nvlink-h100")  # the picker's first preset: the tab's default
"""2 us a ring step, 450 GB/s one way."""

_HEADER = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{$", re.M)
_WHILE = re.compile(r"^\s+(?:ROOT )?%[\w.\-]+ = .* while\(.*?body=%([\w.\-]+).*\"known_trip_count\":\{\"n\":\"(\d+)\"\}",
                    re.M)
_COLLECTIVE = re.compile(r"^\s+(?:ROOT )?%[\w.\-]+ = (\(.*?\)|\S+) (all-reduce|all-gather|reduce-scatter)\(.*$", re.M)


def _collectives(text: str) -> list[tuple[str, int, int, int]]:
    """``(kind, runs per call, result bytes, group size)`` of each collective of a compiled
    module: the bytes are its f32 result's (a combined one's tuple summed), the group size its
    replica groups' (in whichever form XLA prints them), and one inside a while body runs the
    loop's ``known_trip_count`` times (fsdp's plans nest no loops)."""
    heads = list(_HEADER.finditer(text))
    trips = {m.group(1): int(m.group(2)) for m in _WHILE.finditer(text)}
    found = []
    for i, head in enumerate(heads):
        body = text[head.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        for match in _COLLECTIVE.finditer(body):
            shapes = re.findall(r"f32\[([\d,]*)\]", match.group(1))
            nbytes = 4 * sum(math.prod(int(d) for d in dims.split(",") if d) for dims in shapes)
            found.append((match.group(2), trips.get(head.group(1), 1), nbytes, replica_group_size(match.group(0))))
    return found


def _operand_bytes(kind: str, result_bytes: int, group: int) -> int:
    """A device's operand ``S`` of one run, from the result on its group: an all-reduce's is its
    result, an all-gather's a 1/group of it, a reduce-scatter's group results."""
    return {"all-reduce": result_bytes, "all-gather": result_bytes // group}.get(kind, result_bytes * group)


def _ring_seconds(kind: str, operand_bytes: int, n: int) -> float:
    """One run of a device's operand ``S`` on a ring of ``n`` (NCCL's performance notes): an
    all-reduce ``2(n-1)`` steps and ``2(n-1)/n·S``, an all-gather ``n-1`` and ``(n-1)/n·nS``, a
    reduce-scatter ``n-1`` and ``(n-1)/n·S``."""
    alpha, bandwidth = LINK.latency_s, LINK.bandwidth_Bps
    if kind == "all-reduce":
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * operand_bytes / bandwidth
    if kind == "all-gather":
        return (n - 1) * alpha + (n - 1) / n * (n * operand_bytes) / bandwidth
    return (n - 1) * alpha + (n - 1) / n * operand_bytes / bandwidth


def _by_hand() -> dict[str, tuple[list[tuple[str, int, int, int]], int]]:
    """Each plan's collectives read from the module JAX compiles for it, and its runs per call."""
    settings = Settings(path=DEMOS / "fsdp.py", mesh=Mesh.parse(MESH))
    built = build_plans(load_demo_file(settings.path).functions["fsdp"], settings)
    found = {}
    for plan in ("naive", "deferred"):
        collectives = _collectives(jax.jit(built.functions[plan]).lower(*built.args).compile().as_text())
        found[plan] = (collectives, sum(runs for _, runs, _, _ in collectives))
    return found


def _seconds(collectives: list[tuple[str, int, int, int]], ring: int | None = None) -> float:
    """A plan's communication per call: each collective on its own group, or on one ring of
    ``ring`` (the analysed per-device program, its operands as they are, on a ring of that many)."""
    return sum(runs * _ring_seconds(kind, _operand_bytes(kind, nbytes, group), ring or group)
               for kind, runs, nbytes, group in collectives)


def test_the_projection_defaults_to_each_collectives_own_group_as_report_project_does(shardscope_cli):
    hand = _by_hand()
    naive, naive_runs = hand["naive"]
    assert sorted({group for _, _, _, group in naive}) == [2, 4, 8]  # rings of three sizes
    assert (naive_runs, hand["deferred"][1]) == (10, 6)
    own = {plan: _seconds(collectives) for plan, (collectives, _) in hand.items()}
    every = {plan: _seconds(collectives, 8) for plan, (collectives, _) in hand.items()}
    assert format_seconds(own["naive"]) != format_seconds(every["naive"])  # the two are told apart on screen

    result = shardscope_cli("report", DEMOS / "fsdp.py", "--mesh", MESH, "-r", "1", "--project", LINK.name, "--json")
    assert result.returncode == 0, result.stderr
    projection = json.loads(result.stdout)["projection"]
    assert projection["own_groups"] and projection["devices"] == 8
    for plan, seconds in own.items():
        assert projection["plans"][plan]["comm_s_per_call"] == pytest.approx(seconds, rel=1e-9)
        assert projection["plans"][plan]["runs_per_call"] == hand[plan][1]

    async def scenario():
        app = make_app(DEMOS / "fsdp.py", mesh=Mesh.parse(MESH))
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            assert app.analysis.settings.mesh.text() == MESH
            await press(pilot, "4")
            await eventually(pilot, lambda: bool(app.query(ProjectionPanel)), "the Timings view is mounted")
            await settle(pilot)
            panel = app.query_one(ProjectionPanel)
            text = " ".join(panel.plain.split())
            assert f"projected onto {LINK.name}" in text
            assert "with each collective over its own group of the 8-device mesh" in text
            for plan, seconds in own.items():
                reported = projection["plans"][plan]
                assert (f"{plan}: {format_seconds(reported['comm_s_per_call'])} per call "
                        f"({reported['runs_per_call']} collective runs)") in text
                assert f"{plan}: {format_seconds(seconds)} per call ({hand[plan][1]} collective runs)" in text
            # n·alpha·B of each ring the groups make: 2, 4 and 8 devices
            assert ("payloads under 1,800,000 B on a ring of 2, 3,600,000 B on a ring of 4, 7,200,000 B on a ring "
                    "of 8 are latency-dominated") in text

            # a count, picked from the keyboard: one ring of 8 for every collective (--project nvlink-h100:8)
            devices = panel.query_one("#projection-devices", Select)
            devices.focus()
            await press(pilot, "enter", "down", "down", "down", "enter")  # own groups, 2, 4, then 8 devices
            assert devices.value == 8
            text = " ".join(panel.plain.split())
            assert f"projected onto {LINK.name}" in text and "with 8 devices;" in text
            for plan, seconds in every.items():
                assert f"{plan}: {format_seconds(seconds)} per call ({hand[plan][1]} collective runs)" in text

    run(scenario())
