"""The compiled plan on the printed forms a collective takes in GPU and CPU modules.

Modules written by hand in the forms XLA prints (``-start``/``-done`` pairs, ``async-start``
wrappers, the CPU's small calls around a loop), each a gradient accumulation over 8 iterations:
an all-reduce (or reduce-scatter) of a value the iteration computes, added into carry element 2.
The expected facts are the module's own: 8 iterations, the operand's shape, where the sum goes.
"""

from __future__ import annotations

import pytest

from shardscope.engine.hlo.compiled import compiled_plan

_HEAD = """HloModule m, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""

_BODY = """
%body (p: (s32[], f32[8], f32[SHARD])) -> (s32[], f32[8], f32[SHARD]) {
  %p = (s32[], f32[8]{0}, f32[SHARD]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %acc = f32[SHARD]{0} get-tuple-element(%p), index=2
  %ic = f32[] convert(%i)
  %b = f32[8]{0} broadcast(%ic), dimensions={}
  %g = f32[8]{0} multiply(%x, %b)
SUM
  %new = f32[SHARD]{0} add(%acc, %summed)
  ROOT %t = (s32[], f32[8]{0}, f32[SHARD]{0}) tuple(%next, %x, %new)
}

%cond (q: (s32[], f32[8], f32[SHARD])) -> pred[] {
  %q = (s32[], f32[8]{0}, f32[SHARD]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(8)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}
"""

_ENTRY = """
ENTRY %main (x: f32[8]) -> f32[SHARD] {
  %x0 = f32[8]{0} parameter(0), metadata={op_name="params['W']"}
  %zero = s32[] constant(0)
  %z = f32[] constant(0)
  %zeros = f32[SHARD]{0} broadcast(%z), dimensions={}
  %init = (s32[], f32[8]{0}, f32[SHARD]{0}) tuple(%zero, %x0, %zeros)
  %loop = (s32[], f32[8]{0}, f32[SHARD]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"8"}}
  ROOT %out = f32[SHARD]{0} get-tuple-element(%loop), index=2
}
"""

PLAIN = "  %summed = f32[8]{0} all-reduce(%g), channel_id=1, replica_groups={{0,1}}, to_apply=%add"
START_DONE = ("  %start = f32[8]{0} all-reduce-start(%g), channel_id=1, replica_groups={{0,1}}, to_apply=%add\n"
              "  %summed = f32[8]{0} all-reduce-done(%start)")
ASYNC_RS = ("  %rs-start = ((f32[8]{0}), f32[4]{0}) async-start(%g), calls=%wrapped_rs\n"
            "  %summed = f32[4]{0} async-done(%rs-start), calls=%wrapped_rs")
WRAPPED_RS = """
%wrapped_rs (w: f32[8]) -> f32[4] {
  %w = f32[8]{0} parameter(0)
  ROOT %rs = f32[4]{0} reduce-scatter(%w), channel_id=1, replica_groups={{0,1}}, dimensions={0}, to_apply=%add
}
"""


def _module(sum_lines: str, shard: int = 8, extra: str = "") -> str:
    return (_HEAD + extra + _BODY + _ENTRY).replace("SUM", sum_lines).replace("SHARD", str(shard))


@pytest.mark.parametrize("form", ["plain", "start_done"])
def test_an_all_reduce_in_either_form_is_one_deferrable_collective(form):
    text = _module(PLAIN if form == "plain" else START_DONE)
    (c,) = compiled_plan(text).collectives
    assert (c.kind, c.loop_trip_counts, c.executions, c.bytes_per_execution) == ("all-reduce", (8,), 8, 32)
    assert c.verdict.kind == "deferrable" and c.verdict.executions_after == 1
    assert c.value == "params['W']"  # the one input its operand comes from (no output is named)


def test_a_reduce_scatter_inside_an_async_wrapper_is_found_in_its_loop_and_deferrable_at_full_size():
    text = _module(ASYNC_RS, shard=4, extra=WRAPPED_RS)
    (c,) = compiled_plan(text).collectives
    assert (c.kind, c.name, c.wrapper, c.computation) == ("reduce-scatter", "rs", "rs-start", "body")
    assert (c.loop_trip_counts, c.executions, c.bytes_per_execution) == ((8,), 8, 32)
    # deferred, each device accumulates the whole 8-element value and scatters it once
    assert c.verdict.kind == "deferrable" and "one reduce-scatter of the 32 B accumulator" in c.verdict.reason
    assert "unscattered sum, 32 B per device" in c.verdict.reason


def test_a_loop_inside_the_cpus_small_call_is_still_a_loop():
    """jax 0.12's CPU compiler wraps some loops in ``call(...), to_apply=`` (xla_cpu_small_call):
    the collective in that loop's body runs 8 times per call."""
    text = _module(PLAIN).replace(
        "  %loop = (s32[], f32[8]{0}, f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={\"known_trip_count\":{\"n\":\"8\"}}\n",
        '  %loop = (s32[], f32[8]{0}, f32[8]{0}) call(%init), to_apply=%small, frontend_attributes={xla_cpu_small_call="true"}\n'
    ).replace("\nENTRY", """
%small (s: (s32[], f32[8], f32[8])) -> (s32[], f32[8], f32[8]) {
  %s = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  ROOT %w = (s32[], f32[8]{0}, f32[8]{0}) while(%s), condition=%cond, body=%body
}

ENTRY""")
    (c,) = compiled_plan(text).collectives
    assert c.loop_trip_counts == (8,) and c.executions == 8 and c.verdict.kind == "deferrable"


_SELECTED = PLAIN + "\n  %zeros8 = f32[8]{0} broadcast(%z8), dimensions={}\n  %z8 = f32[] constant(0)\n" \
    "  %first = pred[] compare(PREDICATE, %zero_i), direction=EQ\n  %zero_i = s32[] constant(0)\n" \
    "  %kept = f32[8]{0} select(%first, %zeros8, %summed)\n"


@pytest.mark.parametrize("predicate, verdict", [("%i", "deferrable"), ("%pid", "needed")])
def test_a_sum_dropped_in_some_iterations_is_deferrable_only_when_every_device_drops_it_alike(predicate, verdict):
    """``select(i == 0, 0, sum)`` drops the first iteration's sum on every device (as the TPU's
    peeled first iteration does); ``select(partition-id == 0, 0, sum)`` only on device 0, so
    one sum after the loop would not give the same result."""
    lines = _SELECTED.replace("PREDICATE", predicate).replace("%summed = f32[8]{0} all-reduce", "%summed0 = f32[8]{0} all-reduce")
    lines = lines.replace("select(%first, %zeros8, %summed)", "select(%first, %zeros8, %summed0)")
    lines = "  %pid32 = u32[] partition-id()\n  %pid = s32[] convert(%pid32)\n" + lines + \
        "  %summed = f32[8]{0} copy(%kept)"
    (c,) = compiled_plan(_module(lines)).collectives
    assert c.verdict.kind == verdict


@pytest.mark.parametrize("offset, verdict", [("%i", "deferrable"), ("%pid", "needed")])
def test_an_accumulator_slot_is_deferrable_only_at_an_offset_the_same_on_every_device(offset, verdict):
    """The accumulator f32[16] is updated at one 8-element slot: at the loop's own offset, one
    sum of the whole buffer after the loop is the same; at the device's own offset it is not."""
    text = _module(PLAIN, shard=16).replace(
        "  %new = f32[16]{0} add(%acc, %summed)",
        "  %pid32 = u32[] partition-id()\n  %pid = s32[] convert(%pid32)\n  %eight = s32[] constant(8)\n"
        "  %zero_s = s32[] constant(0)\n  %two = s32[] constant(2)\n  %slot = s32[] remainder(OFFSET, %two)\n"
        "  %at = s32[] multiply(%slot, %eight)\n"
        "  %old = f32[8]{0} dynamic-slice(%acc, %at), dynamic_slice_sizes={8}\n"
        "  %added = f32[8]{0} add(%old, %summed)\n"
        "  %new = f32[16]{0} dynamic-update-slice(%acc, %added, %at)".replace("OFFSET", offset))
    (c,) = compiled_plan(text).collectives
    assert c.verdict.kind == verdict


def test_a_collective_in_a_loops_condition_runs_once_more_than_its_body():
    """``lax.while_loop(lambda c: lax.psum(...) < bound, ...)``: the condition runs before each
    of the 8 iterations and once more to stop."""
    text = _module(PLAIN).replace(PLAIN, "  %summed = f32[8]{0} copy(%g)").replace(
        "  ROOT %lt = pred[] compare(%j, %n), direction=LT",
        "  %jf = f32[] convert(%j)\n"
        "  %total = f32[] all-reduce(%jf), channel_id=2, replica_groups={{0,1}}, to_apply=%add\n"
        "  %two = f32[] constant(2)\n  %half = f32[] divide(%total, %two)\n  %back = s32[] convert(%half)\n"
        "  ROOT %lt = pred[] compare(%back, %n), direction=LT")
    (c,) = compiled_plan(text).collectives
    assert c.loop_trip_counts == (8,) and c.executions == 9 and c.verdict.kind == "needed"
