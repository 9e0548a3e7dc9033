"""Options given values that cannot work: one message, a hint that works, exit status 2.

Every hint's suggestion is checked here against the rules it must follow (the cap of 512
simulated devices, a multiple of --processes, a divisor of the batch), recomputed in the test.
"""

from __future__ import annotations

import re

import pytest
from _support import DEMOS

from shardscope.config.settings import MAX_DEVICES

LINEAR = DEMOS / "linear.py"  # N = 64
BATCH = 64


@pytest.fixture
def refused(shardscope_cli):
    """``refused(*args)``: run the CLI (in this process), check it refused with one message and a
    hint (status 2, no traceback), and return ``(message, hint)``."""

    def run(*args: object) -> tuple[str, str]:
        result = shardscope_cli(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        message, _, hint = result.stderr.partition("\nhint: ")
        assert message.startswith("shardscope: error: ") and hint, result.stderr
        return message.removeprefix("shardscope: error: "), hint.strip()

    return run


@pytest.mark.parametrize(("devices", "processes"), [(2, 1000), (2, 300), (2, 4), (8, 3), (2, 513)])
def test_process_counts_suggest_only_device_counts_that_work(devices, processes, refused):
    message, hint = refused("report", LINEAR, "--devices", str(devices), "--processes", str(processes))
    assert f"--devices {devices} does not split over --processes {processes}" in message
    suggested = [int(d) for d in re.findall(r"--devices ([\d, ]+)", hint)[0].replace(",", " ").split()]
    for count in suggested:
        assert count <= MAX_DEVICES and BATCH % count == 0, hint
    named = re.search(r"--processes ([\d, ]+)", hint)
    if named:  # fewer processes, with the devices asked for: each must split them
        assert all(devices % int(p) == 0 for p in named.group(1).replace(",", " ").split()), hint
    else:
        assert all(count % processes == 0 for count in suggested), hint
    if processes > MAX_DEVICES or not any(d % processes == 0 for d in range(1, BATCH + 1) if BATCH % d == 0):
        assert str(MAX_DEVICES) in hint  # the cap is said when no device count fits


def test_calibrate_refuses_more_devices_than_the_cap_before_starting_them(refused):
    message, hint = refused("calibrate", "--devices", "5000")
    assert message == f"5,000 devices asked for, but at most {MAX_DEVICES:,} shardscope simulates."
    assert hint == "pick 1 to 4,096 devices"  # calibrate has no batch to divide; the cap in figures
    message, hint = refused("calibrate", "--devices", "3", "--processes", "2")
    assert "--devices 4, 6, 8" in hint


@pytest.mark.parametrize(("args", "message"), [
    (("sweep", LINEAR, "--memory-budget", "-1KiB"), "--memory-budget '-1KiB' is negative"),
    (("sweep", LINEAR, "--memory-budget", "1e400"), "--memory-budget '1e400' is too large: 1e400 overflows to infinity"),
    (("sweep", LINEAR, "--memory-budget", "inf"), "--memory-budget 'inf' is not a finite number"),
    (("sweep", LINEAR, "--memory-budget", "0.5"), "--memory-budget '0.5' is less than 1 byte"),
    (("sweep", LINEAR, "--memory-budget", "3parsecs"), "'parsecs' is not a unit of size"),
    (("calibrate", "--sizes", "-1KiB,1MiB"), "--sizes '-1KiB' is negative"),
    (("report", LINEAR, "--link", "-25GB/s,5us"), "--link bandwidth '-25GB/s' is negative"),
    (("report", LINEAR, "--link", "25GB/s,-5us"), "--link latency '-5us' is negative"),
    (("report", LINEAR, "--link", "1e400,1e-6"), "--link bandwidth '1e400' is too large"),
    (("report", LINEAR, "--link", "25GB/s,1e400"), "--link latency '1e400' is too large"),
    (("report", LINEAR, "--link", "inf,1us"), "--link bandwidth 'inf' is not a finite number"),
    (("report", LINEAR, "--link", "nan,1us"), "--link bandwidth 'nan' is not a finite number"),
    (("report", LINEAR, "--link", "25GB/s,nan"), "--link latency 'nan' is not a finite number"),
    (("report", LINEAR, "--link", "1e-400,1us"), "--link bandwidth '1e-400' is so small it underflows to zero"),
])
def test_negative_and_non_finite_values_are_refused_with_what_is_wrong(args, message, refused):
    said, hint = refused(*args)
    assert message in said, said
    assert "expected one argument" not in said


def test_a_missing_value_is_still_a_missing_value(shardscope_cli):
    result = shardscope_cli("report", LINEAR, "--link", "--json")
    assert result.returncode == 2 and "--link: expected one argument" in result.stderr


def test_petabytes_and_exabytes_are_sizes(refused):
    from shardscope.costmodel.quantities import parse_size

    assert parse_size("1PiB") == 2**50 and parse_size("1PB") == 10**15
    assert parse_size("2EiB") == 2 * 2**60 and parse_size("1.5 TiB") == 3 * 2**39
    assert parse_size("1e9") == 10**9 and parse_size("512mib") == 512 * 2**20
    _, hint = refused("sweep", LINEAR, "--memory-budget", "2ZiB")
    assert "PiB" in hint and "EiB" in hint  # the units that exist


def test_a_sweep_takes_a_petabyte_budget(shardscope_cli):
    result = shardscope_cli("sweep", LINEAR, "--memory-budget", "1PiB", "--chunk-sizes", "32", "-r", "1")
    assert result.returncode == 0, result.stderr
    assert "within the budget of 1 PiB" in result.stdout


def test_calibrate_refuses_sizes_that_do_not_fit_in_memory(refused):
    message, hint = refused("calibrate", "--sizes", "1KiB,1PiB")
    assert message.startswith("--sizes: 1.1 PB per device on 2 devices needs about 6.8 PB") and "available" in message
    assert "--sizes 1KiB" in hint


def test_a_projection_is_capped_at_a_documented_device_count(refused):
    from shardscope.costmodel.interconnects import MAX_PROJECTED_DEVICES

    message, hint = refused("report", LINEAR, "--project", "nvlink-h100:99999999999999999999")
    assert f"more than the {MAX_PROJECTED_DEVICES:,} a projection takes" in message
    assert f"--project nvlink-h100:" in hint
    guide = " ".join((DEMOS.parent / "docs" / "guides" / "projections.md").read_text().split())
    assert f"`DEVICES` is 2 to {MAX_PROJECTED_DEVICES:,}" in guide


@pytest.mark.parametrize(("args", "said", "suggested"), [
    (("diff", LINEAR, "-r", "3"), "-r/--repeats does nothing here: diff traces the plans", "report"),
    (("diff", LINEAR, "--repeats", "3", "--timing-budget", "5"),
     "-r/--repeats and --timing-budget do nothing here: diff traces the plans", "report"),
    (("sweep", LINEAR, "--timing-budget", "5"), "--timing-budget does nothing here: sweep times every plan", "-r N"),
    (("check", LINEAR, "-r", "3"), "-r/--repeats times --what-if's rewrites", "--what-if -r 3"),
])
def test_timing_options_a_command_does_not_use_are_refused(args, said, suggested, refused):
    message, hint = refused(*args)
    assert message.startswith(said), message
    assert suggested in hint, hint


def test_diff_and_sweep_help_list_only_the_timing_options_they_use(shardscope_cli):
    diff_help = shardscope_cli("diff", "--help").stdout
    assert "--repeats" not in diff_help and "--timing-budget" not in diff_help
    sweep_help = shardscope_cli("sweep", "--help").stdout
    assert "--repeats" in sweep_help and "--timing-budget" not in sweep_help


@pytest.mark.parametrize("command", ["report", "sweep", "diff"])
@pytest.mark.parametrize("devices", [2, 16])
def test_a_mesh_is_refused_with_a_device_count_it_does_not_span(command, devices, refused):
    message, hint = refused(command, LINEAR, "--devices", devices, "--mesh", "data=4,model=2")
    assert message.startswith(f"--mesh data=4,model=2 spans {4 * 2} devices, and --devices asks for {devices}")
    assert "--devices would be ignored" in message
    assert hint.startswith(f"leave --devices out (the mesh's axes multiply to {4 * 2})"), hint


def test_a_mesh_is_refused_with_an_axis_it_would_ignore(refused):
    message, hint = refused("report", LINEAR, "--mesh", "data=4,model=2", "--axis", "q")
    assert message.startswith("--axis q names the axis of the 1-D mesh") and "ignored" in message
    assert hint == "leave --axis out: the mesh's axes are data, model"


def test_the_explorer_refuses_a_mesh_with_a_device_count_it_does_not_span():
    from shardscope.cli import open_options
    from shardscope.errors import SettingsError

    with pytest.raises(SettingsError, match="spans 8 devices, and --devices asks for 2"):
        open_options([str(LINEAR), "--devices", "2", "--mesh", "data=4,model=2"])


def test_a_mesh_with_the_device_count_it_spans_is_taken(shardscope_cli):
    result = shardscope_cli("diff", LINEAR, "--devices", 8, "--mesh", "data=4,model=2")
    assert result.returncode == 0, result.stderr
    assert "psum" in result.stdout  # the plans' diff, traced over the 2-D mesh


@pytest.mark.parametrize("args", [
    ("report", LINEAR, "--timeout", "5"),
    ("sweep", LINEAR, "--timeout", "5", "--processes", "1"),
    ("calibrate", "--timeout", "5"),
])
def test_a_timeout_without_worker_processes_is_refused(args, refused):
    message, hint = refused(*args)
    assert message.startswith("--timeout 5 ends the worker processes --processes P starts")
    assert "--processes 2 or more" in hint


def test_a_timeout_with_distributed_is_refused_with_the_launchers_limit(refused):
    message, hint = refused("report", LINEAR, "--timeout", "5", "--distributed")
    assert "--distributed's processes are the cluster launcher's" in message
    assert "--processes" not in hint and "srun --time" in hint  # --processes does not go with --distributed
