"""The text report and the JSON say the same things in the team's words (VOCAB.md)."""

from __future__ import annotations

import json
import re

import jax
import pytest
from _support import DEMOS
from rich.console import Console

from shardscope.measure.timing import GRADIENT_CHECK
from shardscope.render.report import render, to_json, verdict
from shardscope.measure.speedup import speedup_text


@pytest.fixture(scope="module")
def seed_case(analysis_of):
    return analysis_of("linear.py", devices=2, chunk_size=16, repeats=6)


COMMUNICATING = re.compile(r"= (psum_invariant|unreduced_psum|psum|all_gather|psum_scatter|reduce_scatter|ppermute"
                           r"|all_to_all|pmax|pmin)\[")
"""An equation of a primitive that moves data between devices, as a jaxpr's text writes it (the
casts, pvary and preduced move nothing)."""


def collective_equations(demo: str, devices: int, chunk_size: int) -> dict[str, int]:
    """Each plan's collective equations, counted in the text of its jaxpr (``jax.make_jaxpr``)."""
    from shardscope.plans.registry import build_plans
    from shardscope.config.settings import Settings
    from shardscope.sources.loading import load_demo_file

    settings = Settings(path=DEMOS / demo, devices=devices, chunk_size=chunk_size)
    built = build_plans(load_demo_file(settings.path).get(None), settings)
    return {name: len(COMMUNICATING.findall(str(jax.make_jaxpr(built.functions[name])(*built.args))))
            for name in built.plans}


def _text(analysis) -> str:
    console = Console(record=True, width=200)
    render(analysis, console)
    return console.export_text()


def _row(text: str, label: str) -> list[str]:
    (line,) = [l for l in text.splitlines() if l.startswith(f"│ {label} ")]
    return [cell.strip() for cell in line.strip("│").split("│")]


def test_rows_use_runs_per_call_and_collective_equations(seed_case):
    text = _text(seed_case)
    plans = list(seed_case.plans.values())
    assert [p.name for p in plans][:2] == ["naive", "deferred"]
    counted = collective_equations("linear.py", devices=2, chunk_size=16)
    assert counted["naive"] == counted["deferred"] == 1  # W's all-reduce: in the chunk loop, or once after it
    assert _row(text, "collective equations") == ["collective equations", *(str(counted[p.name]) for p in plans)]
    assert _row(text, "  inside loops")[:3] == ["inside loops", "1", "0"]
    assert _row(text, "  runs per call")[:3] == ["runs per call", "2", "1"]
    assert _row(text, "  bytes per call")[:3] == ["bytes per call", "40", "20"]
    # one all-reduce of W (5 floats) in the while body of 2 chunks, one after the loop: as the jaxpr
    assert _row(text, "compiled collectives")[:3] == ["compiled collectives", "1 (1 in while)", "1 (0 in while)"]
    assert _row(text, "  compiled runs per call")[:3] == ["compiled runs per call", "2", "1"]
    assert _row(text, "  compiled bytes per call")[:3] == ["compiled bytes per call", "40", "20"]


def test_the_verdict_sentence_has_the_runs_and_the_one_speedup_wording(seed_case):
    sentence = verdict(seed_case)
    assert sentence.startswith(
        "naive: 2 runs/call (1 of 1 collective equations in loops; compiled: 2 runs/call); deferred: 1 run/call "
        "(0 of 1 collective equations in loops; compiled: 1 run/call); ")
    assert sentence.endswith(seed_case.speedup_text() + ".")
    c = seed_case.comparison
    assert seed_case.speedup_text() == speedup_text(seed_case.measured_speedup, c.baseline, c.candidate)
    assert sentence in " ".join(_text(seed_case).split())


def test_the_report_says_what_the_gradient_error_is_compared_with(seed_case):
    text = " ".join(_text(seed_case).split())
    assert _row(_text(seed_case), "max_abs_err vs reference")[1:] == [
        f"{p.max_abs_err:.2e}" for p in seed_case.plans.values()]
    assert GRADIENT_CHECK in text
    assert "unchunked VJP" in GRADIENT_CHECK and "same random cotangent" in GRADIENT_CHECK
    assert "separable over the batch" in GRADIENT_CHECK


def test_json_speedup_keys_agree_with_the_per_round_samples(seed_case):
    data = json.loads(json.dumps(to_json(seed_case)))
    s = seed_case.measured_speedup
    assert data["speedup"] == s.median
    assert data["speedup_spread"] == [s.q1, s.q3] and s.q1 <= s.median <= s.q3
    assert data["speedup_interval"] == [s.low, s.high]
    assert data["speedup_verdict"] == seed_case.comparison.verdict
    assert data["speedup_verdict"] in {"faster", "slower", "no measurable difference", "too few rounds"}


def test_json_speedup_keys_are_null_when_only_traced(tmp_path):
    from _support import DEMOS
    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    data = to_json(analyze(Settings(path=DEMOS / "linear.py"), measure=False))
    assert (data["speedup"], data["speedup_spread"], data["speedup_verdict"]) == (None, None, None)
