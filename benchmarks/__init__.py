"""shardscope's benchmarks: ``make bench`` (full) and ``make bench-quick``.

Each benchmark is a module run in its own Python process (``python -m benchmarks.<name>``), so
the CPU device count can be set before JAX starts. Each writes one JSON file under
``benchmarks/results/``; :mod:`benchmarks.run` runs them all and regenerates ``BENCHMARKS.md``.
"""
