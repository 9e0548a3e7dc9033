"""The analysis engine: what a program's collectives cost and whether its loops need them.

The jaxpr view (what a program writes) and the compiled view (what XLA runs: ``hlo_text`` parses
``compiled.as_text()``, ``replica_groups`` maps device groups onto mesh axes, ``compiled`` lists
every collective of the partitioned module with its loops, runs per call, bytes, axes, author,
source line and verdict) live side by side here, so that ``check``, ``inspect``,
``shardscope.testing``, the report and the app read one engine.
"""
