"""``analyze_programs``: a program file's programs as the same Analysis the views render.

Real JAX on the 8 simulated CPU devices of conftest; counts, trip counts, bytes and the
outputs' agreement are checked on the shipped demos and on small program files.
"""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path

import pytest
from _support import DEMOS, load_program_module

import _compiled_programs as programs

from shardscope.errors import DemoFileError, SettingsError, ShardscopeError, TraceError
from shardscope.pipeline.run import analyze
from shardscope.config.settings import Settings
from shardscope.render.text import diff_text, headline

HEADER = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
x = jax.ShapeDtypeStruct((8, 4), jnp.float32)


def mapped(fn):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("d"), out_specs=P()))
'''


@functools.lru_cache(maxsize=None)
def _analysis(path: str, measure: bool = True, function: str | None = None):
    return analyze(Settings(path=Path(path), function=function, repeats=3), measure=measure)


BAD = '''
@shardscope.program(args=(x,))
@mapped
def bad(x):
    return lax.psum(x @ jnp.ones((5, 5)), "d")
'''


def write_programs(tmp_path: Path, *bodies: str, name: str = "programs.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(HEADER) + "".join(textwrap.dedent(body) for body in bodies))
    return path


def test_pipeline_has_one_ppermute_in_its_fori_loop():
    analysis = _analysis(str(DEMOS / "pipeline.py"))
    assert analysis.origin.noun == "program" and list(analysis.plans) == ["pipeline"]
    plan = analysis.plans["pipeline"]
    [ppermute] = plan.collectives
    assert (ppermute.primitive, ppermute.axes, ppermute.loop_trip_counts, ppermute.executions) == (
        "ppermute", ("stage",), (4,), 4)
    # 8 examples x 16 floats of 4 bytes per device, every one of the 4 steps
    assert ppermute.bytes_per_execution == 8 * 16 * 4 and plan.jaxpr_bytes_per_call == 4 * 8 * 16 * 4
    assert plan.jaxpr_runs_per_call == 4 and plan.collectives_in_loops == 1
    assert ppermute.verdict_kind == "needed"
    assert plan.mesh == "stage=4" and plan.role == "program" and plan.title == "pipeline program"
    # compiled and timed: the compiled module keeps the transfer in the while body
    assert len(plan.compiled.findings) >= 1 and len(plan.run_s.samples) == 3 and plan.compile_s > 0
    assert plan.memory["argument_size_in_bytes"] > 0 and plan.cost_analysis["flops"] > 0
    # no chunks, no reference, no gradient: absent, not made up
    assert analysis.shapes is None and analysis.reference is None and plan.max_abs_err is None
    # one program: compared with itself, no speedup and an empty diff
    assert (analysis.comparison.baseline, analysis.comparison.candidate) == ("pipeline", "pipeline")
    assert analysis.comparison.speedup is None and analysis.comparison.diff == ()
    assert analysis.export_stem() == "pipeline-pipeline-8dev"
    assert analysis.warnings == [] and analysis.output_checks == ()


def test_train_step_programs_and_their_comparison():
    analysis = _analysis(str(DEMOS / "train_step.py"))
    step, fixed = analysis.plans["step"], analysis.plans["step_fixed"]
    assert [(c.primitive, c.executions, c.loop_trip_counts) for c in step.collectives] == [
        ("psum_invariant", 4, (4,)), ("psum_invariant", 4, (4,))]
    assert sorted(c.value for c in step.collectives) == ["grad(params['W1'])", "grad(params['W2'])"]
    assert step.jaxpr_runs_per_call == 8 and step.collectives_in_loops == 2
    assert fixed.jaxpr_runs_per_call == 2 and fixed.collectives_in_loops == 0
    # W1 is 16x32 and W2 32x1 floats: 4 all-reduces of each per step, one after the fix
    assert step.jaxpr_bytes_per_call == 4 * (16 * 32 + 32) * 4 and fixed.jaxpr_bytes_per_call == (16 * 32 + 32) * 4
    assert len(step.compiled.findings) >= 1 and len(fixed.compiled.findings) == 0
    comparison = analysis.comparison
    assert (comparison.baseline, comparison.candidate) == ("step", "step_fixed")
    assert comparison.speedup is not None and comparison.speedup.rounds == 3
    assert comparison.diff[:2] == ("--- step", "+++ step_fixed")
    assert any(line.startswith("+") and "pvary" in line for line in comparison.diff)
    # the fix changes where the reduction runs, not what the step computes
    [check] = analysis.output_checks
    assert (check.baseline, check.candidate, check.subject) == ("step", "step_fixed", "outputs")
    assert check.agree and check.max_abs_diff < check.tolerance and analysis.warnings == []
    assert analysis.export_stem() == "train_step-step-vs-step_fixed-8dev"
    assert analysis.function == "train_step" and analysis.settings.devices == 8


def test_program_texts_are_honest_about_what_does_not_apply():
    analysis = _analysis(str(DEMOS / "train_step.py"))
    assert headline(analysis) == [
        "shardscope: train_step.py: 2 programs (step, step_fixed)",
        "mesh batch=8 (cpu, 8 devices started); each program runs as written, on its own example arguments",
    ]
    text = diff_text(analysis)
    assert "# step: 8 runs/call, 2 of 2 collective equations in loops, 8,704 B/call" in text
    assert "# step_fixed: 2 runs/call, all 2 collective equations once per call, 2,176 B/call" in text
    # a program's own chunks (a scan over micro-batches) are not denied: no "no chunks", no chunk size
    assert "chunk" not in text.split("--- step")[0]


def test_the_candidate_can_be_named_and_a_wrong_name_is_refused():
    analysis = _analysis(str(DEMOS / "train_step.py"), measure=False, function="step")
    assert (analysis.comparison.baseline, analysis.comparison.candidate) == ("step_fixed", "step")
    assert analysis.plans["step"].run_s is None and analysis.plans["step"].compiled is None
    with pytest.raises(SettingsError, match="no program 'nope'"):
        analyze(Settings(path=DEMOS / "train_step.py", function="nope"), measure=False)


def test_a_program_that_fails_to_trace_is_unavailable_while_another_traces(tmp_path):
    path = write_programs(tmp_path, '''
        @shardscope.program(args=(x,))
        @mapped
        def good(x):
            return lax.psum(x.sum(), "d")
    ''', BAD)
    analysis = analyze(Settings(path=path, repeats=2), measure=False)
    assert list(analysis.plans) == ["good"]
    assert "bad" in analysis.unavailable and "fails to trace" in analysis.unavailable["bad"]
    only_bad = write_programs(tmp_path, BAD, name="only_bad.py")
    with pytest.raises(TraceError, match="bad fails to trace on its example arguments"):
        analyze(Settings(path=only_bad), measure=False)


def test_programs_whose_outputs_differ_are_warned_about(tmp_path):
    path = write_programs(tmp_path, '''
        @shardscope.program(args=(x,))
        @mapped
        def total(x):
            return lax.psum(x.sum(), "d")

        @shardscope.program(args=(x,))
        @mapped
        def off_by_one(x):
            return lax.psum(x.sum(), "d") + 1.0

        @shardscope.program(args=(x, x))
        @jax.jit
        def other_arguments(a, b):
            return (a + b).sum()
    ''')
    analysis = analyze(Settings(path=path, repeats=2))
    # other_arguments takes other example arguments: not compared
    [check] = analysis.output_checks
    assert (check.baseline, check.candidate, check.agree) == ("total", "off_by_one", False)
    assert check.max_abs_diff == pytest.approx(1.0)
    assert analysis.warnings == [check.warning]
    assert check.warning.startswith("the total and off_by_one programs' outputs differ by 1.00e+00")
    assert analysis.plans["other_arguments"].mesh is None and analysis.plans["other_arguments"].collectives == ()


def test_the_report_renderers_take_a_program_analysis():
    import json

    from rich.console import Console

    from shardscope.render.report import render, to_json

    analysis = _analysis(str(DEMOS / "train_step.py"))
    data = json.loads(json.dumps(to_json(analysis), allow_nan=False))
    assert data["kind"] == "programs" and data["devices"] == 8 and data["function"] == "train_step"
    assert (data["batch"], data["chunk_size"], data["mesh"], data["reference"]) == (None, None, None, None)
    assert data["variants"]["step"]["executed_collectives"] == 8 and data["variants"]["step"]["mesh"] == "batch=8"
    assert data["variants"]["step_fixed"]["max_abs_err"] is None
    assert data["comparison"]["baseline"] == "step" and data["comparison"]["candidate"] == "step_fixed"
    assert [c["agree"] for c in data["output_checks"]] == [True]
    console = Console(record=True, width=200)
    render(analysis, console)
    text = console.export_text()
    assert text.startswith("shardscope: train_step.py: 2 programs (step, step_fixed)\n")
    assert "max_abs_err" not in text and "reference" not in text and "chunk size" not in text
    module = load_program_module(DEMOS / "train_step.py")
    runs = {name: programs.recount(getattr(module, name).trace(module.params, module.xs, module.ys).lower().compile()
                                   .as_text())["runs"]["all-reduce"] for name in ("step", "step_fixed")}
    assert runs == {"step": 4, "step_fixed": 1}  # XLA combines the two gradients' sums into one instruction
    assert (f"step: 8 runs/call (2 of 2 collective equations in loops; compiled: {runs['step']} runs/call); "
            f"step_fixed: 2 runs/call (0 of 2 collective equations in loops; compiled: {runs['step_fixed']} run/call)"
            in " ".join(text.split()))
    assert data["variants"]["step"]["compiled_executed_collectives"] == runs["step"]
    (combined,) = data["variants"]["step"]["compiled_collectives"]
    assert (combined["kind"], combined["operands"], combined["executions"], combined["written_by"]) == (
        "all-reduce", 2, 4, "program")
    assert combined["bytes"] == (16 * 32 + 32) * 4 and combined["bytes_per_call"] == 4 * combined["bytes"]
    assert len(combined["equations"]) == 2 and combined["verdict"] == "deferrable"
    assert data["variants"]["step"]["hlo"]["collectives_in_loops"] == 1


def test_keyword_arguments_and_prng_keys_are_materialised_and_placed(tmp_path):
    path = write_programs(tmp_path, '''
        key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)

        @shardscope.program(args=(x,), kwargs={"scale": jnp.float32(2.0), "key": key})
        def noisy(x, *, scale, key):
            noise = jax.random.normal(key, x.shape)
            total = jax.shard_map(lambda x: lax.psum(x.sum(0), "d"), mesh=mesh, in_specs=P("d"), out_specs=P())
            return total(x + noise) * scale
    ''')
    analysis = analyze(Settings(path=path, repeats=2))
    plan = analysis.plans["noisy"]
    assert plan.jaxpr_runs_per_call == 1 and plan.jaxpr_bytes_per_call == 4 * 4 and plan.mesh == "d=4"
    assert len(plan.run_s.samples) == 2 and len(plan.compiled.collectives) >= 1


def test_a_program_with_static_arguments_is_placed_and_run_on_its_dynamic_ones(tmp_path):
    path = write_programs(tmp_path, '''
        @shardscope.program(args=(x, 3), kwargs={"scale": 2.0, "y": x})
        @functools.partial(jax.jit, static_argnums=1, static_argnames="scale")
        def scaled(x, n, scale, y):
            return n * scale * jax.shard_map(lambda v: lax.psum(v.sum(), "d"), mesh=mesh, in_specs=P("d"),
                                             out_specs=P())(x + y)

        @shardscope.program(args=(x, 3), kwargs={"scale": 2.0, "y": x})
        @jax.jit
        def dynamic(x, n, scale, y):
            return n * scale * jax.shard_map(lambda v: lax.psum(v.sum(), "d"), mesh=mesh, in_specs=P("d"),
                                             out_specs=P())(x + y)
    ''', name="static.py")
    path.write_text("import functools\n" + path.read_text())
    analysis = analyze(Settings(path=path, repeats=2))
    assert list(analysis.plans) == ["scaled", "dynamic"] and analysis.unavailable == {}
    assert len(analysis.plans["scaled"].run_s.samples) == 2
    assert analysis.plans["scaled"].jaxpr_runs_per_call == 1
    # the same example arguments, static or not: the same outputs
    [check] = analysis.output_checks
    assert (check.baseline, check.candidate, check.agree) == ("scaled", "dynamic", True)
    assert analysis.warnings == []


def test_static_arguments_that_cannot_be_told_apart_are_refused(tmp_path):
    path = write_programs(tmp_path, '''
        @shardscope.program(args=(x, 3, 4))
        @functools.partial(jax.jit, static_argnums=1)
        def ambiguous(x, n, m):
            return jax.shard_map(lambda v: lax.psum(v.sum(), "d"), mesh=mesh, in_specs=P("d"),
                                 out_specs=P())(x) * n * m
    ''')
    path.write_text("import functools\n" + path.read_text())
    with pytest.raises(ShardscopeError) as raised:
        analyze(Settings(path=path, repeats=1))
    assert "cannot tell which 1 of the example arguments of the program ambiguous are static" in raised.value.message
    assert "jnp.asarray(3)" in raised.value.hint


def test_programs_given_other_concrete_values_are_not_compared(tmp_path):
    path = write_programs(tmp_path, '''
        w = jnp.ones((4, 4))

        @shardscope.program(args=(w, x))
        @jax.jit
        def ones(w, x):
            return (x @ w).sum()

        @shardscope.program(args=(jnp.zeros((4, 4)), x))
        @jax.jit
        def zeros(w, x):
            return (x @ w).sum()

        @shardscope.program(args=(jnp.ones((4, 4)), x))
        @jax.jit
        def ones_again(w, x):
            return (x @ w).sum()
    ''')
    analysis = analyze(Settings(path=path, repeats=1))
    # zeros runs on other values: comparing it would warn about a difference that is by design
    [check] = analysis.output_checks
    assert (check.baseline, check.candidate, check.agree) == ("ones", "ones_again", True)
    assert analysis.warnings == []


def test_programs_are_compared_within_each_group_of_equal_arguments(tmp_path):
    path = write_programs(tmp_path, '''
        wide = jax.ShapeDtypeStruct((16, 4), jnp.float32)

        @shardscope.program(args=(wide,))
        @mapped
        def first_half(x):
            return lax.psum(x.sum(), "d")

        @shardscope.program(args=(x,))
        @mapped
        def once(x):
            return lax.psum(x.sum(), "d")

        @shardscope.program(args=(x,))
        @mapped
        def twice(x):
            return 2.0 * lax.psum(x.sum(), "d")
    ''')
    analysis = analyze(Settings(path=path, repeats=1))
    [check] = analysis.output_checks
    assert (check.baseline, check.candidate, check.agree) == ("once", "twice", False)
    assert check.max_abs_diff > 100 * check.tolerance
    assert analysis.warnings == [check.warning]


def test_a_file_with_programs_and_demos_is_refused(tmp_path):
    path = write_programs(tmp_path, '''
        @shardscope.program(args=(x,))
        @mapped
        def total(x):
            return lax.psum(x.sum(), "d")

        @shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=x)
        def model(params, x):
            return x @ params
    ''')
    with pytest.raises(DemoFileError) as raised:
        analyze(Settings(path=path, repeats=1))
    assert raised.value.message == (
        "programs.py marks both @shardscope.program functions (total) and @shardscope.demo functions (model); "
        "shardscope reads one kind per file.")
    assert "separate files" in raised.value.hint


ROOTS = '''
xs = jnp.asarray(np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4))  # 16 negative entries

@shardscope.program(args=(xs,))
@jax.jit
def roots(x):
    return jnp.sqrt(x)

@shardscope.program(args=(xs,))
@jax.jit
def roots_scaled(x):
    return jnp.sqrt(4.0 * x) / 2.0  # NaN where roots has NaN; rounding elsewhere
'''


def test_programs_with_nan_in_the_same_entries_agree_with_a_warning_that_says_so(tmp_path):
    """sqrt of linspace(-1, 1, 32): NaN in its 16 negative entries, in both programs: they agree
    (it was 'differ by inf; tolerance nan'), and a warning says the comparison is weaker there."""
    from shardscope.app.views.timings import outputs_note

    analysis = analyze(Settings(path=write_programs(tmp_path, ROOTS), repeats=2))
    [check] = analysis.output_checks
    assert (check.baseline, check.candidate, check.agree, check.non_finite) == ("roots", "roots_scaled", True, 16)
    assert check.scale == 1.0 and check.max_abs_diff < check.tolerance
    assert analysis.warnings == [
        "the roots and roots_scaled programs' outputs: both outputs are NaN or inf in the same 16 entries (out) "
        "on these example arguments: there only the places were compared, not the numbers"]
    assert "roots_scaled agrees with roots (max |diff|" in outputs_note(analysis)


def test_programs_with_nan_in_other_entries_differ_and_the_warning_says_where(tmp_path):
    """One program clips the negative entries to 0 first: the other's 16 NaN are a difference."""
    clipped = ROOTS + '''
@shardscope.program(args=(xs,))
@jax.jit
def clipped(x):
    return jnp.sqrt(jnp.maximum(x, 0.0))
'''
    analysis = analyze(Settings(path=write_programs(tmp_path, clipped), repeats=2))
    check = next(c for c in analysis.output_checks if c.candidate == "clipped")
    assert not check.agree and check.max_abs_diff == 0.0
    assert check.non_finite_mismatch == "the roots program has NaN in 16 entries of out where the clipped program's are finite"
    assert check.warning in analysis.warnings
    assert check.warning.startswith("the roots and clipped programs' outputs are not finite in different entries: the roots program has NaN in 16 entries")
