"""The compiled communication plan: every collective the partitioned module runs, and what it costs.

The jaxpr shows what a program writes; a jit with shardings has no collective there at all, the
partitioner (GSPMD or Shardy) writes them during ``compile()``. This module reads the compiled
text and lists each collective instruction with the while loops around it and their trip
counts, runs and bytes per call, the mesh axes it spans, who wrote it, the source line, the
value it carries, its verdict and fix, and the jaxpr equations it comes from.

How ``check``, ``inspect`` and ``shardscope.testing`` call it::

    traced = jax.jit(step).trace(params, batch)
    plan = plan_of(traced, input_names=argument_names(step, args, {}))
    plan.counts()            # {"all-reduce": 4}: runs per call of each kind
    plan.flagged             # the collectives a loop runs without needing to
    for c in plan.collectives:
        c.kind, c.executions, c.bytes_per_call, c.axes, c.written_by, c.source, c.verdict.fix

or, with text alone (a module dumped elsewhere), ``compiled_plan(text, mesh=mesh)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from math import prod
from typing import Any, Sequence

from shardscope.counts import Count, total_executions
from shardscope.engine import compiled_fixes, replica_groups
from shardscope.engine.compiled_verdicts import DEFERRABLE, LOOP_INVARIANT, NEEDED, CompiledClassifier, OperandVerdict, runs_after
from shardscope.engine.hlo_text import HloModule, Instruction, parse
from shardscope.verdicts import Verdict

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                    "collective-permute", "collective-broadcast")
"""The collective instructions of HLO, by the name the plan lists them under."""

_OPCODES = frozenset(COLLECTIVE_KINDS) | frozenset(f"{k}-start" for k in COLLECTIVE_KINDS)
_LOOPING = {"while": ("body", "condition")}
_DESCEND = frozenset({"while", "conditional", "call", "async-start"})

PROGRAM, PARTITIONER = "program", "partitioner"

JAX_COLLECTIVE_PRIMITIVES = frozenset(
    {"psum", "psum_invariant", "pmax", "pmin", "ppermute", "pbroadcast", "all_to_all", "ragged_all_to_all",
     "all_gather", "all_gather_invariant", "all_gather_reduced", "reduce_scatter", "psum_scatter",
     "unreduced_psum", "unreduced_reduce_scatter", "reshard"}
)
"""Names an ``op_name`` ends with when the program itself wrote the collective (``reshard`` too)."""


@dataclass(frozen=True)
class CompiledLoop:
    """A while loop of the module: the instruction, its body and its trip count (None: unknown)."""

    name: str
    body: str
    trip_count: int | None
    source: str = ""


@dataclass(frozen=True)
class CompiledOperand:
    """One value a collective carries: a combined (tuple-shaped) collective carries several."""

    instruction: str
    shape: str
    bytes: int
    value: str = ""
    verdict: str = NEEDED


@dataclass(frozen=True)
class CompiledCollective:
    """One collective instruction of the compiled module and what it costs per call.

    ``loops`` are the while loops around it, outermost first; ``bytes_per_execution`` is the
    per-device payload, the size of its operands (as the jaxpr view counts). An ``-start``/
    ``-done`` pair is one collective (the start); an ``async-start`` wrapper is listed as the
    collective it wraps.
    """

    name: str
    kind: str
    opcode: str
    computation: str
    operands: tuple[CompiledOperand, ...]
    loops: tuple[CompiledLoop, ...]
    in_conditional: bool
    groups: tuple[tuple[int, ...], ...] | None
    axes: tuple[str, ...] | None
    written_by: str
    source: str
    op_name: str
    verdict: Verdict
    equations: tuple[str, ...] = ()
    paths: int = 1

    @property
    def loop_trip_counts(self) -> tuple[int | None, ...]:
        """The enclosing loops' trip counts, outermost first (None: not known statically)."""
        return tuple(loop.trip_count for loop in self.loops)

    @property
    def in_loop(self) -> bool:
        """True when a while loop encloses it."""
        return bool(self.loops)

    @property
    def executions(self) -> int | None:
        """Runs per call: the product of the loops' trip counts (None when one is unknown)."""
        counts = self.loop_trip_counts
        return None if None in counts else prod(counts) * self.paths

    @property
    def bytes_per_execution(self) -> int:
        """Per-device bytes of one run: its operands together."""
        return sum(op.bytes for op in self.operands)

    @property
    def bytes_per_call(self) -> int | None:
        """Per-device bytes of one call (None when the runs are unknown)."""
        runs = self.executions
        return None if runs is None else runs * self.bytes_per_execution

    @property
    def runs(self) -> Count:
        """:attr:`executions` as a :class:`Count` (an upper bound inside a conditional's branch)."""
        return Count(self.executions, self.in_conditional)

    @property
    def verdict_kind(self) -> str:
        """``deferrable``, ``loop_invariant`` or ``needed``."""
        return self.verdict.kind

    @property
    def value(self) -> str:
        """The value(s) it carries: ``params['W']``, ``params['W'], params['V']``, or ``3 values``."""
        names = [op.value for op in self.operands if op.value]
        if not names:
            return ""
        unique = list(dict.fromkeys(names))
        return ", ".join(unique) if len(unique) <= 3 else f"{unique[0]}, {unique[1]} and {len(unique) - 2} more"

    @property
    def combined(self) -> bool:
        """True when XLA's combiner merged several collectives into this one."""
        return len(self.operands) > 1

    def describe(self) -> str:
        """``psum_invariant of params['W'] -> all-reduce.2 in the while body, x4/call`` in words."""
        where = "outside loops" if not self.loops else (
            "in the while body" if len(self.loops) == 1 else f"in {len(self.loops)} nested while bodies")
        head = ", ".join(self.equations) + " -> " if self.equations else ""
        what = f" of {self.value}" if self.value and not self.equations else ""
        merged = (f" (XLA's combiner merged {len(self.operands)} {self.kind}s into this one)" if self.combined else "")
        return f"{head}{self.name}{what} {where}, {self.runs.badge()}{merged}"


@dataclass(frozen=True)
class CompiledPlan:
    """Every collective of one compiled module, with the backend that compiled it."""

    backend: str
    collectives: tuple[CompiledCollective, ...]
    loops: tuple[CompiledLoop, ...]
    dead_equations: tuple[str, ...] = ()
    unmatched_equations: tuple[str, ...] = ()
    module: HloModule | None = field(default=None, repr=False, compare=False)

    @property
    def findings(self) -> tuple[CompiledCollective, ...]:
        """The collectives inside loops: the ones a verdict is about."""
        return tuple(c for c in self.collectives if c.in_loop)

    @property
    def flagged(self) -> tuple[CompiledCollective, ...]:
        """The collectives a loop runs without needing to (deferrable or loop-invariant)."""
        return tuple(c for c in self.collectives if c.verdict.flagged)

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per call (None when a loop's trip count is unknown)."""
        return total_executions(self.collectives)

    def counts(self) -> dict[str, int | None]:
        """Runs per call of each kind, e.g. ``{"all-reduce": 4}`` (None when a count is unknown)."""
        found: dict[str, list[CompiledCollective]] = {}
        for c in self.collectives:
            found.setdefault(c.kind, []).append(c)
        return {kind: total_executions(group) for kind, group in found.items()}


@dataclass(frozen=True)
class JaxprCollectiveRef:
    """What the plan needs of a jaxpr collective to pair with it (``dataflow.Collective`` has it)."""

    equation_id: str
    primitive: str
    source: str
    loop_trip_counts: tuple[int | None, ...]
    value: str = ""
    bytes: int = 0


# --------------------------------------------------------------------------- building the plan


def compiled_plan(
    text: str,
    *,
    mesh: Any = None,
    backend: str = "cpu",
    style: str = "auto",
    jaxpr_collectives: Sequence[Any] = (),
    input_names: Sequence[str] = (),
    output_names: Sequence[str] = (),
    dead_equations: Sequence[str] = (),
) -> CompiledPlan:
    """The :class:`CompiledPlan` of ``compiled.as_text()``.

    ``mesh`` (a ``jax.sharding.Mesh`` or :class:`~shardscope.engine.replica_groups.MeshShape`)
    names the groups' axes; ``style`` (``auto``, ``explicit``, ``shard_map``) picks the fixes'
    wording; ``jaxpr_collectives`` (``dataflow.Collective`` values) are paired with the compiled
    ones, which also tells on jax 0.10 who wrote a collective; ``input_names`` and
    ``output_names`` are the pytree paths of the flat inputs and outputs (an entry parameter's
    ``op_name`` is used when its name is missing); ``dead_equations`` the jaxpr collectives
    JAX's dead-code elimination removes.
    """
    module = parse(text)
    mesh_shape = mesh if isinstance(mesh, replica_groups.MeshShape) or mesh is None else replica_groups.MeshShape.of(mesh)
    sites = _sites(module)
    classifier = CompiledClassifier(module)
    namer = _Namer(module, list(input_names), list(output_names))
    refs = [_ref(c) for c in jaxpr_collectives if getattr(c, "equation_id", None) not in set(dead_equations)]
    built = []
    for inst, loops, conditional, paths in sites:
        built.append(_collective(module, inst, loops, conditional, paths, mesh_shape, classifier, namer, style))
    paired, unmatched = _pair(built, refs)
    loops = tuple(_loop(module, w) for w in module.instructions() if w.opcode == "while")
    return CompiledPlan(backend, tuple(paired), loops, tuple(dead_equations), tuple(unmatched), module)


def plan_of(traced: Any, compiled: Any = None, *, input_names: Sequence[str] = (), output_names: Sequence[str] = (),
            backend: str | None = None) -> CompiledPlan:
    """The plan of a traced program (``jax.jit(f).trace(...)``), compiling it unless ``compiled``
    is given; the jaxpr's collectives are paired with the compiled ones and its dead ones named."""
    import jax

    from shardscope.dataflow import collectives
    from shardscope.engine.dead_code import dead_collectives, mesh_and_style
    from shardscope.inspection import pytree_names
    from shardscope.jaxpr_model import from_jaxpr

    compiled = compiled if compiled is not None else traced.lower().compile()
    program = from_jaxpr(traced.jaxpr)
    outputs = list(output_names) or pytree_names(traced.out_info, "out")
    found = collectives(program, list(input_names), outputs) if input_names else collectives(program, (), outputs)
    mesh, style = mesh_and_style(traced.jaxpr, compiled)
    return compiled_plan(
        compiled.as_text(), mesh=mesh, backend=backend or jax.default_backend(), style=style,
        jaxpr_collectives=found, input_names=input_names, output_names=outputs,
        dead_equations=dead_collectives(traced.jaxpr),
    )


def _sites(module: HloModule) -> list[tuple[Instruction, tuple[Instruction, ...], bool, int]]:
    """``(collective, loops around it, in a conditional, call paths)`` in program order."""
    found: dict[str, list] = {}
    order: list[str] = []

    def visit(name: str, loops: tuple[Instruction, ...], conditional: bool, depth: int) -> None:
        computation = module.computations.get(name)
        if computation is None or depth > 64:
            return
        for inst in computation.instructions:
            if inst.opcode in _OPCODES:
                if inst.name not in found:
                    found[inst.name] = [inst, loops, conditional, 0]
                    order.append(inst.name)
                found[inst.name][3] += 1
            if inst.opcode not in _DESCEND:
                continue
            for role, callee in inst.called_computations:
                if inst.opcode == "while":
                    visit(callee, loops + (inst,), conditional, depth + 1)
                elif inst.opcode == "conditional" and role == "branch" or role in ("true_computation", "false_computation"):
                    visit(callee, loops, True, depth + 1)
                elif role == "calls":
                    visit(callee, loops, conditional, depth + 1)

    if module.entry_name:
        visit(module.entry_name, (), False, 0)
    return [tuple(found[name]) for name in order]


def _collective(module: HloModule, inst: Instruction, loops: tuple[Instruction, ...], conditional: bool, paths: int,
                mesh: replica_groups.MeshShape | None, classifier: CompiledClassifier, namer: "_Namer", style: str) -> CompiledCollective:
    kind = inst.opcode.removesuffix("-start")
    groups, axes = _groups_and_axes(module, inst, mesh)
    verdicts = classifier.operand_verdicts(inst, loops)
    operands = []
    for k, name in enumerate(inst.operands):
        operand = module.instruction(name)
        shape = operand.shape if operand is not None else None
        operands.append(CompiledOperand(
            instruction=name, shape=str(shape.arrays[0]) if shape and len(shape.arrays) == 1 else (shape.text if shape else ""),
            bytes=shape.nbytes if shape else 0,
            value=namer.value(inst, k, reduction=kind in ("all-reduce", "reduce-scatter")),
            verdict=verdicts[k].kind if k < len(verdicts) else NEEDED,
        ))
    source = module.source(inst)
    collective = CompiledCollective(
        name=inst.name, kind=kind, opcode=inst.opcode, computation=inst.computation, operands=tuple(operands),
        loops=tuple(_loop(module, w) for w in loops), in_conditional=conditional, groups=groups, axes=axes,
        written_by=PARTITIONER if inst.is_spmd_generated else (PROGRAM if inst.metadata.primitive in JAX_COLLECTIVE_PRIMITIVES else ""),
        source=source.text() if source else "", op_name=inst.metadata.op_name,
        verdict=Verdict(NEEDED, "It runs once per call, outside any loop."), paths=paths,
    )
    return _with_verdict(collective, verdicts, loops, style)


def _groups_and_axes(module: HloModule, inst: Instruction, mesh: replica_groups.MeshShape | None):
    devices = module.num_partitions * module.replica_count
    try:
        if inst.source_target_pairs is not None:
            pairs = replica_groups.decode_pairs(inst.source_target_pairs)
            return tuple(pairs), (replica_groups.pair_axes_of(pairs, mesh) if mesh else None)
        text = inst.replica_groups
        groups = replica_groups.decode(text if text is not None else "{}", devices)
    except replica_groups.ReplicaGroupsError:
        return None, None
    return groups, (replica_groups.mesh_axes_of(groups, mesh) if mesh else None)


def _with_verdict(c: CompiledCollective, verdicts: tuple[OperandVerdict, ...], loops: tuple[Instruction, ...],
                  style: str) -> CompiledCollective:
    """``c`` with its instruction-level verdict: the operands' one when they agree, else needed."""
    if not loops:
        return c
    kinds = {v.kind for v in verdicts}
    runs_before = _runs_text(c.executions, c.in_conditional)
    if kinds == {LOOP_INVARIANT}:
        left = verdicts[0].loops
        after = runs_after(loops, left)
        cost = sum(module_bytes for module_bytes in (op.bytes for op in c.operands))
        verdict = Verdict(LOOP_INVARIANT, f"Its operand does not change inside {_loops_words(c, left)}: every run moves the same data.",
                          compiled_fixes.hoist_fix(style, c.kind, c.value, runs_before, _runs_text(after), cost),
                          left, after, cost)
    elif kinds == {DEFERRABLE} and len({v.loops for v in verdicts}) == 1:
        left = verdicts[0].loops
        after = runs_after(loops, left)
        moved = sum(v.bytes_after or 0 for v in verdicts)
        rank = max((len(_dims(op.shape)) for op in c.operands), default=2)
        verdict = Verdict(
            DEFERRABLE,
            f"Its result is only added into the carry of {_loops_words(c, left)}: the sum over devices commutes with the sum "
            f"over iterations, so one {c.kind} of the {moved:,} B accumulator after the loop gives the same result"
            + (" (the accumulator stacks each inner iteration's slot)" if any(v.stacked for v in verdicts) else "") + ".",
            compiled_fixes.deferral_fix(style, c.value, c.axes or (), rank, runs_before, _runs_text(after)),
            left, after,
        )
    elif any(v.stacked for v in verdicts) and kinds == {NEEDED}:
        verdict = Verdict(NEEDED, "It writes each iteration's sum into its own slot of a stacked output "
                                  "(dynamic-update-slice): one sum after the loop would move as many bytes and lose "
                                  "its overlap with the next iteration's work.")
    elif DEFERRABLE in kinds:
        count = sum(v.kind == DEFERRABLE for v in verdicts)
        verdict = Verdict(NEEDED, f"{count} of its {len(verdicts)} values only accumulate into a carry, the others are read "
                                  "inside the loop: as one combined instruction it must run there.")
    else:
        verdict = Verdict(NEEDED, "Its result is read inside the loop, not only added into a carry: it must run there."
                          if c.kind in ("all-reduce", "reduce-scatter") else
                          "Its operand changes every iteration and it is not a sum that could be accumulated: it must run in the loop.")
    return _replace(c, verdict=verdict)


def _replace(c: CompiledCollective, **changes: Any) -> CompiledCollective:
    import dataclasses

    return dataclasses.replace(c, **changes)


def _dims(shape: str) -> tuple[int, ...]:
    inner = shape[shape.find("[") + 1 : shape.find("]")] if "[" in shape else ""
    return tuple(int(d) for d in inner.split(",") if d.strip().isdigit())


def _loop(module: HloModule, inst: Instruction) -> CompiledLoop:
    body = next((c for role, c in inst.called_computations if role == "body"), "")
    source = module.source(inst)
    return CompiledLoop(inst.name, body, inst.known_trip_count, source.text() if source else "")


def _loops_words(c: CompiledCollective, left: tuple[str, ...]) -> str:
    loops = [loop for loop in c.loops if loop.name in left]
    trips = " x ".join("?" if loop.trip_count is None else str(loop.trip_count) for loop in loops)
    if len(loops) == 1:
        count = "an unknown number of" if loops[0].trip_count is None else trips
        return f"the while loop {loops[0].name} ({count} iterations)"
    return f"the {len(loops)} nested while loops ({trips} iterations)"


def _runs_text(runs: int | None, upper_bound: bool = False) -> str:
    return "an unknown number of" if runs is None else Count(runs, upper_bound).text()


# --------------------------------------------------------------------------- values


class _Namer:
    """Names the value a collective carries after the program's outputs or inputs (pytree paths)."""

    def __init__(self, module: HloModule, input_names: list[str], output_names: list[str]) -> None:
        self.module = module
        self.inputs = input_names
        self.outputs = output_names

    @functools.cached_property
    def _callers(self) -> dict[str, tuple[Instruction, str]]:
        found: dict[str, tuple[Instruction, str]] = {}
        for inst in self.module.instructions():
            if inst.opcode in ("while", "call", "conditional", "async-start", "fusion"):
                for role, callee in inst.called_computations:
                    found.setdefault(callee, (inst, role))
        return found

    def value(self, inst: Instruction, operand: int, reduction: bool) -> str:
        """The one output the operand's result reaches (a sum), or the one input it comes from
        (anything else); each falls back on the other direction; empty when neither is one."""
        order = (self._forward, self._backward) if reduction else (self._backward, self._forward)
        for direction in order:
            names = direction(inst, operand)
            if len(names) == 1:
                return names.pop()
        return ""

    def _forward(self, inst: Instruction, operand: int) -> set[str]:
        start_index = operand if inst.shape.is_tuple else None
        reached: set[str] = set()
        seen: set[tuple[str, int | None]] = set()
        stack = [(inst, start_index)]
        steps = 0
        while stack and steps < 20000:
            steps += 1
            current, idx = stack.pop()
            if (current.name, idx) in seen:
                continue
            seen.add((current.name, idx))
            computation = self.module.computations[current.computation]
            if current is computation.root:
                self._leave(computation.name, idx, reached, stack)
            for user, position in computation.users.get(current.name, ()):
                if user.opcode == "get-tuple-element":
                    if idx is None or user.tuple_index == idx:
                        stack.append((user, None))
                elif user.opcode == "tuple":
                    stack.append((user, position))
                elif user.opcode == "while":
                    for role, callee in user.called_computations:
                        body = self.module.computations.get(callee)
                        if role == "body" and body is not None and body.parameters:
                            stack.append((body.parameters[0], idx))
                elif user.opcode in ("call", "conditional") and user.called_computations:
                    for role, callee in user.called_computations:
                        target = self.module.computations.get(callee)
                        params = target.parameters if target else ()
                        k = position if user.opcode == "call" else 0
                        if k < len(params) and (user.opcode == "call" or position >= 1):
                            stack.append((params[k], idx if user.opcode == "call" else None))
                else:
                    stack.append((user, None))
        return reached

    def _leave(self, computation: str, idx: int | None, reached: set[str], stack: list) -> None:
        """A computation's root was reached: the program's output, or its caller's result."""
        if computation == self.module.entry_name:
            root = self.module.entry.root
            if root is not None and root.shape.is_tuple:
                if idx is not None and idx < len(self.outputs) and self.outputs[idx]:
                    reached.add(self.outputs[idx])
                elif idx is None:
                    reached.update(n for n in self.outputs if n)
            elif self.outputs and self.outputs[0]:
                reached.add(self.outputs[0])
            return
        caller = self._callers.get(computation)
        if caller is None:
            return
        inst, role = caller
        if role == "condition":
            return
        stack.append((inst, idx if inst.opcode in ("while", "call") else None))

    def _backward(self, inst: Instruction, operand: int) -> set[str]:
        found: set[str] = set()
        seen: set[str] = set()
        start = self.module.instruction(inst.operands[operand]) if operand < len(inst.operands) else None
        stack = [start] if start is not None else []
        steps = 0
        while stack and steps < 20000:
            steps += 1
            current = stack.pop()
            if current is None or current.name in seen:
                continue
            seen.add(current.name)
            if current.opcode == "parameter":
                name = self._parameter_name(current)
                if name is not None:
                    found.add(name) if name else None
                    continue
                caller = self._callers.get(current.computation)
                if caller is not None and caller[0].opcode in ("call", "fusion"):
                    number = current.parameter_number or 0
                    if number < len(caller[0].operands):
                        stack.append(self.module.instruction(caller[0].operands[number]))
                elif caller is not None and caller[0].opcode == "while" and caller[0].operands:
                    stack.append(self.module.instruction(caller[0].operands[0]))
                continue
            if current.opcode in ("constant", "iota", "partition-id", "replica-id"):
                continue
            stack += [self.module.instruction(o) for o in current.operands]
        return found

    def _parameter_name(self, param: Instruction) -> str | None:
        """An entry parameter's pytree path (``""`` when unnamed); None for other parameters."""
        if param.computation != self.module.entry_name:
            return None
        number = param.parameter_number or 0
        return param.metadata.op_name or (self.inputs[number] if number < len(self.inputs) else "")


# --------------------------------------------------------------------------- pairing with the jaxpr


_HLO_KIND = {
    "psum": "all-reduce", "psum_invariant": "all-reduce", "pmax": "all-reduce", "pmin": "all-reduce",
    "unreduced_psum": "all-reduce", "all_gather": "all-gather", "all_gather_invariant": "all-gather",
    "all_gather_reduced": "all-gather", "reduce_scatter": "reduce-scatter", "psum_scatter": "reduce-scatter",
    "unreduced_reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "ragged_all_to_all": "ragged-all-to-all",
    "ppermute": "collective-permute", "pbroadcast": "collective-broadcast",
}


def _ref(c: Any) -> JaxprCollectiveRef:
    if isinstance(c, JaxprCollectiveRef):
        return c
    return JaxprCollectiveRef(c.equation_id, c.primitive, c.source, tuple(c.loop_trip_counts), getattr(c, "value", ""),
                              getattr(c, "bytes_per_execution", 0))


def _pair(built: list[CompiledCollective], refs: list[JaxprCollectiveRef]) -> tuple[list[CompiledCollective], list[str]]:
    """Pair each compiled collective with the jaxpr collectives it comes from.

    A jaxpr collective pairs with a compiled one of its kind (a reduction may also compile to an
    all-reduce) whose op_name ends with its primitive and whose source line is its own, inside
    loops whose trip counts are among its own (the compiler removes loops, never adds one); a
    combined instruction takes one jaxpr collective per operand. A compiled collective that
    pairs with none was written by the partitioner, unless its op_name names a JAX collective.
    """
    free = list(refs)
    paired: list[CompiledCollective] = []
    for c in built:
        chosen = [r for r in free if _matches(c, r)][:1]
        if chosen and c.combined:  # the other operands carry the op_name of none: match them by size
            sizes = sorted(op.bytes for op in c.operands)
            sizes.remove(min(sizes, key=lambda b: abs(b - chosen[0].bytes)))
            for size in sizes:
                rest = [r for r in free if r not in chosen and _matches(c, r, by_source=False) and r.bytes == size]
                chosen += rest[:1]
        for r in chosen:
            free.remove(r)
        written = c.written_by or (PROGRAM if chosen else PARTITIONER)
        if c.written_by == PARTITIONER:
            written = PARTITIONER
        paired.append(_replace(c, equations=tuple(r.equation_id for r in chosen), written_by=written))
    return paired, [r.equation_id for r in free]


def _matches(c: CompiledCollective, r: JaxprCollectiveRef, by_source: bool = True) -> bool:
    kind = _HLO_KIND.get(r.primitive)
    if kind is None or (c.kind != kind and not (kind == "reduce-scatter" and c.kind == "all-reduce")):
        return False
    if c.op_name and c.op_name.rsplit("/", 1)[-1] != r.primitive:
        return False
    if by_source and r.source and c.source and r.source.split(" ")[0] != c.source.split(" ")[0]:
        return False
    # the compiler removes loops (of one iteration; around a loop-invariant collective it hoists)
    # and never adds one: the compiled trip counts are a subsequence of the jaxpr's
    remaining = iter(t for t in r.loop_trip_counts if t != 1)
    return all(any(t == u for u in remaining) for t in c.loop_trip_counts if t != 1)
