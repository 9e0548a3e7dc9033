"""Calibration: the alpha-beta fit recovers known links, and `shardscope calibrate` measures this machine."""

from __future__ import annotations

import json

import pytest

from shardscope.pipeline.calibrate import AllReducePoint, Calibration, fit


def synthetic(devices: int, alpha: float, bandwidth: float, sizes: list[int]) -> list[AllReducePoint]:
    n = devices
    return [AllReducePoint(s, 2 * (n - 1) * alpha + 2 * (n - 1) / n * s / bandwidth) for s in sizes]


@pytest.mark.parametrize(("devices", "alpha", "bandwidth"), [(2, 20e-6, 1e9), (4, 2e-6, 450e9), (8, 1e-5, 12.5e9)])
def test_fit_recovers_a_known_link(devices, alpha, bandwidth):
    points = synthetic(devices, alpha, bandwidth, [1024, 16384, 262144, 1 << 20, 4 << 20])
    got_alpha, got_bandwidth = fit(devices, points)
    assert got_alpha == pytest.approx(alpha, rel=1e-6)
    assert got_bandwidth == pytest.approx(bandwidth, rel=1e-6)
    c = Calibration(devices, 1, "in-process", tuple(points), got_alpha, got_bandwidth)
    assert c.max_relative_error < 1e-6


def test_fit_error_is_reported_for_points_off_the_line():
    points = synthetic(2, 10e-6, 1e9, [1024, 1 << 20])
    noisy = [points[0], AllReducePoint(points[1].payload_bytes, points[1].seconds * 2), *synthetic(2, 10e-6, 1e9, [4096])]
    alpha, bandwidth = fit(2, noisy)
    c = Calibration(2, 1, "in-process", tuple(noisy), alpha, bandwidth)
    assert c.max_relative_error > 0.05  # the doubled point cannot sit on any line through the others
    assert c.rms_relative_error <= c.max_relative_error


@pytest.mark.slow  # starts two worker processes
def test_calibrate_json_in_process_and_over_two_processes(shardscope_cli):
    for extra, transport, processes in (((), "in-process", 1), (("--processes", "2"), "gloo", 2)):
        result = shardscope_cli("calibrate", "--devices", "2", "--sizes", "1KiB,64KiB,256KiB", "-r", "3", "--json",
                         *extra)
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert (data["processes"], data["collectives_transport"], data["devices"]) == (processes, transport, 2)
        assert [p["payload_bytes"] for p in data["points"]] == [1024, 65536, 262144]
        assert all(p["seconds"] > 0 for p in data["points"])
        assert data["latency_s"] >= 0 and data["max_relative_error"] >= data["rms_relative_error"] >= 0
        assert data["link"].count(",") == 1
        cpu = data["cpu"]  # the step estimate's peaks for this machine's CPU, measured
        assert cpu["peak_flops"]["f32"] > 0 and cpu["peak_flops"]["bf16"] > 0 and cpu["memory_bandwidth_Bps"] > 0
        assert cpu["call_overhead_s"] > 0 and "measured by shardscope calibrate" in cpu["sources"]["peak_flops"]


def test_calibrate_user_errors(shardscope_cli):
    for args, needle in ((("--sizes", "1KiB"), "at least two sizes"), (("--devices", "1"), "at least 2 devices"),
                         (("--devices", "20000"), "20,000 devices asked for, but at most 4,096")):
        result = shardscope_cli("calibrate", *args)
        assert result.returncode == 2 and needle in result.stderr and "hint:" in result.stderr
