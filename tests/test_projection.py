"""Projection onto interconnects: ring formulas, presets, --link/--project, JSON, against hand-computed values."""

from __future__ import annotations

import json

import pytest

from _support import DEMOS
from shardscope.errors import SettingsError
from shardscope.costmodel.interconnects import PRESETS, parse_link, parse_project, preset
from shardscope.costmodel.projection import crossover_bytes, ring_terms
from shardscope.pipeline.projections import project

LINEAR = DEMOS / "linear.py"


def test_ring_terms_follow_the_nccl_formulas():
    # all-reduce: 2(n-1) steps, 2(n-1)/n * S bytes over the link
    assert ring_terms("psum_invariant", 800, 4) == (6, 1200.0)
    assert ring_terms("psum", 800, 8) == (14, 1400.0)
    # reduce-scatter: (n-1) steps, (n-1)/n * S; all-gather: S is the gathered array, n x the operand
    assert ring_terms("reduce_scatter", 800, 4) == (3, 600.0)
    assert ring_terms("all_gather", 200, 4) == (3, 600.0)
    assert ring_terms("ppermute", 800, 4) == (1, 800)
    assert ring_terms("psum", 800, 1) == (0.0, 0.0)


def test_seed_case_on_nvlink_with_8_devices_matches_hand_computation(analysis_of):
    analysis = analysis_of("linear.py", devices=2, chunk_size=16)
    projection = project(analysis, preset("nvlink-h100"), 8)
    # one all-reduce of 20 B per run: 2*7 steps * 2 us + 2*7/8 * 20 B / 450 GB/s
    per_run = 14 * 2e-6 + (14 / 8) * 20 / 450e9
    naive, deferred = projection.plans["naive"], projection.plans["deferred"]
    assert naive.comm_s_per_call == pytest.approx(2 * per_run, rel=1e-12)  # 2 runs per call
    assert deferred.comm_s_per_call == pytest.approx(per_run, rel=1e-12)
    assert naive.latency_share == pytest.approx(14 * 2e-6 / per_run, rel=1e-12)
    assert projection.ratio("naive", "deferred") == pytest.approx(2.0)
    assert projection.crossover_bytes == pytest.approx(8 * 2e-6 * 450e9)  # 7.2 MB
    assert [c.latency_dominated for c in naive.collectives] == [True]


def test_seed_case_on_the_data_centre_network_with_4_devices(analysis_of):
    analysis = analysis_of("linear.py", devices=2, chunk_size=8)  # 4 chunks per device
    assert analysis.plans["naive"].jaxpr_runs_per_call == 4
    projection = project(analysis, preset("dcn-100g"), 4)
    per_run = 6 * 10e-6 + (6 / 4) * 20 / 12.5e9  # 60 us + 2.4 ns
    assert projection.plans["naive"].comm_s_per_call == pytest.approx(4 * per_run, rel=1e-12)
    assert projection.plans["deferred"].comm_s_per_call == pytest.approx(per_run, rel=1e-12)
    assert projection.ratio("naive", "deferred") == pytest.approx(4.0)


def test_a_large_payload_is_bandwidth_dominated(analysis_of):
    analysis = analysis_of("mlp.py", devices=2)
    link = parse_link("1GB/s,1us")
    projection = project(analysis, link, 2)
    for name, plan in projection.plans.items():
        result = analysis.plans[name]
        expected = sum(
            c.executions * (2 * 1e-6 + c.bytes_per_execution / 1e9) for c in result.collectives
        )
        assert plan.comm_s_per_call == pytest.approx(expected, rel=1e-12), name
        for c in plan.collectives:
            assert c.latency_dominated == (c.bytes_per_execution < crossover_bytes(2, link))


def test_parse_link_units():
    assert parse_link("25GB/s,5us").bandwidth_Bps == 25e9
    assert parse_link("25GB/s,5us").latency_s == pytest.approx(5e-6)
    assert parse_link("400Gb/s,2us").bandwidth_Bps == 50e9  # bits
    assert parse_link("400Gbps, 500ns").latency_s == pytest.approx(5e-7)
    assert parse_link("1e9,1e-6").bandwidth_Bps == 1e9
    assert parse_link("2GiB/s,1ms").bandwidth_Bps == 2 * 2**30
    for bad in ("25GB/s", "fast,5us", "25GB/s,soon", "0,1us", "25XB/s,1us"):
        with pytest.raises(SettingsError):
            parse_link(bad)


def test_parse_project():
    link, devices = parse_project("nvlink-h100:16", None)
    assert (link.name, devices) == ("nvlink-h100", 16)
    assert parse_project("ib-ndr", None)[1] is None
    custom = parse_link("1GB/s,1us")
    assert parse_project("link:4", custom) == (custom, 4)
    for bad in ("nvlink:8", "ib-ndr:one", "ib-ndr:1", "link:4"):
        with pytest.raises(SettingsError):
            parse_project(bad, None)


def test_a_tpu_slice_has_no_ring_preset_its_target_costs_its_torus():
    """v5e's ICI is one model, the torus of its machine record: the 200 GB/s ring preset it also
    had (5x faster than the scaling book's measured v5e all-gather) is gone, and asking for it
    says where the slice's ICI is costed."""
    with pytest.raises(SettingsError) as refused:
        parse_project("tpu-v5e-ici:16", None)
    assert "--target tpu:TOPOLOGY" in refused.value.hint
    assert not [p.name for p in PRESETS if "ici" in p.name]


def test_presets_json_lists_every_preset_with_a_source(shardscope_cli):
    result = shardscope_cli("presets", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [p["name"] for p in data] == [p.name for p in PRESETS]
    for item in data:
        assert {"name", "bandwidth_Bps", "latency_s", "source"} <= set(item)
        assert item["bandwidth_Bps"] > 0 and item["latency_s"] > 0
        assert "bandwidth:" in item["source"] and "latency:" in item["source"]
    text = shardscope_cli("presets")
    assert text.returncode == 0 and "nvlink-h100" in text.stdout


def test_report_json_has_the_projection(shardscope_cli):
    result = shardscope_cli("report", LINEAR, "-c", "16", "-r", "2", "--project", "ib-ndr:16", "--json")
    assert result.returncode == 0, result.stderr
    projection = json.loads(result.stdout)["projection"]
    assert (projection["preset"], projection["devices"]) == ("ib-ndr", 16)
    per_run = 30 * 6e-6 + (30 / 16) * 20 / 50e9
    assert projection["plans"]["naive"]["comm_s_per_call"] == pytest.approx(2 * per_run, rel=1e-9)
    assert projection["plans"]["deferred"]["comm_s_per_call"] == pytest.approx(per_run, rel=1e-9)
    assert 0.99 < projection["plans"]["naive"]["latency_share"] <= 1
    assert projection["ratio"]["projected"] == pytest.approx(2.0)
    assert projection["ratio"]["measured"] > 0
    plain = shardscope_cli("report", LINEAR, "-c", "16", "-r", "2", "--json")
    assert json.loads(plain.stdout)["projection"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--project", "warp-drive:8"), "no interconnect preset"),
        (("--link", "fast"), "--link"),
        (("--project", "link:8"), "--link"),
    ],
)
def test_bad_projection_options_exit_2_before_jax(args, needle, shardscope_cli):
    result = shardscope_cli("report", LINEAR, *args)
    assert result.returncode == 2
    assert needle in result.stderr and "hint:" in result.stderr
    assert "Traceback" not in result.stderr


def test_report_project_states_the_measured_comparison_in_the_reports_own_sentence(shardscope_cli):
    """One statement of the comparison: the projection's "measured here" is the verdict's sentence,
    not a second number computed on its own (it said 1.94x beside "no measurable difference")."""
    import re

    result = shardscope_cli("report", LINEAR, "-c", "16", "-r", "6", "--project", "nvlink-h100:8")
    assert result.returncode == 0, result.stderr
    words = " ".join(result.stdout.split())
    sentence = (r"deferred is \d+\.\d\dx (?:faster|slower) than naive \(median of \d+ per-round ratios[^)]*\)"
                r"|no measurable difference between naive and deferred \([^)]*\)")
    verdict = re.search(rf"collective equations in loops(?:; compiled: [^)]*)?\); ({sentence})\.", words)
    measured = re.search(rf"communication time: 2\.00x; measured run time here: ({sentence})\.", words)
    assert verdict and measured, words[-800:]
    assert measured.group(1) == verdict.group(1)
    assert "measured naive/deferred run time here" not in words
