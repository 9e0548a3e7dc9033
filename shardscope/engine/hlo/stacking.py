"""The ``stackable`` verdict in words: a collective whose result each iteration writes into its
own slot of a stacked buffer.

XLA's ``WhileLoopAllReduceCodeMotion`` moves such an all-reduce out of the loop: each device
writes its own value into the slot, and one all-reduce of the whole stacked buffer after the
loop gives every slot what the all-reduce in the loop gave it (the combiner combines each slot's
values only). The bytes are the same (N slots in one run instead of one slot in each of N runs),
so what it saves is the runs' latency, which is what a small value (a per-step loss) costs;
what it loses is each run's overlap with the next iteration's work, which is what hides a large
one (a layer's gradient in a backward scan over layers).
"""

from __future__ import annotations

from shardscope.engine.jaxpr.verdicts import STACKABLE, Verdict

LATENCY_BOUND_BYTES = 64 * 1024
"""Below this a run costs its latency more than its bytes on every interconnect shardscope
models (microseconds of setup against tens of GB/s): batching such runs is the saving."""


def stackable_verdict(kind: str, loops: str, slots_bytes: int, run_bytes: int, runs_before: str, runs_after: str,
                      left: tuple[str, ...], executions_after: int | None) -> Verdict:
    """The verdict of a collective stacked slot by slot in ``loops`` (the loops' words):
    ``slots_bytes`` the stacked buffer's bytes per device, ``run_bytes`` one run's."""
    small = run_bytes < LATENCY_BOUND_BYTES
    trade = ("its runs are small, so their latency is most of their cost: batching them is the saving"
             if small else "its runs are large enough to cost their bytes more than their latency, and each "
             "overlaps the next iteration's work: batching them may cost more than it saves")
    reason = (f"Each iteration writes its {kind} result into its own slot of a stacked buffer (dynamic-update-slice): "
              f"one {kind} of the whole {slots_bytes:,} B buffer after {loops} gives every slot the same result, the "
              f"same bytes in {runs_after} run{'' if runs_after == '1' else 's'}/call instead of {runs_before}. A "
              f"trade-off, not waste: {trade}.")
    fix = (f"write each iteration's unreduced {run_bytes:,} B value into the stacked buffer and run the {kind} once on "
           f"the {slots_bytes:,} B buffer after the loop ({runs_after} runs/call instead of {runs_before})"
           + ("." if small else ", if the loop's other work does not hide its runs today."))
    return Verdict(STACKABLE, reason, fix, left, executions_after)
