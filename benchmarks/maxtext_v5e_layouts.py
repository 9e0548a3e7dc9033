"""MaxText's tuned v5e-256 models as ``@shardscope.layouts`` functions: what ``shardscope layouts
benchmarks/maxtext_v5e_layouts.py -f llama2_7b --target tpu:v5e:16x16`` ranks.

Each function builds its model's train step (``benchmarks/decoder_step.py``: MaxText's published
dimensions, float32 weights computed in bfloat16, scanned layers under full rematerialization,
AdamW) over any mesh of ``data``, ``fsdp`` and ``tensor``, at MaxText's per-device batch
(``benchmarks/maxtext_v5e_model_configs.py`` in AI-Hypercomputer/maxtext) and its neighbours.
``PUBLISHED`` is the table itself: each model's layout and per-device batch on v5e-256.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import shardscope
from benchmarks.decoder_step import MODELS, TINY, TINY_GPT, Decoder, build

PUBLISHED = {
    "llama2_7b": ({"fsdp": 256}, 4),
    "llama2_13b": ({"fsdp": 256}, 6),
    "llama2_70b": ({"fsdp": 256}, 2),
    "default_16b": ({"fsdp": 256}, 6),
    "default_32b": ({"fsdp": 256}, 4),
    "default_64b": ({"fsdp": 256}, 2),
    "default_128b": ({"fsdp": 16, "tensor": 16}, 1),
    "gpt3_175b": ({"fsdp": 16, "tensor": 16}, 0.5),
}
"""MaxText's v5e-256 layouts (``ici_fsdp_parallelism: -1`` is every chip left after the others)
and per-device batches, by function name. Llama-2 13B's batch is 6 in ``maxtext_v5e_model_configs.py``
and 8 in ``configs/tpu/v5e/llama2_13b.sh``."""


def _layouts(model: Decoder, batches: Sequence[float]) -> Callable:
    """A layouts function of ``model`` over the per-device ``batches``."""

    @shardscope.layouts(axes=("data", "fsdp", "tensor"), options={"per_device_batch": list(batches)},
                        tokens=lambda mesh, per_device_batch: per_device_batch * mesh.size * model.tokens,
                        model_flops=model.flops_per_token())
    def layouts(mesh, per_device_batch):  # noqa: ANN001, ANN202 - the decorator's contract
        return build(mesh, model, per_device_batch)

    layouts.__doc__ = f"{model.name}: {model.parameters / 1e9:.1f}B parameters, {model.layers} layers of {model.width}"
    return layouts


llama2_7b = _layouts(MODELS["llama2-7b"], [1, 2, 4, 8])
llama2_13b = _layouts(MODELS["llama2-13b"], [2, 4, 6, 8])
llama2_70b = _layouts(MODELS["llama2-70b"], [1, 2, 4])
default_16b = _layouts(MODELS["default-16b"], [2, 4, 6])
default_32b = _layouts(MODELS["default-32b"], [2, 4])
default_64b = _layouts(MODELS["default-64b"], [1, 2])
default_128b = _layouts(replace(MODELS["default-128b"], fused_qkv=True, fused_mlp=True), [0.5, 1, 2])
"""The 128B model as its v5e-256 configuration runs it: ``fused_qkv`` and ``fused_mlp`` (one matmul for
the query, key and value projections, one for the MLP's two input projections)."""
gpt3_175b = _layouts(MODELS["gpt3-175b"], [0.5, 1])
tiny = _layouts(TINY, [1, 2])
tiny_gpt = _layouts(TINY_GPT, [0.5, 1])
"""The same programs at toy sizes (``--smoke``, tests)."""
