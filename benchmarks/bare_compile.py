"""JAX's own ``lower(*args).compile()`` of one program of a program file, alone.

``python benchmarks/bare_compile.py step_shardings [FILE]`` (FILE: ``benchmarks/transformer_step.py``
by default): starts JAX with 8 CPU devices (as ``shardscope check`` does), imports the program
file, traces, lowers and compiles the program on the example arguments its
``@shardscope.program`` names, and prints the number of characters of the compiled text (so the module
is made, as ``check`` makes it). The baseline of benchmark 4a (``benchmarks/check_cost.py``).
"""

import importlib.util
import sys
from pathlib import Path

import jax

jax.config.update("jax_num_cpu_devices", 8)

from shardscope.sources.programs import spec_of

PROGRAMS = Path(__file__).resolve().with_name("transformer_step.py")


def main(name: str, file: Path = PROGRAMS) -> None:
    """Compile ``name`` of the program file and print the size of its compiled text."""
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = spec_of(getattr(module, name))  # the program file imports shardscope: this adds no import
    compiled = getattr(module, name).lower(*args.args, **args.kwargs).compile()
    print(len(compiled.as_text()))


if __name__ == "__main__":
    main(sys.argv[1], *(Path(a) for a in sys.argv[2:3]))
