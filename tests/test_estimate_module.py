"""``shardscope.estimate_module``: a compiled module's text priced on a named chip.

Every expected number is written out here from the shapes in the module text and the chips'
published peaks (v5e: 197 TFLOP/s bf16, 394 TOPS int8, 819 GB/s; H100 SXM: 989 TFLOP/s bf16,
494 TF32, 1,979 FP8 and INT8, 67 FP32), or the rates measured on the v5e chip that
``shardscope/hardware/chips.py`` cites (vector 5.7e12 operations/s, scatter 2.8e10 updates/s,
0.85 of the bandwidth reached, 0.59 ms per call waited on, 0.13 ms back to back; a gather from
HBM 8.4 ns a row, 1.12 ns a 128-element piece, 3.0 ns an index component past the first, from
on-chip memory 2.85 ns a row and 0.12 ns a piece).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import shardscope
from shardscope.errors import HloTextError, TargetError

V5E_BF16, V5E_INT8, V5E_BANDWIDTH = 197e12, 394e12, 819e9 * 0.85
H100_TF32, H100_FP32, H100_FP8 = 494e12, 67e12, 1979e12


def _module(body: str, fused: str = "") -> str:
    return f"HloModule m\n\n{fused}\nENTRY %main {{\n{body}\n}}\n"


def _matmul(dtype: str, m: int, k: int, n: int, out: str = "", attributes: str = "") -> str:
    out = out or dtype
    return _module(f"""  %a = {dtype}[{m},{k}]{{1,0}} parameter(0)
  %b = {dtype}[{k},{n}]{{1,0}} parameter(1)
  ROOT %c = {out}[{m},{n}]{{1,0}} convolution(%a, %b), dim_labels=bf_io->bf{attributes}""")


def test_a_tpu_batched_dot_written_as_a_dilated_convolution_counts_its_batch_once():
    """XLA:TPU writes ``bij,bjk->bik`` as a convolution over the batch, dilated by its own size:
    2 x 64 x 1024 x 1024 x 512 flops, not 64 times that (one window position lands on an input)."""
    fused = """%fused (p0: bf16[64,1024,512], p1: bf16[64,512,1024]) -> bf16[64,1024,1024] {
  %p0 = bf16[64,1024,512]{2,1,0} parameter(0)
  %p1 = bf16[64,512,1024]{2,1,0} parameter(1)
  ROOT %conv = bf16[64,1024,1024]{2,1,0} convolution(%p0, %p1), window={size=64 stride=63 lhs_dilate=64}, dim_labels=0bf_0io->0bf
}
"""
    text = _module("""  %a = bf16[64,1024,512]{2,1,0} parameter(0)
  %b = bf16[64,512,1024]{2,1,0} parameter(1)
  ROOT %f = bf16[64,1024,1024]{2,1,0} fusion(%a, %b), kind=kOutput, calls=%fused""", fused)
    estimate = shardscope.estimate_module(text, "v5e")
    flops = 2 * 64 * 1024 * 1024 * 512
    assert estimate.flops == flops
    assert estimate.compute_s == pytest.approx(flops / V5E_BF16, rel=1e-12)
    moved = 2 * (64 * 1024 * 512 * 2) + 64 * 1024 * 1024 * 2
    assert estimate.memory_s == pytest.approx(moved / V5E_BANDWIDTH, rel=1e-12)


def test_a_padded_convolution_counts_only_the_window_positions_that_land_on_the_input():
    """A 3x3 'SAME' convolution over a 4x4 image: per spatial dimension the kernel positions
    that land inside, summed over the 4 outputs, are 2+3+3+2 = 10 (an edge output's window
    hangs one position over the padding), so 2 x batch x in x out x 10 x 10 flops."""
    text = _module("""  %x = bf16[2,4,4,8]{3,2,1,0} parameter(0)
  %w = bf16[3,3,8,16]{3,2,1,0} parameter(1)
  ROOT %y = bf16[2,4,4,16]{3,2,1,0} convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f""")
    assert shardscope.estimate_module(text, "v5e").flops == 2 * 2 * 8 * 16 * 10 * 10


@pytest.mark.parametrize("precision, passes", [("", 1), (", operand_precision={high,high}", 3),
                                               (", operand_precision={highest,highest}", 6)])
def test_an_f32_matmul_on_a_tpu_takes_its_precisions_bf16_passes(precision, passes):
    flops = 2 * 512 * 256 * 128
    estimate = shardscope.estimate_module(_matmul("f32", 512, 256, 128, attributes=precision), "v5e")
    assert estimate.compute_s == pytest.approx(passes * flops / V5E_BF16, rel=1e-12)


@pytest.mark.parametrize("precision, peak", [("", H100_TF32), (", operand_precision={high,high}", H100_TF32),
                                             (", operand_precision={highest,highest}", H100_FP32)])
def test_an_f32_matmul_on_an_h100_runs_on_tf32_unless_highest(precision, peak):
    flops = 2 * 512 * 256 * 128
    estimate = shardscope.estimate_module(_matmul("f32", 512, 256, 128, attributes=precision), "h100")
    assert estimate.compute_s == pytest.approx(flops / peak, rel=1e-12)


def test_int8_and_fp8_matmuls_run_at_their_peaks_where_the_chip_has_them():
    flops = 2 * 1024 * 512 * 256
    int8 = _matmul("s8", 1024, 512, 256, out="s32")
    fp8 = _matmul("f8e4m3fn", 1024, 512, 256, out="bf16")
    assert shardscope.estimate_module(int8, "v5e").compute_s == pytest.approx(flops / V5E_INT8, rel=1e-12)
    assert shardscope.estimate_module(fp8, "v5e").compute_s == pytest.approx(flops / V5E_BF16, rel=1e-12)  # no fp8 MXU
    assert shardscope.estimate_module(fp8, "h100").compute_s == pytest.approx(flops / H100_FP8, rel=1e-12)


def test_a_depthwise_convolution_and_a_scatter_run_at_the_measured_vector_and_scatter_rates():
    depthwise = _module("""  %x = bf16[4,16,16,32]{3,2,1,0} parameter(0)
  %w = bf16[3,3,1,32]{3,2,1,0} parameter(1)
  ROOT %y = bf16[4,16,16,32]{3,2,1,0} convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=32""")
    flops = 2 * 4 * 1 * 32 * (16 * 3 - 2) ** 2
    estimate = shardscope.estimate_module(depthwise, "v5e")
    assert estimate.flops == flops and estimate.compute_s == pytest.approx(flops / 5.7e12, rel=1e-12)
    scatter = _module("""  %acc = f32[1000,64]{1,0} parameter(0)
  %ids = s32[4096,1]{1,0} parameter(1)
  %upd = f32[4096,64]{1,0} parameter(2)
  ROOT %s = f32[1000,64]{1,0} scatter(%acc, %ids, %upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add""")
    scatter = scatter.replace("ENTRY", "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
                              "  %y = f32[] parameter(1)\n  ROOT %z = f32[] add(%x, %y)\n}\n\nENTRY")
    assert shardscope.estimate_module(scatter, "v5e").compute_s == pytest.approx(4096 * 64 / 2.8e10, rel=1e-12)


def _gather(table: str, ids: str, out: str, sizes: str, index_map: str = "{0}", collapsed: str = "{0}",
            offset: str = "{1}") -> str:
    """An embedding lookup as XLA:TPU fuses it: a gather of ``table``'s rows by ``ids``."""
    fused = f"""%gathered (p0: {table.split('{')[0]}, p1: {ids.split('{')[0]}) -> {out.split('{')[0]} {{
  %p0 = {table} parameter(0)
  %p1 = {ids} parameter(1)
  ROOT %g = {out} gather(%p0, %p1), offset_dims={offset}, collapsed_slice_dims={collapsed}, start_index_map={index_map}, index_vector_dim=1, slice_sizes={sizes}
}}
"""
    return _module(f"""  %t = {table} parameter(0)
  %i = {ids} parameter(1)
  ROOT %f = {out} fusion(%t, %i), kind=kCustom, calls=%gathered""", fused)


def test_a_gather_from_hbm_reads_row_by_row_and_streams_only_its_writes():
    """4,096 rows of 1,024 bf16 (8 pieces of 128 each) from a 100,000-row table in HBM: 8.4 ns a row
    and 1.12 ns a piece, plus the 8 MiB it writes at the bandwidth; neither the table (200 MB)
    nor the rows it reads are streamed."""
    text = _gather("bf16[100000,1024]{1,0:T(8,128)(2,1)}", "s32[4096,1]{1,0}", "bf16[4096,1024]{1,0:T(8,128)(2,1)}",
                   "{1,1024}")
    estimate = shardscope.estimate_module(text, "v5e")
    written, ids = 4096 * 1024 * 2, 4096 * 4
    expected = (written + ids) / V5E_BANDWIDTH + 4096 * 8.4e-9 + 4096 * 8 * 1.12e-9
    assert estimate.memory_s == pytest.approx(expected, rel=1e-12)
    assert estimate.flops == 0 and estimate.compute_s == 0
    assert estimate.bytes == 2 * written + ids  # the traffic still counts the rows read


def test_a_gather_by_two_index_components_pays_for_the_second():
    """``take_along_axis`` over a 4,096 x 16,384 f32 array: 65,536 single elements (one piece each)
    indexed by (row, column)."""
    text = _gather("f32[4096,16384]{1,0:T(8,128)}", "s32[65536,2]{1,0}", "f32[65536]{0}", "{1,1}",
                   index_map="{0,1}", collapsed="{0,1}", offset="{}")
    estimate = shardscope.estimate_module(text, "v5e")
    expected = (65536 * 4 + 65536 * 2 * 4) / V5E_BANDWIDTH + 65536 * (8.4e-9 + 1.12e-9 + 3.0e-9)
    assert estimate.memory_s == pytest.approx(expected, rel=1e-12)


def test_a_gather_from_a_table_kept_on_the_chip_takes_its_rows_or_its_writes_whichever_is_longer():
    """The table laid out in on-chip memory (``S(1)``): 65,536 rows of 256 bf16 (2 pieces) take
    2.85 + 2 x 0.12 ns each, longer than writing their 32 MiB."""
    text = _gather("bf16[16384,256]{1,0:T(8,128)(2,1)S(1)}", "s32[65536,1]{1,0}", "bf16[65536,256]{1,0:T(8,128)(2,1)}",
                   "{1,256}")
    estimate = shardscope.estimate_module(text, "v5e")
    rows = 65536 * (2.85e-9 + 2 * 0.12e-9)
    assert estimate.compute_s == pytest.approx(rows, rel=1e-12)
    assert estimate.memory_s == pytest.approx((65536 * 256 * 2 + 65536 * 4) / V5E_BANDWIDTH, rel=1e-12)
    assert estimate.roofline_s == pytest.approx(rows, rel=1e-12)


def test_a_gpu_or_cpu_gather_takes_no_access_time_where_no_rate_was_measured():
    text = _gather("f32[100000,1024]{1,0}", "s32[4096,1]{1,0}", "f32[4096,1024]{1,0}", "{1,1024}")
    estimate = shardscope.estimate_module(text, "h100")
    assert estimate.compute_s == 0 and estimate.flops == 0


def test_a_softmax_fusion_reads_its_input_twice():
    """XLA:TPU's softmax reduces along the row with a reduce-window spanning it (size 1023 over
    512, padded 511 each side) and uses the result in the same fusion: the input is read twice."""
    fused = """%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%shifted (p: f32[64,512]) -> f32[64,512] {
  %p = f32[64,512]{1,0} parameter(0)
  %low = f32[] constant(-inf)
  %rw = f32[64,512]{1,0} reduce-window(%p, %low), window={size=1x1023 pad=0_0x511_511}, to_apply=%max
  ROOT %d = f32[64,512]{1,0} subtract(%p, %rw)
}
"""
    text = _module("""  %x = f32[64,512]{1,0} parameter(0)
  ROOT %y = f32[64,512]{1,0} fusion(%x), kind=kOutput, calls=%shifted""", fused)
    assert shardscope.estimate_module(text, "v5e").bytes == 3 * 64 * 512 * 4
    prefix = text.replace("size=1x1023 pad=0_0x511_511", "size=1x128 pad=0_0x127_0")  # a cumsum's window
    assert shardscope.estimate_module(prefix, "v5e").bytes == 2 * 64 * 512 * 4


def test_a_cross_program_prefetch_moves_nothing_within_a_call_and_an_async_slice_reads_its_slice():
    text = _module("""  %t = bf16[32000,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %x = bf16[4,512,512]{2,1,0:T(8,128)(2,1)} parameter(1)
  %cs = (bf16[32000,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[32000,1024]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) copy-start(%t), cross_program_prefetch_index=0
  %ss = ((bf16[4,512,512]{2,1,0:T(8,128)(2,1)}), bf16[1,512,512]{2,1,0:T(8,128)(2,1)S(1)}, s32[]{:S(2)}) slice-start(%x), slice={[0:1], [0:512], [0:512]}
  %sd = bf16[1,512,512]{2,1,0:T(8,128)(2,1)S(1)} slice-done(%ss)
  ROOT %cd = bf16[32000,1024]{1,0:T(8,128)(2,1)S(1)} copy-done(%cs)""")
    assert shardscope.estimate_module(text, "v5e").bytes == 512 * 512 * 2  # the slice read; its copy is on chip


def test_a_module_with_a_sort_top_k_or_unknown_call_is_a_lower_bound_naming_them():
    text = _module("""  %x = f32[256,1000]{1,0} parameter(0)
  %t = (f32[256,8]{1,0}, s32[256,8]{1,0}) custom-call(%x), custom_call_target="TopK"
  %u = f32[256,1000]{1,0} custom-call(%x), custom_call_target="MyKernel"
  %h = f32[256,1000]{1,0} custom-call(%x), custom_call_target="AssumeGatherIndicesInBound"
  ROOT %s = f32[256,1000]{1,0} sort(%u), dimensions={1}, to_apply=%lt""")
    text = text.replace("ENTRY", "%lt (a: f32[], b: f32[]) -> pred[] {\n  %a = f32[] parameter(0)\n"
                        "  %b = f32[] parameter(1)\n  ROOT %c = pred[] compare(%a, %b), direction=LT\n}\n\nENTRY")
    estimate = shardscope.estimate_module(text, "v5e")
    assert estimate.lower_bound
    assert dict(estimate.unmodelled) == {"top-k": 1, "custom-call MyKernel": 1, "sort": 1}
    assert "a lower bound: 1 top-k, 1 custom-call MyKernel, 1 sort not modelled" in estimate.line()


def test_waited_on_a_call_pays_its_overhead_back_to_back_the_chip_idles_between_calls():
    """One kernel (the matmul), two arguments, one result: waited on, 0.59 ms a call, 1.14 us an
    argument, 5.86 us a result and 0.27 us a kernel; back to back the kernel and a 30 us gap, at
    least the host's dispatch (0.13 ms, 1.09 us an argument, 4.28 us a result)."""
    big = shardscope.estimate_module(_matmul("bf16", 8192, 8192, 8192), "v5e")
    roofline = max(2 * 8192**3 / V5E_BF16, 3 * 8192 * 8192 * 2 / V5E_BANDWIDTH)
    assert big.seconds == pytest.approx(roofline + 5.9e-4 + 2 * 1.14e-6 + 5.86e-6 + 0.27e-6, rel=1e-12)
    assert big.dispatched_seconds == pytest.approx(roofline + 0.27e-6 + 3e-5, rel=1e-12)
    small = shardscope.estimate_module(_matmul("bf16", 128, 128, 128), "v5e")
    assert small.dispatched_seconds == pytest.approx(1.3e-4 + 2 * 1.09e-6 + 4.28e-6, rel=1e-12)  # the host sets the pace
    assert not small.lower_bound and small.unmodelled == ()
    # 590 + 2.28 + 5.86 + 0.27 us and a 0.14 us roofline waited on; 130 + 2.18 + 4.28 us back to back
    assert small.line().startswith("step estimate ~599 us per call waited on, ~136 us back to back, on v5e")


def test_on_a_gpu_a_call_back_to_back_is_no_slower_than_one_waited_on():
    """The 30 us gap between calls back to back was measured on a TPU v5e and is a TPU's: a GPU's
    calls back to back cost their work, at least its 20 us dispatch, never more than a call waited
    on (its work and its 20 us call overhead)."""
    flops, peak = 2 * 8192**3, 989e12  # H100 SXM's dense bf16 peak, as the GPU's record publishes it
    big = shardscope.estimate_module(_matmul("bf16", 8192, 8192, 8192), "h100")
    assert big.seconds == pytest.approx(big.roofline_s + 2e-5, rel=1e-12)
    assert big.dispatched_seconds == pytest.approx(big.roofline_s, rel=1e-12) and big.roofline_s >= flops / peak
    small = shardscope.estimate_module(_matmul("bf16", 128, 128, 128), "h100")
    assert small.dispatched_seconds == pytest.approx(2e-5, rel=1e-12) and small.dispatched_seconds < small.seconds


def test_a_module_jax_compiled_here_is_estimated_from_its_text():
    m, k, n = 256, 128, 64
    text = jax.jit(jnp.matmul).lower(jnp.zeros((m, k), jnp.float32), jnp.zeros((k, n), jnp.float32)).compile().as_text()
    estimate = shardscope.estimate_module(text, "v6e")
    assert estimate.flops == 2 * m * k * n and estimate.chip == "v6e"
    assert "unchecked on v6e: published peaks" in estimate.line()


def test_a_chip_shardscope_does_not_know_or_a_text_without_a_module_is_one_clear_error():
    with pytest.raises(TargetError, match=r"no chip called 'v9': known chips are v4, v5e, v5p, v6e, a100"):
        shardscope.estimate_module(_matmul("bf16", 8, 8, 8), "v9")
    with pytest.raises(HloTextError, match="hlo_text holds no computation: it is not HLO text"):
        shardscope.estimate_module("not a module", "v5e")
    assert "estimate_module" in shardscope.__all__


def test_a_table_cell_of_a_lower_bound_says_at_least():
    from shardscope.render.targets import step_cell

    text = _module("""  %x = f32[4096]{0} parameter(0)
  ROOT %s = f32[4096]{0} sort(%x), dimensions={0}, to_apply=%lt""")
    text = text.replace("ENTRY", "%lt (a: f32[], b: f32[]) -> pred[] {\n  %a = f32[] parameter(0)\n"
                        "  %b = f32[] parameter(1)\n  ROOT %c = pred[] compare(%a, %b), direction=LT\n}\n\nENTRY")
    estimate = shardscope.estimate_module(text, "v5e")
    assert step_cell(estimate).startswith("at least ~")
    assert not step_cell(shardscope.estimate_module(_matmul("bf16", 8, 8, 8), "v5e")).startswith("at least")


@pytest.mark.parametrize("precision, peak", [("DEFAULT", H100_TF32), ("HIGHEST", H100_FP32)])
def test_a_cublas_gemm_takes_its_precision_from_its_backend_config(precision, peak):
    """XLA:GPU's cuBLAS call carries the dot's precision in ``gemm_backend_config``: an f32 gemm
    at DEFAULT runs on TF32, at HIGHEST in FP32 (2 x 64 x 16 x 32 flops)."""
    config = ('{"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":'
              '["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},'
              f'"precision_config":{{"operand_precision":["{precision}","{precision}"]}}}}}}')
    text = _module(f"""  %a = f32[64,32]{{1,0}} parameter(0)
  %b = f32[32,16]{{1,0}} parameter(1)
  %gemm = (f32[64,16]{{1,0}}, s8[4194304]{{0}}) custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config={config}
  ROOT %out = f32[64,16]{{1,0}} get-tuple-element(%gemm), index=0""")
    estimate = shardscope.estimate_module(text, "h100")
    assert estimate.compute_s == pytest.approx(2 * 64 * 16 * 32 / peak, rel=1e-12)


def _scaled_outputs(count: int) -> str:
    """``count`` f32[256] arguments, each scaled by its own fusion, returned as a tuple."""
    fused = "%scale (p: f32[256]) -> f32[256] {\n  %p = f32[256]{0} parameter(0)\n  %two = f32[] constant(2)\n" \
            "  %b = f32[256]{0} broadcast(%two), dimensions={}\n  ROOT %m = f32[256]{0} multiply(%p, %b)\n}\n"
    body = "\n".join(f"  %x{i} = f32[256]{{0}} parameter({i})\n  %y{i} = f32[256]{{0}} fusion(%x{i}), kind=kLoop, "
                     f"calls=%scale" for i in range(count))
    root = ", ".join(f"%y{i}" for i in range(count))
    return _module(f"{body}\n  ROOT %t = ({', '.join(['f32[256]{0}'] * count)}) tuple({root})", fused)


def test_many_small_arrays_cost_their_kernels_and_the_hosts_per_array_work():
    """120 arrays in, 120 fusions, 120 out (clipping's shape): 120 x 0.27 us of kernels on the chip;
    waited on 120 x (1.14 + 5.86) us more than a call; back to back the host's dispatch of 0.13 ms
    and 120 x (1.09 + 4.28) us, longer than the chip's work, sets the pace. The call holds 240
    arrays in and out: it says the estimate may be off there."""
    estimate = shardscope.estimate_module(_scaled_outputs(120), "v5e")
    flops, moved = 120 * 256, 120 * 2 * 256 * 4
    roofline = 120 * max(256 / 5.7e12, 2 * 256 * 4 / V5E_BANDWIDTH)
    assert estimate.flops == flops and estimate.bytes == moved
    assert estimate.kernels_s == pytest.approx(120 * 0.27e-6, rel=1e-12)
    assert estimate.seconds == pytest.approx(roofline + 5.9e-4 + 120 * (1.14e-6 + 5.86e-6) + 120 * 0.27e-6, rel=1e-9)
    assert estimate.dispatched_seconds == pytest.approx(1.3e-4 + 120 * (1.09e-6 + 4.28e-6), rel=1e-12)
    assert [(kind.kind, count) for kind, count in estimate.outside_band] == [("many arrays", 240)]
    assert "240 arrays in and out of the call (50 or more), measured at" in estimate.line()
    few = shardscope.estimate_module(_scaled_outputs(2), "v5e")
    assert few.outside_band == ()


def test_a_loops_kernels_are_in_its_iterations_overhead_not_counted_again():
    """A fusion in a while body of 1,000 known iterations: 1,000 x 0.16 us of iteration overhead, and
    the kernel cost only for the kernels outside the loop (the add before it)."""
    loop = """%body (s: (s32[], f32[256])) -> (s32[], f32[256]) {
  %s = (s32[], f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %v = f32[256]{0} get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %w = f32[256]{0} fusion(%v), kind=kLoop, calls=%scale
  ROOT %r = (s32[], f32[256]{0}) tuple(%j, %w)
}

%cond (c: (s32[], f32[256])) -> pred[] {
  %c = (s32[], f32[256]{0}) parameter(0)
  %k = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(1000)
  ROOT %lt = pred[] compare(%k, %n), direction=LT
}
"""
    fused = "%scale (p: f32[256]) -> f32[256] {\n  %p = f32[256]{0} parameter(0)\n  ROOT %m = f32[256]{0} add(%p, %p)\n}\n"
    text = _module("""  %x = f32[256]{0} parameter(0)
  %x2 = f32[256]{0} add(%x, %x)
  %zero = s32[] constant(0)
  %init = (s32[], f32[256]{0}) tuple(%zero, %x2)
  %loop = (s32[], f32[256]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"1000"}}
  ROOT %out = f32[256]{0} get-tuple-element(%loop), index=1""", fused + loop)
    estimate = shardscope.estimate_module(text, "v5e")
    assert estimate.loop_iterations == 1000
    assert estimate.kernels_s == pytest.approx(1 * 0.27e-6, rel=1e-12)  # %x2 alone
    assert estimate.iteration_s == pytest.approx(1000 * 1.6e-7, rel=1e-12)


def test_a_vectors_cumsum_window_sliding_along_a_tiled_dimension_is_timed_by_its_taps():
    """XLA:TPU's cumsum of 16M f32: a reduce-window of 128 taps along dimension 1 of a [131072,128]
    array laid out {0,1} (both dimensions in the tile). Its work is 131072 x 128 x 128 taps at the
    0.667e12 a second measured on v5e. The same window over the outermost dimension of a
    [4096,64,128] array laid out {0,1,2} (whole tiles at a time, as XLA:TPU's cumsum over a matrix's
    rows) stays one operation per element read, and is flagged as a prefix sum."""
    region = "%sum (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n" \
             "  ROOT %c = f32[] add(%a, %b)\n}\n"

    def cumsum(shape: str, layout: str, window: str) -> str:
        return _module(f"""  %x = f32[{shape}]{{{layout}}} parameter(0)
  %zero = f32[] constant(0)
  ROOT %w = f32[{shape}]{{{layout}}} reduce-window(%x, %zero), window={{{window}}}, to_apply=%sum""", region)
    taps = 131072 * 128 * 128
    in_tile = shardscope.estimate_module(cumsum("131072,128", "0,1", "size=1x128 pad=0_0x127_0"), "v5e")
    assert in_tile.flops == taps
    assert in_tile.compute_s == pytest.approx(taps / 0.667e12, rel=1e-12)
    assert in_tile.outside_band == ()
    outer = shardscope.estimate_module(cumsum("4096,64,128", "0,1,2", "size=1x1x128 pad=0_0x0_0x127_0"), "v5e")
    assert outer.flops == 4096 * 64 * 128
    assert [kind.kind for kind, _ in outer.outside_band] == ["prefix sum"]


def test_a_fusion_slicing_a_main_memory_array_into_on_chip_memory_reads_its_slice():
    """A scan's layer slice of a stacked cache in HBM, written to on-chip memory (S(1)): it reads
    the slice's 1 x 8 x 4096 x 4 x 128 bf16 from HBM (33.5 MB) and its 4-byte index, and writes
    nothing to HBM."""
    fused = """%slice (c: bf16[8,8,4096,4,128], i: s32[]) -> bf16[1,8,4096,4,128] {
  %c = bf16[8,8,4096,4,128]{4,3,2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %z = s32[] constant(0)
  ROOT %d = bf16[1,8,4096,4,128]{4,3,2,1,0:S(1)} dynamic-slice(%c, %i, %z, %z, %z, %z), dynamic_slice_sizes={1,8,4096,4,128}
}
"""
    text = _module("""  %cache = bf16[8,8,4096,4,128]{4,3,2,1,0} parameter(0)
  %layer = s32[] parameter(1)
  ROOT %s = bf16[1,8,4096,4,128]{4,3,2,1,0:S(1)} fusion(%cache, %layer), kind=kLoop, calls=%slice""", fused)
    estimate = shardscope.estimate_module(text, "v5e")
    assert estimate.bytes == 8 * 4096 * 4 * 128 * 2 + 4
    assert estimate.memory_s == pytest.approx((8 * 4096 * 4 * 128 * 2 + 4) / V5E_BANDWIDTH, rel=1e-12)


def test_an_update_of_a_large_on_chip_array_says_the_estimate_may_be_off():
    """A dynamic-update-slice into a 32 MiB bf16 array laid out in S(1), as the decode steps that
    keep a layer's KV cache on the chip do: flagged; into a 2 MiB one: not."""
    def update(positions: int) -> str:
        return _module(f"""  %cache = bf16[8,{positions},4,128]{{3,2,1,0:S(1)}} parameter(0)
  %new = bf16[8,1,4,128]{{3,2,1,0:S(1)}} parameter(1)
  %p = s32[] parameter(2)
  %z = s32[] constant(0)
  ROOT %u = bf16[8,{positions},4,128]{{3,2,1,0:S(1)}} dynamic-update-slice(%cache, %new, %z, %p, %z, %z)""")
    large = shardscope.estimate_module(update(4096), "v5e")  # 8 x 4096 x 4 x 128 x 2 B = 32 MiB
    assert [(kind.kind, count) for kind, count in large.outside_band] == [("on-chip update", 1)]
    assert "1 dynamic-update-slice into an on-chip array of 16 MiB or more (S(1)), measured at" in large.line()
    assert shardscope.estimate_module(update(256), "v5e").outside_band == ()
