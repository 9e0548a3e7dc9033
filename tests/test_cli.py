"""The headless CLI: JSON contract, diff export, defaults, user errors.

Most run ``shardscope.cli.main`` in this process (the ``shardscope_cli`` fixture). The ones about the
interpreter itself (the entry point, a traceback, argparse's usage exit, ``--help``, a missing file's
exit status) start a fresh one: each fails before JAX is imported, so it costs a fraction of a second.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from _support import CARRY_FROM_ZEROS, DEMOS, DYNAMIC_WHILE, PYTHON, ROOT, write_demo

LINEAR = DEMOS / "linear.py"

PLAN_KEYS = {
    "collectives", "collectives_in_loops", "executed_collectives", "bytes_per_call", "hlo",
    "compile_s", "run_s", "memory", "max_abs_err",
}
COLLECTIVE_KEYS = {"primitive", "axes", "loop_trip_counts", "executions", "bytes"}


def report_json(cli, *args):
    result = cli("report", *args, "--json", "-r", "2")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(result.stdout)  # fails unless stdout is exactly one JSON value


@pytest.fixture
def seed_json(shardscope_cli):
    return report_json(shardscope_cli, LINEAR, "--devices", "2", "--chunk-size", "16")


def test_json_has_the_issue_keys(seed_json):
    data = seed_json
    assert isinstance(data, dict)
    assert {"function", "backend", "devices", "chunk_size", "chunks_per_device", "variants"} <= set(data)
    assert (data["function"], data["backend"], data["devices"], data["chunk_size"], data["chunks_per_device"]) == (
        "linear", "cpu", 2, 16, 2)
    assert set(data["variants"]) == {"naive", "deferred", "reduced"}  # every plan the registry builds here
    assert data["unavailable"] == {}
    assert data["mesh"] == {"s": 2} and data["batch_axes"] == ["s"]
    for name, plan in data["variants"].items():
        assert PLAN_KEYS <= set(plan), name
        assert {"collectives", "collectives_in_loops"} <= set(plan["hlo"])
        assert {"median", "min", "max"} <= set(plan["run_s"])
        assert plan["run_s"]["min"] <= plan["run_s"]["median"] <= plan["run_s"]["max"]
        assert isinstance(plan["memory"], dict) and plan["memory"]
        assert isinstance(plan["compile_s"], float) and plan["compile_s"] > 0
        assert plan["max_abs_err"] < 1e-5
        for c in plan["collectives"]:
            assert COLLECTIVE_KEYS <= set(c)


def test_json_numbers_of_the_seed_case(seed_json):
    naive, deferred = seed_json["variants"]["naive"], seed_json["variants"]["deferred"]
    assert naive["collectives"] == [
        {**naive["collectives"][0], "primitive": "psum_invariant", "axes": ["s"], "loop_trip_counts": [2],
         "executions": 2, "bytes": 20}
    ]
    assert (naive["collectives_in_loops"], naive["executed_collectives"], naive["bytes_per_call"]) == (1, 2, 40)
    assert (naive["hlo"]["collectives"], naive["hlo"]["collectives_in_loops"]) == (1, 1)
    assert [c["loop_trip_counts"] for c in deferred["collectives"]] == [[]]
    assert (deferred["collectives_in_loops"], deferred["executed_collectives"], deferred["bytes_per_call"]) == (0, 1, 20)
    assert (deferred["hlo"]["collectives"], deferred["hlo"]["collectives_in_loops"]) == (1, 0)


def test_defaults(shardscope_cli):
    data = report_json(shardscope_cli, LINEAR)
    assert data["function"] == "linear"  # the first (only) demo
    assert data["devices"] == 2
    assert data["chunk_size"] == 16 and data["chunks_per_device"] == 2  # largest with >= 2 chunks/device
    assert data["variants"]["naive"]["collectives"][0]["axes"] == ["s"]


def test_function_devices_axis_chunk_options(tmp_path, shardscope_cli):
    path = write_demo(tmp_path, "two.py", """
        SPEC = dict(params=jax.ShapeDtypeStruct((3,), jnp.float32), x=jax.ShapeDtypeStruct((32, 3), jnp.float32))

        @shardscope.demo(**SPEC)
        def first(W, x):
            return x @ W

        @shardscope.demo(**SPEC)
        def second(W, x):
            return jnp.sin(x @ W)
    """)
    data = report_json(shardscope_cli, path, "--function", "second", "--devices", "4", "--axis", "batch", "--chunk-size", "2")
    assert (data["function"], data["devices"], data["chunk_size"], data["chunks_per_device"]) == ("second", 4, 2, 4)
    (c,) = data["variants"]["naive"]["collectives"]
    assert c["axes"] == ["batch"] and c["loop_trip_counts"] == [4] and c["executions"] == 4 and c["bytes"] == 12


def test_human_report_heads_with_the_settings_and_states_the_verdict(shardscope_cli):
    result = shardscope_cli("report", LINEAR, "-r", "6", "--chunk-size", "16")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["shardscope: linear.py::linear",
                         "mesh s=2 (cpu), batch N=64, 32/device, chunk size 16 -> 2 chunks/device"]
    runs = [l for l in lines if l.startswith("│   runs per call")]
    assert [cell.strip() for cell in runs[0].strip("│").split("│")][:3] == ["runs per call", "2", "1"]
    words = " ".join(result.stdout.split())
    assert re.search(  # -r 6 alone: exactly 6 rounds, the fewest with a 95% interval of the median
        r"naive: 2 runs/call \(1 of 1 collective equations in loops; compiled: 2 runs/call\); "
        r"deferred: 1 run/call \(0 of 1 collective equations in loops; compiled: 1 run/call\); .*"
        r"(deferred is \d+\.\d\dx (faster|slower) than naive \(median of 6 per-round ratios;"
        r"|no measurable difference between naive and deferred \(median of 6 per-round ratios \d+\.\d\dx;) "
        r"95% confidence interval \d+\.\d\d-\d+\.\d\dx\)\.", words), words[-300:]


def test_dynamic_trip_count_is_null_in_json(tmp_path, shardscope_cli):
    """A collective in a while loop runs an unknown number of times: null, never a made-up count."""
    path = write_demo(tmp_path, "dyn.py", DYNAMIC_WHILE)
    data = report_json(shardscope_cli, path, "--devices", "2", "--chunk-size", "8")
    naive, deferred = data["variants"]["naive"], data["variants"]["deferred"]
    (c,) = naive["collectives"]
    assert c["loop_trip_counts"] == [2, None]
    assert c["executions"] is None
    assert naive["executed_collectives"] is None and naive["bytes_per_call"] is None
    assert naive["collectives_in_loops"] == 1
    assert deferred["executed_collectives"] == 1 and deferred["collectives_in_loops"] == 0
    assert naive["max_abs_err"] < 1e-5 and deferred["max_abs_err"] < 1e-5


# ------------------------------------------------------------------------------------ diff


def test_diff_to_stdout(shardscope_cli):
    result = shardscope_cli("diff", LINEAR, "--chunk-size", "16")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("# shardscope: linear.py::linear")
    assert "chunk size 16 -> 2 chunks/device" in text
    assert "--- naive" in text and "+++ deferred" in text
    assert any(l.startswith("-") and "psum_invariant" in l for l in text.splitlines())


def test_diff_output_atomic_no_overwrite_force(tmp_path, shardscope_cli):
    out = tmp_path / "plans.diff"
    first = shardscope_cli("diff", LINEAR, "-o", out)
    assert first.returncode == 0, first.stderr
    written = out.read_text()
    assert "--- naive" in written
    assert first.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plans.diff"]  # no temp file left behind

    out.write_text("mine\n")
    refused = shardscope_cli("diff", LINEAR, "-o", out)
    assert refused.returncode == 2
    assert "exists" in refused.stderr and "Traceback" not in refused.stderr
    assert out.read_text() == "mine\n"

    forced = shardscope_cli("diff", LINEAR, "-o", out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert out.read_text() == written  # the same settings give the same export
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plans.diff"]


def test_diff_output_into_missing_directory(tmp_path, shardscope_cli):
    result = shardscope_cli("diff", LINEAR, "-o", tmp_path / "no" / "such" / "x.diff")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------- user errors

BROKEN = {
    "syntax.py": ("def f(:\n", "Syntax error"),
    "imports.py": ("import not_a_module_shardscope_cli\n", "not_a_module_shardscope_cli"),
    "nodemo.py": ("def f(W, x):\n    return x @ W\n", "no demo function"),
    "carry.py": (CARRY_FROM_ZEROS, "lax.pcast"),
}


def assert_user_error(result, *needles):
    """One message on stderr and exit 2; with ``--json``, the error's JSON object on stdout, else nothing."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    if "--json" in result.args:
        error = json.loads(result.stdout)
        assert error["exit_code"] == 2 and f"shardscope: error: {error['error']}\n" in result.stderr
    else:
        assert result.stdout == ""
    assert result.stderr.count("error:") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_demo_files(tmp_path, name, shardscope_cli):
    body, needle = BROKEN[name]
    path = write_demo(tmp_path, name, body)
    assert_user_error(shardscope_cli("report", path, "--json"), needle)


def test_missing_file(tmp_path, shardscope_cli):
    assert_user_error(shardscope_cli("report", tmp_path / "missing.py"), "No such file")


def test_a_directory_is_not_a_missing_file(shardscope_cli):
    result = shardscope_cli("report", DEMOS)
    assert_user_error(result, f"error: {DEMOS} is a directory, not a demo file.", "linear.py")
    assert "No such file" not in result.stderr


def test_syntax_error_in_an_imported_module_names_its_file(tmp_path, shardscope_cli):
    (tmp_path / "helper_cli_syntax.py").write_text("def model(W, x:\n    return x @ W\n")
    path = write_demo(tmp_path, "demo.py", "from helper_cli_syntax import model\n")
    assert_user_error(shardscope_cli("report", path), f"Syntax error in {tmp_path / 'helper_cli_syntax.py'} line 1")


def test_carry_type_error_shows_jax_s_line_without_debug(tmp_path, shardscope_cli):
    result = shardscope_cli("report", write_demo(tmp_path, "carry.py", CARRY_FROM_ZEROS), "--chunk-size", "8")
    assert_user_error(result, "lax.pcast")
    assert re.search(r"input carry h has type float32\[8,4\] but .* float32\[8,4\]\{V:s\}", result.stderr)


def test_unknown_function_lists_available(shardscope_cli):
    assert_user_error(shardscope_cli("report", LINEAR, "--function", "nope"), "'nope'", "available: linear")


def test_chunk_size_that_does_not_divide(shardscope_cli):
    assert_user_error(shardscope_cli("report", LINEAR, "--chunk-size", "5"), "Chunk size 5", "1, 2, 4, 8, 16, 32")


def test_devices_that_do_not_divide(shardscope_cli):
    assert_user_error(shardscope_cli("report", LINEAR, "--devices", "3"), "does not split over 3 devices")


@pytest.mark.parametrize("option", [["--chunk-size", "0"], ["--devices", "0"], ["--repeats", "-1"], ["--axis", "1x"]])
def test_bad_option_values(option, shardscope_cli):
    result = shardscope_cli("report", LINEAR, *option)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and option[0] in result.stderr


def test_debug_shows_the_traceback_and_keeps_the_status(tmp_path, shardscope_cli):
    """--debug shows the traceback, and the status is still 2, a user's mistake (not Python's 1)."""
    result = shardscope_cli("report", tmp_path / "missing.py", "--debug")
    assert result.returncode == 2 and "Traceback" in result.stderr and "No such file" in result.stderr


def test_entry_point_and_module():
    import subprocess

    for command in ([str(ROOT / ".venv" / "bin" / "shardscope"), "--version"], [PYTHON, "-m", "shardscope", "--version"]):
        if not os.path.exists(command[0]):
            continue
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.startswith("shardscope "), result


def test_an_unknown_option_is_a_usage_error(shardscope_cli):
    # (no arguments at all open the seed demo: tests/test_shipped_demos.py)
    result = shardscope_cli("--no-such-option")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "usage" in result.stderr.lower()


NAN_GRADIENT = """
@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def nan(W, x):
    return jnp.sqrt(x @ W)  # negative arguments: NaN outputs and gradients
"""


def _reject_constant(name):
    raise ValueError(f"not JSON: {name}")


def test_json_stays_json_when_the_gradient_is_nan(tmp_path, shardscope_cli):
    result = shardscope_cli("report", write_demo(tmp_path, "nan.py", NAN_GRADIENT), "--json", "-r", "1")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout, parse_constant=_reject_constant)


def test_device_hint_offers_larger_counts_that_work(shardscope_cli):
    result = shardscope_cli("report", LINEAR, "--devices", "3")
    assert result.returncode == 2
    hint = [l for l in result.stderr.splitlines() if l.startswith("hint:")][0]
    assert "4" in hint.split(":")[-1].split(", ")


CHATTY = """
print("loading the demo")


@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def chatty(W, x):
    print("tracing with", x.shape)  # as in the seed discussion's code
    return x @ W
"""


def test_json_stdout_survives_a_demo_that_prints(tmp_path, shardscope_cli):
    result = shardscope_cli("report", write_demo(tmp_path, "chatty.py", CHATTY), "--json", "-r", "1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["function"] == "chatty"


def test_diff_output_onto_a_directory(tmp_path, shardscope_cli):
    for force in ([], ["--force"]):
        result = shardscope_cli("diff", LINEAR, "-o", tmp_path, *force)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_lists_every_command_there_is(shardscope_cli):
    """--help names every command parse() accepts (open too), and each has a line of help."""
    from shardscope.cli import COMMANDS

    result = shardscope_cli("--help")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    usage = " ".join(result.stdout.split("\n\n")[0].split())
    assert usage == "usage: shardscope [-h] [--version] {" + ",".join(COMMANDS) + "} ..."
    described = [line.split()[0] for line in lines if re.match(r"    \w+ +\S", line)]
    assert described == list(COMMANDS) and "open" in described
    for command in COMMANDS:  # and each of them parses
        result = shardscope_cli(command, "--help")
        assert result.returncode == 0 and result.stdout.startswith(f"usage: shardscope {command} "), result.stdout


@pytest.mark.parametrize("argv", [("check", "missing.py", "--json"), ("check", "missing.py", "--format", "json"),
                                  ("report", "linear", "--json", "-c", "7"),
                                  ("report", "linear", "--json", "-c", "7", "--processes", "2")])
def test_json_that_stops_on_a_mistake_is_still_one_json_object(argv, shardscope_cli, tmp_path):
    """docs/reference/json.md: exactly one JSON object on stdout, a mistake's too (a CI step's ``jq``
    reads it); the message on stderr is the same."""
    result = shardscope_cli(*argv, cwd=tmp_path)
    error = json.loads(result.stdout)  # one object: a worker's mistake is printed once, by its spawner
    assert result.returncode == error["exit_code"] == 2
    assert f"shardscope: error: {error['error']}\nhint: {error['hint']}\n" in result.stderr
    assert ("No such file: missing.py" if argv[1] == "missing.py" else "Chunk size 7 does not divide") in error["error"]


def test_report_on_a_layouts_file_points_at_layouts(shardscope_cli):
    assert_user_error(shardscope_cli("report", "transformer_layouts"), "is a layouts file (@shardscope.layouts)",
                      "shardscope layouts ")
