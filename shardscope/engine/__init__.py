"""The analysis engine: what a program's collectives cost and whether its loops need them.

The jaxpr view (what a program writes) and the compiled view (what XLA runs) live side by side
here, so that ``check``, ``inspect``, ``shardscope.testing``, the report and the app read one
engine. The compiled view, by concept:

- ``hlo_text`` (with ``hlo_syntax``, ``hlo_shapes``, ``hlo_source``): the parse of
  ``compiled.as_text()``;
- ``hlo_flow``, ``hlo_loops``, ``loop_facts``: values through fusions and calls, loop trip
  counts (written or derived), what a loop changes and what every device shares;
- ``collective_sites``: every collective in each printed form, with the loops around it;
- ``replica_groups``: device groups as mesh axes;
- ``compiled_verdicts``, ``compiled_fixes``: deferrable, loop-invariant or needed, and the fix;
- ``jaxpr_pairing``, ``dead_code``, ``compiled_names``, ``equation_names``: the jaxpr
  collectives each compiled one comes from, the ones that never run, and the values named as
  the jaxpr view names them;
- ``compiled``: the plan (``compiled_plan``, ``plan_of``, ``CompiledPlan``);
- ``target_plan``: what a TPU target's compiler did with each collective of the CPU plan.
"""
