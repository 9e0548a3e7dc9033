"""The JSON reference (docs/reference/json.md) lists every key ``report --json``, ``check --json``,
``layouts --json`` and the others print.

Each schema is read from the page's block under its heading (every quoted name in it); the keys
from a fresh run: ``report --json`` of the seed demo, at the top level, in ``comparison`` and in
each plan; ``check --json`` of one program, at the top level, in the program and in each of its
collectives, compiled collectives and what-if rewrites.
"""

from __future__ import annotations

import json
import platform
import re
import sys

import pytest

from _support import DEMOS, ROOT

REFERENCE = ROOT / "docs" / "reference" / "json.md"


def _schema_names(heading: str, blocks: int = 1) -> set[str]:
    """The quoted names of the first ``blocks`` fenced blocks under ``heading`` (up to the next heading
    of its level)."""
    page = REFERENCE.read_text()
    section = page[page.index(f"\n{heading}\n"):]
    level = heading.split()[0]
    following = re.search(rf"^{level} ", section[len(heading) + 1:], re.MULTILINE)
    section = section[: following.start() + len(heading) + 1] if following else section
    fenced = re.findall(r"^```\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert len(fenced) >= blocks, f"{heading}: {len(fenced)} fenced blocks"
    return set(re.findall(r'"(\w+)"', "".join(fenced[:blocks])))


def test_every_key_of_report_json_is_in_the_reference(shardscope_cli):
    result = shardscope_cli("report", DEMOS / "linear.py", "--json", "-r", "1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = _schema_names("## `report --json`")
    assert set(data) - names == set()
    assert set(data["comparison"]) - names == set()
    for plan in data["variants"].values():
        assert set(plan) - names == set()
    # what the reference says of them: a demo's plans, no programs compared, the mesh at the top
    assert data["kind"] == "plans" and data["output_checks"] == []
    assert data["targets"] == {} and data["unavailable_targets"] == []  # no --target: none compiled for, none missing
    assert set(data["timed_on"]) - names == set()
    assert {k: data["timed_on"][k] for k in ("platform", "device_kind", "devices", "simulated")} == \
        {"platform": "cpu", "device_kind": "cpu", "devices": 2, "simulated": True}  # the demo's 2 CPU devices
    assert {plan["mesh"] for plan in data["variants"].values()} == {None} and data["mesh"] == {"s": 2}


def test_every_key_of_check_json_is_in_the_reference(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step", "--json", "--what-if", "-r", "2")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    names = _schema_names("## `check --json`", blocks=3)
    (program,) = data["programs"]
    assert set(data) - names == set() and set(program) - names == set()
    assert program["collectives"] and program["compiled_collectives"]
    for collective in (*program["collectives"], *program["compiled_collectives"]):
        assert set(collective) - names == set()
    # one program: its findings at the top level too, as the reference says
    assert data["function"] == "step" and data["findings"] == program["findings"]
    (rewrite, *_) = program["what_if"]
    assert set(rewrite) - _schema_names("### The what-if") == set()


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
def test_every_key_of_a_targets_plan_and_of_min_saving_is_in_the_reference(shardscope_cli):
    """``check --target --min-saving --json`` of a program whose gradient sum the slice keeps in
    its loop: the target's, each plan's, each saving's, the fit's and the step estimate's keys."""
    result = shardscope_cli("check", DEMOS / "fsdp_accumulate.py", "--target", "tpu:v5e:2x4", "--min-saving", "1ms",
                            "--json")
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert set(data) - _schema_names("## `check --json`", blocks=3) == set()
    names = _schema_names("### `targets`")
    (target,) = data["targets"].values()
    assert set(target) - names == set() and set(target["interconnect"]) - names == set()
    (plan,) = target["variants"].values()
    assert plan["savings"] and plan["fit"] and plan["step_estimate"]  # what the keys below are read from
    nested = [plan, plan["fit"], plan["step_estimate"], *plan["step_estimate"]["instructions"], *plan["savings"],
              *plan["placements"], *(c["interconnect"] for c in plan["compiled_collectives"] if c["interconnect"])]
    for fields in nested:
        assert set(fields) - names == set()
    cpu_fields = _schema_names("## `check --json`", blocks=3)
    for collective in plan["compiled_collectives"]:
        assert set(collective) - names - cpu_fields == set()


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
def test_every_key_of_layouts_json_is_in_the_reference(shardscope_cli):
    """``layouts --json`` of the shipped demo on a slice: its candidate with tensor 2 (fsdp=4 x
    tensor=2), every key of its row, its fit, step estimate and collectives, and of the sweep's
    pick and cost. One candidate: the two with tensor 1 and 2 (a compile for the slice each) gave
    the same 99 keys, path for path, as either alone."""
    result = shardscope_cli("layouts", "transformer_layouts", "--target", "tpu:v5e:2x4", "--axis", "data=1",
                            "--axis", "tensor=2", "--option", "per_device_batch=1", "--json", "--workers", "1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = _schema_names("## `layouts --json`")
    assert set(data) - names == set() and set(data["cost"]) - names == set() and set(data["pick"]) - names == set()
    step_names = _schema_names("### `targets`")
    assert [row["candidate"]["label"] for row in data["rows"]] == ["fsdp=4 x tensor=2, per_device_batch=1"]
    for row in data["rows"]:
        assert row["step"] is not None and row["collectives"] and row["utilization"]  # the keys below are read
        nested = [row, row["candidate"], row["step"], row["utilization"], *row["collectives"]]
        for fields in nested:
            assert set(fields) - names == set()
        assert set(row["fit"]) - step_names == set() and set(row["step"]["estimate"]) - step_names == set()


def test_every_key_of_calibrate_json_is_in_the_reference(shardscope_cli):
    # two sizes timed 3 times, not the default five (to 4 MiB) timed 20 times: the keys are the
    # same (33, path for path); the object's keys and the CPU's are fixed whatever is measured
    result = shardscope_cli("calibrate", "--json", "--sizes", "1KiB,16KiB", "-r", "3")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = _schema_names("## `calibrate --json` and `presets --json`")
    assert set(data) - names == set()
    assert data["cpu"] is not None and set(data["cpu"]) - names == set()


def test_every_key_of_presets_targets_json_is_in_the_reference(shardscope_cli):
    result = shardscope_cli("presets", "--targets", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    names = _schema_names("## `calibrate --json` and `presets --json`", blocks=2)
    assert {row["target"].split(":")[0] for row in rows} == {"tpu", "gpu"}  # both kinds of machine
    for row in rows:
        assert set(row) - names == set()
