"""JAX's own route to a benchmark step's compile for a TPU slice: no shardscope at all.

``python -m benchmarks.bare_llama_target [llama|mixtral]``: the step of ``benchmarks/llama_model.py``
(default) or ``benchmarks/mixtral_model.py`` built over the compile-only devices libtpu describes
for the slice (``jax.experimental.topologies``), laid out by ``jax.make_mesh`` (Auto axes, as the
CPU program's ``Mesh``), then ``lower(*args).compile()`` as MaxText's ahead-of-time compile does,
and the size of the compiled text printed (the module is made, as ``check`` makes it). The
baseline of benchmark 7b (``benchmarks/check_at_scale.py``).
"""

import importlib
import os
import sys

# libtpu started as a compiler only, on a machine without TPU chips (as shardscope starts it)
for name, value in {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_WORKER_HOSTNAMES": "localhost",
                    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_MIN_LOG_LEVEL": "3"}.items():
    os.environ.setdefault(name, value)

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")  # the host's own backend: the slice's devices are compile-only

from jax.experimental import topologies  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh  # noqa: E402

MODELS = {"llama": "benchmarks.llama_model", "mixtral": "benchmarks.mixtral_model",
          "llama_adamw": "benchmarks.llama_adamw_model", "moe": "benchmarks.moe_model"}


def main(model: str = "llama") -> None:
    """Compile ``model``'s step for its slice and print the size of its compiled text."""
    module = importlib.import_module(MODELS[model])
    axes = {"fsdp": module.FSDP, "tp": module.TP} if model == "llama" else module.MESH
    devices = topologies.get_topology_desc(platform="tpu", topology_name=module.TOPOLOGY).devices
    try:
        mesh = jax.make_mesh(tuple(axes.values()), tuple(axes), devices=devices, axis_types=(AxisType.Auto,) * len(axes))
    except NotImplementedError:  # no ICI layout of these axes (fsdp 256 x tp 4 on v5p:8x8x16): the slice's own
        # order, as shardscope's targets.base.device_grid falls back to, so that both compile the same program
        mesh = Mesh(np.array(devices, dtype=object).reshape(tuple(axes.values())), tuple(axes),
                    axis_types=(AxisType.Auto,) * len(axes))
    step, args = module.build(mesh)
    compiled = step.lower(*args).compile()
    print(len(compiled.as_text()))


if __name__ == "__main__":
    main(*sys.argv[1:2])
