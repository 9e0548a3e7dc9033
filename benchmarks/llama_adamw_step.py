"""The Llama-3-8B-shaped FSDP x TP step with AdamW over 256 CPU devices (1,024 with
``SHARDSCOPE_SCALE_CHIPS=1024``): a program file.

``shardscope check benchmarks/llama_adamw_step.py --devices 256 --target tpu:v5p:8x8x4`` traces it
over the CPU devices and compiles it for the slice (the model: ``benchmarks/llama_adamw_model.py``).
Benchmark 7b (``benchmarks/check_at_scale.py``) times that against JAX's own route,
``python -m benchmarks.bare_llama_target llama_adamw``.
"""

import jax
import numpy as np
from jax.sharding import Mesh

import shardscope
from benchmarks.llama_adamw_model import DEVICES, MESH, build

mesh = Mesh(np.array(jax.devices()[:DEVICES]).reshape(tuple(MESH.values())), tuple(MESH))
_built = build(mesh)
train_step = shardscope.program(args=_built[1])(_built[0])  # the one name: each name of a marked function is checked
