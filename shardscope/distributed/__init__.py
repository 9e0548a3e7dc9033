"""Beyond one process: how JAX starts, local worker processes, clusters, interrupts."""
