"""The pipeline: trace, compile, time and check a list of programs into one ``Analysis``.

The machines it compiles for (``--target tpu:v5e:16x16``, ``gpu:h100:8``) are
:mod:`shardscope.targets`'.
"""
