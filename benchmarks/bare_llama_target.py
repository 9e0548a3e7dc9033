"""JAX's own route to the Llama-3-8B-shaped step's compile for a TPU slice: no shardscope at all.

``python benchmarks/bare_llama_target.py``: the step of ``benchmarks/llama_model.py`` built over
the compile-only devices libtpu describes for the slice (``jax.experimental.topologies``), laid
out by ``jax.make_mesh`` (Auto axes, as the CPU program's ``Mesh``), then ``lower(*args).compile()`` as MaxText's ahead-of-time compile does,
and the size of the compiled text printed (the module is made, as ``check`` makes it). The
baseline of benchmark 4c (``benchmarks/check_cost.py``).
"""

import os

# libtpu started as a compiler only, on a machine without TPU chips (as shardscope starts it)
for name, value in {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_WORKER_HOSTNAMES": "localhost",
                    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_LOG_DIR": "disabled"}.items():
    os.environ.setdefault(name, value)

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")  # the host's own backend: the slice's devices are compile-only

from jax.experimental import topologies  # noqa: E402
from jax.sharding import AxisType  # noqa: E402

from benchmarks.llama_model import FSDP, TOPOLOGY, TP, build  # noqa: E402


def main() -> None:
    """Compile the step for the slice and print the size of its compiled text."""
    devices = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGY).devices
    mesh = jax.make_mesh((FSDP, TP), ("fsdp", "tp"), devices=devices, axis_types=(AxisType.Auto,) * 2)
    step, args = build(mesh)
    compiled = step.lower(*args).compile()
    print(len(compiled.as_text()))


if __name__ == "__main__":
    main()
