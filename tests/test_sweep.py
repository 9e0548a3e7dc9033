"""shardscope sweep: every plan at every chunk size, memory per device, and the pick under a budget."""

from __future__ import annotations

import json

import pytest

from _support import DEMOS, run_main
from shardscope.errors import SettingsError
from shardscope.costmodel.quantities import parse_size
from shardscope.pipeline.sweep import parse_chunk_sizes

MLP = DEMOS / "mlp.py"
BUDGET = 20 * 2**10  # mlp on 2 devices: chunk sizes 32 and 64 need more than 20 KiB per device


@pytest.fixture(scope="module")
def mlp_sweep():
    result = run_main("sweep", MLP, "--devices", "2", "-r", "2", "--memory-budget", "20KiB", "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "sweep: chunk size 64 done (7/7)" in result.stderr  # progress, off stdout
    return json.loads(result.stdout)


def test_sweep_covers_every_plan_at_every_divisor(mlp_sweep):
    points = mlp_sweep["points"]
    assert mlp_sweep["per_device_batch"] == 64 and mlp_sweep["memory_budget_bytes"] == BUDGET
    assert sorted({p["chunk_size"] for p in points}) == [1, 2, 4, 8, 16, 32, 64]
    plans = {p["plan"] for p in points}
    assert {"naive", "deferred"} <= plans and len(points) == 7 * len(plans)  # every plan the registry built
    for p in points:
        assert {"plan", "chunk_size", "memory", "run_s", "executed_collectives", "bytes_per_call"} <= set(p)
        assert {"temp_size_in_bytes", "argument_size_in_bytes", "output_size_in_bytes"} <= set(p["memory"])
        assert p["run_s"]["min"] <= p["run_s"]["median"] <= p["run_s"]["max"]
        assert p["max_abs_err"] < 1e-4
        chunks = 64 // p["chunk_size"]
        # four parameter leaves: four all-reduces per chunk (naive) or once per call (the others)
        expected_runs = 4 * chunks if p["plan"] == "naive" else 4
        assert (p["chunks_per_device"], p["executed_collectives"]) == (chunks, expected_runs)
        assert p["bytes_per_call"] == expected_runs // 4 * (16 * 32 + 32 + 32 * 4 + 4) * 4
        m = p["memory"]
        assert p["footprint_bytes"] == (m["argument_size_in_bytes"] + m["output_size_in_bytes"]
                                        + m["temp_size_in_bytes"] - m["alias_size_in_bytes"])
        assert p["fits"] == (p["footprint_bytes"] <= BUDGET)


def test_the_budget_excludes_the_largest_chunks_and_the_pick_is_the_fastest_that_fits(mlp_sweep):
    points = mlp_sweep["points"]
    assert not any(p["fits"] for p in points if p["chunk_size"] >= 32)
    fitting = [p for p in points if p["fits"]]
    assert fitting
    fastest = min(fitting, key=lambda p: p["run_s"]["median"])
    pick = mlp_sweep["pick"]
    # the fastest point, or the first swept of the plans that compile to the same program as it
    assert pick["chunk_size"] == fastest["chunk_size"] < 32
    assert [pick["plan"], pick["chunk_size"]] == pick["same_program"][0]
    assert [fastest["plan"], fastest["chunk_size"]] in pick["same_program"]
    same = [p for p in points if [p["plan"], p["chunk_size"]] in pick["same_program"]]
    assert {(p["executed_collectives"], p["bytes_per_call"], p["footprint_bytes"]) for p in same} == {
        (fastest["executed_collectives"], fastest["bytes_per_call"], fastest["footprint_bytes"])}
    smallest = min(points, key=lambda p: p["footprint_bytes"])
    assert mlp_sweep["smallest_footprint"]["footprint_bytes"] == smallest["footprint_bytes"]


def test_nothing_fits_a_tiny_budget(shardscope_cli):
    result = shardscope_cli("sweep", MLP, "--chunk-sizes", "32,64", "-r", "1", "--memory-budget", "1KiB")
    assert result.returncode == 0, result.stderr
    assert "nothing fits within the budget of 1 KiB" in result.stdout
    assert "the smallest footprint is" in result.stdout
    data = json.loads(shardscope_cli("sweep", MLP, "--chunk-sizes", "64", "-r", "1", "--memory-budget", "1KiB",
                              "--json").stdout)
    assert data["pick"] is None and {p["chunk_size"] for p in data["points"]} == {64}


def test_parsers():
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("4096") == 4096
    assert parse_chunk_sizes("8,2,4,2") == (2, 4, 8)
    for bad in ("lots", "-1MiB", "0"):
        with pytest.raises(SettingsError):
            parse_size(bad)
    with pytest.raises(SettingsError):
        parse_chunk_sizes("a,b")


@pytest.mark.parametrize(("args", "needle"), [
    (("--chunk-sizes", "3"), "do not divide the per-device batch 64"),
    (("--memory-budget", "heaps"), "is not a memory size"),
])
def test_sweep_user_errors(args, needle, shardscope_cli):
    result = shardscope_cli("sweep", MLP, *args)
    assert result.returncode == 2
    assert needle in result.stderr and "hint:" in result.stderr and "Traceback" not in result.stderr


def test_the_sweep_command_shows_every_measured_time_and_the_pick():
    """Only the app hides measurements (for its screenshots): the command's table and pick never do."""
    from rich.console import Console

    from shardscope.config.settings import Settings
    from shardscope.pipeline.sweep import run_sweep
    from shardscope.render.sweep import render_sweep

    sweep = run_sweep(Settings(path=DEMOS / "linear.py", devices=2, repeats=1), (16, 32))
    console = Console(width=200, color_system=None)
    with console.capture() as capture:
        render_sweep(sweep, console)
    out = capture.get()
    for p in sweep.points:
        run = f"{p.run_s.median * 1e3:.3f} ({p.run_s.min * 1e3:.2f}-{p.run_s.max * 1e3:.2f})"
        assert any(f"│ {p.plan}" in line and run in line for line in out.splitlines()), (p.plan, run)
    pick = sweep.pick
    if len(sweep.same_program) == 1:
        assert f"pick: {pick.plan} at chunk size {pick.chunk_size}: the fastest (median {pick.run_s.median * 1e3:.3f} ms" in out
    else:  # deferred and reduced may compile to one program: no winner among them
        medians = sorted(p.run_s.median * 1e3 for p in sweep.same_program)
        assert f"pick: chunk size {pick.chunk_size}, the fastest, where " in out
        assert f"(medians {medians[0]:.3f}-{medians[-1]:.3f} ms" in out
    assert "···" not in out and "hidden" not in out


def test_plans_that_compile_to_one_program_tie_instead_of_naming_a_winner(shardscope_cli):
    """At one chunk per device (linear: N=64 on 2 devices, chunk size 32) there is no loop to defer
    out of: every plan all-reduces the gradient once, the same bytes, in the same memory."""
    data = json.loads(shardscope_cli("sweep", DEMOS / "linear.py", "--chunk-sizes", "32", "-r", "6", "--json").stdout)
    points = data["points"]
    assert [p["plan"] for p in points] == ["naive", "deferred", "reduced"]
    assert {(p["chunks_per_device"], p["executed_collectives"], p["bytes_per_call"], p["footprint_bytes"])
            for p in points} == {(1, 1, 20, points[0]["footprint_bytes"])}  # the gradient of W: 5 f32 parameters
    assert data["pick"] == {"plan": "naive", "chunk_size": 32,  # the first swept, whatever noise made fastest
                            "same_program": [["naive", 32], ["deferred", 32], ["reduced", 32]], "same_collectives": []}
    text = " ".join(shardscope_cli("sweep", DEMOS / "linear.py", "--chunk-sizes", "32", "-r", "6").stdout.split())
    assert ("pick: chunk size 32, the fastest, where naive, deferred and reduced compile to the same collectives and "
            "memory: one program, their times differ by noise only (medians ") in text
    assert "pick: naive" not in text and "pick: deferred" not in text and "pick: reduced" not in text


def test_sweep_lists_the_plans_report_cannot_build_and_sweeps_the_rest(analysis_of, shardscope_cli):
    """rnn's own scan closes over the reduced weight: JAX refuses the unreduced cotangent in it.

    The report lists the reduced plan as unavailable; the sweep must do the same in text and
    JSON (exit 0), sweep the plans that exist, and never blame the model for shardscope's plan.
    """
    report = analysis_of("rnn.py", devices=2, chunk_size=16, repeats=1)
    assert "reduced" in report.unavailable  # on jax 0.10.2 and 0.12 (docs/guides/demos.md says so)
    result = shardscope_cli("sweep", DEMOS / "rnn.py", "--chunk-sizes", "8,16", "-r", "1", "--json")
    assert result.returncode == 0, result.stderr
    sweep = json.loads(result.stdout)
    assert set(sweep["unavailable"]) == set(report.unavailable)
    assert sweep["unavailable"]["reduced"] == report.unavailable["reduced"]
    assert {p["plan"] for p in sweep["points"]} == set(report.plans)
    # Wh's all-reduce runs in the time loop (T=8) of every chunk; Wx's and b's once per chunk
    runs = {(p["plan"], p["chunk_size"]): p["executed_collectives"] for p in sweep["points"]}
    assert runs == {("naive", 8): 4 * 8 + 4 + 4, ("naive", 16): 2 * 8 + 2 + 2,
                    ("deferred", 8): 3, ("deferred", 16): 3}

    text = shardscope_cli("sweep", DEMOS / "rnn.py", "--chunk-sizes", "16", "-r", "1")
    assert text.returncode == 0, text.stderr
    assert "reduced: unavailable (JAX cannot trace it here:" in " ".join(text.stdout.split())
    assert "fails to trace" not in text.stdout + text.stderr


_COMPLEX_RBM = """
import jax
import jax.numpy as jnp

import shardscope


@shardscope.demo(params={"W": jax.ShapeDtypeStruct((16, 8), jnp.complex64),
                         "b": jax.ShapeDtypeStruct((8,), jnp.complex64)},
                 x=jax.ShapeDtypeStruct((64, 16), jnp.float32))
def crbm(p, x):
    theta = x @ p["W"] + p["b"]
    return jnp.sum(jnp.log(jnp.cosh(theta)), axis=-1)
"""


def test_a_plan_with_the_picks_collectives_but_another_program_is_named_with_what_differs(tmp_path):
    """A complex RBM at one chunk per device (N=64 on 2 devices, chunk size 32): every plan
    all-reduces W's and b's gradients once, (16*8 + 8) complex64 = 1,088 B, yet with jax 0.10.2
    naive compiles to another program than deferred and reduced (its bias gradient takes 16 B
    more of temporaries; jax 0.12's XLA compiles the three alike). The pick ties only the plans
    of its program, and names the others with the figures in which their memory and XLA counts
    differ, which the table's rounded KiB hide."""
    from rich.console import Console

    from shardscope.config.settings import Settings
    from shardscope.pipeline.sweep import run_sweep
    from shardscope.render.sweep import render_sweep, sweep_json

    path = tmp_path / "crbm.py"
    path.write_text(_COMPLEX_RBM)
    sweep = run_sweep(Settings(path=path, devices=2, repeats=3), (32,))  # one sweep: the pick is noise's
    data = json.loads(json.dumps(sweep_json(sweep)))
    points = {p["plan"]: p for p in data["points"]}
    assert {(p["executed_collectives"], p["bytes_per_call"]) for p in points.values()} == {(2, (16 * 8 + 8) * 8)}
    pick = data["pick"]
    picked = points[pick["plan"]]
    same = {plan for plan, _ in pick["same_program"]}
    others = [p for p in points.values() if p["memory"] != picked["memory"]]
    # every plan whose memory is the pick's is the pick's program (jax 0.12's XLA compiles all three alike)
    assert same == {p["plan"] for p in points.values() if p not in others}
    listed = {entry["plan"]: entry["differences"] for entry in pick["same_collectives"]}
    assert set(listed) == {p["plan"] for p in others}
    for p in others:
        differing = {k for k in p["memory"] if p["memory"][k] != picked["memory"][k]}
        assert differing and differing <= set(listed[p["plan"]])
        for key in differing:
            assert listed[p["plan"]][key] == [picked["memory"][key], p["memory"][key]]

    console = Console(width=200, color_system=None)
    with console.capture() as capture:
        render_sweep(sweep, console)
    text = " ".join(capture.get().split())
    if not others:
        assert "another program" not in text
        return
    subject = " and ".join(p["plan"] for p in others) + (" run" if len(others) > 1 else " runs")  # of 3 plans
    assert f"{subject} the same collectives as " in text
    verb = "compile" if len(others) > 1 else "compiles"
    for p in others:
        figure = p["memory"]["temp_size_in_bytes"], picked["memory"]["temp_size_in_bytes"]
        assert f"but {verb} to another program (temporaries {figure[0]:,} B against {figure[1]:,} B" in text
