"""Collectives of compiled HLO (the compiled plan): which sit in a while body, with the loops' known trip counts,
and the note on what other compilers do with them."""

from __future__ import annotations

from shardscope.engine.hlo.compiled import compiled_plan

NESTED = """\
HloModule nested, entry_computation_layout={(f32[4]{0}, pred[])->f32[4]{0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%inner_body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element((s32[], f32[4]{0}) %p), index=0
  %x = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %p), index=1
  %inner.ar = f32[4]{0} all-reduce(f32[4]{0} %x), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (s32[], f32[4]{0}) tuple(s32[] %i, f32[4]{0} %inner.ar)
}

%inner_cond (p.1: (s32[], f32[4])) -> pred[] {
  %p.1 = (s32[], f32[4]{0}) parameter(0)
  %k = s32[] constant(8)
  %j = s32[] get-tuple-element((s32[], f32[4]{0}) %p.1), index=0
  ROOT %lt = pred[] compare(s32[] %j, s32[] %k), direction=LT
}

%outer_body (q: (s32[], f32[4])) -> (s32[], f32[4]) {
  %q = (s32[], f32[4]{0}) parameter(0)
  %inner.loop = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %q), condition=%inner_cond, body=%inner_body, backend_config={"known_trip_count":{"n":"8"}}
  %y = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %inner.loop), index=1
  %outer.ag = f32[8]{0} all-gather(f32[4]{0} %y), channel_id=2, replica_groups={{0,1}}, dimensions={0}
  %z = f32[4]{0} slice(f32[8]{0} %outer.ag), slice={[0:4]}
  %c = s32[] get-tuple-element((s32[], f32[4]{0}) %q), index=0
  ROOT %u = (s32[], f32[4]{0}) tuple(s32[] %c, f32[4]{0} %z)
}

%outer_cond (q.1: (s32[], f32[4])) -> pred[] {
  %q.1 = (s32[], f32[4]{0}) parameter(0)
  %n = s32[] constant(3)
  %m = s32[] get-tuple-element((s32[], f32[4]{0}) %q.1), index=0
  ROOT %lt.1 = pred[] compare(s32[] %m, s32[] %n), direction=LT
}

%dyn_body (r: (s32[], f32[4])) -> (s32[], f32[4]) {
  %r = (s32[], f32[4]{0}) parameter(0)
  %v = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %r), index=1
  %dyn.perm = f32[4]{0} collective-permute(f32[4]{0} %v), channel_id=3, source_target_pairs={{0,1},{1,0}}
  %e = s32[] get-tuple-element((s32[], f32[4]{0}) %r), index=0
  ROOT %w = (s32[], f32[4]{0}) tuple(s32[] %e, f32[4]{0} %dyn.perm)
}

%dyn_cond (r.1: (s32[], f32[4])) -> pred[] {
  %r.1 = (s32[], f32[4]{0}) parameter(0)
  ROOT %flag = pred[] constant(false)
}

%then (t.0: f32[4]) -> f32[4] {
  %t.0 = f32[4]{0} parameter(0)
  ROOT %then.ar = f32[4]{0} all-reduce(f32[4]{0} %t.0), channel_id=4, replica_groups={{0,1}}, to_apply=%add
}

%else (e.0: f32[4]) -> f32[4] {
  ROOT %e.0 = f32[4]{0} parameter(0)
}

%never_called (z.0: f32[4]) -> f32[4] {
  %z.0 = f32[4]{0} parameter(0)
  ROOT %dead.ar = f32[4]{0} all-reduce(f32[4]{0} %z.0), channel_id=5, replica_groups={{0,1}}, to_apply=%add
}

ENTRY %main (arg: f32[4], pred: pred[]) -> f32[4] {
  %arg = f32[4]{0} parameter(0)
  %pred = pred[] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(s32[] %zero, f32[4]{0} %arg)
  %outer.loop = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %init), condition=%outer_cond, body=%outer_body, backend_config={"known_trip_count":{"n":"3"}}
  %dyn.loop = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %outer.loop), condition=%dyn_cond, body=%dyn_body
  %h = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %dyn.loop), index=1
  %branch = f32[4]{0} conditional(pred[] %pred, f32[4]{0} %h, f32[4]{0} %h), true_computation=%then, false_computation=%else
  %top.ar = (f32[4]{0}, f32[4]{0}) all-reduce(f32[4]{0} %branch, f32[4]{0} %h), channel_id=6, replica_groups={{0,1}}, to_apply=%add
  ROOT %out = f32[4]{0} get-tuple-element((f32[4]{0}, f32[4]{0}) %top.ar), index=0
}
"""


def by_name(plan):
    return {c.name: c for c in plan.collectives}


def test_nested_whiles_and_conditional():
    plan = compiled_plan(NESTED, backend="cpu")
    found = by_name(plan)
    assert set(found) == {"inner.ar", "outer.ag", "dyn.perm", "then.ar", "top.ar"}  # not the dead one
    assert found["inner.ar"].loop_trip_counts == (3, 8) and found["inner.ar"].executions == 24
    assert found["inner.ar"].computation == "inner_body"
    assert found["outer.ag"].loop_trip_counts == (3,)
    assert found["outer.ag"].kind == "all-gather" and plan.module.instruction("outer.ag").shape_text == "f32[8]{0}"
    assert found["dyn.perm"].loop_trip_counts == (None,) and found["dyn.perm"].executions is None  # no known trip count
    assert found["dyn.perm"].kind == "collective-permute"
    assert found["then.ar"].loop_trip_counts == () and not found["then.ar"].in_loop and found["then.ar"].in_conditional
    assert plan.module.instruction("top.ar").shape_text == "(f32[4]{0}, f32[4]{0})"
    assert found["top.ar"].combined and found["top.ar"].bytes_per_execution == 2 * 4 * 4
    assert (len(plan.collectives), len(plan.findings)) == (5, 3)
    assert plan.backend == "cpu"
    # 3 x 8 + the branch's 1 (an upper bound) + the combined 1; the permute's loop has no count
    assert plan.counts() == {"all-reduce": 3 * 8 + 1 + 1, "all-gather": 3, "collective-permute": None}


def test_branch_computations_syntax():
    text = NESTED.replace(
        "true_computation=%then, false_computation=%else", "branch_computations={%then, %else}"
    )
    found = by_name(compiled_plan(text))
    assert "then.ar" in found and found["then.ar"].loop_trip_counts == ()


def test_names_without_percent_signs():
    """Newer XLA prints HLO without the % sigils."""
    found = by_name(compiled_plan(NESTED.replace("%", ""), backend="tpu"))
    assert found["inner.ar"].loop_trip_counts == (3, 8)
    assert len(found) == 5


def test_empty_and_garbage_text():
    assert compiled_plan("").collectives == ()
    assert compiled_plan("not hlo at all\n{\n}\n").collectives == ()


def test_real_compiled_modules(analysis_of):
    a = analysis_of("rnn.py")
    naive, deferred = a.plans["naive"].compiled, a.plans["deferred"].compiled
    assert naive.backend == "cpu"
    assert {c.loop_trip_counts for c in naive.collectives} == {(2,), (2, 8)}
    assert all(c.kind == "all-reduce" for c in naive.collectives + deferred.collectives)
    assert len(deferred.findings) == 0 and len(deferred.collectives) >= 1


def test_collective_in_a_while_condition_is_in_the_loop():
    """A convergence test that all-reduces runs on every iteration, like the body."""
    text = NESTED.replace(
        "  ROOT %flag = pred[] constant(false)\n",
        "  %norm = f32[] constant(1)\n"
        "  %cond.ar = f32[] all-reduce(f32[] %norm), channel_id=7, replica_groups={{0,1}}, to_apply=%add\n"
        "  %one = f32[] constant(1)\n"
        "  ROOT %flag = pred[] compare(f32[] %cond.ar, f32[] %one), direction=GT\n",
    )
    found = by_name(compiled_plan(text))
    assert found["cond.ar"].loop_trip_counts == (None,) and found["cond.ar"].in_loop


def test_real_module_with_a_collective_in_the_while_condition():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    from shardscope.engine.jaxpr import dataflow
    from shardscope.engine.jaxpr.model import from_jaxpr

    def local(x):
        def cond(c):
            return lax.psum(jnp.sum(c[1] ** 2), "s") > 1.0  # converged on every device?

        return lax.while_loop(cond, lambda c: (c[0] + 1, c[1] * 0.5), (0, x))[1]

    mesh = Mesh(np.array(jax.devices()[:2]), ("s",))
    traced = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("s"), out_specs=P("s"))).trace(jnp.ones(8))
    (jaxpr_side,) = dataflow.collectives(from_jaxpr(traced.jaxpr))
    plan = compiled_plan(traced.lower().compile().as_text())
    assert jaxpr_side.in_loop and len(plan.collectives) == 1
    assert len(plan.findings) == 1  # the HLO agrees with the jaxpr: inside the loop


def test_compiler_note_names_the_loop_motion_pass_and_what_the_module_did():
    from shardscope.engine.compiler_note import compiler_note

    cpu = compiler_note("cpu", {"naive": (1, 1), "deferred": (0, 0)})
    assert "never moves an all-reduce out of a loop" in cpu
    assert "openxla/xla issue 6750, PR 28184" in cpu and "WhileLoopAllReduceCodeMotion" in cpu
    assert "naive: its all-reduce stayed in the loop" in compiler_note("gpu", {"naive": (1, 1), "deferred": (0, 0)})
    assert "naive: the compiler moved" in compiler_note("tpu", {"naive": (1, 0)})
    assert "naive: the compiler moved" in compiler_note("tpu", {"naive": (1, 0)}, {"naive": 1})
    # one chip: the module has no collective at all, which is no motion out of a loop
    one_chip = compiler_note("tpu", {"naive": (1, 0)}, {"naive": 0})
    assert "naive: no collective compiled at all" in one_chip and "moved" not in one_chip.split("In this")[1]
    assert "1 of 4 loop collectives stayed" in compiler_note("gpu", {"naive": (4, 1)})


def test_report_json_carries_the_compiler_note(analysis_of):
    from shardscope.render.report import to_json

    data = to_json(analysis_of("linear.py", devices=2, chunk_size=16))
    assert "The CPU compiler never moves an all-reduce out of a loop" in data["compiler_note"]


def test_cost_analysis_does_not_grow_with_the_chunks_shardscope_counts(analysis_of):
    """XLA's cost_analysis() costs a loop body once: 4x the chunks is 4x shardscope's bytes, not XLA's."""
    few, many = analysis_of("linear.py", devices=2, chunk_size=16), analysis_of("linear.py", devices=2, chunk_size=4)
    a, b = few.plans["naive"], many.plans["naive"]
    assert (a.jaxpr_bytes_per_call, b.jaxpr_bytes_per_call) == (40, 160)
    assert a.cost_analysis["bytes_accessed"] > 0 and b.cost_analysis["bytes_accessed"] > 0
    assert b.cost_analysis["bytes_accessed"] < 2 * a.cost_analysis["bytes_accessed"]
