"""The small Mixtral-like MoE step (benchmark 7b's held-out program) over 256 CPU devices (1,024 with
``SHARDSCOPE_SCALE_CHIPS=1024``): a program file.

``shardscope check benchmarks/moe_step.py --devices 256 --target tpu:v5p:8x8x4`` traces it
over the CPU devices and compiles it for the slice (the model: ``benchmarks/moe_model.py``).
Benchmark 7b (``benchmarks/check_at_scale.py``) times that against JAX's own route,
``python -m benchmarks.bare_llama_target moe``.
"""

import jax
import numpy as np
from jax.sharding import Mesh

import shardscope
from benchmarks.moe_model import DEVICES, MESH, build

mesh = Mesh(np.array(jax.devices()[:DEVICES]).reshape(tuple(MESH.values())), tuple(MESH))
_built = build(mesh)
train_step = shardscope.program(args=_built[1])(_built[0])  # the one name: each name of a marked function is checked
