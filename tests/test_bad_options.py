"""Options given values that cannot work: one message, a hint that works, exit status 2.

Every hint's suggestion is checked here against the rules it must follow (the cap of 512
simulated devices, a multiple of --processes, a divisor of the batch), recomputed in the test.
"""

from __future__ import annotations

import re

import pytest
from _support import DEMOS, run_cli

from shardscope.settings import MAX_DEVICES

LINEAR = DEMOS / "linear.py"  # N = 64
BATCH = 64


def refused(*args: str) -> tuple[str, str]:
    result = run_cli(*args, timeout=60)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    message, _, hint = result.stderr.partition("\nhint: ")
    assert message.startswith("shardscope: error: ") and hint, result.stderr
    return message.removeprefix("shardscope: error: "), hint.strip()


@pytest.mark.parametrize(("devices", "processes"), [(2, 1000), (2, 300), (2, 4), (8, 3), (2, 513)])
def test_process_counts_suggest_only_device_counts_that_work(devices, processes):
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


def test_calibrate_refuses_more_devices_than_the_cap_before_starting_them():
    message, hint = refused("calibrate", "--devices", "1000")
    assert message == f"1,000 devices asked for, but at most {MAX_DEVICES} shardscope simulates."
    message, hint = refused("calibrate", "--devices", "3", "--processes", "2")
    assert "--devices 4, 6, 8" in hint
