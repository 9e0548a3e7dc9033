"""The cost model: projection onto interconnects, their presets, calibration, the chunk sweep."""
