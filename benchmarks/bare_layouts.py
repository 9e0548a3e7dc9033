"""JAX's own route to a layouts sweep's compiles, no shardscope at all: the baseline of the sweep's cost.

``python -m benchmarks.bare_layouts FILE FUNCTION TOPOLOGY AXES... --option=NAME=VALUE [--dump=DIR]``: for each
candidate (given as ``data=1,fsdp=256,tensor=1``), the layouts function's ``build`` over a mesh of
the slice's own compile-only devices (libtpu's, laid out by ``jax.make_mesh``, Auto axes), then
``step.lower(*args).compile()``, as MaxText's ahead-of-time compile does; one JSON line per
candidate on stdout with its wall and CPU seconds (build, lower and compile) and its
``memory_analysis()``.

``--dump=DIR`` has XLA write each candidate's compiled module to ``DIR/<n>/`` (``xla_dump_to``):
its buffer assignment (``*buffer-assignment.txt``: the arguments' allocations and the one block of
temporaries, together about libtpu's ``peak_memory_in_bytes``: 14.08 GiB against 14.07 for
Llama-2 70B over fsdp=256, ``benchmarks/maxtext_v5e_layouts.py llama2_70b v5e:16x16
data=1,fsdp=256,tensor=1 --option=per_device_batch=2 --dump=DIR``), and ``*live-range.txt``, whose
"Live ranges at N (peak)" lists the buffers live at the peak of the top-level schedule by name
(``state/params/layers/w1``, the scan's ``dynamic_update_slice`` of the saved layer inputs).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
import time

# libtpu started as a compiler only, on a machine without TPU chips (as shardscope starts it)
for name, value in {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_WORKER_HOSTNAMES": "localhost",
                    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_MIN_LOG_LEVEL": "3"}.items():
    os.environ.setdefault(name, value)

from shardscope.targets.compilers import private_libtpu  # noqa: E402 - where `make` installs libtpu: a path, nothing else

if "TPU_LIBRARY_PATH" not in os.environ and private_libtpu() is not None:  # JAX's own way to a libtpu off its path
    os.environ["TPU_LIBRARY_PATH"] = str(private_libtpu())

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")  # the host's own backend: the slice's devices are compile-only

from jax.experimental import topologies  # noqa: E402
from jax.sharding import AxisType  # noqa: E402


def main(argv: list[str]) -> None:
    """Compile each candidate JAX's way and print its times."""
    path, function, topology, *rest = argv
    options = {}
    candidates = []
    dump = None
    for word in rest:
        if word.startswith("--dump="):
            dump = word.removeprefix("--dump=")
        elif word.startswith("--option="):
            name, _, value = word.removeprefix("--option=").partition("=")
            options[name] = ast.literal_eval(value)
        else:
            candidates.append({axis: int(size) for axis, size in (pair.split("=") for pair in word.split(","))})
    spec = importlib.util.spec_from_file_location("layouts_file", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.getcwd())
    spec.loader.exec_module(module)
    build = getattr(module, function)
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    for number, axes in enumerate(candidates):
        start, cpu = time.perf_counter(), time.process_time()
        mesh = jax.make_mesh(tuple(axes.values()), tuple(axes), devices=devices,
                             axis_types=(AxisType.Auto,) * len(axes))
        flags = {} if dump is None else {"xla_dump_to": os.path.join(dump, str(number))}
        memory = {}
        try:
            step, args = build(mesh, **options)
            stats = step.lower(*args).compile(compiler_options=flags).memory_analysis()
            memory = {name: getattr(stats, name) for name in dir(stats) if name.endswith("_in_bytes")}
            outcome = "compiled"
        except Exception as exc:  # a candidate JAX's route cannot compile either: timed all the same
            outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        print(json.dumps({"mesh": axes, "options": options, "outcome": outcome, "memory": memory,
                          "wall_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
