"""The work of a compiled module (flops and bytes, loops counted) and the step estimate on a chip.

Every expected number is derived here from the shapes written in the test: a dot's flops are
2 x M x N x K, an elementwise op's one per element, bytes the operands and results at a
fusion's boundary. Modules are written out as HLO text, or compiled by JAX with the shapes
stated, and read back through the parse the engine uses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from shardscope.hardware.catalogue import chip_of
from shardscope.hardware.chips import Chip
from shardscope.hardware.gpu_nodes import described_chip
from shardscope.engine.hlo.roofline import estimate_step
from shardscope.engine.hlo.text import parse
from shardscope.engine.hlo.work import module_work

MATMUL_FUSION = """\
HloModule m, entry_computation_layout={(f32[64,32]{1,0}, f32[32,16]{1,0})->f32[64,16]{1,0}}

%fused (p0: f32[64,32], p1: f32[32,16]) -> f32[64,16] {
  %p0 = f32[64,32]{1,0} parameter(0)
  %p1 = f32[32,16]{1,0} parameter(1)
  ROOT %dot.1 = f32[64,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%tanh_fused (q0: f32[64,16]) -> f32[64,16] {
  %q0 = f32[64,16]{1,0} parameter(0)
  %add.1 = f32[64,16]{1,0} add(%q0, %q0)
  ROOT %tanh.1 = f32[64,16]{1,0} tanh(%add.1)
}

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.2 = f32[] add(%x, %y)
}

ENTRY %main (a: f32[64,32], b: f32[32,16]) -> f32[64] {
  %a = f32[64,32]{1,0} parameter(0)
  %b = f32[32,16]{1,0} parameter(1)
  %mm = f32[64,16]{1,0} fusion(%a, %b), kind=kOutput, calls=%fused
  %t = f32[64,16]{1,0} fusion(%mm), kind=kLoop, calls=%tanh_fused
  %zero = f32[] constant(0)
  ROOT %r = f32[64]{0} reduce(%t, %zero), dimensions={1}, to_apply=%sum
}
"""


def test_a_dot_an_elementwise_fusion_and_a_reduction_counted_from_their_shapes():
    work = module_work(parse(MATMUL_FUSION))
    by_name = {item.name: item for item in work.instructions}
    assert set(by_name) == {"mm", "t", "r"}  # parameters and constants cost nothing
    # the dot: 2 x 64 x 16 x 32 flops; reads 64x32 and 32x16 f32, writes 64x16 f32
    assert by_name["mm"].flops == 2 * 64 * 16 * 32
    assert by_name["mm"].bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
    assert by_name["mm"].matmul and by_name["mm"].dtype == "f32"
    # add and tanh fused: one flop each per element of 64x16; one read and one write of it
    assert by_name["t"].flops == 2 * 64 * 16
    assert by_name["t"].bytes == 4 * (64 * 16 + 64 * 16)
    # the reduction reads 64x16 elements (one add each) and the scalar, writes 64
    assert by_name["r"].flops == 64 * 16
    assert by_name["r"].bytes == 4 * (64 * 16 + 1 + 64)
    assert work.loop_iterations == 0 and work.flops == 2 * 64 * 16 * 32 + 2 * 64 * 16 + 64 * 16


CONVOLUTION = """\
HloModule c

ENTRY %main (x: f32[1,8,8,3], k: f32[3,3,3,4]) -> f32[1,6,6,4] {
  %x = f32[1,8,8,3]{3,2,1,0} parameter(0)
  %k = f32[3,3,3,4]{3,2,1,0} parameter(1)
  ROOT %conv = f32[1,6,6,4]{3,2,1,0} convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01io->b01f
}
"""


def test_a_convolution_sums_kernel_height_x_width_x_input_features_terms_per_output():
    (conv,) = module_work(parse(CONVOLUTION)).instructions
    # each of the 1x6x6x4 outputs sums 3x3 (window) x 3 (input features) products: 2 flops each
    assert conv.flops == 2 * (6 * 6 * 4) * (3 * 3 * 3)
    assert conv.bytes == 4 * (8 * 8 * 3 + 3 * 3 * 3 * 4 + 6 * 6 * 4)


LOOP = """\
HloModule l

%body_dot (p0: f32[16,16], p1: f32[16,16]) -> f32[16,16] {
  %p0 = f32[16,16]{1,0} parameter(0)
  %p1 = f32[16,16]{1,0} parameter(1)
  ROOT %d = f32[16,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%update (buf: f32[100,16,16], upd: f32[16,16], i: s32[]) -> f32[100,16,16] {
  %buf = f32[100,16,16]{2,1,0} parameter(0)
  %upd = f32[16,16]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %zero = s32[] constant(0)
  %b3 = f32[1,16,16]{2,1,0} bitcast(%upd)
  ROOT %dus = f32[100,16,16]{2,1,0} dynamic-update-slice(%buf, %b3, %i, %zero, %zero)
}

%read (xs: f32[100,16,16], i: s32[]) -> f32[1,16,16] {
  %xs = f32[100,16,16]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %zero = s32[] constant(0)
  ROOT %ds = f32[1,16,16]{2,1,0} dynamic-slice(%xs, %i, %zero, %zero), dynamic_slice_sizes={1,16,16}
}

%body (t: (s32[], f32[16,16], f32[100,16,16], f32[100,16,16])) -> (s32[], f32[16,16], f32[100,16,16], f32[100,16,16]) {
  %t = (s32[], f32[16,16]{1,0}, f32[100,16,16]{2,1,0}, f32[100,16,16]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %c = f32[16,16]{1,0} get-tuple-element(%t), index=1
  %xs = f32[100,16,16]{2,1,0} get-tuple-element(%t), index=2
  %ys = f32[100,16,16]{2,1,0} get-tuple-element(%t), index=3
  %x = f32[1,16,16]{2,1,0} fusion(%xs, %i), kind=kLoop, calls=%read
  %xb = f32[16,16]{1,0} bitcast(%x)
  %next = f32[16,16]{1,0} fusion(%c, %xb), kind=kOutput, calls=%body_dot
  %out = f32[100,16,16]{2,1,0} fusion(%ys, %next, %i), kind=kLoop, calls=%update
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[16,16]{1,0}, f32[100,16,16]{2,1,0}, f32[100,16,16]{2,1,0}) tuple(%i2, %next, %xs, %out)
}

%cond (t: (s32[], f32[16,16], f32[100,16,16], f32[100,16,16])) -> pred[] {
  %t = (s32[], f32[16,16]{1,0}, f32[100,16,16]{2,1,0}, f32[100,16,16]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(100)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (c0: f32[16,16], xs: f32[100,16,16], ys: f32[100,16,16]) -> f32[100,16,16] {
  %c0 = f32[16,16]{1,0} parameter(0)
  %xs = f32[100,16,16]{2,1,0} parameter(1)
  %ys = f32[100,16,16]{2,1,0} parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[16,16]{1,0}, f32[100,16,16]{2,1,0}, f32[100,16,16]{2,1,0}) tuple(%zero, %c0, %xs, %ys)
  %w = (s32[], f32[16,16]{1,0}, f32[100,16,16]{2,1,0}, f32[100,16,16]{2,1,0}) while(%init), condition=%cond, body=%body
  ROOT %res = f32[100,16,16]{2,1,0} get-tuple-element(%w), index=3
}
"""


def test_a_loop_body_counts_once_per_iteration_and_reads_one_step_of_its_stacked_inputs():
    """No ``known_trip_count``: the 100 comes from the condition (i < 100, i from 0 by 1)."""
    work = module_work(parse(LOOP))
    by_name = {item.name: item for item in work.instructions}
    assert work.loop_iterations == 100
    assert by_name["next"].runs == 100 and by_name["next"].total_flops == 100 * 2 * 16 * 16 * 16
    # the slice fusion reads one 16x16 step of xs (and the s32 index), writes it: not all 100 steps
    assert by_name["x"].bytes == 4 * 16 * 16 + 4 + 4 * 16 * 16
    # the update writes its 16x16 step in place: the 100-step buffer is neither read nor written whole
    assert by_name["out"].bytes == 4 * 16 * 16 + 4 + 4 * 16 * 16
    # the condition runs 101 times (its compare once each: one flop), the body's add 100 times
    assert by_name["lt"].runs == 101 and by_name["i2"].runs == 100


@pytest.mark.parametrize("steps", [10, 100])
def test_a_lax_scan_of_matmuls_costs_n_times_its_body(steps):
    """A real compile: the scan's dots together are ``steps`` x 2 x 32 x 32 x 64, whatever XLA
    does around them; XLA's own cost analysis counts the body once."""
    m, k, n = 32, 64, 32

    def scan(w, xs):
        def body(carry, x):
            return carry + x @ w, None

        return lax.scan(body, jnp.zeros((m, n)), xs)[0]

    w = jax.ShapeDtypeStruct((k, n), jnp.float32)
    xs = jax.ShapeDtypeStruct((steps, m, k), jnp.float32)
    compiled = jax.jit(scan).lower(w, xs).compile()
    work = module_work(parse(compiled.as_text()))
    matmul_flops = sum(item.total_flops for item in work.instructions if item.matmul)
    assert matmul_flops == steps * 2 * m * n * k
    assert work.loop_iterations == steps


def test_the_step_estimate_is_a_roofline_per_instruction_plus_the_chips_overheads():
    chip = Chip("toy", 1 << 30, memory_bandwidth_Bps=1e9, peak_flops={"f32": 1e9}, call_overhead_s=1e-3,
                iteration_overhead_s=1e-5)
    step = estimate_step(module_work(parse(LOOP)), chip)
    assert step is not None
    # the 100 dots: 100 x 2 x 16^3 flops at 1e9/s; their bytes: (3 x 16x16 f32) x 100 at 1e9 B/s
    dot = next(t for t in step.instructions if t.name == "next")
    assert dot.compute_s == pytest.approx(100 * 2 * 16**3 / 1e9)
    assert dot.memory_s == pytest.approx(100 * 3 * 16 * 16 * 4 / 1e9)
    assert dot.bound == "compute"
    assert step.overhead_s == pytest.approx(1e-3 + 100 * 1e-5)
    assert step.seconds == pytest.approx(step.roofline_s + step.overhead_s)
    assert step.collectives_s is None and step.lower_s == step.upper_s == step.seconds
    assert "collectives not included" in step.line() and "unchecked on toy" in step.line()
    with_collectives = step.with_collectives(0.5)  # the interconnect's hook: the bounds open up
    assert with_collectives.lower_s == 0.5 and with_collectives.upper_s == pytest.approx(step.seconds + 0.5)


def test_a_v5e_chips_numbers_are_googles_published_ones():
    chip = chip_of("TPU v5 lite")
    assert chip is not None and chip.name == "v5e"
    assert chip.flops_per_s("bf16") == 197e12 and chip.memory_bandwidth_Bps == 819e9
    assert chip.memory_bytes == 16 * 2**30 and "cloud.google.com/tpu/docs/v5e" in chip.sources["peak_flops"]
    v5p = chip_of("TPU v5")  # what libtpu calls a v5p chip
    assert v5p is not None and v5p.name == "v5p"


def test_a_b200s_fp32_peak_is_one_eighth_of_the_hgx_boards():
    """NVIDIA's HGX B200 (8 GPUs) lists 36 PFLOPS FP16/BF16 tensor core with 2:4 sparsity and 600
    TFLOPS FP32, which has no sparse mode: per GPU, dense, 36e15 / 8 / 2 and 600e12 / 8 (the
    B200 datasheet's 75 TFLOPS FP32)."""
    chip = described_chip("b200", "")
    assert chip.flops_per_s("bf16") == 36e15 / 8 / 2
    assert chip.flops_per_s("f32") == 600e12 / 8


ON_CHIP = """\
HloModule v

%f (p0: bf16[512,512], p1: bf16[512,512]) -> bf16[512,512] {
  %p0 = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  %p1 = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(1)
  ROOT %d = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (a: bf16[512,512], b: bf16[512,512]) -> bf16[512,512] {
  %a = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  %b = bf16[512,512]{1,0:T(8,128)(2,1)} parameter(1)
  ROOT %mm = bf16[512,512]{1,0:T(8,128)(2,1)S(1)} fusion(%a, %b), kind=kOutput, calls=%f
}
"""


def test_arrays_the_compiler_keeps_in_on_chip_memory_move_no_main_memory_bytes():
    """XLA:TPU lays a small loop's carry out in memory space 1 (VMEM, ``S(1)``): only ``b``,
    512 x 512 bf16 in main memory, is read from it."""
    (mm,) = module_work(parse(ON_CHIP)).instructions
    assert mm.bytes == 512 * 512 * 2
    assert mm.flops == 2 * 512**3 and mm.dtype == "bf16"


CUBLAS = """\
HloModule g

ENTRY %main (a: f32[64,32], b: f32[32,16]) -> f32[64,16] {
  %a = f32[64,32]{1,0} parameter(0)
  %b = f32[32,16]{1,0} parameter(1)
  %gemm = (f32[64,16]{1,0}, s8[4194304]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config={"operation_queue_id":"0","gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  ROOT %out = f32[64,16]{1,0} get-tuple-element(%gemm), index=0
}
"""


def test_a_cublas_gemm_custom_call_counts_as_its_dot():
    """XLA:GPU may call cuBLAS for a dot: 2 x 64 x 16 x 32 flops; its workspace is no data moved."""
    (gemm,) = module_work(parse(CUBLAS)).instructions
    assert gemm.flops == 2 * 64 * 16 * 32 and gemm.matmul and gemm.dtype == "f32"
    assert gemm.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
