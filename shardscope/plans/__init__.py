"""The plans shardscope generates for a demo function: the registry and the per-device bodies
(the settings, mesh and sizes a run is made of are :mod:`shardscope.config`)."""
