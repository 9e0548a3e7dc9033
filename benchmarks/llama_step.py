"""The Llama-3-8B-shaped FSDP x TP train step over 256 CPU devices (a program file).

``shardscope check benchmarks/llama_step.py --devices 256 --target tpu:v5p:8x8x4`` traces it over
the CPU devices and compiles it for the slice (the model: ``benchmarks/llama_model.py``).
Benchmark 4c (``benchmarks/check_cost.py``) times that against JAX's own route,
``benchmarks/bare_llama_target.py``.
"""

import jax
import numpy as np
from jax.sharding import Mesh

import shardscope
from benchmarks.llama_model import DEVICES, FSDP, TP, build

mesh = Mesh(np.array(jax.devices()[:DEVICES]).reshape(FSDP, TP), ("fsdp", "tp"))
_built = build(mesh)
train_step = shardscope.program(args=_built[1])(_built[0])  # the one name: each name of a marked function is checked
