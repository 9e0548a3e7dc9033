"""Collectives in the compiled HLO module, and whether they sit inside a while loop's body.

This is what the compiler will really run. On CPU the all-reduce of the naive plan stays in
the while body; GPU and TPU compilers may move collectives, so the backend is always named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HLO_COLLECTIVE_OPCODES = frozenset(
    {
        "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
        "all-to-all", "ragged-all-to-all", "collective-permute", "collective-permute-start",
        "collective-broadcast",
    }
)

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s([a-z][a-z0-9\-]*)\((.*)$")
_CALLED = re.compile(r"\b(body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


@dataclass(frozen=True)
class HloCollective:
    """One collective instruction of the compiled module."""

    name: str
    opcode: str
    shape: str
    computation: str
    while_trip_counts: tuple[int | None, ...]

    @property
    def in_loop(self) -> bool:
        """True when the instruction is reached through a while loop's body."""
        return bool(self.while_trip_counts)


@dataclass(frozen=True)
class HloSummary:
    """The collectives of one compiled module, with the backend that compiled it."""

    backend: str
    collectives: tuple[HloCollective, ...]

    @property
    def count(self) -> int:
        """How many collective instructions the module has."""
        return len(self.collectives)

    @property
    def in_loops(self) -> int:
        """How many of them sit inside a while body."""
        return sum(c.in_loop for c in self.collectives)


def summarize(hlo_text: str, backend: str) -> HloSummary:
    """Parse ``compiled.as_text()`` into an :class:`HloSummary`."""
    computations, entry = _parse(hlo_text)
    found: list[HloCollective] = []
    seen: set[str] = set()

    def visit(name: str, trips: tuple[int | None, ...]) -> None:
        if name in seen or name not in computations:
            return
        seen.add(name)
        for inst_name, shape, opcode, rest in computations[name]:
            if opcode in HLO_COLLECTIVE_OPCODES:
                found.append(HloCollective(inst_name, opcode, shape, name, trips))
            trip = _trip_count(rest) if opcode == "while" else None
            for role, callee in _callees(rest):
                # a while's condition runs on every iteration too: it is inside the loop
                in_loop = opcode == "while" and role in ("body", "condition")
                visit(callee, trips + (trip,) if in_loop else trips)

    if entry is not None:
        visit(entry, ())
    return HloSummary(backend=backend, collectives=tuple(found))


def _parse(text: str) -> tuple[dict[str, list[tuple[str, str, str, str]]], str | None]:
    computations: dict[str, list[tuple[str, str, str, str]]] = {}
    entry, current = None, None
    for line in text.splitlines():
        if current is None:
            match = _COMPUTATION.match(line)
            if match and not line.startswith(" "):
                current = match.group(2)
                computations[current] = []
                if match.group(1):
                    entry = current
            continue
        if line.startswith("}"):
            current = None
            continue
        match = _INSTRUCTION.match(line)
        if match:
            computations[current].append(match.groups())
    return computations, entry


def _callees(rest: str) -> list[tuple[str, str]]:
    called = [(role, name) for role, name in _CALLED.findall(rest)]
    for group in _BRANCHES.findall(rest):
        called += [("branch", name.strip().lstrip("%")) for name in group.split(",") if name.strip()]
    return called


def _trip_count(rest: str) -> int | None:
    match = _TRIP.search(rest)
    return int(match.group(1)) if match else None



LOOP_MOTION_REFERENCES = "openxla/xla issue 6750, PR 28184"
"""Where XLA's pass that moves an all-reduce out of a while loop is discussed."""


def compiler_note(backend: str, loop_collectives: dict[str, tuple[int, int]]) -> str:
    """What this backend's compiler does with collectives in loops, and what others would do.

    ``loop_collectives`` maps a plan to ``(collective equations in loops in the jaxpr,
    collective instructions in while bodies in the compiled HLO)``. On the CPU nothing moves; on
    a GPU or TPU the note says, per plan, whether the compiled HLO kept the loop's collectives.
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
        elif in_hlo_loops == 0:
            verdicts.append(f"{plan}: the compiler moved its loop collectives out of the loop")
        else:
            verdicts.append(f"{plan}: {in_hlo_loops} of {in_jaxpr_loops} loop collectives stayed in the loop")
    said = "; ".join(verdicts) if verdicts else "no plan has collectives in loops"
    return f"{motion}. In this {backend} module: {said}."
