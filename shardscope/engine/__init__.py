"""The analysis engine: what a program's collectives cost and whether its loops need them.

One folder per level, each importing only the ones under it:

- ``jaxpr/``: the jaxpr view, what a program writes. ``model`` (the jaxpr as blocks and
  equations, with the user's source lines), ``valueflow`` and ``linearity`` (where single values
  go, and whether a value reaches a carry only linearly), ``dataflow`` (the networkx graph of
  collectives and loops), ``verdicts`` (deferrable, loop-invariant or needed), ``loop_names``,
  ``dead_code`` (collectives the compiler removes).
- ``hlo/``: the compiled view, what XLA runs. ``text`` (the parse of ``compiled.as_text()``,
  with ``syntax``, ``shapes``, ``source``), ``flow``, ``loops``, ``loop_facts`` (values through
  fusions, trip counts, what a loop changes), ``sites`` (every collective in each printed form,
  with the loops around it), ``replica_groups``, ``verdicts`` and ``fixes``, ``names`` and
  ``equation_names`` (the values each collective carries, named as the user names them),
  ``pairing`` and ``paired`` (the jaxpr collectives each compiled one comes from), ``plan`` (the
  values: ``CompiledPlan``, ``CompiledCollective``), ``compiled`` (building the plan:
  ``compiled_plan``, ``plan_of``), ``target_plan`` (what a target's compiler did with each
  collective of the CPU plan), ``added_terms`` (why a sum with another term added into its
  accumulator is needed).
- ``dispatch/``: a step that is not jitted and calls jitted functions, read as its sequence of
  dispatches. ``plan`` (``is_dispatch_sequence``, the one place that decides it, and the
  ``DispatchPlan``), ``calls`` (each call's module compiled alone, as JAX compiles it when
  called), ``sums`` (the results the step only adds up across its calls).
- at this level, the pieces the levels share, importing none of them: ``counts`` (runs per
  call), ``pytree_paths``, ``user_frames`` (which frame is the user's line), ``written_values``,
  ``traceable`` (any callable as a program JAX traces), ``compilation`` (every compile).
- ``joined/``, the levels joined, on top of them: ``inspection``, one program read both ways, the value
  ``check``, ``inspect`` and ``shardscope.testing`` return; ``remat_fixes``, a
  rematerialization's fix compiled and checked.

The what-if (a flagged finding's program rewritten as a user would fix it) sits over the
engine, in :mod:`shardscope.whatif`; an ``Inspection`` reaches it, and its renderings, through
the functions those layers register (``extensions.EXTENSIONS``).
"""
