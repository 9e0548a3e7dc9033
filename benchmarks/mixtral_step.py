"""The Mixtral-shaped MoE train step over 256 CPU devices (a program file): benchmark 7b's held-out program.

``shardscope check benchmarks/mixtral_step.py --devices 256 --target tpu:v5p:8x8x4`` traces it over
the CPU devices and compiles it for the slice (the model: ``benchmarks/mixtral_model.py``).
Benchmark 7b (``benchmarks/check_at_scale.py``) times that against JAX's own route,
``python -m benchmarks.bare_llama_target mixtral``.
"""

import jax
import numpy as np
from jax.sharding import Mesh

import shardscope
from benchmarks.mixtral_model import DEVICES, MESH, build

mesh = Mesh(np.array(jax.devices()[:DEVICES]).reshape(tuple(MESH.values())), tuple(MESH))
_built = build(mesh)
train_step = shardscope.program(args=_built[1])(_built[0])  # the one name: each name of a marked function is checked
