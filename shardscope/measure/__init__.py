"""Measurement: compile and run times, speedups with their spread, output cross-checks."""
