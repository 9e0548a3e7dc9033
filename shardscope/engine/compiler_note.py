"""What compilers do with collectives in loops, said beside every compiled plan.

The CPU compiler keeps every all-reduce where the program put it, so the CPU's compiled plan
(:mod:`shardscope.engine.hlo.compiled`) is what runs; XLA's GPU and TPU pipelines may move a
simple accumulation's all-reduce out of its loop, so the backend is always named.
"""

from __future__ import annotations

LOOP_MOTION_REFERENCES = "openxla/xla issue 6750, PR 28184"
"""Where XLA's pass that moves an all-reduce out of a while loop is discussed."""


def compiler_note(backend: str, loop_collectives: dict[str, tuple[int, int]],
                  compiled_collectives: dict[str, int] | None = None) -> str:
    """What this backend's compiler does with collectives in loops, and what others would do.

    ``loop_collectives`` maps a plan to ``(collective equations in loops in the jaxpr,
    collective instructions in while bodies in the compiled HLO)``. On the CPU nothing moves; on
    a GPU or TPU the note says, per plan, whether the compiled HLO kept the loop's collectives.
    ``compiled_collectives`` (a plan's collective instructions anywhere) tells a module with none
    at all (a mesh of one device: nothing to sum over) from one whose loop lost them.
    """
    motion = (
        "XLA's GPU and TPU pipelines run a pass (WhileLoopAllReduceCodeMotion) that can move an "
        f"all-reduce out of a while loop, for simple accumulation patterns only ({LOOP_MOTION_REFERENCES})"
    )
    if backend == "cpu":
        return (f"The CPU compiler never moves an all-reduce out of a loop: this HLO is what runs. {motion}; "
                "on an accelerator an all-reduce that sits in a loop here may leave it, so check there.")
    verdicts = []
    for plan, (in_jaxpr_loops, in_hlo_loops) in loop_collectives.items():
        if not in_jaxpr_loops:
            continue
        if in_hlo_loops >= in_jaxpr_loops:
            verdicts.append(f"{plan}: its all-reduce stayed in the loop")
        elif in_hlo_loops == 0 and (compiled_collectives or {}).get(plan) == 0:
            verdicts.append(f"{plan}: no collective compiled at all (one device: nothing to sum over)")
        elif in_hlo_loops == 0:
            verdicts.append(f"{plan}: the compiler moved its loop collectives out of the loop")
        else:
            verdicts.append(f"{plan}: {in_hlo_loops} of {in_jaxpr_loops} loop collectives stayed in the loop")
    said = "; ".join(verdicts) if verdicts else "no plan has collectives in loops"
    return f"{motion}. In this {backend} module: {said}."
