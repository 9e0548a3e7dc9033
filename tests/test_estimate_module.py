"""``shardscope.estimate_module``: a compiled module's text priced on a named chip.

Every expected number is written out here from the shapes in the module text and the chips'
published peaks (v5e: 197 TFLOP/s bf16, 394 TOPS int8, 819 GB/s; H100 SXM: 989 TFLOP/s bf16,
494 TF32, 1,979 FP8 and INT8, 67 FP32), or the rates measured on the v5e chip that
``shardscope/hardware/chips.py`` cites (vector 5.7e12 operations/s, scatter 2.8e10 updates/s,
0.85 of the bandwidth reached, 0.59 ms per call waited on, 0.13 ms back to back).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import shardscope
from shardscope.errors import TargetError

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
    big = shardscope.estimate_module(_matmul("bf16", 8192, 8192, 8192), "v5e")
    roofline = max(2 * 8192**3 / V5E_BF16, 3 * 8192 * 8192 * 2 / V5E_BANDWIDTH)
    assert big.seconds == pytest.approx(roofline + 5.9e-4, rel=1e-12)
    assert big.dispatched_seconds == pytest.approx(roofline + 3e-5, rel=1e-12)
    small = shardscope.estimate_module(_matmul("bf16", 128, 128, 128), "v5e")
    assert small.dispatched_seconds == 1.3e-4  # the host's dispatch, not the chip, sets the pace
    assert not small.lower_bound and small.unmodelled == ()
    assert small.line().startswith("step estimate ~590 us per call waited on, ~130 us back to back, on v5e")


def test_a_module_jax_compiled_here_is_estimated_from_its_text():
    m, k, n = 256, 128, 64
    text = jax.jit(jnp.matmul).lower(jnp.zeros((m, k), jnp.float32), jnp.zeros((k, n), jnp.float32)).compile().as_text()
    estimate = shardscope.estimate_module(text, "v6e")
    assert estimate.flops == 2 * m * k * n and estimate.chip == "v6e"
    assert "unchecked on v6e: published peaks" in estimate.line()


def test_a_chip_shardscope_does_not_know_or_a_text_without_a_module_is_one_clear_error():
    with pytest.raises(TargetError, match=r"no chip called 'v9': known chips are v4, v5e, v5p, v6e, a100"):
        shardscope.estimate_module(_matmul("bf16", 8, 8, 8), "v9")
    with pytest.raises(TargetError, match="no HLO module"):
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
