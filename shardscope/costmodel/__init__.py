"""The cost model: projection onto interconnects, their presets, a target's collective times,
savings, calibration, the chunk sweep (the machines' figures and models are :mod:`shardscope.hardware`)."""
