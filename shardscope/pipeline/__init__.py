"""The pipeline: trace, compile, time and check a list of programs into one ``Analysis``, and the
runners that execute programs beside it: every chunk size tried (``sweep``), a verified rewrite
timed (``what_if``), the alpha-beta fit to this machine (``calibrate``, ``cpu_peaks``), a step's
layouts compiled and ranked (``layout_compile``, ``layout_ranking``).

The machines it compiles for (``--target tpu:v5e:16x16``, ``gpu:h100:8``) are
:mod:`shardscope.targets`'.
"""
