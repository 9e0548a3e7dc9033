"""GPT-3 175B as a ``@shardscope.layouts`` function over data, FSDP, tensor and pipeline
parallelism: what ``shardscope layouts benchmarks/gpu_gpt3_layouts.py -f gpt3_175b --target
gpu:h100:8x8`` ranks on H100 hosts (``benchmarks/pipelined_step.py``: MaxText's GPT-3 dimensions,
the layers in pipeline stages).

``NVIDIA`` is what NVIDIA published for this model on H100: its MLPerf Training v3.1 submission
(``NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_*`` in mlcommons/training_results_v3.1)
runs GPT-3 175B with tensor parallelism 4 and pipeline parallelism 8 (micro-batch 1; data
parallelism over the rest) on 96 to 1,344 DGX H100 hosts: a model-parallel group of 32 GPUs.
"""

from __future__ import annotations

from typing import Callable, Sequence

import shardscope
from benchmarks.decoder_step import MODELS, TINY_GPT, Decoder
from benchmarks.pipelined_step import build

NVIDIA = {"tensor": 4, "pipeline": 8}
"""NVIDIA's GPT-3 175B layout on H100 (MLPerf Training v3.1), data parallelism over the rest."""


def _layouts(model: Decoder, batches: Sequence[float], microbatches: Sequence[int]) -> Callable:
    """A layouts function of ``model`` over the per-device ``batches`` and ``microbatches``."""

    @shardscope.layouts(axes=("data", "fsdp", "tensor", "pipeline"),
                        options={"per_device_batch": list(batches), "microbatches": list(microbatches)},
                        tokens=lambda mesh, per_device_batch, microbatches: per_device_batch * mesh.size * model.tokens,
                        model_flops=model.flops_per_token())
    def layouts(mesh, per_device_batch, microbatches):  # noqa: ANN001, ANN202 - the decorator's contract
        return build(mesh, model, per_device_batch, microbatches)

    layouts.__doc__ = f"{model.name} in pipeline stages: {model.parameters / 1e9:.1f}B parameters"
    return layouts


gpt3_175b = _layouts(MODELS["gpt3-175b"], [1, 2], [8, 16])
tiny_gpt = _layouts(TINY_GPT, [1, 2], [2, 4])
"""The same program at toy sizes (tests, ``--smoke``)."""
