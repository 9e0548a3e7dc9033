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

The what-if (each flagged finding rewritten as a user would fix it, checked before it is a
saving), by concept:

- ``what_if``: the API (``what_if``, ``rewrites_of``, ``Rewrite``, ``verify``), on a
  ``rewrite_subject.Subject`` (the program traced, compiled, planned, with run arguments);
- ``rewrite_groups``: which findings one rewrite fixes together, and the refused sums;
- ``rewrite_build``: which rewrite, on which jaxpr, in which style;
- ``retrace``: a traced program run again with edits (the engine of every rewrite);
- ``deferral``, ``type_reach``: a sum moved after its loop, and where its unsummed value goes;
- ``explicit_axes``: the sums the partitioner writes, read from Explicit-axes types, and an
  Auto program traced again with Explicit axes;
- ``hoisting``: a loop-invariant collective moved before its loop;
- ``rewritten``, ``rewrite_checks``: the rewritten program beside the original, and the checks
  (runs per call, outputs) a rewrite passes before it is reported;
- ``patch``: the change as a unified diff of the user's file, or a snippet.
"""
