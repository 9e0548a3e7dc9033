"""Where a collective comes from: the user's line, or the plan's own (never shardscope's code).

The naive plan's all-reduce is the transpose of the implicit ``pvary`` of ``W`` where the model
uses it: the demo's line. The deferred plan's ``psum`` after the loop, the reduced plan's
``unreduced_psum`` and FSDP's gathers and scatters are made by shardscope's plan bodies: they
are named as the plan's own, in the JSON ``source``, the check notes and the text.
"""

from __future__ import annotations

import json

from _support import DEMOS

from shardscope.pipeline.run import analyze
from shardscope.config.mesh import Mesh
from shardscope.config.settings import Settings

PACKAGE = DEMOS.parent / "shardscope"
SHARDSCOPE_FILES = {path.name for path in PACKAGE.rglob("*.py") if "demo_files" not in path.relative_to(PACKAGE).parts}
"""shardscope's own modules; the demos shipped in the package (shardscope/demo_files) are the user's code."""


def sources(analysis) -> dict[str, list[tuple[str, str]]]:
    return {name: [(c.primitive, c.source) for c in plan.collectives] for name, plan in analysis.plans.items()}


def line_of(demo: str, text: str) -> int:
    """The 1-based line of ``demo`` holding ``text``: counted here, not by shardscope."""
    lines = (DEMOS / demo).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def assert_no_shardscope_file(found: dict[str, list[tuple[str, str]]]) -> None:
    for plan, collectives in found.items():
        for primitive, source in collectives:
            assert source, (plan, primitive)
            assert source.split(":")[0] not in SHARDSCOPE_FILES, (plan, primitive, source)


def test_linear_names_the_users_line_or_the_plans_own():
    found = sources(analyze(Settings(path=DEMOS / "linear.py", devices=2), measure=False, graphs=False))
    assert_no_shardscope_file(found)
    assert found["naive"] == [("psum_invariant", f"linear.py:{line_of('linear.py', 'return x @ W')} (linear)")]
    assert found["deferred"] == [("psum_invariant", "the deferred plan's own psum_invariant, after the chunk loop")]
    assert found["reduced"] == [("unreduced_psum", "the reduced plan's own unreduced_psum, after the chunk loop")]


def test_fsdp_gathers_and_scatters_are_the_plans_own_with_where_they_sit():
    settings = Settings(DEMOS / "fsdp.py", mesh=Mesh.parse("data=4"))
    analysis = analyze(settings, measure=False, graphs=False)
    found = sources(analysis)
    assert_no_shardscope_file(found)
    naive = {(p, s) for p, s in found["naive"]}
    assert ("all_gather", "the naive plan's own all_gather, inside the chunk loop") in naive
    assert ("reduce_scatter", "the naive plan's own reduce_scatter, inside the chunk loop") in naive
    deferred = {(p, s) for p, s in found["deferred"]}
    assert deferred == {
        ("all_gather", "the deferred plan's own all_gather, before the chunk loop"),
        ("psum_invariant", "the deferred plan's own psum_invariant, after the chunk loop"),
        ("reduce_scatter", "the deferred plan's own reduce_scatter, after the chunk loop"),
    }
    # the biases' all-reduce in the naive plan is the transpose of the model's own use of them
    biases = [s for p, s in found["naive"] if p == "psum_invariant"]
    assert sorted(biases) == sorted(f"fsdp.py:{line_of('fsdp.py', b)} (fsdp)" for b in ('params["b1"]', 'params["b2"]'))


def test_report_json_and_check_notes_never_name_shardscope_code(shardscope_cli):
    report = shardscope_cli("report", DEMOS / "linear.py", "--json", "--repeats", "1")
    assert report.returncode == 0, report.stderr
    variants = json.loads(report.stdout)["variants"]
    assert variants["deferred"]["collectives"][0]["source"].startswith("the deferred plan's own psum_invariant")
    check = shardscope_cli("check", DEMOS / "linear.py", "--json")
    for program in json.loads(check.stdout)["programs"]:
        for c in program["collectives"]:
            assert c["source"].split(":")[0] not in SHARDSCOPE_FILES, c
    assert "bodies.py" not in report.stdout + check.stdout


def test_a_users_program_keeps_its_own_lines(shardscope_cli):
    check = shardscope_cli("check", DEMOS / "train_step.py", "--json")
    loss_line = line_of("train_step.py", 'prediction = jnp.tanh(x @ params["W1"])')
    step = json.loads(check.stdout)["programs"][0]
    assert {c["source"] for c in step["collectives"]} == {f"train_step.py:{loss_line} (loss)"}
