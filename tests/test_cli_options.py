"""The command line's own machinery: the parser built once from what the command modules register,
typed options, and the command line a ``--processes`` worker runs (the user's own, without the
spawner's options, in every form argparse reads them)."""

from __future__ import annotations

import json
import subprocess

import pytest

from _support import DEMOS, PYTHON, ROOT
from shardscope.cli import COMMANDS, command_line, parse
from shardscope.cli.options import without_spawner_options
from shardscope.cli.report import ReportOptions
from shardscope.cli.processes import with_options

LINEAR = DEMOS / "linear.py"


def test_the_parser_is_built_once_and_every_command_runs_its_own_function():
    assert command_line() is command_line()
    runs = {}
    for command in COMMANDS:
        takes_file = command in ("report", "sweep", "diff", "check")
        needs = {"layouts": ["layouts", "transformer_layouts", "--target", "tpu:v5e:2x4"]}
        args, words = parse(needs.get(command) or ([command, "linear"] if takes_file else [command]))
        runs[command] = args.run
        assert words[0] == command
    assert len(set(runs.values())) == len(COMMANDS)  # one function per command, no shared if-chain
    assert [runs[c].__module__ for c in COMMANDS] == [
        "shardscope.cli.explorer", *(f"shardscope.cli.{c}" for c in COMMANDS[1:])]


def test_options_are_typed_once_from_the_namespace():
    args, words = parse(["report", "linear", "--proc", "2", "-d", "4", "--mesh", "a=2,b=2", "--timeout=7", "--json"])
    options = ReportOptions.from_args(args, words)
    processes = options.common.processes
    assert (processes.processes, processes.timeout_s, processes.spawns_workers) == (2, 7, True)
    assert options.demo.mesh.text() == "a=2,b=2" and options.demo.devices == 4 and options.common.json
    assert processes.worker_argv == ("report", "linear", "-d", "4", "--mesh", "a=2,b=2", "--json")
    with pytest.raises(AttributeError):
        options.common = options.common  # frozen


@pytest.mark.parametrize(("extra", "repeats", "budget"), [
    ([], 20, 3.0),  # at least 20 rounds, and up to 3 s more while a comparison is unsettled
    (["-r", "5"], 5, 0.0),  # a count asked for alone: exactly that many
    (["-r", "5", "--timing-budget", "2.5"], 5, 2.5),
    (["--timing-budget", "0"], 20, 0.0),
])
def test_repeats_and_the_timing_budget(extra, repeats, budget):
    args, words = parse(["report", "linear", *extra])
    settings = ReportOptions.from_args(args, words).demo.settings()
    assert (settings.repeats, settings.timing_budget_s) == (repeats, budget)


def test_a_negative_timing_budget_is_refused(shardscope_cli):
    result = shardscope_cli("report", "linear", "--timing-budget", "-1")
    assert result.returncode == 2 and "must be 0 or more seconds" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("argv", "expected"), [
    (["report", "linear", "--processes", "2", "--timeout", "9", "-r", "1"], ["report", "linear", "-r", "1"]),
    (["report", "--processes=2", "linear", "--timeout=9"], ["report", "linear"]),
    (["sweep", "--proc", "2", "--time", "5", "linear", "-r2"], ["sweep", "linear", "-r2"]),
    (["report", "--proc=2", "-d", "4", "--", "linear"], ["report", "-d", "4", "--", "linear"]),
    (["report", "linear", "--link=-25GB/s,5us", "--processes", "2"], ["report", "linear", "--link=-25GB/s,5us"]),
    (["calibrate", "--sizes", "1KiB,4KiB", "-d", "4", "--processes", "2", "--distributed"],
     ["calibrate", "--sizes", "1KiB,4KiB", "-d", "4", "--distributed"]),
])
def test_a_worker_runs_the_users_command_line_without_the_spawners_options(argv, expected):
    assert without_spawner_options(argv) == expected


def test_the_workers_own_options_go_before_a_double_dash():
    assert with_options(["report", "-d", "4", "--", "linear"], "--worker", "R") == [
        "report", "-d", "4", "--worker", "R", "--", "linear"]
    assert with_options(["report", "linear"], "--worker", "R") == ["report", "linear", "--worker", "R"]
    args, _ = parse(with_options(["report", "-d", "4", "--", "linear"], "--worker", "127.0.0.1:1,2,0,1"))
    assert str(args.file) == "linear" and args.worker.process_id == 0


def test_importing_the_command_line_imports_neither_jax_nor_textual():
    """``shardscope --version``, ``demos`` and the refusals before JAX starts stay quick, and the
    explorer's first paint does not wait for JAX. Nor does the parser load what the commands run
    and print (numpy, rich, the engine, the renderers): each command imports those when it runs,
    so that every process a command starts (a worker of --processes too) pays only for its own."""
    probe = "import json, sys, shardscope.cli; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    tops = {name.split(".")[0] for name in loaded}
    assert "shardscope" in tops and not tops & {"jax", "textual", "numpy", "rich", "networkx"}
    layers = {".".join(name.split(".")[:2]) for name in loaded if name.startswith("shardscope.")}
    assert not layers & {"shardscope.render", "shardscope.engine", "shardscope.pipeline", "shardscope.costmodel",
                         "shardscope.hardware", "shardscope.measure", "shardscope.app", "shardscope.whatif"}


@pytest.mark.slow  # the two workers are fresh processes; the command that starts them runs in this one
def test_processes_abbreviated_with_a_double_dash_before_the_file(shardscope_cli):
    result = shardscope_cli("report", "--proc=2", "--devices", "4", "-r", "1", "--json", "--", LINEAR)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["processes"], data["devices"], data["variants"]["naive"]["executed_collectives"]) == (2, 4, 2)
