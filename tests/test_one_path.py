"""One path from a program to its inspection (issue 47): ``check``, ``shardscope.inspect`` and the
pipeline behind the explorer and ``report`` read each program through
:mod:`shardscope.pipeline.one_program`, so they agree on what it finds: a rematerialization's fix,
compiled and checked; the flagged count of a step of dispatches (its calls' modules, with its
findings across calls); what a program that does not trace says. Expected values come from the
programs themselves (the compiled module of the fix has no all-gather; the step calls its gradient
function 4 times, 3 of whose all-reduces are avoidable; a step's module holds one all-reduce in its
loop, which the one jit of the step holds once per call)."""

from __future__ import annotations

import re
import runpy
import textwrap

import jax
import pytest
from _support import ROOT
from jax.sharding import PartitionSpec as P
from test_partitioner_warnings import CLASH, _compiled_add

import shardscope
from shardscope.config.settings import Settings
from shardscope.errors import TraceError
from shardscope.pipeline import one_program
from shardscope.pipeline.check import EXIT_FAILED, check_file
from shardscope.pipeline.run import analyze
from shardscope.render.check import to_json
from shardscope.render.report import _plan_json
from shardscope.sources.programs import spec_of

DEMOS = ROOT / "demos"

SCANNED_STEP = textwrap.dedent('''
    """A Python loop of jitted calls, each call's module accumulating a gradient in a lax.scan."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    W = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P()))
    CHUNKS = [jax.ShapeDtypeStruct((2, 32, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))
              for _ in range(3)]


    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)


    @jax.jit
    def scan_grad(w, xs):
        def body(acc, x):
            return acc + jax.grad(loss)(w, x), None

        return lax.scan(body, jnp.zeros_like(w), xs)[0]


    @jax.jit
    def apply(w, g):
        return w - 0.1 * g


    @shardscope.program(args=(W, CHUNKS))
    def mixed_step(w, chunks):
        acc = jnp.zeros_like(w)
        for chunk in chunks:
            acc = acc + scan_grad(w, chunk)
        return apply(w, acc / len(chunks))
''')

READS_A_VALUE = textwrap.dedent('''
    import jax
    import jax.numpy as jnp

    import shardscope


    @jax.jit
    def double(x):
        return x * 2


    @shardscope.program(args=(jax.ShapeDtypeStruct((4,), jnp.float32),))
    def step(x):
        y = double(x)
        if float(y.sum()) > 0:
            return y
        return -y
''')

EXITS = textwrap.dedent('''
    import sys

    import jax
    import jax.numpy as jnp

    import shardscope


    @shardscope.program(args=(jax.ShapeDtypeStruct((4,), jnp.float32),))
    def quits(x):
        sys.exit(3)


    @shardscope.program(args=(jax.ShapeDtypeStruct((4,), jnp.float32),))
    def doubles(x):
        return x * 2
''')


def test_the_explorers_path_compiles_a_rematerializations_fix_as_check_does(tmp_path):
    # the fix check compiles: a given b's layout, after which the add gathers nothing
    assert "all-gather" not in jax.jit(lambda a, b: a + b).lower(*_compiled_add(
        P(None, ("x", "y"), None), P(None, ("x", "y"), None))[1:]).compile().as_text()
    path = tmp_path / "clash.py"
    path.write_text(CLASH)
    analysis = analyze(Settings(path=path, devices=8), measure=False, compile=True, graphs=False)
    (plan,) = analysis.plans.values()
    assert plan.compiled is not None
    (warning,) = plan.compiled.rematerializations
    assert warning.fix is not None and warning.fix.verified and warning.fix.bytes_after == 0


def test_report_json_counts_a_dispatch_steps_findings_across_calls_as_check_does():
    analysis = analyze(Settings(path=DEMOS / "dispatch_step.py", devices=8), measure=False, compile=True, graphs=False)
    step, fixed = analysis.plans["step"], analysis.plans["step_fixed"]
    assert step.dispatches is not None and len(step.dispatches.flagged) == 1  # 4 calls, one all-reduce each
    assert _plan_json(step)["flagged"] == len(step.flagged) + 1
    assert _plan_json(fixed)["flagged"] == 0


def test_report_json_counts_a_dispatch_steps_loops_by_its_calls_modules_as_check_does(tmp_path):
    path = tmp_path / "scanned.py"
    path.write_text(SCANNED_STEP)
    step = runpy.run_path(str(path))
    # by hand: the module each call runs holds one all-reduce, in its scan's loop (flagged once:
    # the step sums nothing it reduces outside a loop); the one jit of the step holds it once per call
    module = step["scan_grad"].lower(step["W"], step["CHUNKS"][0]).compile().as_text()
    assert module.count(" while(") == 1 and len(re.findall(r" all-reduce\(", module)) == 1
    one_jit = jax.jit(step["mixed_step"]).lower(step["W"], step["CHUNKS"]).compile().as_text()
    assert one_jit.count(" while(") == 3 and len(re.findall(r" all-reduce\(", one_jit)) == 3
    (plan,) = analyze(Settings(path=path, devices=8), measure=False, compile=True, graphs=False).plans.values()
    assert len(plan.flagged) == 3  # the one jit the explorer shows beside the calls, which does not run
    checked = check_file(path)
    (program,) = to_json(path, checked)["programs"]
    assert _plan_json(plan)["flagged"] == program["flagged"] == 1


def test_the_explorers_path_says_a_step_reads_a_value_as_check_does(tmp_path):
    path = tmp_path / "reads.py"
    path.write_text(READS_A_VALUE)
    (failed,) = check_file(path).failed
    with pytest.raises(TraceError) as raised:
        analyze(Settings(path=path, devices=8), measure=False, compile=True, graphs=False)
    assert "step reads the value of an array at reads.py:16" in failed.error.message
    assert (raised.value.message, raised.value.hint) == (failed.error.message, failed.error.hint)


def test_check_lists_a_program_that_exits_while_traced_and_checks_the_others(tmp_path):
    path = tmp_path / "exits.py"
    path.write_text(EXITS)
    checked = check_file(path)
    assert [ins.function for ins in checked.inspections] == ["doubles"]
    (failed,) = checked.failed
    assert (failed.function, failed.error.message) == ("quits", "quits called sys.exit(3) while being traced.")
    assert checked.exit_status == EXIT_FAILED
    analysis = analyze(Settings(path=path, devices=8), measure=False, compile=True, graphs=False)
    assert list(analysis.plans) == ["doubles"]
    assert analysis.unavailable == {"quits": "it called sys.exit(3) while being traced"}


def test_every_consumer_reads_its_programs_compiled_plan_on_the_one_path(tmp_path, monkeypatch):
    """A fix made on the path reaches each consumer: each one's compiled plan is read there."""
    path = tmp_path / "clash.py"
    path.write_text(CLASH)
    read: list[str] = []
    with_compiled = one_program.with_compiled

    def reading(inspection, *args, **kwargs):
        read.append(inspection.function)
        return with_compiled(inspection, *args, **kwargs)

    monkeypatch.setattr(one_program, "with_compiled", reading)
    clash = runpy.run_path(str(path))["clash"]
    spec = spec_of(clash)
    assert spec is not None
    shardscope.inspect(clash, *spec.args)
    check_file(path)
    analyze(Settings(path=path, devices=8), measure=False, compile=True, graphs=False)
    assert read == ["clash"] * 3
