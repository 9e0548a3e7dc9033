"""The machines shardscope compiles for, one module per compiler behind one interface.

- :mod:`~shardscope.targets.base`: :class:`~shardscope.targets.base.Target`, what every target
  knows about its machine (its devices, how a mesh is laid over them, the platform JAX lowers
  for, the compiler's name), and :class:`~shardscope.targets.base.TargetDevices`.
- :mod:`~shardscope.targets.cpu`, :mod:`~shardscope.targets.tpu` (libtpu's compile-only
  devices), :mod:`~shardscope.targets.gpu` (JAX's CUDA plugin's): the implementations.
- :mod:`~shardscope.hardware.tpu_generations`, :mod:`~shardscope.hardware.gpu_nodes`: the record of
  each machine a target is made of (its chip and its interconnect's one cost model), which the
  target owns (``Target.machine``): a new TPU generation is one record there.
- :mod:`~shardscope.targets.registry`: ``--target`` text read as a target, and its devices loaded.
- :mod:`~shardscope.targets.compile`: the one place that lowers and compiles a traced program
  for any target.
- :mod:`~shardscope.targets.plans`: each program's compiled plan on each target.
- :mod:`~shardscope.targets.host`: how JAX starts in this process (its platforms and the CPU
  device count), which every command sets before it imports the user's file.

A new backend is one more ``Target`` subclass in a module here and one more prefix in
:data:`shardscope.targets.registry._PARSERS`.
"""
