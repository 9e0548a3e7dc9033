"""Beyond one process, the parts every layer may name: clusters, interrupts, the compilation
cache (how a command's JAX starts and its worker processes are :mod:`shardscope.cli.launch`)."""
