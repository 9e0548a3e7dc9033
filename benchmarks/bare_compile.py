"""JAX's own ``lower(*args).compile()`` of one program of ``benchmarks/transformer_step.py``, alone.

``python benchmarks/bare_compile.py step_shardings``: starts JAX with 8 CPU devices (as
``shardscope check`` does), imports the program file, traces, lowers and compiles the program on
its example arguments, and prints the number of characters of the compiled text (so the module
is made, as ``check`` makes it). The baseline of benchmark 4a (``benchmarks/check_cost.py``).
"""

import importlib.util
import sys
from pathlib import Path

import jax

jax.config.update("jax_num_cpu_devices", 8)

PROGRAMS = Path(__file__).resolve().with_name("transformer_step.py")


def main(name: str) -> None:
    """Compile ``name`` of the program file and print the size of its compiled text."""
    spec = importlib.util.spec_from_file_location("transformer_step", PROGRAMS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compiled = getattr(module, name).lower(module.params, module.batches).compile()
    print(len(compiled.as_text()))


if __name__ == "__main__":
    main(sys.argv[1])
