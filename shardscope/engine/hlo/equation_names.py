"""The jaxpr view's name of any equation's value, for the compiled view to name what it carries.

One naming: a collective is named as the jaxpr view names it (``dataflow.collectives``: the
argument it is the gradient of, else the program output it reaches or input it comes from);
any other equation the same way, by :func:`shardscope.engine.jaxpr.dataflow.value_name`, except that a
gradient is named as the gradient of its argument (``grad(params['W'])``,
:func:`shardscope.engine.pytree_paths.gradient_label`). A gradient is an equation of the
backward pass (its name stack holds ``transpose(...)``); JAX transposes each forward equation
under that equation's own source information, so the two share their user frames, columns
included (their origin): the forward equation's operand of the gradient's shape and type leads
back to the argument (``params['W']``, or ``W`` for a bare one). The forward equation is one of
the same primitive (a ``dot_general``'s gradient is a ``dot_general``): other equations of the
same line (the loss's ``sub``) share the origin too. Only a pairing that leads to exactly one
argument names one; the layers made by one line in a Python loop are told apart by the outputs
their gradients reach (``out[0][2]['b']`` is the update of ``params[2]['b']``).

A compiled instruction finds its equation by what XLA keeps of it: the primitive at the end of
its ``op_name``, whether the name stack is the backward pass's, its source line, and its
shape: one device's, the whole of an equation's value or a shard of it.
"""

from __future__ import annotations

import functools
from itertools import permutations
from math import prod
from typing import TYPE_CHECKING, Sequence

from shardscope.engine.hlo.memo import cached_method
from shardscope.engine.hlo.source import SourceLocation
from shardscope.engine.jaxpr.dataflow import outputs_reached, value_name
from shardscope.engine.jaxpr.dead_code import named_equations
from shardscope.engine.jaxpr.model import Equation, Program
from shardscope.engine.jaxpr.valueflow import ValueIndex
from shardscope.collective_kinds import PSUM_INVARIANT
from shardscope.engine.pytree_paths import gradient_label, told_apart_by_outputs

if TYPE_CHECKING:
    import jax

    from shardscope.engine.jaxpr.dataflow import Collective

Frames = tuple[tuple[str, int, int], ...]
"""The user's frames of an equation, innermost first: ``((file, line, column), ...)``."""

_FORWARD_OF = {"transpose": {"dot_general", "transpose"}, PSUM_INVARIANT: {"pvary", "pcast"},
               "reduce_sum": {"broadcast_in_dim", "reduce_sum", "reshape"}, "scatter-add": {"gather"},
               "scatter_add": {"gather"}}
"""The forward primitives a backward-pass primitive transposes, where they differ: the gradient
of a matmul's operand is a ``dot_general``, sometimes followed by a ``transpose``; the sum of a
replicated value's gradient is the transpose of its implicit ``pvary``; a broadcast's (a norm's
scale times the activations, a bias reshaped to add to every row as flax's ``Linear`` does) is
a ``reduce_sum``; an embedding lookup's a ``scatter-add``."""


class EquationNames:
    """Names of the values of one traced program's equations (computed on first use)."""

    def __init__(self, closed_jaxpr: "jax.extend.core.ClosedJaxpr", program: Program, input_names: Sequence[str],
                 output_names: Sequence[str], collectives: Sequence["Collective"] = ()) -> None:
        self.closed_jaxpr = closed_jaxpr
        self.program = program
        self.index = ValueIndex(program)
        self.inputs = [""] * (len(program.root.inputs) - len(input_names)) + list(input_names)
        self.outputs = list(output_names)
        self._collectives = {c.equation_id: c.value for c in collectives}

    def collective_value(self, equation_id: str) -> str:
        """The value the jaxpr view gives the collective ``equation_id``."""
        return self._collectives.get(equation_id, "")

    def argument_dims(self, name: str) -> tuple[int, ...] | None:
        """The jaxpr type's dimensions of the program input ``name`` (None when none is so named)."""
        k = next((k for k, given in enumerate(self.inputs) if given == name), None)
        return None if k is None else self.program.root.inputs[k].shape

    def values_of(self, op_name: str, source: SourceLocation | None, dims: tuple[int, ...] | None,
                  frames: Frames = ()) -> frozenset[str]:
        """The names of the equations an HLO instruction may come from: those with its
        primitive, pass (forward or backward) and line, preferring the ones whose output the
        instruction's per-device ``dims`` fit (:func:`_fitting`; None for a tuple-shaped one).
        Several when one line made several values (``q, k, v = ...``), unless the instruction's
        whole stack (``frames``: ``(file, line, column)``, innermost first) tells them apart: two
        layers called on one line (``out(tanh(hidden(x)))``) differ by the column of their call."""
        head = op_name.split(";", 1)[0]
        primitive = head.rsplit("/", 1)[-1]
        if not primitive or source is None:
            return frozenset()
        key = (primitive, source.file, source.line, "transpose(" in head, dims)
        names, by_frames = self._values_at(*key)
        for k in range(min(len(frames), _FRAMES_COMPARED), 0, -1) if len(names) > 1 else ():
            if frames[:k] in by_frames:  # the equations whose innermost frames are the instruction's
                return by_frames[frames[:k]]
        return names

    @cached_method
    def _values_at(self, primitive: str, file: str, line: int, backward: bool, dims: tuple[int, ...] | None
                   ) -> tuple[frozenset[str], dict[Frames, frozenset[str]]]:
        """:meth:`values_of`, once per instruction kind and line (a combined sum's hundreds of
        gradients of one line in a Python loop ask the same question): the names, and the names
        by the innermost frames of their equations (as many as :data:`_FRAMES_COMPARED`)."""
        found = [(eqn_id, eqn) for eqn_id, eqn in self._at(primitive, file, line) if self._backward[eqn_id] == backward]
        sized = _fitting(found, dims)
        by_frames: dict[Frames, set[str]] = {}
        for eqn_id, _ in sized:
            by_frames.setdefault(self._positions[eqn_id][:_FRAMES_COMPARED], set()).add(self.name(eqn_id))
        names = frozenset({self.name(eqn_id) for eqn_id, _ in sized} - {""})
        return names, {key: frozenset(group - {""}) for key, group in by_frames.items() if group - {""}}

    @cached_method
    def name(self, equation_id: str) -> str:
        """The value of the equation ``equation_id``: the gradient of the argument it is the
        gradient of (``grad(params['W'])``), else the one output it reaches or input it comes
        from (``""`` when none is one value)."""
        eqn = self._equations.get(equation_id)
        arguments = self.gradient_of(equation_id)
        if len(arguments) > 1 and eqn is not None:  # one line made several (q, k, v; a loop's layers)
            arguments = told_apart_by_outputs(arguments, outputs_reached(self.index, eqn, self.outputs))
        if len(arguments) == 1:
            return gradient_label(arguments.pop())
        return value_name(self.index, eqn, self.inputs, self.outputs, reduction=True) if eqn is not None else ""

    def gradient_of(self, equation_id: str) -> set[str]:
        """The arguments whose gradient the backward-pass equation ``equation_id`` may compute:
        one when its forward equation says which, several when one line made several values.

        The forward equations that read a value the gradient reads too (the gradient of ``x @ W``
        with respect to ``W`` reads ``x``) are the ones it transposes when any of them has the
        gradient's operand: the layers a Python loop made on one line are told apart without
        looking at each other's equations. Else every forward equation of its origin."""
        raw = self._raw.get(equation_id)
        if raw is None or not self._backward[equation_id] or len(raw.outvars) != 1:
            return set()
        forwards = self._forward_equations(equation_id, raw)
        readers = self._forward_readers()
        sharing = {forward_id: forwards[forward_id] for v in raw.invars for forward_id in readers.get(id(v), ())
                   if forward_id in forwards}
        for candidates in (sharing, forwards):
            found: set[str] = set()
            transposed = argument = False
            for forward_id, forward in candidates.items():
                k = _primal_operand(forward, raw)
                if k is not None:
                    transposed = True
                    argument = argument or self._is_argument(forward_id, k)
                    found |= self._operand_inputs(forward_id, k)
            if transposed and not argument:
                # each equation it may transpose has an activation there (the mean of ``x * x`` in a
                # norm), computed from arguments but none of them: no argument's gradient
                return set()
            if found or candidates is forwards:
                return found
        return set()

    def _forward_equations(self, equation_id: str, raw: "jax.extend.core.JaxprEqn"
                           ) -> dict[str, "jax.extend.core.JaxprEqn"]:
        """The forward equations ``raw`` may transpose: the same origin, a primitive it transposes,
        an operand of the gradient's type (in the same dimension order or another)."""
        want = raw.outvars[0].aval
        by_type = self._forward_by_type()
        origin = self._origins[equation_id]
        found: dict[str, "jax.extend.core.JaxprEqn"] = {}
        for primitive in _FORWARD_OF.get(raw.primitive.name, {raw.primitive.name}):
            for key in (_type_key(want), _type_key(want, any_order=True)):
                found.update(by_type.get((origin, primitive, key), {}))
        return found

    @cached_method
    def _operand_inputs(self, forward_id: str, k: int) -> frozenset[str]:
        """The arguments the operand ``k`` of the forward equation ``forward_id`` comes from; of a
        loop's carry that several arguments update (SGD's weights, updated with a gradient of
        the batch), the one argument it starts as (``w``: its gradient is ``grad(w)``)."""
        eqn = self._equations.get(forward_id)
        if eqn is None:
            return frozenset()
        found = self._inputs_of(forward_id, eqn.inputs[k].name)
        if len(found) > 1:
            started = self.index.started_as(self.index.block_of[forward_id].block.id, eqn.inputs[k].name)
            if started is not None and started < len(self.inputs) and self.inputs[started]:
                return frozenset({self.inputs[started]})
        return frozenset(found)

    def _is_argument(self, forward_id: str, k: int) -> bool:
        """True when the operand ``k`` of the forward equation ``forward_id`` is a program input
        itself, moved (cast, reshaped, transposed, constrained), passed into a call or a loop (a
        loop's carry is the argument it starts as, a scan's slice the stacked argument's)."""
        eqn = self._equations.get(forward_id)
        return eqn is not None and self._argument_is(self.index.block_of[forward_id].block.id, eqn.inputs[k].name)

    def _argument_is(self, block_id: str, name: str) -> bool:
        """True when the value ``name`` of block ``block_id`` is a program input through moves
        (:data:`_MOVES`), the outputs of calls and the inputs of blocks."""
        for _ in range(256):
            facts = self.index.blocks[block_id]
            producer = facts.producers.get(name)
            if producer is not None:
                eqn, k = producer
                if eqn.kind == "call":  # a pjit, a closed_call, a custom_jvp: its block's output k
                    sub = next((b for b in eqn.blocks if k < len(b.outputs)), None)
                    if sub is None:
                        return False
                    block_id, name = sub.id, sub.outputs[k].name
                elif eqn.primitive in _MOVES and eqn.inputs:  # a barrier moves each operand to its output
                    name = eqn.inputs[k if len(eqn.inputs) == len(eqn.outputs) else 0].name
                else:
                    return False
            elif name not in facts.input_positions:
                return False  # a literal
            elif facts.owner is None or facts.outer is None:
                return True
            else:
                outer = self.index.operand_of(facts, name)
                if outer is None:
                    return False
                block_id, name = facts.outer.block.id, outer
        return False

    def _inputs_of(self, equation_id: str, value: str) -> set[str]:
        block = self.index.block_of[equation_id].block.id
        return {self.inputs[k] for k in self.index.backward(block, [value]) if k < len(self.inputs) and self.inputs[k]}

    # ------------------------------------------------------------------ the raw equations

    @functools.cached_property
    def _raw(self) -> dict[str, "jax.extend.core.JaxprEqn"]:
        return dict(named_equations(self.closed_jaxpr))

    @functools.cached_property
    def _backward(self) -> dict[str, bool]:
        """Whether each equation belongs to the backward pass: its name stack, or the name stack
        of an equation around it (a transposed scan's body says nothing itself), holds
        ``transpose(``."""
        found: dict[str, bool] = {}
        for eqn_id, eqn in self._raw.items():  # outer equations come before the ones inside them
            found[eqn_id] = "transpose(" in str(eqn.source_info.name_stack) or found.get(_owner(eqn_id), False)
        return found

    @functools.cached_property
    def _origins(self) -> dict[str, Frames]:
        """Every equation's origin: its user frames, the innermost one's column left out. The
        columns of the frames around it tell apart two layers called on one line
        (``out(tanh(hidden(x)))``); the innermost line's equations are one operation's steps at
        several columns (flax's ``y += jnp.reshape(bias, ...)``: the reshape and the broadcast)."""
        return {eqn_id: ((frames[0][0], frames[0][1], 0), *frames[1:]) if frames else ()
                for eqn_id, frames in self._positions.items()}

    @functools.cached_property
    def _equations(self) -> dict[str, Equation]:
        return {site.equation.id: site.equation for site in self.program.sites()}

    @functools.cached_property
    def _positions(self) -> dict[str, Frames]:
        """Every equation's user frames as ``(file, line, column)``, innermost first (the costly
        part: one traceback walk per equation). A gradient finds its forward equation by them:
        JAX transposes an equation under its own traceback, so the two share every frame, columns
        too."""
        from jax._src import source_info_util  # JAX is loaded by now: the equations are its

        return {eqn_id: tuple((f.file_name, f.start_line, f.start_column)
                              for f in source_info_util.user_frames(eqn.source_info.traceback))
                for eqn_id, eqn in self._raw.items()}

    @cached_method
    def _by_primitive_line(self) -> dict[tuple[str, str, int], list[tuple[str, "jax.extend.core.JaxprEqn"]]]:
        found: dict[tuple[str, str, int], list] = {}
        for eqn_id, eqn in self._raw.items():
            origin = self._origins[eqn_id]
            if origin:
                found.setdefault((eqn.primitive.name, origin[0][0], origin[0][1]), []).append((eqn_id, eqn))
        return found

    @cached_method
    def _forward_readers(self) -> dict[int, list[str]]:
        """The forward-pass equations that read each variable (by its ``id``)."""
        found: dict[int, list[str]] = {}
        for eqn_id, eqn in self._raw.items():
            if not self._backward[eqn_id]:
                for v in eqn.invars:
                    found.setdefault(id(v), []).append(eqn_id)
        return found

    @cached_method
    def _forward_by_type(self) -> dict[tuple[Frames, str, tuple], dict[str, "jax.extend.core.JaxprEqn"]]:
        """The forward-pass equations by origin, primitive and the type of an operand (its
        dimensions in order, and sorted): where a gradient of that type finds its forward
        equation, in one look-up rather than a scan of its origin's equations."""
        found: dict[tuple[Frames, str, tuple], dict[str, "jax.extend.core.JaxprEqn"]] = {}
        for eqn_id, eqn in self._raw.items():
            if self._backward[eqn_id]:
                continue
            origin = self._origins[eqn_id]
            for v in eqn.invars:
                aval = getattr(v, "aval", None)
                if aval is None:
                    continue
                for key in (_type_key(aval), _type_key(aval, any_order=True)):
                    found.setdefault((origin, eqn.primitive.name, key), {})[eqn_id] = eqn
        return found

    def _at(self, primitive: str, file: str, line: int) -> list[tuple[str, "jax.extend.core.JaxprEqn"]]:
        return self._by_primitive_line().get((primitive, file, line), [])


_MOVES = frozenset({"convert_element_type", "reshape", "transpose", "broadcast_in_dim", "squeeze", "expand_dims",
                    "copy", "copy_p", "sharding_constraint", "reshard", "mesh_cast", "device_put", "pvary", "pcast",
                    "optimization_barrier", "reduce_precision"})
"""Primitives whose output is their operand moved, cast or placed: the gradient with respect to it
is the gradient of the argument it moves (``p['embed'].T``, ``w.astype(jnp.bfloat16)``)."""

_FRAMES_COMPARED = 3
"""How many frames, innermost first, an instruction's stack and an equation's must share."""


def _owner(equation_id: str) -> str:
    """The id of the equation whose sub-jaxpr holds ``equation_id`` (``""`` at the top):
    ``scan_0/dot_general_1`` is in ``scan_0``, ``while_0.cond/lt_0`` in ``while_0``."""
    if "/" not in equation_id:
        return ""
    block = equation_id.rsplit("/", 1)[0]
    last = block.rsplit("/", 1)[-1]
    return block[: len(block) - len(last) + last.find(".")] if "." in last else block


def _primal_operand(forward: "jax.extend.core.JaxprEqn", backward: "jax.extend.core.JaxprEqn") -> int | None:
    """The operand of ``forward`` whose gradient ``backward`` computes: one ``backward`` does not
    read itself (the gradient of ``x @ W`` with respect to ``W`` reads ``x``), of the gradient's
    type, its dimensions in the same order or else in any order (a gradient made transposed)."""
    reads = {id(v) for v in backward.invars}
    want = backward.outvars[0].aval
    operands = [k for k, v in enumerate(forward.invars) if id(v) not in reads and hasattr(v, "aval")]
    for same in (_same_type, _same_type_transposed):
        matching = [k for k in operands if same(forward.invars[k].aval, want)]
        if matching:
            return matching[0] if len(matching) == 1 else None
    return None


def _type_key(aval: object, any_order: bool = False) -> tuple:
    """A value's type as a key: its dtype and dimensions (sorted with ``any_order``)."""
    shape = getattr(aval, "shape", None)
    dims = tuple(sorted(shape) if any_order else shape) if shape is not None else None
    return ("sorted" if any_order else "ordered", str(getattr(aval, "dtype", "")), dims)


def _same_type(a: object, b: object) -> bool:
    return getattr(a, "shape", None) == getattr(b, "shape", 0) and str(getattr(a, "dtype", "")) == str(getattr(b, "dtype", "?"))


def _same_type_transposed(a: object, b: object) -> bool:
    shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
    return (shape_a is not None and shape_b is not None and sorted(shape_a) == sorted(shape_b)
            and str(getattr(a, "dtype", "")) == str(getattr(b, "dtype", "?")))


def _fitting(found: "list[tuple[str, jax.extend.core.JaxprEqn]]", dims: tuple[int, ...] | None
             ) -> "list[tuple[str, jax.extend.core.JaxprEqn]]":
    """The equations of ``found`` whose output an instruction of per-device ``dims`` holds, the
    closest fit first: the whole value (its dimensions, in any order), else one device's shard of
    it (each of its dimensions a multiple of one of the instruction's, in any order too: the
    partitioner split it, and XLA may fold the transpose that follows it into the instruction),
    else its elements reshaped; all of them when none fits (or ``dims`` is None).

    The jaxpr's types are global and the compiled module's per device, so a count of elements
    alone mistakes a shard for another value of its size: ``W2``'s gradient split over ``model``
    (``[64, 128]`` on ``[64, 64]``) holds as many elements as the activation's (``[32, 128]``)."""
    if dims is None:
        return found
    # dimensions of one element say nothing of the value (XLA:TPU writes a matmul's [64, 128] as [64, 128, 1])
    part = tuple(d for d in dims if d != 1)
    shaped = [(pair, _output_dims(pair[1])) for pair in found]
    for fits in (_same_dims, _shard_of, _same_elements):
        kept = [pair for pair, whole in shaped if whole is not None and fits(tuple(d for d in whole if d != 1), part)]
        if kept:
            return kept
    return found


def _output_dims(eqn: "jax.extend.core.JaxprEqn") -> tuple[int, ...] | None:
    shape = getattr(eqn.outvars[0].aval, "shape", None) if eqn.outvars else None
    return tuple(int(d) for d in shape) if shape is not None else None


def _same_dims(whole: tuple[int, ...], part: tuple[int, ...]) -> bool:
    return sorted(whole) == sorted(part)


def _shard_of(whole: tuple[int, ...], part: tuple[int, ...]) -> bool:
    """True when ``part`` splits each dimension of ``whole``, in its order or another: the gradient of
    ``h @ W`` with respect to ``W`` is a ``dot_general`` then a ``transpose`` in the jaxpr, and XLA:TPU
    writes the ``dot_general``'s instruction in the transposed layout (the CPU transposes after it).
    Only as many orders as :data:`_ORDERS_TRIED` allow (a high-rank value keeps its own)."""
    if len(whole) != len(part):
        return False
    orders = permutations(part) if len(part) <= _ORDERS_TRIED else (part,)
    return any(all(p > 0 and w % p == 0 for w, p in zip(whole, order)) for order in orders)


_ORDERS_TRIED = 4
"""The highest rank whose every order of dimensions :func:`_shard_of` tries (4! = 24 orders)."""


def _same_elements(whole: tuple[int, ...], part: tuple[int, ...]) -> bool:
    return prod(whole) == prod(part)
