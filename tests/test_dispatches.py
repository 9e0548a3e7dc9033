"""A step that is not jitted and calls jitted functions: counted per step, dispatch by dispatch.

Every expected count is the test's own: each jitted callee compiled alone here
(``callee.lower(args).compile().as_text()``, its collective instructions counted in the text)
times the calls the step makes, written out. The steps run eagerly too, where a fix is
compared with the original.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import platform
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import DEMOS
from jax.sharding import NamedSharding, PartitionSpec as P

import _dispatch_programs as d
import shardscope
from shardscope.testing import assert_no_collectives_in_loops, collective_counts

W = d.placed((d.D, d.D), d.REPLICATED)
XS = [d.placed((d.BATCH, d.D), d.BATCHED) for _ in range(d.MICRO_BATCHES)]


def compiled_count(callee, *args, kind: str = "all-reduce") -> int:
    """Instructions of ``kind`` in ``callee``'s own compiled module (a ``-start`` counts, its ``-done`` not)."""
    text = callee.lower(*args).compile().as_text()
    return len(re.findall(rf" {kind}(?:-start)?\(", text))


def test_the_issue_step_runs_4_all_reduces_per_step_and_is_flagged():
    per_call = compiled_count(d.grad_fn, W, XS[0])
    assert per_call == 1 and compiled_count(d.apply, W, W) == 0
    expected = per_call * d.MICRO_BATCHES + 0 * 1  # grad_fn x4, apply x1
    assert collective_counts(d.step, W, XS) == {"all-reduce": expected} == {"all-reduce": 4}
    inspection = shardscope.inspect(d.step, W, XS)
    assert [(x.name, x.calls) for x in inspection.dispatches.dispatches if x.jitted] == [("grad_fn", 4), ("apply", 1)]
    (finding,) = inspection.dispatches.flagged
    assert (finding.kind, finding.executions, finding.avoidable, finding.summed) == ("all-reduce", 4, 3, 4)
    assert finding.collective.axes == ("data",) and finding.source.startswith("_dispatch_programs.py:")
    assert "apply" in finding.fix and "lax.scan" in finding.fix and inspection.fails_check
    with pytest.raises(AssertionError, match="deferrable"):
        assert_no_collectives_in_loops(d.step, W, XS)


def test_one_jit_of_the_same_step_merges_what_the_dispatches_cannot():
    # the behaviour this replaces: XLA sums the four gradients of one module and reduces once
    text = jax.jit(d.step).lower(W, XS).compile().as_text()
    assert len(re.findall(r" all-reduce(?:-start)?\(", text)) == 1


def test_the_fixed_step_reduces_once_and_computes_the_same_update():
    expected = compiled_count(d.local_grad_fn, W, XS[0]) * d.MICRO_BATCHES + compiled_count(
        d.apply_fixed, W, d.local_grad_fn(W, XS[0]))
    assert expected == 1
    assert collective_counts(d.step_fixed, W, XS) == {"all-reduce": expected}
    inspection = assert_no_collectives_in_loops(d.step_fixed, W, XS)
    assert not inspection.fails_check and inspection.dispatch_findings == ()
    np.testing.assert_allclose(np.asarray(d.step_fixed(W, XS)), np.asarray(d.step(W, XS)), rtol=1e-5, atol=1e-6)


def test_check_exits_1_on_the_demo_step_and_0_on_its_fix(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "dispatch_step.py", "--function", "step")
    assert result.returncode == 1, result.stderr
    out = " ".join(result.stdout.split())
    assert "a sequence of 11 dispatches per step (grad_fn x4, apply x1;" in out
    assert "4 compiled collective runs per step" in out and "3 of its 4 runs per step avoidable" in out
    assert "deferrable" in out and "check failed: step" in out
    fixed = shardscope_cli("check", DEMOS / "dispatch_step.py", "--function", "step_fixed")
    assert fixed.returncode == 0, fixed.stderr
    assert "1 compiled collective runs per step" in " ".join(fixed.stdout.split()) and "check passed" in fixed.stdout


def test_check_json_lists_the_dispatches(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "dispatch_step.py", "--json")
    assert result.returncode == 1, result.stderr
    step, fixed = json.loads(result.stdout)["programs"]
    jitted = [(x["name"], x["calls"], x["counts_per_call"], x["counts"]) for x in step["dispatches"] if x["jitted"]]
    assert jitted == [("grad_fn", 4, {"all-reduce": 1}, {"all-reduce": 4}), ("apply", 1, {}, {})]
    assert step["counts"] == {"all-reduce": 4} and step["executed_collectives"] == 4 and step["flagged"] == 1
    (finding,) = step["dispatch_findings"]
    assert finding["verdict"] == "deferrable" and finding["avoidable"] == 3 and finding["axes"] == ["data"]
    assert fixed["counts"] == {"all-reduce": 1} and fixed["flagged"] == 0
    assert [c["kind"] for x in fixed["dispatches"] for c in x["compiled_collectives"]] == ["all-reduce"]


def test_a_maxtext_engine_like_step_all_reduces_every_micro_batch():
    state, opt_state, xs, ys = d.engine_inputs()
    grads = d.engine_grad(state, xs[0], ys[0])
    per_call = compiled_count(d.engine_grad, state, xs[0], ys[0])  # the CPU combines the 4 gradients into 1
    update = compiled_count(d.engine_update, state, grads, opt_state)
    assert (per_call, update) == (1, 0)
    expected = per_call * d.ENGINE_MICRO_BATCHES + update
    assert collective_counts(d.engine_step, state, opt_state, xs, ys) == {"all-reduce": expected}
    inspection = shardscope.inspect(d.engine_step, state, opt_state, xs, ys)
    (finding,) = inspection.dispatches.flagged
    assert (finding.dispatch, finding.executions, finding.avoidable) == ("engine_grad", 8, 7)
    assert "grad(state['l1']['kernel'].value)" in finding.values and "engine_update" in finding.fix


def test_a_scan_inside_a_jit_in_a_python_loop_counts_both_loops():
    chunks = [d.placed((d.SCAN_LENGTH, d.BATCH, d.D), NamedSharding(d.mesh, P(None, "data"))) for _ in range(d.CHUNKS)]
    text = d.scan_grad.lower(W, chunks[0]).compile().as_text()
    # by hand: one all-reduce, in the body of the one while loop (2 iterations): 2 runs per call
    assert len(re.findall(r" all-reduce\(", text)) == 1 and '"known_trip_count":{"n":"2"}' in text
    expected = 1 * d.SCAN_LENGTH * d.CHUNKS
    assert collective_counts(d.mixed_step, W, chunks) == {"all-reduce": expected} == {"all-reduce": 6}
    inspection = shardscope.inspect(d.mixed_step, W, chunks)
    (in_loop,) = inspection.findings  # the scan's own loop, with its own verdict
    assert in_loop.verdict_kind == "deferrable" and in_loop.executions == d.SCAN_LENGTH
    assert inspection.fails_check


def test_nested_jitted_calls_are_one_module_per_call():
    expected = compiled_count(d.outer_grad, W, XS[0]) * 3 + compiled_count(d.apply, W, W)
    assert expected == 3
    assert collective_counts(d.nested_step, W, XS[:3]) == {"all-reduce": expected}
    inspection = shardscope.inspect(d.nested_step, W, XS[:3])
    assert [(x.name, x.calls) for x in inspection.dispatches.dispatches if x.jitted] == [("outer_grad", 3), ("apply", 1)]
    assert [f.avoidable for f in inspection.dispatches.flagged] == [2]


def test_grad_of_a_jitted_function_is_a_forward_and_a_backward_dispatch():
    # eagerly, jax.grad of a jitted function runs the forward (whose loss, the mean over the split
    # batch, is all-reduced although grad drops it) and the backward (w's gradient): 2 modules
    calls = [eqn for eqn in jax.make_jaxpr(d.grad_of_jitted)(W, XS[0]).jaxpr.eqns if eqn.primitive.name in ("jit", "pjit")]
    assert len(calls) == 2
    counted = 0
    for eqn in calls:
        closed = eqn.params["jaxpr"]
        args = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, sharding=_sharding_of(v, eqn)) for v in eqn.invars]
        counted += compiled_count(jax.jit(lambda *a, c=closed: jax.core.eval_jaxpr(c.jaxpr, c.consts, *a)), *args)
    assert counted == 2
    assert collective_counts(d.grad_of_jitted, W, XS[0]) == {"all-reduce": counted}
    names = [x.name for x in shardscope.inspect(d.grad_of_jitted, W, XS[0]).dispatches.dispatches if x.jitted]
    assert names == ["jitted_loss", "jitted_loss (backward)"]


def _sharding_of(var, eqn):
    """The forward's operands are the step's own (w, x); the backward's are the residuals of x's shape."""
    return d.REPLICATED if var.aval.shape == (d.D, d.D) or var.aval.shape == () else d.BATCHED


def test_a_callee_on_two_shapes_is_two_modules():
    large = d.placed((2 * d.BATCH, d.D), d.BATCHED)
    expected = compiled_count(d.grad_fn, W, XS[0]) + compiled_count(d.grad_fn, W, large)
    assert collective_counts(d.two_shapes_step, W, XS[0], large) == {"all-reduce": expected} == {"all-reduce": 2}
    inspection = shardscope.inspect(d.two_shapes_step, W, XS[0], large)
    jitted = [x for x in inspection.dispatches.dispatches if x.jitted]
    assert [x.calls for x in jitted] == [1, 1, 1] and jitted[0].name != jitted[1].name
    # the two modules' gradients are added up: one all-reduce of the sum would do, 1 of the 2 runs saved
    assert sum(f.avoidable for f in inspection.dispatches.flagged) == 1


def test_an_eager_op_between_the_calls_is_a_dispatch_with_its_collective():
    eager = compiled_count(jax.jit(jnp.sum), XS[0])
    assert eager == 1
    expected = compiled_count(d.grad_fn, W, XS[0]) * d.MICRO_BATCHES + eager
    assert collective_counts(d.eager_sum_step, W, XS) == {"all-reduce": expected}
    inspection = shardscope.inspect(d.eager_sum_step, W, XS)
    (holder,) = inspection.dispatches.eager_with_collectives
    assert holder.name == "reduce_sum" and holder.calls == 1
    assert "reduce_sum at _dispatch_programs.py" in " ".join(str(inspection).split())


def test_results_used_each_on_their_own_need_each_all_reduce():
    inspection = shardscope.inspect(d.used_each_step, W, XS)
    assert inspection.counts() == {"all-reduce": compiled_count(d.grad_fn, W, XS[0]) * d.MICRO_BATCHES}
    assert [f.verdict_kind for f in inspection.dispatch_findings] == ["needed"] and not inspection.fails_check
    with pytest.raises(AssertionError):  # still a collective in the step's (Python) loop
        assert_no_collectives_in_loops(d.used_each_step, W, XS)
    assert_no_collectives_in_loops(d.used_each_step, W, XS, allow=["needed"])


READS_A_VALUE = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import shardscope

mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
W = jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P()))
X = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(mesh, P("data")))

@jax.jit
def grad_fn(w, x):
    return jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)

@shardscope.program(args=(W, X))
def step(w, x):
    g = grad_fn(w, x)
    if jnp.sum(g) > 0:
        g = 2 * g
    return w - g
'''


def test_a_step_that_reads_a_value_gets_one_message_naming_the_line(shardscope_cli, tmp_path):
    path = tmp_path / "reads_value.py"
    path.write_text(READS_A_VALUE)
    result = shardscope_cli("check", path)
    assert result.returncode == 2
    err = " ".join(result.stderr.split())
    assert "reads_value.py:19" in err and "if jnp.sum(g) > 0:" in err and "Traceback" not in result.stderr
    assert "pass what the line decides as an argument" in err


def test_a_partial_of_one_jitted_function_is_still_that_program():
    inspection = shardscope.inspect(functools.partial(d.grad_fn, W), XS[0])
    assert inspection.dispatches is None and inspection.counts() == {"all-reduce": 1}


def test_explicit_axes_outside_a_mesh_context_compile_each_call_on_the_arguments_mesh():
    w, xs = d.explicit_inputs()
    with jax.set_mesh(d.explicit_mesh):  # how the user's own call of grad_fn compiles it
        per_call = compiled_count(d.grad_fn, w, xs[0])
    assert per_call == 1
    assert collective_counts(d.step, w, xs) == {"all-reduce": per_call * len(xs)}
    assert [f.avoidable for f in shardscope.inspect(d.step, w, xs).dispatches.flagged] == [len(xs) - 1]


def test_a_term_added_to_the_reduced_gradient_keeps_it_deferrable_across_calls():
    # sum over calls of (all-reduce(g_k) + 0.01 w) = all-reduce(sum g_k) + 4 * 0.01 w: one reduction does
    per_call = compiled_count(d.decayed_grad_fn, W, XS[0])
    assert per_call == 1
    inspection = shardscope.inspect(d.decayed_step, W, XS)
    assert inspection.counts() == {"all-reduce": per_call * d.MICRO_BATCHES}
    assert [f.avoidable for f in inspection.dispatches.flagged] == [per_call * (d.MICRO_BATCHES - 1)]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")
def test_check_on_a_target_reads_a_step_of_dispatches_as_its_calls_and_still_fails(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "dispatch_step.py", "--function", "step", "--target", "tpu:v5e:2x2")
    assert result.returncode == 1, result.stderr
    out = " ".join(result.stdout.split())
    assert "4 compiled collective runs per step" in out and "deferrable" in out
    assert "step: not compiled for tpu:v5e:2x2: a step of dispatches is read as its calls on the CPU" in out


ENGINE_PACKAGE = '''
import jax
import jax.numpy as jnp

@jax.jit
def grad_fn(w, x):
    return jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
'''


def test_an_installed_engines_jitted_function_is_a_dispatch_and_jaxs_own_jit_is_not(tmp_path):
    path = tmp_path / "site-packages" / "trainer_engine.py"
    path.parent.mkdir()
    path.write_text(ENGINE_PACKAGE)
    spec = importlib.util.spec_from_file_location("trainer_engine", path)
    engine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine)

    def engine_step(w, xs):
        acc = jnp.zeros_like(w)
        for x in xs:
            acc = acc + engine.grad_fn(w, x)
        return acc

    expected = compiled_count(engine.grad_fn, W, XS[0]) * d.MICRO_BATCHES
    assert collective_counts(engine_step, W, XS) == {"all-reduce": expected}
    assert shardscope.inspect(engine_step, W, XS).dispatches.flagged

    def clipped(w, x):  # jnp.clip is JAX's own jit: the function is one program, as before
        return jnp.clip(x @ w, 0.0, 1.0).sum()

    assert shardscope.inspect(clipped, W, XS[0]).dispatches is None
