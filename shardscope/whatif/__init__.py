"""The what-if: each flagged finding's program rewritten as a user would fix it, checked before
it counts as a saving. Above the engine, whose jaxpr and compiled views it reads.

- ``what_if``: the API (``what_if``, ``what_if_of``, ``rewrites_of``, ``Rewrite``, ``verify``),
  on a ``subject.Subject`` (the program traced, compiled, planned, with run arguments);
- ``groups``: which findings one rewrite fixes together, and the refused sums;
- ``build``: which rewrite, on which jaxpr, in which style;
- ``retrace``: a traced program run again with edits (the engine of every rewrite);
- ``deferral``, ``type_reach``: a sum moved after its loop, and where its unsummed value goes;
- ``explicit_axes``: the sums the partitioner writes, read from Explicit-axes types, and an
  Auto program traced again with Explicit axes;
- ``shard_map_route``: a jit program's step run per device inside ``jax.shard_map`` when its
  Explicit-axes rewrite fails, read by ``per_device`` (which dimensions are split, where the
  devices sum) with ``split_rules`` (one rule per primitive); ``shard_map_snippet`` writes it;
- ``hoisting``: a loop-invariant collective moved before its loop;
- ``rewritten``, ``checks``: the rewritten program beside the original, and the checks (runs
  per call, outputs) a rewrite passes before it is reported;
- ``patch``: the change as a unified diff of the user's file, or a snippet.
"""
