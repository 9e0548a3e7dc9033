"""The pure cost models, with the engine: a plan's collectives projected onto an interconnect with
the ring model (``projection``) and the interconnects' presets (``interconnects``), ``check
--min-saving``'s threshold (``savings``), a module file's step estimate (``estimate``, ``corpus``),
quantities with units (``quantities``). They run nothing; the runners that do (the sweep,
calibration, a what-if timed) are the pipeline's (the machines' figures and models are
:mod:`shardscope.hardware`)."""
