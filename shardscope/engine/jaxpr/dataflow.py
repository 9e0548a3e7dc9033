"""The dataflow graph of a :class:`Program` and the collectives it executes.

Nodes are equations (by id) and block inputs (by qualified name); edges go from the node that
defines a value to every equation that uses it, into loop bodies (outer operand -> body input),
out of them (body output -> loop equation), and around them (carry out -> carry in, marked
``back=True``). Each node knows the loops around it and how often it runs per call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence, overload

from shardscope.engine.counts import Count, PerCall, known_product, total_executions
from shardscope.engine.jaxpr.loop_names import loop_path, loop_words
from shardscope.engine.jaxpr.model import Block, Equation, Program, qualify, short_source, source_file, Value
from shardscope.engine.jaxpr.valueflow import ValueIndex
from shardscope.engine.jaxpr.verdicts import NEEDED, REDUCTIONS, Classifier, Verdict
from shardscope.collective_kinds import PSUM_INVARIANT, REDUCING, called
from shardscope.engine.pytree_paths import gradient_label, is_gradient_label, told_apart_by_outputs

if TYPE_CHECKING:  # networkx is imported by build_graph only: `report` and `diff` never need it
    import networkx as nx


@dataclass(frozen=True)
class Collective(PerCall):
    """One collective equation and what it costs per call.

    ``bytes_per_execution`` is the per-device payload: the size of the collective's operands,
    whole along :attr:`auto_axes` (a partial-auto ``shard_map``'s types are per device along its
    manual axes only), where it is at most what a device moves (:attr:`bytes_count` says so).
    ``executions`` is the product of the enclosing loops' trip counts; ``None`` when a ``while``
    loop with no static trip count encloses it.
    """

    equation_id: str
    primitive: str
    axes: tuple[str, ...]
    loop_ids: tuple[str, ...]
    loop_trip_counts: tuple[int | None, ...]
    bytes_per_execution: int
    in_conditional: bool = False
    value: str = ""  # the pytree path it carries (``params['Wh']``), else its source line
    source: str = ""  # ``train_step.py:42 (loss)``: the user's line that made it
    verdict: Any = None  # shardscope.engine.jaxpr.verdicts.Verdict
    source_file: str = ""  # the whole path of ``source``'s file, for annotations on the user's line
    traced_source: str = ""  # the line JAX's frames (and the compiled metadata) keep, where ``source`` differs
    auto_axes: tuple[tuple[str, int], ...] = ()
    """The mesh axes (with their sizes) its operands are typed whole along, which the partitioner
    may split them over: a partial-auto ``shard_map``'s Auto axes (empty for a manual one)."""
    operand_dims: tuple[tuple[int, ...], ...] = ()
    """Its operands' dimensions as the jaxpr types them."""

    @property
    def bytes_count(self) -> Count:
        """:attr:`bytes_per_call` as a :class:`Count`: an upper bound in a conditional's branch, and
        along :attr:`auto_axes` (the partitioner may split the operands: a device moves at most that)."""
        return Count(self.bytes_per_call, self.in_conditional or bool(self.auto_axes))

    @property
    def verdict_kind(self) -> str:
        """``deferrable``, ``loop_invariant`` or ``needed``."""
        return self.verdict.kind if self.verdict is not None else NEEDED

    @property
    def in_loop(self) -> bool:
        """True when at least one loop encloses this collective."""
        return bool(self.loop_ids)

    @property
    def executions(self) -> int | None:
        """How many times one call runs it (``None`` if a loop has no static trip count)."""
        return known_product(self.loop_trip_counts)



def collectives(
    program: Program, input_names: Sequence[str] = (), output_names: Sequence[str] = ()
) -> tuple[Collective, ...]:
    """Every collective equation of ``program`` in program order, named and with its verdict.

    ``input_names`` and ``output_names`` are the pytree paths of the program's inputs and
    outputs (``params['Wh']``); a collective that sums an argument's gradient is named
    ``grad(params['Wh'])`` (:func:`gradient_names`), any other after the one output it reaches,
    else the one input it comes from, else its source line.
    """
    sites = [site for site in program.sites() if site.equation.kind == "collective"]
    if not sites:
        return ()
    index = ValueIndex(program)
    classifier = Classifier(index)
    inputs = [""] * (len(program.root.inputs) - len(input_names)) + list(input_names)
    named = any(inputs) or any(output_names)
    gradients = gradient_names(program, index, inputs, output_names) if any(inputs) else {}
    found = []
    for site in sites:
        eqn = site.equation
        gradient_of = gradients.get(eqn.id, "")
        reached = value_name(index, eqn, inputs, output_names) if named else ""
        if eqn.primitive in _SUMMING and reached in output_names and not is_gradient_label(reached):
            reached = eqn.assigned or reached  # a sum on its way to an output: as the program assigns it
        # a value a collective moves (a ppermute's activation) is the one its call writes, not an
        # output it reaches (a backward ppermute reaches the weights' gradient); a sum's output is its value
        value = (gradient_label(gradient_of) if gradient_of else "") \
            or (eqn.written if eqn.primitive not in _SUMMING else "") or reached or eqn.written \
            or short_source(eqn.rule_source or eqn.source)
        verdict = classifier.verdict(eqn, site.loops, site.in_conditional, gradient_of=gradient_of)
        found.append(Collective(
            equation_id=eqn.id,
            primitive=eqn.primitive,
            axes=eqn.axes,
            loop_ids=tuple(loop.id for loop in site.loops),
            loop_trip_counts=tuple(loop.trip_count for loop in site.loops),
            bytes_per_execution=payload_bytes(eqn),
            in_conditional=site.in_conditional,
            value=value,
            source=short_source(eqn.rule_source or eqn.source),
            verdict=_in_rule(verdict, eqn) if eqn.rule_source else verdict,
            source_file=source_file(eqn.rule_source or eqn.source) or "",
            traced_source=short_source(eqn.source) if eqn.rule_source else "",
            auto_axes=eqn.auto_axes,
            operand_dims=tuple(v.shape for v in eqn.inputs),
        ))
    return tuple(found)


_SUMMING = REDUCING
"""Collectives whose result is a reduction: named by the output it reaches before their call's operand."""


def _in_rule(verdict: Verdict, eqn: Equation) -> Verdict:
    """``verdict`` of a collective a custom_vjp's backward rule wrote, its fix starting there:
    JAX runs the rule as written, so no cast outside it removes the rule's own collective."""
    if not verdict.fix:
        return verdict
    function = eqn.rule_source.rsplit("(", 1)[-1].rstrip(")")
    what = f"{eqn.written} " if eqn.written else ""
    where = f"the lax.{called(eqn.primitive)} at {short_source(eqn.rule_source)}"
    fix = (f"{where} is in {function}, a custom_vjp backward rule: JAX runs it as written, so remove it there "
           f"and return the unsummed {what}from {function}; then {verdict.fix}")
    return replace(verdict, fix=fix)


def gradient_names(program: Program, index: ValueIndex, input_names: Sequence[str],
                   output_names: Sequence[str] = ()) -> dict[str, str]:
    """``{psum_invariant id: the program input whose gradient it sums}`` (``W``, ``params['W1']``).

    A ``psum_invariant`` inside a VJP is the transpose of the implicit ``pvary`` of a value that is
    the same on every device, where the model uses it. JAX makes the transpose under the
    ``pvary``'s source information, so the two share their user frames (``Equation.origin``), axes
    and type; the ``pvary``'s operand leads back to a program input. Only a pairing that leads
    to exactly one input names one, or where several do (the layers a Python loop made on one
    line), the one the outputs it reaches point at (:func:`told_apart_by_outputs`): the sum's own
    output (``out``) says nothing about it.
    """
    casts: dict[tuple, list[tuple[Equation, int]]] = {}
    sums = []
    for site in program.sites():
        eqn = site.equation
        if eqn.primitive in ("pvary", "pcast") and eqn.origin:
            for k, operand in enumerate(eqn.inputs):
                casts.setdefault(_pairing_key(eqn, operand), []).append((eqn, k))
        elif eqn.primitive == PSUM_INVARIANT and eqn.origin:
            sums.append(eqn)
    came_from: dict[tuple[str, int], set[str]] = {}  # a cast's operand -> the inputs it comes from

    def inputs_of(cast: Equation, k: int) -> set[str]:
        if (cast.id, k) not in came_from:
            block = index.block_of[cast.id].block.id
            reached = index.backward(block, [cast.inputs[k].name])
            found = {input_names[i] for i in reached if i < len(input_names) and input_names[i]}
            started = index.started_as(block, cast.inputs[k].name) if len(found) > 1 else None
            if started is not None and started < len(input_names) and input_names[started]:
                found = {input_names[started]}  # a loop's carry the loop updates (SGD's weights): its argument
            came_from[cast.id, k] = found
        return came_from[cast.id, k]

    names = {}
    for eqn in sums:
        found: set[str] = set()
        pairs = [pair for result in eqn.outputs for pair in casts.get(_pairing_key(eqn, result), ())]
        for cast, k in pairs:
            found |= inputs_of(cast, k)
        if len(found) > 1:  # layers made by one line in a loop: the outputs the sum reaches tell which
            found = told_apart_by_outputs(found, outputs_reached(index, eqn, output_names))
        if len(found) == 1:
            names[eqn.id] = found.pop()
    return names


def _pairing_key(eqn: Equation, value: Value) -> tuple:
    """What a ``pvary``'s operand and the ``psum_invariant`` transposing it have in common."""
    return (eqn.origin, tuple(sorted(eqn.axes)), value.shape, value.dtype)


def value_name(index: ValueIndex, eqn: Equation, input_names: Sequence[str], output_names: Sequence[str],
               reduction: bool | None = None) -> str:
    """The program output or input ``eqn`` carries, or ``""`` when that is not one value.

    A reduction is named after the one output it feeds (the gradient it sums), any other
    collective after the one input it moves (the parameter an ``all_gather`` gathers); each
    falls back on the other direction. ``reduction`` says which ``eqn`` is when it is no
    collective (the equation whose value a compiled all-reduce sums).
    """
    block_id = index.block_of[eqn.id].block.id

    def forward() -> set[str]:
        return outputs_reached(index, eqn, output_names)

    def backward() -> set[str]:
        sources = index.backward(block_id, [v.name for v in eqn.inputs])
        return {input_names[k] for k in sources if k < len(input_names) and input_names[k]}

    summed = eqn.primitive in REDUCTIONS if reduction is None else reduction
    order = (forward, backward) if summed else (backward, forward)
    for direction in order:
        names = direction()
        if len(names) == 1:
            return names.pop()
    return ""


def outputs_reached(index: ValueIndex, eqn: Equation, output_names: Sequence[str]) -> set[str]:
    """The named program outputs the values ``eqn`` makes flow into."""
    block_id = index.block_of[eqn.id].block.id
    reached = index.forward(block_id, [v.name for v in eqn.outputs if v.name != "_"])
    return {output_names[k] for _, k in reached if k < len(output_names) and output_names[k]}


@overload
def per_call(program: Program, per_execution: Callable[[Equation], int]) -> int | None: ...
@overload
def per_call(program: Program, per_execution: Callable[[Equation], float]) -> float | None: ...
def per_call(program: Program, per_execution: Callable[[Equation], float]) -> float | None:
    """Sum ``per_execution(collective)`` over every collective execution of one call.

    Loops multiply by their trip count (``None`` when a loop with collectives has none); of a
    ``cond``'s branches only one runs, so the largest branch counts: an upper bound when the
    branches differ (see :func:`has_conditional`).
    """
    return _block_per_call(program.root, per_execution)


def per_call_count(program: Program, per_execution: Callable[[Equation], int]) -> Count:
    """:func:`per_call` as a :class:`Count`: an upper bound when a collective sits in a ``cond`` branch."""
    return Count(per_call(program, per_execution), has_conditional(collectives(program)))


def _block_per_call(block: Block, per_execution: Callable[[Equation], float]) -> float | None:
    total: float = 0
    for eqn in block.equations:
        per_block = [_block_per_call(sub, per_execution) for sub in eqn.blocks]
        inner = [n for n in per_block if n is not None]
        if len(inner) < len(per_block):
            return None
        if eqn.kind == "collective":
            total += per_execution(eqn)
        if not inner:
            continue
        runs = max(inner) if eqn.kind == "cond" else sum(inner)
        if eqn.kind == "loop" and runs:
            if eqn.trip_count is None:
                return None
            runs *= eqn.trip_count
        total += runs
    return total


def payload_bytes(eqn: Equation) -> int:
    """Per-device bytes one execution of a collective moves: the size of its operands (at most
    that, inside a partial-auto shard_map: they are typed whole along its :attr:`Equation.auto_axes`)."""
    return sum(v.nbytes for v in eqn.inputs)


def payload_count(program: Program) -> Count:
    """Per-device bytes of one call as :func:`per_call_count` counts them, an upper bound also when
    a collective's operands are typed whole along axes the partitioner splits (:func:`payload_bytes`)."""
    count = per_call_count(program, payload_bytes)
    unsplit = any(site.equation.auto_axes for site in program.sites() if site.equation.kind == "collective")
    return Count(count.value, count.upper_bound or unsplit)


def has_conditional(collectives: tuple[Collective, ...]) -> bool:
    """True when some collective sits in a ``cond`` branch, so per-call totals are upper bounds."""
    return any(c.in_conditional for c in collectives)


@dataclass(frozen=True)
class Loop:
    """One loop equation: its trip count, the loops around it and every collective inside it."""

    equation_id: str
    primitive: str
    trip_count: int | None
    enclosing_ids: tuple[str, ...]
    collectives: tuple[Collective, ...]
    source: str = ""  # ``/path/rnn.py:36 (rnn)``: the line that wrote the loop (empty when unknown)
    written_as: str = ""  # ``fori_loop``: the JAX function called there (empty when unknown)

    @property
    def path(self) -> str:
        """``scan_0/scan_1``: the loop's name with the loops around it, which tells nested loops apart
        (equation names are only unique in their block: two loops in two bodies are both ``scan_0``)."""
        return loop_path(self.equation_id, self.enclosing_ids)

    @property
    def words(self) -> str:
        """``the lax.scan at rnn.py:36 (rnn)``, ``the plan's chunk loop``: the loop as the user wrote it."""
        return loop_words(self.primitive, self.written_as, self.source)

    @property
    def executed_collectives(self) -> int | None:
        """Collective runs per call from inside this loop (None if unknown).

        Every collective counts, in every ``cond`` branch: an upper bound when one sits in a branch.
        """
        return total_executions(self.collectives)

    @property
    def executed(self) -> Count:
        """:attr:`executed_collectives` as a :class:`Count` (an upper bound with collectives in branches)."""
        return Count(self.executed_collectives, has_conditional(self.collectives))


def loops(program: Program, found: tuple[Collective, ...] | None = None) -> tuple[Loop, ...]:
    """Every loop of ``program`` in program order, with the collectives at any depth inside it.

    ``found`` are the program's collectives when the caller already has them.
    """
    found = collectives(program) if found is None else found
    return tuple(
        Loop(
            equation_id=site.equation.id,
            primitive=site.equation.primitive,
            trip_count=site.equation.trip_count,
            enclosing_ids=tuple(loop.id for loop in site.loops),
            collectives=tuple(c for c in found if site.equation.id in c.loop_ids),
            source=site.equation.source,
            written_as=site.equation.written_as,
        )
        for site in program.sites()
        if site.equation.kind == "loop"
    )
def build_graph(program: Program) -> nx.DiGraph:
    """The def -> use graph of ``program``, across loop and call boundaries.

    Node attributes: ``kind``, ``primitive``, ``label`` (the canonical line), ``types`` (the
    output types with varying axes, e.g. ``("f32[5]{V:s}",)``), ``block``, ``loops``,
    ``executions`` and, for loops, ``trip_count``.
    """
    import networkx as nx

    # Nodes and edges are collected in order and added in two calls: networkx's add_node and
    # add_edge each clear its cached views, a cost per call that two batches pay once. Every edge
    # joins nodes collected before it, so the graph (its order too) is the same as one built
    # call by call.
    graph = _Parts()
    producers: dict[str, str] = {}  # qualified value name -> the node that defines it
    root = program.root
    for value in root.inputs:
        node = qualify(root.id, value.name)
        graph.add_node(node, kind="input", label=value.declaration(), block=root.id, loops=(), executions=1,
                       types=(value.type_str + value.vma_str,))
        producers[node] = node
    _add_block(graph, root, producers, ())
    built = nx.DiGraph()
    built.add_nodes_from(graph.nodes)
    built.add_edges_from(graph.edges)
    return built


class _Parts:
    """The nodes and edges of a graph being built, in the order they were added."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, dict[str, Any]]] = []
        self.edges: list[tuple[str, str, dict[str, Any]]] = []

    def add_node(self, node: str, **attributes: Any) -> None:  # networkx's attributes: any values
        self.nodes.append((node, attributes))

    def add_edge(self, source: str, target: str, **attributes: Any) -> None:  # networkx's attributes: any values
        self.edges.append((source, target, attributes))


def _add_block(graph: _Parts, block: Block, producers: dict[str, str], loops: tuple[Equation, ...]) -> None:
    # the same for every equation of the block: made once, shared by its nodes (they are tuples and ints)
    loop_ids = tuple(loop.id for loop in loops)
    executions = known_product(loop.trip_count for loop in loops)
    for eqn in block.equations:
        graph.add_node(
            eqn.id,
            kind=eqn.kind,
            primitive=eqn.primitive,
            label=eqn.line(),
            block=block.id,
            loops=loop_ids,
            executions=executions,
            trip_count=eqn.trip_count,
            types=tuple(v.type_str + v.vma_str for v in eqn.outputs),
        )
        for value in eqn.inputs:
            source = producers.get(qualify(block.id, value.name))
            if source is not None:
                graph.add_edge(source, eqn.id)
        for sub in eqn.blocks:
            _add_sub_block(graph, eqn, block, sub, producers, loops)
        for value in eqn.outputs:
            if value.name != "_":
                producers[qualify(block.id, value.name)] = eqn.id


def _add_sub_block(
    graph: _Parts, eqn: Equation, outer: Block, sub: Block, producers: dict[str, str], loops: tuple
) -> None:
    inner_loops = loops + (eqn,) if eqn.kind == "loop" else loops
    executions = known_product(loop.trip_count for loop in inner_loops)
    for value, operand in zip(sub.inputs, _operands_for(eqn, sub)):
        node = qualify(sub.id, value.name)
        graph.add_node(node, kind="input", label=value.declaration(), block=sub.id,
                       loops=tuple(loop.id for loop in inner_loops), executions=executions,
                       types=(value.type_str + value.vma_str,))
        producers[node] = node
        source = None if operand is None else producers.get(qualify(outer.id, operand.name))
        if source is not None:
            graph.add_edge(source, node)
    _add_block(graph, sub, producers, inner_loops)
    for value in sub.outputs:
        source = producers.get(qualify(sub.id, value.name))
        if source is not None:
            graph.add_edge(source, eqn.id)
    if eqn.kind == "loop" and sub.role == "body":
        # The body's carry out feeds the next iteration: its own carry in, and a while's cond.
        for target_block in [b for b in eqn.blocks if b is sub or b.role == "cond"]:
            carry_in = [v for v in target_block.inputs if ".carry" in v.name]
            for value, target in zip(sub.outputs, carry_in):
                source = producers.get(qualify(sub.id, value.name))
                if source is not None:
                    graph.add_edge(source, qualify(target_block.id, target.name), back=True)


def _operands_for(eqn: Equation, sub: Block) -> list:
    """The outer operands that feed ``sub``'s inputs, aligned from the right."""
    n = len(sub.inputs)
    if eqn.primitive == "while" and sub.role == "cond":
        consts = [v for v in sub.inputs if ".cond_const" in v.name]
        carry = n - len(consts)
        operands = list(eqn.inputs[: len(consts)]) + list(eqn.inputs[len(eqn.inputs) - carry :])
        return operands
    tail = list(eqn.inputs[-n:]) if n else []
    return [None] * (n - len(tail)) + tail


def forward_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph without loop back-edges: a DAG, for ancestry and layered drawing."""
    back = [(u, v) for u, v, d in graph.edges(data=True) if d.get("back")]
    view = graph.copy()
    view.remove_edges_from(back)
    return view


def feeding_subgraph(graph: nx.DiGraph, *nodes: str) -> nx.DiGraph:
    """What feeds ``nodes`` inside their own blocks (a loop body for a collective in a loop).

    With several nodes, the union of what feeds each one; one walk per block either way, so a
    block with hundreds of collectives costs about as much as a block with one.
    """
    dag = forward_graph(graph)
    by_block: dict[str, list[str]] = {}
    for node in nodes:
        by_block.setdefault(graph.nodes[node]["block"], []).append(node)
    keep: set[str] = set(nodes)
    for block, sinks in by_block.items():
        keep |= {n for n in _ancestors(dag, sinks) if graph.nodes[n]["block"] == block}
    return dag.subgraph(keep).copy()


def _ancestors(dag: nx.DiGraph, sinks: list[str]) -> set[str]:
    """Every node with a path to one of ``sinks`` (the sinks excluded unless on such a path)."""
    seen: set[str] = set()
    stack = list(sinks)
    while stack:
        for parent in dag.predecessors(stack.pop()):
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return seen
