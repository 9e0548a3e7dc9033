"""The plans shardscope generates for a demo function: the registry, the per-device bodies,
the sizes that follow from the settings, and the mesh."""
