"""The test run's XLA:CPU compiles make unoptimized machine code: ``--xla_backend_optimization_level=0``.

The suite compiles some thousands of small programs on the CPU, in its workers and in the commands
they start; LLVM's optimization of the machine code is about a quarter of their CPU time (two test
files that mostly compile: 36.5 CPU-s at XLA's default level 3 against 26.7 at 0; six files of
commands, app runs and target compiles: 195.9 against 155.7, side by side on this machine). What
shardscope reads is untouched: in XLA the level is read by the LLVM steps only
(``xla/backends/cpu/codegen/ir_compiler.cc``, ``GetCodeGenOptLevel``: the pass pipeline and the
instruction selection; ``cpu_compiler.cc`` hands the HLO passes the target machine's features,
which do not depend on it; XLA:GPU reads it in its LLVM back end only), after the optimized module,
its schedule and its buffers are fixed. ``tests/test_xla_flags.py`` checks that the compiled
module's text, memory and cost analyses are the same at both levels on the kinds of program the
suite compiles. What changes is how the machine code rounds: a gradient compared between two plans
may differ in its last bits from the default level's (the output capture, ``tests/_output_capture.py``,
is made at this level too). shardscope compiles at level 0 itself what it never runs
(``shardscope.engine.compilation.READ_ONLY``).

The variable is set before any JAX backend starts (XLA reads ``XLA_FLAGS`` once, when it first
compiles) and is inherited by the commands the tests start; a flag already in ``XLA_FLAGS`` (a
developer's dump, say) is kept."""

from __future__ import annotations

import os

FLAG = "--xla_backend_optimization_level=0"


def unoptimized_machine_code() -> None:
    """:data:`FLAG` added to ``XLA_FLAGS`` (once), unless it names a level already."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
