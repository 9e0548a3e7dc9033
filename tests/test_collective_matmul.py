"""XLA:TPU's collective matmuls and async collective fusions, priced as the compiled module runs them.

Every expected number is written out here from the shapes in the module text and the figures
the chip's and the interconnect's records cite: v5e's 197 TFLOP/s bf16 and 819 GB/s (0.85 of it
reached, measured on the chip), 45 GB/s one way per ICI link and about 1 us per hop (the
scaling book). What the modules stand for was read in the 256-chip compile of the Llama-shaped
128B step over fsdp=16 x tensor=16 (``benchmarks/maxtext_v5e_layouts.py default_128b``):

- ``wide.windowed_dot_general_body_rs.1``: the MLP's down projection, 4 trips of 2 steps, each a
  dot of bf16[16,2048,3584] by 2 x 512 output columns beside one collective-permute of the
  bf16[16,2048,512] partial sums each way round the tensor ring ({i -> i+1} and {i -> i-1}),
  which the dot does not read;
- ``async_collective_fusion.1196``: a matmul step fused with the all-gather over tensor of the
  next layer's input (bf16[16,2048,512] into bf16[16,2048,8192], the gathered buffer carried
  through the fusion twice): 2.44 GB counted per run before, 0.76 GB now.
"""

from __future__ import annotations

import pytest

from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.interconnect_times import TargetInterconnect
from shardscope.engine.hlo.roofline import estimate_step, joined_step, overlapped_times
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.traffic import boundary_bytes
from shardscope.engine.hlo.work import module_work
from shardscope.hardware.catalogue import chip_named
from shardscope.hardware.tpu_generations import generation_of

V5E_BF16 = 197e12
ICI_LINK, HOP = 4.5e10, 1e-6
TRIPS = 4
M, K, N = 2048, 4096, 1024
CARRY = "bf16[2048,4096], bf16[4096,1024], bf16[2048,1024], bf16[2048,1024], bf16[2048,1024], s32[]"


def _loop(body_name: str) -> str:
    """A collective matmul loop as XLA:TPU prints one: each of ``TRIPS`` trips a dot of
    bf16[M,K] by bf16[K,N] beside two collective-permutes of bf16[M,N], one each way round a
    ring of 4, neither read by the dot."""
    return f"""HloModule windowed

%{body_name} (p: ({CARRY})) -> ({CARRY}) {{
  %p = ({CARRY}) parameter(0)
  %x = bf16[{M},{K}]{{1,0}} get-tuple-element(%p), index=0
  %w = bf16[{K},{N}]{{1,0}} get-tuple-element(%p), index=1
  %f = bf16[{M},{N}]{{1,0}} get-tuple-element(%p), index=2
  %b = bf16[{M},{N}]{{1,0}} get-tuple-element(%p), index=3
  %i = s32[] get-tuple-element(%p), index=5
  %dot = bf16[{M},{N}]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %forward = bf16[{M},{N}]{{1,0}} collective-permute(%f), channel_id=1, source_target_pairs={{{{0,1}},{{1,2}},{{2,3}},{{3,0}}}}
  %backward = bf16[{M},{N}]{{1,0}} collective-permute(%b), channel_id=2, source_target_pairs={{{{0,3}},{{1,0}},{{2,1}},{{3,2}}}}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = ({CARRY}) tuple(%x, %w, %forward, %backward, %dot, %next)
}}

%cond (q: ({CARRY})) -> pred[] {{
  %q = ({CARRY}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=5
  %n = s32[] constant({TRIPS})
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}}

ENTRY %main (x: bf16[{M},{K}], w: bf16[{K},{N}], f: bf16[{M},{N}]) -> bf16[{M},{N}] {{
  %x = bf16[{M},{K}]{{1,0}} parameter(0)
  %w = bf16[{K},{N}]{{1,0}} parameter(1)
  %f = bf16[{M},{N}]{{1,0}} parameter(2)
  %zero = s32[] constant(0)
  %init = ({CARRY}) tuple(%x, %w, %f, %f, %f, %zero)
  %loop = ({CARRY}) while(%init), condition=%cond, body=%{body_name}, backend_config={{"known_trip_count":{{"n":"{TRIPS}"}}}}
  ROOT %out = bf16[{M},{N}]{{1,0}} get-tuple-element(%loop), index=4
}}
"""


def _priced(body_name: str) -> tuple[object, list]:
    """The loop's step estimate on v5e and its two permutes each timed by hand on the ICI: one
    hop to a ring neighbour, ``HOP + S / W``, per run, ``TRIPS`` runs per call."""
    text = _loop(body_name)
    step = estimate_step(module_work(parse(text)), chip_named("v5e"))
    plan = compiled_plan(text, backend="tpu")
    permute = TRIPS * (HOP + M * N * 2 / ICI_LINK)
    return step, [(c, permute) for c in plan.collectives]


def test_a_collective_matmul_loops_permutes_overlap_its_dots_and_the_two_ways_run_at_once():
    """Each trip: a dot of 2 x 2048 x 4096 x 1024 flops (87.2 us at 197 TFLOP/s; its 29.4 MB at
    0.85 x 819 GB/s take 42.2 us, so compute-bound), and a 4 MiB permute each way (94.2 us each).
    The two ways use links of their own: together 94.2 us a trip, not 188.4; the dot covers 87.2
    us of that, so 7.0 us a trip may be exposed, not the 188.4 us the sum of every collective said."""
    assert chip_named("v5e").peak_flops["bf16"] == V5E_BF16  # the figure this derivation uses
    step, timed = _priced("wide.windowed_dot_general_body_rs.1.clone.sunk")
    dot = TRIPS * 2 * M * K * N / V5E_BF16
    permute = TRIPS * (HOP + M * N * 2 / ICI_LINK)
    assert dict(step.windowed) == {"wide.windowed_dot_general_body_rs.1.clone.sunk": pytest.approx(dot, rel=1e-6)}
    joined = overlapped_times(step, timed)
    assert [s for _, s, _ in joined] == pytest.approx([permute / 2, permute / 2])  # one way's time, shared
    assert sum(o for _, _, o in joined) == pytest.approx(dot, rel=1e-6)  # the dots' whole time overlapped
    priced = step.with_collectives(sum(s for _, s, _ in joined), sum(o for _, _, o in joined))
    # 28.0 us over the 4 trips (less the loop counter's add, 12 B a trip, also in the body's work)
    assert priced.upper_s - priced.seconds == pytest.approx(permute - dot, rel=1e-5)
    assert priced.lower_s == pytest.approx(max(priced.seconds, permute))


def test_a_loop_the_partitioner_did_not_window_keeps_every_collective_exposed_at_most():
    """The same loop under another name (a layer scan's body): nothing is known to overlap, so
    the step's upper end adds both permutes' whole time, 2 x 4 x 94.2 us."""
    step, timed = _priced("region_2.4_spmd")
    assert step.windowed == ()
    joined = overlapped_times(step, timed)
    permute = TRIPS * (HOP + M * N * 2 / ICI_LINK)
    assert [(s, o) for _, s, o in joined] == [(pytest.approx(permute), 0.0)] * 2
    priced = step.with_collectives(2 * permute)
    assert priced.upper_s - priced.seconds == pytest.approx(2 * permute)


def _fused(shape: str, root: str, dot: bool = True) -> str:
    """An async collective fusion as XLA:TPU prints one: a dot of bf16[16,256] by bf16[256,128]
    beside the all-gather of bf16[16,512] over 4 devices into bf16[16,2048], the gathered buffer
    (parameter 1) carried through (``dot=False``: the fusion that finishes the collective, which
    has no compute)."""
    product = ("  %dot = bf16[16,128]{1,0} dot(%param_2, %param_3), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
               if dot else "")
    return f"""HloModule acf

%async_collective_fusion (param_0: bf16[16,512], param_1: bf16[16,2048], param_2: bf16[16,256], param_3: bf16[256,128]) -> {shape} {{
  %param_0 = bf16[16,512]{{1,0}} parameter(0)
  %param_1 = bf16[16,2048]{{1,0}} parameter(1)
  %param_2 = bf16[16,256]{{1,0}} parameter(2)
  %param_3 = bf16[256,128]{{1,0}} parameter(3)
{product}  %all-gather = bf16[16,2048]{{1,0}} all-gather(%param_0), channel_id=1, replica_groups={{{{0,1,2,3}}}}, dimensions={{1}}, use_global_device_ids=true
  ROOT %root = {shape} {root}
}}

ENTRY %main (a: bf16[16,512], b: bf16[16,2048], c: bf16[16,256], d: bf16[256,128]) -> {shape} {{
  %a = bf16[16,512]{{1,0}} parameter(0)
  %b = bf16[16,2048]{{1,0}} parameter(1)
  %c = bf16[16,256]{{1,0}} parameter(2)
  %d = bf16[256,128]{{1,0}} parameter(3)
  ROOT %f = {shape} fusion(%a, %b, %c, %d), kind=kOutput, calls=%async_collective_fusion
}}
"""


def test_an_async_collective_fusion_moves_its_compute_bytes_not_the_collectives_buffers():
    """The dot reads 16 x 256 x 2 + 256 x 128 x 2 = 73,728 B and writes 16 x 128 x 2 = 4,096 B;
    the all-gather's operand (16,384 B), the carried buffer (65,536 B read and written) and the
    gathered result (65,536 B) are the ICI's transfers, priced as the collective."""
    text = _fused("(bf16[16,128], bf16[16,2048], bf16[16,2048])", "tuple(%dot, %param_1, %all-gather)")
    module = parse(text)
    assert boundary_bytes(module, module.instruction("f")) == 16 * 256 * 2 + 256 * 128 * 2 + 16 * 128 * 2


def test_the_fusion_that_finishes_the_collective_moves_nothing_of_its_own():
    """XLA:TPU's done fusion: its root an ``AsyncCollectiveDone`` custom call of the collective's
    buffers and nothing else: no bytes of compute."""
    text = _fused("bf16[16,2048]", 'custom-call(%param_0, %param_1, %all-gather), custom_call_target="AsyncCollectiveDone"',
                  dot=False)
    module = parse(text)
    assert boundary_bytes(module, module.instruction("f")) == 0.0



def _chunk_step(use: str, before: str = "") -> str:
    """A step of a collective matmul loop as XLA:TPU prints the weight gradient's (the 128B
    compile's ``fusion.1082``, scaled down): the activations bf16[64,1,1024] padded to two rows
    (-inf below, then above) and one 128-column chunk dynamic-sliced from each, the two rows
    merged, and their dot with the whole bf16[64,384] output gradient (``use``: what the nested
    fusion's root does with the two padded slices, after the lines ``before``)."""
    return f"""HloModule chunk

%chunk (o: s32[], x: bf16[64,1,1024], p: s32[]) -> bf16[64,2,128] {{
  %x = bf16[64,1,1024]{{2,1,0}} parameter(1)
  %inf = bf16[] constant(-inf)
  %zero = s32[] constant(0)
  %o = s32[] parameter(0)
  %p = s32[] parameter(2)
  %below = bf16[64,2,1024]{{2,1,0}} pad(%x, %inf), padding=0_0x0_1x0_0
  %first = bf16[64,2,128]{{2,1,0}} dynamic-slice(%below, %zero, %zero, %o), dynamic_slice_sizes={{64,2,128}}
  %above = bf16[64,2,1024]{{2,1,0}} pad(%x, %inf), padding=0_0x1_0x0_0
  %second = bf16[64,2,128]{{2,1,0}} dynamic-slice(%above, %zero, %zero, %p), dynamic_slice_sizes={{64,2,128}}
{before}  ROOT %both = bf16[64,2,128]{{2,1,0}} {use}
}}

%step (g: bf16[64,384], o: s32[], x: bf16[64,1,1024], p: s32[]) -> bf16[2,128,384] {{
  %o = s32[] parameter(1)
  %x = bf16[64,1,1024]{{2,1,0}} parameter(2)
  %p = s32[] parameter(3)
  %rows = bf16[64,2,128]{{2,1,0}} fusion(%o, %x, %p), kind=kLoop, calls=%chunk
  %g = bf16[64,384]{{1,0}} parameter(0)
  ROOT %dot = bf16[2,128,384]{{2,1,0}} dot(%rows, %g), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
}}

ENTRY %main (g: bf16[64,384], o: s32[], x: bf16[64,1,1024], p: s32[]) -> bf16[2,128,384] {{
  %g = bf16[64,384]{{1,0}} parameter(0)
  %o = s32[] parameter(1)
  %x = bf16[64,1,1024]{{2,1,0}} parameter(2)
  %p = s32[] parameter(3)
  ROOT %f = bf16[2,128,384]{{2,1,0}} fusion(%g, %o, %x, %p), kind=kOutput, calls=%step
}}
"""


def test_a_collective_matmul_step_that_pads_its_activations_reads_the_chunks_it_slices():
    """Each dynamic-slice keeps 64 x 2 x 128 elements of a padded array, of which the padding row
    holds no data: 64 x 1 x 128 bf16 = 16,384 B read of the activations per slice, 32,768 B for
    both, not the whole 64 x 1024 x 2 = 131,072 B. With the whole output gradient (64 x 384 x 2 =
    49,152 B), the two offsets (4 B each) and the result written (2 x 128 x 384 x 2 = 196,608 B)."""
    module = parse(_chunk_step("maximum(%first, %second)"))
    assert boundary_bytes(module, module.instruction("f")) == 2 * 64 * 128 * 2 + 64 * 384 * 2 + 2 * 4 + 2 * 128 * 384 * 2


def test_a_padded_operand_read_other_than_through_slices_is_read_whole():
    """The same step where the nested fusion also adds the two padded arrays whole before cutting
    a chunk of the sum: every element of the activations is read (131,072 B)."""
    whole = ("  %sum = bf16[64,2,1024]{2,1,0} add(%below, %above)\n"
             "  %cut = bf16[64,2,128]{2,1,0} slice(%sum), slice={[0:64], [0:2], [0:128]}\n"
             "  %merged = bf16[64,2,128]{2,1,0} maximum(%first, %second)\n")
    module = parse(_chunk_step("add(%merged, %cut)", whole))
    assert boundary_bytes(module, module.instruction("f")) == 64 * 1024 * 2 + 64 * 384 * 2 + 2 * 4 + 2 * 128 * 384 * 2


OUTER, INNER = 2, 4
ACF = '{"async_collective_fusion_config":{"flag_start":"2","flag_end":"8"}}'
GATHER = (f"all-gather(%param_0), channel_id=7, replica_groups={{{{0,1,2,3}}}}, dimensions={{1}}, "
          f"use_global_device_ids=true, backend_config={ACF}")
INNER_CARRY = f"s32[], bf16[16,512], bf16[16,2048], bf16[{M},{K}], bf16[{K},{N}], bf16[{M},{N}]"
OUTER_CARRY = f"s32[], bf16[16,512], bf16[{M},{K}], bf16[{K},{N}], bf16[16,2048], bf16[{M},{N}]"
STEP_OUT = f"(bf16[{M},{N}], bf16[16,512], bf16[16,2048], bf16[16,2048])"


def _step_fusion(name: str, gather: str) -> str:
    """One step of the all-gather beside a dot of bf16[M,K] by bf16[K,N], as XLA:TPU fuses it:
    the collective's operand and gathered buffer in (parameters 0 and 1) and out again."""
    return f"""%{name} (param_0: bf16[16,512], param_1: bf16[16,2048], param_2: bf16[{M},{K}], param_3: bf16[{K},{N}]) -> {STEP_OUT} {{
  %param_0 = bf16[16,512]{{1,0}} parameter(0)
  %param_1 = bf16[16,2048]{{1,0}} parameter(1)
  %param_2 = bf16[{M},{K}]{{1,0}} parameter(2)
  %param_3 = bf16[{K},{N}]{{1,0}} parameter(3)
  %dot = bf16[{M},{N}]{{1,0}} dot(%param_2, %param_3), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %{gather} = bf16[16,2048]{{1,0}} {GATHER}
  ROOT %out = {STEP_OUT} tuple(%dot, %param_0, %param_1, %{gather})
}}
"""


def _stepped() -> str:
    """An all-gather of bf16[16,512] over 4 devices (``channel_id=7``) as XLA:TPU's async
    collective fusion runs it in a layer scan whose layer holds a loop of its own (the 128B
    step's attention): started and finished in the outer loop's body (``OUTER`` trips), stepped
    by two fusions of the inner loop (``INNER`` trips), each beside a dot."""
    return f"""HloModule stepped

%start (param_0: bf16[16,512]) -> (bf16[16,512], bf16[16,2048]) {{
  %param_0 = bf16[16,512]{{1,0}} parameter(0)
  %all-gather.1 = bf16[16,2048]{{1,0}} {GATHER}
  ROOT %begun = (bf16[16,512]{{1,0}}, bf16[16,2048]{{1,0}}) custom-call(%all-gather.1), custom_call_target="AsyncCollectiveStart"
}}

{_step_fusion("step_a", "all-gather.2")}
{_step_fusion("step_b", "all-gather.3")}
%done (param_0: bf16[16,512], param_1: bf16[16,2048]) -> bf16[16,2048] {{
  %param_0 = bf16[16,512]{{1,0}} parameter(0)
  %param_1 = bf16[16,2048]{{1,0}} parameter(1)
  %all-gather.4 = bf16[16,2048]{{1,0}} {GATHER}
  ROOT %finished = bf16[16,2048]{{1,0}} custom-call(%param_0, %param_1, %all-gather.4), custom_call_target="AsyncCollectiveDone"
}}

%inner_body (p: ({INNER_CARRY})) -> ({INNER_CARRY}) {{
  %p = ({INNER_CARRY}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %a = bf16[16,512]{{1,0}} get-tuple-element(%p), index=1
  %g = bf16[16,2048]{{1,0}} get-tuple-element(%p), index=2
  %x = bf16[{M},{K}]{{1,0}} get-tuple-element(%p), index=3
  %w = bf16[{K},{N}]{{1,0}} get-tuple-element(%p), index=4
  %fa = {STEP_OUT} fusion(%a, %g, %x, %w), kind=kOutput, calls=%step_a
  %a1 = bf16[16,512]{{1,0}} get-tuple-element(%fa), index=1
  %g1 = bf16[16,2048]{{1,0}} get-tuple-element(%fa), index=3
  %fb = {STEP_OUT} fusion(%a1, %g1, %x, %w), kind=kOutput, calls=%step_b
  %a2 = bf16[16,512]{{1,0}} get-tuple-element(%fb), index=1
  %g2 = bf16[16,2048]{{1,0}} get-tuple-element(%fb), index=3
  %z = bf16[{M},{N}]{{1,0}} get-tuple-element(%fb), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = ({INNER_CARRY}) tuple(%next, %a2, %g2, %x, %w, %z)
}}

%inner_cond (q: ({INNER_CARRY})) -> pred[] {{
  %q = ({INNER_CARRY}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant({INNER})
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}}

%outer_body (p: ({OUTER_CARRY})) -> ({OUTER_CARRY}) {{
  %p = ({OUTER_CARRY}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %a = bf16[16,512]{{1,0}} get-tuple-element(%p), index=1
  %x = bf16[{M},{K}]{{1,0}} get-tuple-element(%p), index=2
  %w = bf16[{K},{N}]{{1,0}} get-tuple-element(%p), index=3
  %y = bf16[{M},{N}]{{1,0}} get-tuple-element(%p), index=5
  %started = (bf16[16,512]{{1,0}}, bf16[16,2048]{{1,0}}) fusion(%a), kind=kCustom, calls=%start
  %sa = bf16[16,512]{{1,0}} get-tuple-element(%started), index=0
  %sg = bf16[16,2048]{{1,0}} get-tuple-element(%started), index=1
  %zero = s32[] constant(0)
  %init = ({INNER_CARRY}) tuple(%zero, %sa, %sg, %x, %w, %y)
  %attention = ({INNER_CARRY}) while(%init), condition=%inner_cond, body=%inner_body, backend_config={{"known_trip_count":{{"n":"{INNER}"}}}}
  %la = bf16[16,512]{{1,0}} get-tuple-element(%attention), index=1
  %lg = bf16[16,2048]{{1,0}} get-tuple-element(%attention), index=2
  %ly = bf16[{M},{N}]{{1,0}} get-tuple-element(%attention), index=5
  %gathered = bf16[16,2048]{{1,0}} fusion(%la, %lg), kind=kCustom, calls=%done
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = ({OUTER_CARRY}) tuple(%next, %a, %x, %w, %gathered, %ly)
}}

%outer_cond (q: ({OUTER_CARRY})) -> pred[] {{
  %q = ({OUTER_CARRY}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant({OUTER})
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}}

ENTRY %main (a: bf16[16,512], x: bf16[{M},{K}], w: bf16[{K},{N}], y: bf16[{M},{N}]) -> bf16[16,2048] {{
  %a = bf16[16,512]{{1,0}} parameter(0)
  %x = bf16[{M},{K}]{{1,0}} parameter(1)
  %w = bf16[{K},{N}]{{1,0}} parameter(2)
  %y = bf16[{M},{N}]{{1,0}} parameter(3)
  %g0 = bf16[16,2048]{{1,0}} broadcast(bf16[] constant(0)), dimensions={{}}
  %zero = s32[] constant(0)
  %init = ({OUTER_CARRY}) tuple(%zero, %a, %x, %w, %g0, %y)
  %layers = ({OUTER_CARRY}) while(%init), condition=%outer_cond, body=%outer_body, backend_config={{"known_trip_count":{{"n":"{OUTER}"}}}}
  ROOT %out = bf16[16,2048]{{1,0}} get-tuple-element(%layers), index=4
}}
"""


def test_an_async_collective_fusions_steps_in_a_nested_loop_are_steps_of_one_collective():
    """The all-gather is printed four times (start, two steps, done), the steps in the inner
    loop: one collective, run once per outer trip (2 a call), not 2 + 2 x 4 x 2 times; its other
    copies are its steps, each with the computation it runs in."""
    plan = compiled_plan(_stepped(), backend="tpu")
    gathers = [c for c in plan.collectives if c.kind == "all-gather"]
    assert [(c.name, c.executions, c.bytes_per_execution) for c in gathers] == [("all-gather.1", OUTER, 16 * 512 * 2)]
    assert sorted(gathers[0].steps) == [("fa", "inner_body"), ("fb", "inner_body"), ("gathered", "outer_body")]


def test_a_stepped_collective_overlaps_its_steps_work_by_construction():
    """Each step fusion's dot: 2 x 2048 x 4096 x 1024 flops, 87.2 us at 197 TFLOP/s (its 29.4 MB
    at 0.85 x 819 GB/s take 42.2 us; the collective's buffers are not its traffic), run
    OUTER x INNER = 8 times a call: 2 x 8 x 87.2 = 1.395 ms of work beside the all-gather. An
    all-gather of 2 x 1 ms a call overlaps 1.395 ms of it; one of 2 x 0.5 ms overlaps all of itself."""
    text = _stepped()
    step = estimate_step(module_work(parse(text)), chip_named("v5e"))
    dot = 2 * M * K * N / V5E_BF16
    assert sorted(step.stepping) == [("fa", pytest.approx(OUTER * INNER * dot, rel=1e-6)),
                                     ("fb", pytest.approx(OUTER * INNER * dot, rel=1e-6))]
    gather = next(c for c in compiled_plan(text, backend="tpu").collectives if c.kind == "all-gather")
    work = 2 * OUTER * INNER * dot
    for per_run, overlapped in ((1e-3, work), (0.5e-3, OUTER * 0.5e-3)):
        joined = overlapped_times(step, [(gather, OUTER * per_run)])
        assert joined == [(gather, pytest.approx(OUTER * per_run), pytest.approx(overlapped, rel=1e-6))]
    priced, _ = joined_step(step, [(gather, OUTER * 1e-3)])
    assert priced.upper_s - priced.seconds == pytest.approx(OUTER * 1e-3 - work, rel=1e-5)
    assert priced.lower_s == pytest.approx(max(priced.seconds, OUTER * 1e-3))


def test_the_interconnect_figure_and_the_step_read_one_pricing_of_a_collective_matmul_loop():
    """Without a step estimate (a chip without peaks: the interconnect's figure alone) the loop's
    two ways round the ring still run at once, 4 x 94.2 us a call, not twice that; only the
    overlap needs the loop's work."""
    step, timed = _priced("wide.windowed_dot_general_body_rs.1.clone.sunk")
    permute = TRIPS * (HOP + M * N * 2 / ICI_LINK)
    alone, joined_alone = joined_step(None, timed)
    assert alone is None
    assert [(s, o) for _, s, o in joined_alone] == [(pytest.approx(permute / 2), 0.0)] * 2
    priced, joined = joined_step(step, timed)
    assert [s for _, s, _ in joined] == [s for _, s, _ in joined_alone]
    assert priced.collectives_s == pytest.approx(permute)
    assert joined_step(step, None) == (step, [])  # no model of the interconnect: nothing joined


ROWS = "{{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}"
BACK = "{{0,3},{1,0},{2,1},{3,2},{4,7},{5,4},{6,5},{7,6}}"
V5E_4X2 = tuple((p % 4, p // 4) for p in range(8))
"""A v5e 4x2 slice's chips by position: 0-3 along axis 0 at y = 0, 4-7 at y = 1."""


def _loop_beside(groups: str) -> str:
    """A collective matmul loop over 8 devices: each of ``TRIPS`` trips a dot of bf16[M,K] by
    bf16[K,N] beside a collective-permute of bf16[M,N] each way round the rows' rings of 4 (0-3
    and 4-7), and an all-gather of bf16[512,1024] over ``groups`` stepped in the same loop."""
    carry = f"bf16[{M},{K}], bf16[{K},{N}], bf16[{M},{N}], bf16[{M},{N}], bf16[{M},{N}], s32[], bf16[512,1024]"
    return f"""HloModule beside

%wide.windowed_dot_general_body_ag.9 (p: ({carry})) -> ({carry}) {{
  %p = ({carry}) parameter(0)
  %x = bf16[{M},{K}]{{1,0}} get-tuple-element(%p), index=0
  %w = bf16[{K},{N}]{{1,0}} get-tuple-element(%p), index=1
  %f = bf16[{M},{N}]{{1,0}} get-tuple-element(%p), index=2
  %b = bf16[{M},{N}]{{1,0}} get-tuple-element(%p), index=3
  %i = s32[] get-tuple-element(%p), index=5
  %g = bf16[512,1024]{{1,0}} get-tuple-element(%p), index=6
  %dot = bf16[{M},{N}]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %forward = bf16[{M},{N}]{{1,0}} collective-permute(%f), channel_id=1, source_target_pairs={ROWS}
  %backward = bf16[{M},{N}]{{1,0}} collective-permute(%b), channel_id=2, source_target_pairs={BACK}
  %gathered = bf16[1024,1024]{{1,0}} all-gather(%g), channel_id=3, replica_groups={groups}, dimensions={{0}}, use_global_device_ids=true
  %half = bf16[512,1024]{{1,0}} slice(%gathered), slice={{[0:512], [0:1024]}}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = ({carry}) tuple(%x, %w, %forward, %backward, %dot, %next, %half)
}}

%cond (q: ({carry})) -> pred[] {{
  %q = ({carry}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=5
  %n = s32[] constant({TRIPS})
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}}

ENTRY %main (x: bf16[{M},{K}], w: bf16[{K},{N}], f: bf16[{M},{N}], g: bf16[512,1024]) -> bf16[{M},{N}] {{
  %x = bf16[{M},{K}]{{1,0}} parameter(0)
  %w = bf16[{K},{N}]{{1,0}} parameter(1)
  %f = bf16[{M},{N}]{{1,0}} parameter(2)
  %g = bf16[512,1024]{{1,0}} parameter(3)
  %zero = s32[] constant(0)
  %init = ({carry}) tuple(%x, %w, %f, %f, %f, %zero, %g)
  %loop = ({carry}) while(%init), condition=%cond, body=%wide.windowed_dot_general_body_ag.9, backend_config={{"known_trip_count":{{"n":"{TRIPS}"}}}}
  ROOT %out = bf16[{M},{N}]{{1,0}} get-tuple-element(%loop), index=4
}}
"""


def _beside(groups: str) -> tuple[object, list, TargetInterconnect]:
    """The loop's step on v5e, its collectives timed by hand per call (``TRIPS`` runs): a permute
    one hop to a ring neighbour, ``HOP + S / W``; the all-gather over 2 chips, its 1 MiB operand
    each way over one link, ``S / W`` (more than its one hop's 1 us); and a v5e 4x2 slice's chips."""
    text = _loop_beside(groups)
    step = estimate_step(module_work(parse(text)), chip_named("v5e"))
    plan = compiled_plan(text, backend="tpu")
    permute, gather = TRIPS * (HOP + M * N * 2 / ICI_LINK), TRIPS * 512 * 1024 * 2 / ICI_LINK
    seconds = {"collective-permute": permute, "all-gather": gather}
    interconnect = TargetInterconnect("tpu:v5e:4x2", generation_of("TPU v5 lite").ici, V5E_4X2, (4, 2))
    return step, [(c, seconds[c.kind]) for c in plan.collectives], interconnect


def test_a_loops_collectives_on_links_of_their_own_run_at_once():
    """The all-gather pairs chips across the rows ({0,4}: along axis 1), the permutes stay in the
    rows (along axis 0): no link in common, so the loop's collectives take the longer of the
    permutes' one way (94.2 us a trip) and the all-gather (23.3 us), not their sum (117.5 us); the
    loop's work, the dot (87.2 us) and the slice that keeps half the gathered rows (2 MiB read and
    written at 0.85 x 819 GB/s, 3.0 us), covers all but 4.0 us a trip. Each collective's seconds
    are its share of that."""
    step, timed, interconnect = _beside("{{0,4},{1,5},{2,6},{3,7}}")
    permute, gather, dot = TRIPS * (HOP + M * N * 2 / ICI_LINK), TRIPS * 512 * 1024 * 2 / ICI_LINK, TRIPS * 2 * M * K * N / V5E_BF16
    assert [interconnect.lines(c) for c, _ in timed] == [
        frozenset({(0, (0,)), (0, (1,))}), frozenset({(0, (0,)), (0, (1,))}), frozenset({(1, (x,)) for x in range(4)})]
    joined = overlapped_times(step, timed, interconnect.lines)
    assert sum(s for _, s, _ in joined) == pytest.approx(permute)  # the longer: one way's permutes
    scale = permute / (permute + gather)
    assert [s for _, s, _ in joined] == pytest.approx([permute / 2 * scale, permute / 2 * scale, gather * scale])
    work = dot + TRIPS * 2 * 512 * 1024 * 2 / (819e9 * 0.85)
    assert sum(o for _, _, o in joined) == pytest.approx(work, rel=1e-5)
    alone = overlapped_times(step, timed)  # nothing known of the links: every collective shares them
    assert sum(s for _, s, _ in alone) == pytest.approx(permute + gather)


def test_a_loops_collectives_on_the_same_links_add_up():
    """The all-gather over each row's 4 chips (along axis 0, as the permutes): one way round its
    rings it carries half its bytes beside one permute pattern, so the loop's collectives take
    both, 94.2 + 23.3 us a trip, as without knowing the links."""
    step, timed, interconnect = _beside("{{0,1,2,3},{4,5,6,7}}")
    permute, gather = TRIPS * (HOP + M * N * 2 / ICI_LINK), TRIPS * 512 * 1024 * 2 / ICI_LINK
    joined = overlapped_times(step, timed, interconnect.lines)
    assert [s for _, s, _ in joined] == pytest.approx([permute / 2, permute / 2, gather])
    assert joined == overlapped_times(step, timed)
