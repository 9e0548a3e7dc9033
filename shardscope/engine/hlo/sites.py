"""Where each collective of a compiled module runs: the loops and conditionals around it.

A collective instruction stands in the computation it runs in in one of these forms:

- plain: ``all-reduce(...)``;
- an async pair: ``all-reduce-start`` and its ``all-reduce-done`` (one collective: the start);
- wrapped: ``async-start(...), calls=%c`` (with ``async-update``/``async-done`` after it), or a
  fusion that calls a computation holding the collective (the GPU's dynamic-slice fusions, the
  TPU's ``all-reduce-scatter`` fusion: an all-reduce whose result the fusion slices to the
  device's shard);
- the TPU's async collective fusion: one collective printed several times, in a start fusion,
  the fusions that step it beside other work and a done fusion, all with the same
  ``channel_id`` (``async_collective_fusion_config`` in each): one collective, issued by the
  start and finished by the done fusion. The steps may run in a loop nested in the start's: in
  the 256-chip compile of a Llama-shaped 128B step over fsdp=16 x tensor=16, the all-gather of
  a layer's activations over tensor (bf16[16,2048,512] into bf16[16,2048,8192], ``channel_id=142``)
  starts and finishes in the layer scan's body and is stepped by two fusions of the attention's
  own 4-trip loop, 8 steps for a ring of 16 both ways round (:data:`STEPPED`); it is still one
  collective, run once per layer (:attr:`CollectiveSite.steps`).

A :class:`CollectiveSite` names the instruction, the one that stands for it where it runs
(``anchor``: its operands are the values it reads there) and the one whose value is its
result there (``result``), with the while loops around it (outermost first) and whether a
conditional's branch holds it. The call graph is walked upwards from each collective, so the
tens of thousands of fused computations of a large module are never visited.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from shardscope.engine.hlo.flow import Flow
from shardscope.engine.hlo.memo import cached_method
from shardscope.engine.hlo.text import HloModule, Instruction
from shardscope.collective_kinds import NAMES

COLLECTIVE_KINDS = NAMES
"""The collective instructions of HLO, by the name the plan lists them under (:mod:`~shardscope.collective_kinds`)."""

COLLECTIVE_OPCODES = frozenset(COLLECTIVE_KINDS) | frozenset(f"{k}-start" for k in COLLECTIVE_KINDS)
_BRANCH_ROLES = frozenset({"branch", "true_computation", "false_computation"})
_PASSING_ROLES = {"call": ("to_apply", "calls"), "fusion": ("calls",), "async-start": ("calls",)}
_ASYNC_FUSION = "async_collective_fusion_config"


@dataclass(frozen=True)
class Context:
    """One way a computation is reached from the entry: the loops around it, the ones among
    them whose condition (not body) holds it, and whether a conditional branch is on the way."""

    loops: tuple[Instruction, ...] = ()
    in_conditional: bool = False
    conditions: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CollectiveSite:
    """One collective the module runs and where."""

    instruction: Instruction
    anchor: Instruction
    result: Instruction
    loops: tuple[Instruction, ...]
    in_conditional: bool
    paths: int = 1
    conditions: frozenset[str] = frozenset()
    parts: tuple[str, ...] = ()
    part_results: tuple[str, ...] = ()
    steps: tuple[Instruction, ...] = ()
    """A TPU async collective fusion's other copies: the fusions that step it (beside their own
    compute) and the one that finishes it, wherever they run (a loop nested in its own)."""

    @property
    def carried(self) -> tuple[str, ...]:
        """The values it carries: its operands, or the GPU combiner's parts of a flat one."""
        return self.parts or self.instruction.operands

    @property
    def kind(self) -> str:
        """``all-reduce``, ``all-gather``, ...: the opcode without ``-start``."""
        return self.instruction.opcode.removesuffix("-start")

    @property
    def wrapped(self) -> bool:
        """True when another instruction (an async-start, a fusion) stands for it."""
        return self.anchor is not self.instruction


class SiteFinder:
    """Finds every collective's site in one module (contexts of computations cached)."""

    def __init__(self, module: HloModule, flow: Flow | None = None) -> None:
        self.module = module
        self.flow = flow or Flow(module)

    @cached_method
    def sites(self) -> list[CollectiveSite]:
        """Every collective the entry reaches, in print order, each once (found once per module)."""
        found: list[CollectiveSite] = []
        seen: dict[tuple[str, str, int], int] = {}
        for inst in self.module.instructions():
            if inst.opcode not in COLLECTIVE_OPCODES:
                continue
            anchor = self._anchor(inst)
            contexts = self.contexts(anchor.computation)
            if not contexts:
                continue  # a computation the entry never calls
            key = self._async_fusion_key(inst, anchor)
            if key is not None and key in seen:  # the same collective's overlap or done fusion
                first = found[seen[key]]
                found[seen[key]] = dataclasses.replace(first, result=anchor, steps=first.steps + (anchor,))
                continue
            if key is not None:
                seen[key] = len(found)
            context = contexts[0]
            result = self._result(inst, anchor)
            parts, part_results = self._flat_parts(inst, result)
            found.append(CollectiveSite(inst, anchor, result, context.loops, context.in_conditional, len(contexts),
                                        context.conditions, parts, part_results))
        return _stepped_in_nested_loops(found)

    @cached_method
    def contexts(self, computation: str, depth: int = 0) -> tuple[Context, ...]:
        """Every way the entry reaches ``computation`` (empty when it does not)."""
        if computation == self.module.entry_name:
            return (Context(),)
        if depth > 64:
            return ()
        found: list[Context] = []
        for caller, role in self.module.callers.get(computation, ()):
            for outer in self.contexts(caller.computation, depth + 1):
                inner = _inner(caller, role, outer)
                if inner is not None:
                    found.append(inner)
        return tuple(found)

    def _anchor(self, inst: Instruction) -> Instruction:
        """The outermost async-start or fusion whose computation holds ``inst`` (``inst`` itself
        when none does)."""
        anchor = inst
        for _ in range(16):
            caller = self.flow.inlined_by.get(anchor.computation)
            if caller is None or caller.opcode == "call":
                return anchor
            anchor = caller
        return anchor

    def _result(self, inst: Instruction, anchor: Instruction) -> Instruction:
        """The instruction whose value is the collective's result where it runs: the ``-done``
        of a ``-start``, the ``async-done`` of an ``async-start``, else the anchor."""
        if anchor.opcode.endswith("-start") and anchor.opcode != "async-start":
            return self._user(anchor, (anchor.opcode.removesuffix("-start") + "-done",)) or anchor
        if anchor.opcode == "async-start":
            current = anchor
            for _ in range(16):
                after = self._user(current, ("async-update", "async-done"))
                if after is None:
                    return current
                current = after
        return anchor

    def _flat_parts(self, inst: Instruction, result: Instruction) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The GPU combiner's flat form: one all-reduce of a ``wrapped_concatenate`` fusion of the
        values, each taken back by a ``wrapped_slice`` fusion of the result. Returns the values
        (the concatenation's operands) and the slice that holds each one's sum, in order; empty
        for any other form."""
        if len(inst.operands) != 1:
            return (), ()
        joined = self.module.instruction(inst.operands[0])
        if joined is None or _fused_root(self.module, joined) != "concatenate" or len(joined.operands) < 2:
            return (), ()
        users = self.module.computations[result.computation].users.get(result.name, ())
        slices = [(start, user) for user, _ in users
                  if _fused_root(self.module, user) == "slice" and (start := _slice_start(self.module, user)) is not None]
        if len(slices) != len(joined.operands):
            return (), ()
        return joined.operands, tuple(user.name for _, user in sorted(slices, key=lambda pair: pair[0]))

    def _user(self, inst: Instruction, opcodes: tuple[str, ...]) -> Instruction | None:
        users = self.module.computations[inst.computation].users.get(inst.name, ())
        return next((user for user, _ in users if user.opcode in opcodes), None)

    def _async_fusion_key(self, inst: Instruction, anchor: Instruction) -> tuple[str, str, int] | None:
        """What the copies of one TPU async collective fusion share, or None for any other form."""
        if anchor.opcode != "fusion" or inst.channel_id is None or _ASYNC_FUSION not in (inst.attribute("backend_config") or ""):
            return None
        return anchor.computation, inst.opcode, inst.channel_id


def _stepped_in_nested_loops(sites: list[CollectiveSite]) -> list[CollectiveSite]:
    """``sites`` with the copies of each TPU async collective fusion that step it in a loop nested
    in its own (the same opcode, ``channel_id`` and result shape; loops that extend the start's)
    made steps of the start's site (:attr:`CollectiveSite.steps`), not collectives of their own."""
    groups: dict[tuple[str, int, str], list[int]] = {}
    for number, site in enumerate(sites):
        inst = site.instruction
        if site.anchor.opcode == "fusion" and inst.channel_id is not None \
                and _ASYNC_FUSION in (inst.attribute("backend_config") or ""):
            groups.setdefault((inst.opcode, inst.channel_id, inst.shape.text.split("{")[0]), []).append(number)
    dropped: set[int] = set()
    merged: dict[int, CollectiveSite] = {}
    for numbers in groups.values():
        if len(numbers) < 2:
            continue
        base = min(numbers, key=lambda n: len(sites[n].loops))
        outer = [loop.name for loop in sites[base].loops]
        nested = [n for n in numbers if n != base
                  and [loop.name for loop in sites[n].loops[:len(outer)]] == outer and len(sites[n].loops) > len(outer)]
        if not nested:
            continue
        steps = sites[base].steps + tuple(s for n in nested for s in (sites[n].anchor,) + sites[n].steps)
        merged[base] = dataclasses.replace(sites[base], steps=steps)
        dropped.update(nested)
    return [merged.get(n, site) for n, site in enumerate(sites) if n not in dropped]


STEPPED = (
    "XLA:TPU's async collective fusion (MaxText's 'continuation fusion': xla_tpu_enable_async_collective_fusion "
    "with _multiple_steps) spreads one collective over the fusions of the work it overlaps: in the 256-chip compile "
    "of a Llama-shaped 128B step over fsdp=16 x tensor=16, channel 142's all-gather of bf16[16,2048,512] over tensor "
    "starts (AsyncCollectiveStart) and finishes (AsyncCollectiveDone) in the layer scan's body, and two fusions of "
    "the attention's 4-trip loop carry its operand and gathered buffer through the loop and each step it: 8 steps, "
    "as a ring of 16 both ways round takes. Read as a collective of the inner loop, it ran 256 times a step, not 64")
"""Why an async collective fusion's copies in a nested loop are steps of one collective (read in the compiled module)."""


def _fused_root(module: HloModule, inst: Instruction) -> str:
    """The opcode of the root of the computation a fusion calls (empty for anything else)."""
    if inst.opcode != "fusion":
        return ""
    called = next((c for role, c in inst.called_computations if role == "calls"), "")
    computation = module.computations.get(called)
    root = computation.root if computation is not None else None
    return root.opcode if root is not None else ""


def _slice_start(module: HloModule, inst: Instruction) -> int | None:
    """Where a ``wrapped_slice`` fusion's slice starts (``slice={[256:768]}`` -> 256)."""
    called = next((c for role, c in inst.called_computations if role == "calls"), "")
    root = module.computations[called].root
    text = (root.attribute("slice") if root is not None else None) or ""
    digits = text.lstrip("{[").split(":", 1)[0]
    return int(digits) if digits.isdigit() else None


def _inner(caller: Instruction, role: str, outer: Context) -> Context | None:
    """The context inside the computation ``caller`` calls in ``role``, or None when that
    computation does not run as a place collectives run in (a reduction's combiner)."""
    if caller.opcode == "while" and role == "body":
        return Context(outer.loops + (caller,), outer.in_conditional, outer.conditions)
    if caller.opcode == "while" and role == "condition":  # tested once more than the body runs
        return Context(outer.loops + (caller,), outer.in_conditional, outer.conditions | {caller.name})
    if caller.opcode == "conditional" and role in _BRANCH_ROLES:
        return Context(outer.loops, True, outer.conditions)
    if role in _PASSING_ROLES.get(caller.opcode, ()):
        return outer
    return None
