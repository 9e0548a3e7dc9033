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
        c.kind, c.executions, c.bytes_per_call, c.axes, c.written_by, c.source, c.value, c.verdict.fix

or, with text alone (a module dumped elsewhere, a target's module),
``compiled_plan(text, mesh=mesh)``.
"""

from __future__ import annotations

import dataclasses
import re
from math import prod
from typing import TYPE_CHECKING, Sequence, Protocol, runtime_checkable

from shardscope.engine.compilation import compile_traced, partitioner_messages
from shardscope.engine.hlo import replica_groups
from shardscope.engine.hlo.equation_names import EquationNames
from shardscope.engine.hlo.fixes import Signature, collective_devices, summed_losses, verdict_of
from shardscope.engine.hlo.loss_scaling import loss_scaling, loss_scalings
from shardscope.engine.hlo.flow import Flow
from shardscope.engine.hlo.loops import LoopCounts
from shardscope.engine.hlo.names import CollectiveNamer, EquationNamer
from shardscope.engine.hlo.partitioner_warnings import (
    PartitionerWarning, implementing, read_warning, value_instructions,
)
from shardscope.engine.hlo.pairing import JAX_COLLECTIVE_PRIMITIVES, PARTITIONER, PROGRAM, JaxprCollective, pair
from shardscope.engine.hlo.promotion import promoted_from
from shardscope.engine.hlo.plan import CompiledCollective, CompiledLoop, CompiledOperand, CompiledPlan
from shardscope.engine.hlo.replica_groups import MeshShape
from shardscope.engine.hlo.sites import COLLECTIVE_KINDS, CollectiveSite, SiteFinder
from shardscope.engine.hlo.text import HloModule, Instruction, parse
from shardscope.engine.hlo.verdicts import DEFERRABLE, NEEDED, CompiledClassifier
from shardscope.engine.jaxpr.dataflow import collectives as jaxpr_collectives_of
from shardscope.engine.jaxpr.dead_code import dead_collectives, mesh_and_style
from shardscope.engine.jaxpr.model import from_jaxpr
from shardscope.engine.jaxpr.verdicts import SPLITTABLE, Verdict
from shardscope.collective_kinds import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, COLLECTIVE_PERMUTE, OF_PRIMITIVE, SUM_KINDS
from shardscope.engine.hlo.added_terms import adds_another_term
from shardscope.engine.pytree_paths import is_gradient_label, labelled_argument, pytree_names
from shardscope.engine.written_values import written_name

if TYPE_CHECKING:
    import jax

    from shardscope.engine.jaxpr.dataflow import Collective
    from shardscope.engine.jaxpr.model import Program

__all__ = ["COLLECTIVE_KINDS", "PROGRAM", "PARTITIONER", "CompiledLoop", "CompiledOperand", "CompiledCollective",
           "CompiledPlan", "compiled_plan", "plan_of"]


# --------------------------------------------------------------------------- building the plan


def compiled_plan(
    text: "str | HloModule",
    *,
    mesh: "MeshShape | jax.sharding.Mesh | None" = None,
    backend: str = "cpu",
    style: str = "auto",
    jaxpr_collectives: Sequence[JaxprCollective] = (),
    input_names: Sequence[str] = (),
    output_names: Sequence[str] = (),
    dead_equations: Sequence[str] = (),
    equation_names: EquationNamer | None = None,
    arguments: Sequence[tuple[str, tuple[str, ...]]] = (),
    replicated_parameters: Sequence[int] = (),
) -> CompiledPlan:
    """The :class:`CompiledPlan` of ``compiled.as_text()`` (or of its parse, when the caller holds
    it already: a dump's modules are parsed to pick the step's).

    ``mesh`` (a ``jax.sharding.Mesh`` or :class:`~shardscope.engine.hlo.replica_groups.MeshShape`)
    names the groups' axes; ``style`` (``auto``, ``explicit``, ``shard_map``) picks the fixes'
    wording; ``jaxpr_collectives`` (``dataflow.Collective`` values) are paired with the compiled
    ones, which also tells on jax 0.10 who wrote a collective; ``equation_names`` (the jaxpr
    view's names, :class:`~shardscope.engine.hlo.equation_names.EquationNames`) names the values
    they carry; without it, ``input_names`` and ``output_names`` (the pytree paths of the flat
    inputs and outputs; an entry parameter's ``op_name`` is used when it has one) do;
    ``dead_equations`` are the jaxpr collectives JAX's dead-code elimination removes;
    ``arguments`` (each argument's name and its leaves' specs, ``("xs", ("P(None, 'data')",))``) are what a fix
    through ``jax.shard_map`` passes as its ``in_specs``, and the specs a fix on Explicit axes
    keeps when it reshards a value ``reduced``; ``replicated_parameters`` are the entry
    parameters (by number) whose arguments are replicated over the devices (a mask or a
    schedule the same everywhere), for a module that does not print its parameters' shardings.
    """
    module = text if isinstance(text, HloModule) else parse(text)
    builder = _Builder(module, _mesh_shape(mesh), style, CollectiveNamer(module, Flow(module), input_names, output_names,
                                                                        equation_names), frozenset(replicated_parameters))
    dead = set(dead_equations)
    refs = [c for c in jaxpr_collectives if c.equation_id not in dead]
    paired, unmatched = pair([builder.collective(site) for site in builder.finder.sites()], refs)
    sizes = {r.equation_id: r.bytes_per_execution for r in refs}
    dims = {r.equation_id: r.operand_dims for r in refs}
    paired = [builder.named_after_pairing(c, sizes, dims) for c in paired]
    if style in ("auto", "explicit"):  # the fixes name the arguments' specs (and, through a shard_map, the losses)
        losses, devices = summed_losses(tuple(paired), builder.mesh)
        mesh_shape = builder.mesh
        one_device = frozenset() if mesh_shape is None else frozenset(
            name for name, size in zip(mesh_shape.names, mesh_shape.sizes) if size == 1)
        axis_sizes = () if mesh_shape is None else tuple(zip(mesh_shape.names, mesh_shape.sizes))
        paired = [builder.with_scalings(c) for c in paired]
        signature = Signature(tuple(arguments), devices or builder.devices, losses, one_device, axis_sizes,
                              loss_scalings(paired))
        paired = [builder.with_signature(c, signature) for c in paired]
    loops = tuple(builder.loop(w) for w in module.instructions() if w.opcode == "while")
    return CompiledPlan(backend, tuple(paired), loops, tuple(dead_equations), tuple(unmatched), module)


def plan_of(traced: "jax.stages.Traced", compiled: "jax.stages.Compiled | None" = None, *,
            input_names: Sequence[str] = (), output_names: Sequence[str] = (), backend: str | None = None,
            text: str | None = None, program: "Program | None" = None,
            jaxpr_collectives: "Sequence[Collective] | None" = None,
            messages: Sequence[str] | None = None) -> CompiledPlan:
    """The plan of a traced program (``jax.jit(f).trace(...)``), compiling it unless ``compiled``
    is given; the jaxpr's collectives are paired with the compiled ones, its dead ones named,
    and the values named as the jaxpr view names them. ``text`` is another module of the same
    trace to read instead of ``compiled``'s (a target's, ``TargetCompilation.hlo_text``; the
    CPU's ``compiled`` then still gives the mesh). ``traced`` may be flax's
    ``nnx.jit(f).trace(...)``, which holds JAX's own in ``.traced``. ``program`` and
    ``jaxpr_collectives`` are the jaxpr view of the same trace when the caller has it already
    (:func:`shardscope.engine.joined.inspection.inspect_traced`): it is not read a second time.
    ``messages`` are the partitioner's log messages of the compile that made ``text`` (default:
    those kept for ``compiled``, none for another ``text``): :attr:`CompiledPlan.partitioner`."""
    import jax

    compiled = compiled if compiled is not None or text is not None else compile_traced(traced)
    traced = jax_traced(traced)
    program = program if program is not None else from_jaxpr(traced.jaxpr)
    outputs = list(output_names) or pytree_names(traced.out_info, "out")
    inputs = list(input_names) if len(input_names) == len(traced.jaxpr.jaxpr.invars) else []
    found = jaxpr_collectives if jaxpr_collectives is not None else jaxpr_collectives_of(program, inputs, outputs)
    mesh, style = mesh_and_style(traced.jaxpr, compiled)
    module_text = text if text is not None else (compiled.as_text() if compiled is not None else None)
    if module_text is None:  # jax gives no text where the backend cannot print its module
        raise ValueError("the compiled program has no module text to read")
    plan = compiled_plan(
        module_text, mesh=mesh, backend=backend or jax.default_backend(),
        style=style, jaxpr_collectives=found, input_names=_entry_parameter_names(compiled, inputs), output_names=outputs,
        dead_equations=dead_collectives(traced.jaxpr),
        equation_names=EquationNames(traced.jaxpr, program, inputs, outputs, found),
        arguments=argument_specs(compiled, inputs),
        replicated_parameters=replicated_parameters(compiled),
    )
    if messages is None:
        messages = partitioner_messages(compiled) if compiled is not None and text is None else ()
    if not messages:
        return plan
    warnings = partitioner_findings(messages, plan, _mesh_shape(mesh))
    return dataclasses.replace(plan, partitioner=warnings, collectives=_named_by_warnings(plan.collectives, warnings))


def partitioner_findings(messages: Sequence[str], plan: CompiledPlan,
                         mesh: MeshShape | None) -> tuple[PartitionerWarning, ...]:
    """The partitioner's log messages read over the program's mesh, each joined to the compiled
    collectives that carry out its fallback and to the user's line they came from; a value
    computed inside the program is named as its line writes it (:func:`written_name`)."""
    by_name = {c.name: c for c in plan.collectives}
    devices = 1 if mesh is None else prod(mesh.sizes)
    found = []
    for message in messages:
        warning = read_warning(message, mesh)
        names, line = implementing(warning, plan.module, list(by_name))
        sources = [by_name[n].source for n in names if by_name[n].source]
        warning = dataclasses.replace(warning, collectives=names, source=sources[0] if sources else line,
                                      devices=devices)
        found.append(_with_written_value(warning, plan.module) if warning.is_intermediate else warning)
    return tuple(found)


def _with_written_value(warning: PartitionerWarning, module: HloModule | None) -> PartitionerWarning:
    """``warning`` with the user's name and line of the value it is about (as it was when the
    module keeps no line for the operation that made it)."""
    if module is None:
        return warning
    made = value_instructions(warning, module)
    location = module.source(made[0], users=True) if made else None
    if location is None:
        return warning
    # the operand of its line it is (a tanh in ``out = jnp.tanh(acts) + resid``), when every
    # instruction of its op_name starts at one column: a gelu's muls and a ``* 2.0`` do not
    columns = {where.column for where in (module.source(i, users=True) for i in made) if where is not None}
    primitive = made[0].metadata.op_name.split(";", 1)[0].rsplit("/", 1)[-1]
    name = written_name(location.file, location.line, columns.pop() if len(columns) == 1 else None, primitive)
    return dataclasses.replace(warning, value=name, value_source=location.text(),
                               value_line=(location.file, location.line))


def _named_by_warnings(collectives: tuple[CompiledCollective, ...],
                       warnings: Sequence[PartitionerWarning]) -> tuple[CompiledCollective, ...]:
    """The gathers of a rematerialization carry the value it is about: named by it (the value
    the module leads them to, ``out``, is where the value goes, not what they move)."""
    named = {c: w.value for w in warnings if w.value for c in w.collectives}
    return tuple(dataclasses.replace(c, operands=tuple(dataclasses.replace(op, value=named[c.name])
                                                       for op in c.operands)) if c.name in named else c
                 for c in collectives)


@runtime_checkable
class HoldsTraced(Protocol):
    """A trace that wraps JAX's own (flax's ``nnx.jit(f).trace(...)``)."""

    @property
    def traced(self) -> "jax.stages.Traced": ...


def jax_traced(traced: "jax.stages.Traced | HoldsTraced") -> "jax.stages.Traced":
    """JAX's own ``Traced`` of ``traced``: flax's ``nnx.jit(f).trace(...)`` holds it in ``.traced``."""
    return traced.traced if isinstance(traced, HoldsTraced) else traced


def argument_specs(compiled: "jax.stages.Compiled | None", inputs: Sequence[str]
                   ) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each positional argument's name (the root of its leaves' paths: ``params``) and each of
    its leaves' spec (``P(None, 'data')``); empty when the shardings or the names are not known.
    :func:`~shardscope.engine.hlo.fixes.argument_specs_text` writes them as code."""
    import jax  # loaded by now: ``compiled`` is its
    from jax.sharding import NamedSharding

    shardings = getattr(compiled, "input_shardings", None)
    if not shardings or not inputs:
        return ()
    found, start = [], 0
    for argument in shardings[0]:
        leaves = jax.tree.leaves(argument)
        names = inputs[start:start + len(leaves)]
        start += len(leaves)
        roots = {re.split(r"[\[.]", n, maxsplit=1)[0] for n in names}
        if len(roots) != 1 or not leaves:
            return ()
        found.append((roots.pop(), tuple(spec_text(s.spec) if isinstance(s, NamedSharding) else "P()" for s in leaves)))
    return tuple(found)


def spec_text(spec: "jax.sharding.PartitionSpec") -> str:
    """``P(None, 'data')``, ``P('x', reduced={'y'})``, as the user writes it (a spec with a
    reduced or unreduced set refuses to be iterated: its dimensions are ``spec.partitions``)."""
    def entry(e: object) -> str:
        return "None" if e is None else repr(e) if isinstance(e, str) else "(" + ", ".join(map(repr, e)) + ")"  # type: ignore[call-overload]

    def axes(names: "frozenset[str]") -> str:
        return "{" + ", ".join(repr(a) for a in sorted(names)) + "}"

    parts = [entry(e) for e in getattr(spec, "partitions", spec)]
    parts += [f"{kind}={axes(names)}" for kind in ("unreduced", "reduced") if (names := getattr(spec, kind, None))]
    return "P(" + ", ".join(parts) + ")"


def replicated_parameters(compiled: "jax.stages.Compiled | None") -> tuple[int, ...]:
    """The entry parameters (by number) whose arguments are replicated over the devices: jit
    drops the arguments the program never reads, so parameter ``k`` is the ``k``-th kept one."""
    import jax  # loaded by now: ``compiled`` is its

    shardings = getattr(compiled, "input_shardings", None)
    if not shardings:
        return ()
    flat = jax.tree.leaves(shardings[0])
    kept = getattr(getattr(compiled, "_executable", None), "_kept_var_idx", None)
    order = sorted(kept) if kept and max(kept) < len(flat) else range(len(flat))
    return tuple(k for k, leaf in enumerate(flat[i] for i in order) if getattr(leaf, "is_fully_replicated", False))


def _entry_parameter_names(compiled: "jax.stages.Compiled | None", inputs: list[str]) -> list[str]:
    """The names of the module's entry parameters: jit drops the arguments the program never
    reads (``keep_unused=False``), so parameter ``k`` is the ``k``-th kept argument."""
    kept = getattr(getattr(compiled, "_executable", None), "_kept_var_idx", None)
    if not inputs or not kept or max(kept) >= len(inputs):
        return inputs
    return [inputs[k] for k in sorted(kept)]


def _mesh_shape(mesh: "MeshShape | jax.sharding.Mesh | None") -> MeshShape | None:
    if mesh is None or isinstance(mesh, MeshShape):
        return mesh
    return MeshShape.of(mesh)


class _Builder:
    """Turns each site of one module into a :class:`CompiledCollective`."""

    def __init__(self, module: HloModule, mesh: MeshShape | None, style: str, namer: CollectiveNamer,
                 replicated_parameters: frozenset[int] = frozenset()) -> None:
        self.module = module
        self.mesh = mesh
        self.style = style
        self.namer = namer
        self.flow = namer.flow
        self.counts = LoopCounts(module, self.flow)
        self.finder = SiteFinder(module, self.flow)
        self.classifier = CompiledClassifier(module, self.flow, self.counts, self.finder, replicated_parameters)
        self._judged: dict[str, tuple] = {}  # each collective's operand verdicts, loops, added term
        self._sites: dict[str, CollectiveSite] = {}  # each collective's site, by its instruction's name
        # each replica-groups text's groups and axes: a step's collectives share a few texts, each
        # of up to a million ids, kept only while this module is read
        self._groups: dict[tuple[str, str | None], tuple[tuple[tuple[int, ...], ...] | None, tuple[str, ...] | None]] = {}

    @property
    def devices(self) -> int:
        """The devices of the program's mesh (0 when unknown)."""
        return prod(self.mesh.sizes) if self.mesh is not None else 0

    def with_scalings(self, c: CompiledCollective) -> CompiledCollective:
        """``c`` with each loss it sums (a value the step computes) marked with whether the module
        divides it by the rows it covers (:func:`~shardscope.engine.hlo.loss_scaling.loss_scaling`):
        what the ``shard_map`` fix divides its one sum after the loop by."""
        site = self._sites.get(c.name)
        if site is None or c.kind not in SUM_KINDS or not any(op.computed for op in c.operands):
            return c
        devices = collective_devices(c, self.mesh)
        return dataclasses.replace(c, operands=tuple(
            dataclasses.replace(op, scaling=loss_scaling(self.flow, site, k, devices)) if op.computed else op
            for k, op in enumerate(c.operands)))

    def with_signature(self, c: CompiledCollective, signature: Signature) -> CompiledCollective:
        """``c`` with its deferral's fix written for the whole function (``signature``): a
        deferrable sum's, or a splittable one's (its values split out are deferred the same way)."""
        judged = self._judged.get(c.name)
        if judged is None or c.verdict.kind not in (DEFERRABLE, SPLITTABLE):
            return c
        verdicts, loops, added = judged
        return dataclasses.replace(c, verdict=verdict_of(c, verdicts, self.style, self.counts, loops, added, signature))

    def collective(self, site: CollectiveSite) -> CompiledCollective:
        """The collective at ``site``, with its verdict."""
        inst = site.instruction
        verdicts = self.classifier.operand_verdicts(site)
        operands = tuple(self._operand(site, k, verdicts[k].kind if k < len(verdicts) else NEEDED)
                         for k in range(len(site.carried)))
        groups, axes = self._groups_and_axes(inst)
        if site.kind == ALL_TO_ALL and inst.dimensions is None and groups:
            operands = _values_of_peer_chunks(operands, len(groups[0]))
        named = inst if inst.metadata.op_name else site.anchor  # a TPU collective fusion's own copy has no metadata
        source = self.module.source(named, users=True)
        collective = CompiledCollective(
            name=inst.name, kind=site.kind, opcode=inst.opcode, computation=site.anchor.computation, operands=operands,
            loops=tuple(self.loop(w) for w in site.loops), in_conditional=site.in_conditional, groups=groups, axes=axes,
            written_by=_author(inst, site.kind), source=source.text() if source else "", op_name=named.metadata.op_name,
            source_file=source.file if source else "",
            verdict=Verdict(NEEDED, ""), paths=site.paths, wrapper=site.anchor.name if site.wrapped else "",
            scatters=self._scatters(site), in_condition_of=tuple(sorted(site.conditions)),
            layout_change=layout_change(inst, site.kind, axes),
            steps=tuple((step.name, step.computation) for step in site.steps),
        )
        added = site.kind in SUM_KINDS and all(v.kind == NEEDED for v in verdicts) \
            and adds_another_term(self.flow, site)
        self._judged[inst.name] = (verdicts, site.loops, added)
        self._sites[inst.name] = site
        return dataclasses.replace(collective, verdict=verdict_of(collective, verdicts, self.style, self.counts, site.loops,
                                                                  added))

    def named_after_pairing(self, c: CompiledCollective, sizes: dict[str, int],
                            dims: dict[str, tuple[tuple[int, ...], ...]] | None = None) -> CompiledCollective:
        """``c`` with the jaxpr view's name of the collective it pairs with, where it has one; each
        operand of a combined instruction takes the name of the one paired collective of its bytes
        (``sizes``: each jaxpr collective's bytes per run), else keeps its own; an operand pairing
        placed by shape (``dims``: each jaxpr collective's operands' dimensions), by
        :meth:`_placed_names`."""
        if c.operand_equations:
            names = self._placed_names(c, sizes, dims or {})
        elif not c.combined:
            name = self.namer.paired_value(c)
            names = [name] * len(c.operands)
        else:
            split = _split_values([op.written_bytes for op in c.operands], c.equations, sizes)
            names = ([self.namer.equation_value([e]) for e in split] if split is not None else
                     [self.namer.equation_value([e for e in c.equations if sizes.get(e) == op.written_bytes])
                      for op in c.operands])
        if not any(names):
            return c
        return dataclasses.replace(c, operands=tuple(
            dataclasses.replace(op, value=name, computed=name in self.namer.outputs or op.computed and not is_gradient_label(name))
            if name else op
            for op, name in zip(c.operands, names)))

    def _placed_names(self, c: CompiledCollective, sizes: dict[str, int],
                      dims: dict[str, tuple[tuple[int, ...], ...]]) -> list[str]:
        """Each operand's name where pairing placed a partial-auto shard_map's collective on it by
        shape (:attr:`CompiledCollective.operand_equations`): the gradient the module finds it
        sums, where that argument's type is the collective's operand's (the jaxpr names the sums
        of one ``lax.psum(grads, ...)`` all ``grads``, or after the output each reaches), else the
        jaxpr view's; the other operands by bytes, as :meth:`named_after_pairing` names them."""
        placed = set(c.operand_equations) - {""}
        rest = [e for e in c.equations if e not in placed]

        def placed_name(op: CompiledOperand, e: str) -> str:
            own = dims.get(e, ())
            if is_gradient_label(op.value) and len(own) == 1 and self.namer.equations is not None \
                    and self.namer.equations.argument_dims(labelled_argument(op.value)) == tuple(own[0]):
                return op.value
            return self.namer.equation_value([e])

        return [placed_name(op, e) if e else self.namer.equation_value([r for r in rest if sizes.get(r) == op.written_bytes])
                for op, e in zip(c.operands, c.operand_equations)]

    def loop(self, inst: Instruction) -> CompiledLoop:
        """The :class:`CompiledLoop` of the while instruction ``inst``."""
        body = next((c for role, c in inst.called_computations if role == "body"), "")
        source = self.module.source(inst, users=True)
        return CompiledLoop(inst.name, body, self.counts.trip_count(inst.name), source.text() if source else "",
                            inst.metadata.op_name)

    def _operand(self, site: CollectiveSite, k: int, verdict: str) -> CompiledOperand:
        name = site.carried[k]
        operand = self.module.instruction(name)
        shape = operand.shape if operand is not None else None
        text = str(shape.arrays[0]) if shape and len(shape.arrays) == 1 else (str(shape) if shape else "")
        named = self.namer.operand_value(site, k, reduction=site.kind in SUM_KINDS)
        return CompiledOperand(instruction=name, shape=text, bytes=shape.nbytes if shape else 0, value=named.value,
                               verdict=verdict, computed=named.computed,
                               promoted_from=promoted_from(self.module, site.instruction, k) if not site.parts else "")

    def _groups_and_axes(self, inst: Instruction) -> tuple[tuple[tuple[int, ...], ...] | None, tuple[str, ...] | None]:
        key = ("pairs", inst.source_target_pairs) if inst.source_target_pairs is not None else ("groups", inst.replica_groups)
        found = self._groups.get(key)
        if found is None:
            found = self._groups[key] = self._read_groups(inst)
        return found

    def _read_groups(self, inst: Instruction) -> tuple[tuple[tuple[int, ...], ...] | None, tuple[str, ...] | None]:
        devices = self.module.num_partitions * self.module.replica_count
        try:
            if inst.source_target_pairs is not None:
                pairs = replica_groups.decode_pairs(inst.source_target_pairs)
                return tuple(pairs), (replica_groups.pair_axes_of(pairs, self.mesh) if self.mesh else None)
            text = inst.replica_groups
            groups = replica_groups.decode(text if text is not None else "{}", devices)
        except replica_groups.ReplicaGroupsError:
            return None, None
        return groups, (replica_groups.mesh_axes_of(groups, self.mesh) if self.mesh else None)

    def _scatters(self, site: CollectiveSite) -> bool:
        """True for an all-reduce whose wrapping fusion keeps one shard of the sum (the TPU's
        all-reduce-scatter fusion): a reduce-scatter in effect."""
        if site.kind != ALL_REDUCE or site.anchor.opcode != "fusion":
            return False
        operand = self.module.instruction(site.instruction.operands[0]) if site.instruction.operands else None
        return operand is not None and site.result.shape.nbytes < operand.shape.nbytes


def _values_of_peer_chunks(chunks: tuple[CompiledOperand, ...], peers: int) -> tuple[CompiledOperand, ...]:
    """The values of an all-to-all in its tuple form (XLA:CPU's): it lists one operand per peer
    of its group, the chunk of one value that peer receives, so each ``peers`` operands in a
    row are one value (its bytes their sum, its shape the tuple of its chunks). One value is
    one all-to-all; several only when a combiner merged several."""
    if peers < 2 or len(chunks) % peers:
        return chunks
    values = []
    for start in range(0, len(chunks), peers):
        group = chunks[start:start + peers]
        names = list(dict.fromkeys(op.value for op in group if op.value))
        values.append(CompiledOperand(
            instruction=group[0].instruction, shape=f"({', '.join(op.shape for op in group)})",
            bytes=sum(op.bytes for op in group), value=names[0] if len(names) == 1 else "",
            verdict=NEEDED if any(op.verdict == NEEDED for op in group) else group[0].verdict,
            computed=all(op.computed for op in group)))
    return tuple(values)


def layout_change(inst: Instruction, kind: str, axes: tuple[str, ...] | None) -> str:
    """How an all-gather, all-to-all or collective-permute moves a value's shards, in words
    (``dimension 2 gathered over x``); ``""`` for a reduction."""
    over = f" over {','.join(axes)}" if axes else ""
    if kind == ALL_GATHER:
        dims = inst.dimensions or ()
        return f"dimension {','.join(map(str, dims))} gathered{over}" if dims else f"gathered{over}"
    if kind == ALL_TO_ALL:
        exchanged = inst.dimensions
        return f"dimension {exchanged[0]} exchanged{over}" if exchanged else f"shards exchanged{over}"
    if kind == COLLECTIVE_PERMUTE:
        return f"shards moved between devices{over}"
    return ""


def _author(inst: Instruction, kind: str) -> str:
    """Who wrote it, when the instruction says: the partitioner marks its own on jax >= 0.11,
    and an ``op_name`` ending in a JAX collective that compiles to its kind is the program's (a
    ``psum`` may be any sum; the partitioner's all-to-all that reshards a ``pmean``'s result
    carries that ``pmean``'s ``op_name``); else pairing decides."""
    if inst.is_spmd_generated:
        return PARTITIONER
    return PROGRAM if any(_compiles_to(p, kind) for p in inst.metadata.primitives) else ""


def _compiles_to(primitive: str, kind: str) -> bool:
    """True when the JAX collective ``primitive`` may compile to a collective of ``kind`` (a
    ``reshard`` to any)."""
    if primitive not in JAX_COLLECTIVE_PRIMITIVES:
        return False
    compiled = OF_PRIMITIVE.get(primitive)
    return compiled is None or compiled == kind or {compiled, kind} <= SUM_KINDS


def _split_values(operand_bytes: list[int], equations: Sequence[str], sizes: dict[str, int]) -> list[str] | None:
    """Each operand's equation when a combined instruction carries each of its values in several
    consecutive operands (XLA:TPU all-reduces a complex value as its real and imaginary parts: no
    operand's bytes are a value's): the operands read left to right, each run of
    them whose bytes add up to the bytes of an equation not yet placed taking that equation.
    None when the operands are the values themselves (each one's bytes an equation's) or no such
    reading places every operand and equation."""
    if not equations or len(operand_bytes) <= len(equations) or any(e not in sizes for e in equations):
        return None
    left, placed, start = list(equations), [], 0
    while start < len(operand_bytes):
        total, end, found = 0, start, None
        while end < len(operand_bytes) and found is None:
            total += operand_bytes[end]
            end += 1
            found = next((e for e in left if sizes[e] == total and (end - start > 1 or len(left) == 1)), None)
        if found is None:
            return None
        left.remove(found)
        placed += [found] * (end - start)
        start = end
    return placed if not left else None

