"""shardscope's own model of a jaxpr: an immutable tree with stable names.

JAX names variables ``a, b, c, ...`` in print order, so one extra equation renames everything
after it and a diff between two plans is all noise. Here an equation is named after its
primitive and how many equations of that primitive came before it in the same block
(``dot_general_1``); a sub-jaxpr's inputs are named after its equation and their role
(``scan_0.const0``, ``scan_0.carry0``, ``scan_0.xs0``). Names are local to their block, as
variables are in a jaxpr; ids qualify them with the path of blocks around them
(``shard_map_0/scan_0/psum_invariant_0``) so that they are unique in the program. Two plans
that differ in one place differ in one place of their canonical text.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field, fields
from math import prod
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterator, TypeGuard, cast

import numpy as np

from shardscope.engine.jaxpr.custom_rules import RuleSite, backward_rule_site
from shardscope.collective_kinds import PRIMITIVES, PSUM_INVARIANT
from shardscope.engine.user_frames import users_first
from shardscope.engine.written_values import assigned_name, written_argument
from shardscope.sources.prng_keys import is_key_dtype, key_itemsize

if TYPE_CHECKING:
    from jax._src.source_info_util import Frame
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var

COLLECTIVE_PRIMITIVES = PRIMITIVES
"""Primitives that move data between devices (:data:`shardscope.collective_kinds.PRIMITIVES`)."""

CAST_PRIMITIVES = frozenset(
    {"pvary", "pcast", "preduced", "vary_unreduced_cast_p", "vary_unreduced_cast", "reduced_vary_cast", "reduced_vary_cast_p"}
)
"""Primitives that only change a value's varying-axes type: no communication."""

LOOP_PRIMITIVES = frozenset({"scan", "while"})

_KIND_OF = {
    **{"cond": "cond"},
    **{p: "loop" for p in LOOP_PRIMITIVES},
    **{p: "cast" for p in CAST_PRIMITIVES},
    **{p: "collective" for p in COLLECTIVE_PRIMITIVES},
}
"""An equation's kind by its primitive, where the primitive decides it (later groups win, as the
order of :attr:`Equation.kind`'s checks did)."""

_DTYPE_SHORT = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "c64", "complex128": "c128", "int8": "i8", "int16": "i16", "int32": "i32",
    "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bool": "bool", "float0": "float0",
}


@dataclass(frozen=True)
class Value:
    """A variable or literal of the program, with its per-device type and varying axes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    varying: frozenset[str] = frozenset()
    itemsize: int = 0
    reduced: frozenset[str] = frozenset()
    unreduced: frozenset[str] = frozenset()

    # The two texts are cached by what they are made of, not on the value: a program has a handful
    # of distinct types among tens of thousands of values, and a cached_property takes a lock on
    # every read (Python 3.11).
    @property
    def type_str(self) -> str:
        """``f32[16,5]`` (the per-device shape inside a shard_map)."""
        return _type_text(self.dtype, self.shape)

    @property
    def vma_str(self) -> str:
        """``{V:data,model}`` when the value varies over mesh axes, ``{R:s}`` reduced, ``{U:s}``
        unreduced (JAX's reduced/unreduced types), several side by side; else empty."""
        if not (self.varying or self.reduced or self.unreduced):
            return ""
        return _vma_text(self.varying, self.reduced, self.unreduced)

    @property
    def nbytes(self) -> int:
        """Bytes of one copy of this value."""
        return prod(self.shape) * self.itemsize

    def declaration(self) -> str:
        """``name:f32[16,5]{V:s}``, as a definition is printed."""
        return f"{self.name}:{self.type_str}{self.vma_str}"


@functools.lru_cache(maxsize=4096)
def _type_text(dtype: str, shape: tuple[int, ...]) -> str:
    short = _DTYPE_SHORT.get(dtype, dtype)
    return f"{short}[{','.join(map(str, shape))}]"


@functools.lru_cache(maxsize=4096)
def _vma_text(varying: frozenset[str], reduced: frozenset[str], unreduced: frozenset[str]) -> str:
    return "".join(
        "{" + tag + ":" + ",".join(sorted(axes)) + "}"
        for tag, axes in (("V", varying), ("R", reduced), ("U", unreduced))
        if axes
    )


@dataclass(frozen=True)
class Block:
    """A list of equations with inputs and outputs: the program itself or a sub-jaxpr.

    ``id`` is ``""`` for the program, the owning equation's id for a single body
    (``shard_map_0/scan_0``) and ``<equation id>.<role>`` otherwise (``while_0.cond``).
    """

    id: str
    role: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    equations: tuple["Equation", ...]


@dataclass(frozen=True)
class Equation:
    """One equation; loops, calls and shard_maps carry their sub-jaxprs as ``blocks``.

    ``name`` is unique in its block (``psum_invariant_0``); ``id`` in the program.
    """

    id: str
    name: str
    primitive: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    params: tuple[tuple[str, str], ...]
    blocks: tuple[Block, ...] = ()
    trip_count: int | None = None
    # ``file.py:42 (fn)``: the user's line that made a collective or a loop (empty for other
    # equations, whose source is never shown, and not compared: the same program traced from
    # another file is the same program).
    source: str = field(default="", compare=False)
    # ``fori_loop``: the JAX function the user called that made a loop (a fori_loop with static
    # bounds is a scan in the jaxpr; only the traceback says which it was). Empty when unknown.
    written_as: str = field(default="", compare=False)
    # the user's frames that made a cast or a psum_invariant (``user_frames_of``): a psum_invariant is
    # paired with the pvary it transposes by them; not compared, as ``source``
    origin: tuple[tuple[str, int, str], ...] = field(default=(), compare=False, repr=False)
    # a collective's operand as the user's call writes it (``y`` of ``lax.ppermute(y, ...)``;
    # ``grad(y)`` for the transpose JAX makes of it); empty when the line does not say
    written: str = field(default="", compare=False, repr=False)
    # the variable the program assigns a forward collective's result to (``total`` of
    # ``total = lax.psum(...)``, :func:`assigned_name`); empty when no statement names it
    assigned: str = field(default="", compare=False, repr=False)
    # a collective a custom_vjp's backward rule wrote: the rule's line (``file.py:24 (_bwd)``),
    # where ``source`` is the line JAX's frames keep (the custom function's call)
    rule_source: str = field(default="", compare=False, repr=False)
    # a collective inside a shard_map that leaves some mesh axes to the partitioner
    # (``axis_names={'data'}`` on a data x model mesh): those axes with their sizes. Its operands'
    # types are whole along them, and how the partitioner splits them is not in the jaxpr
    auto_axes: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def kind(self) -> str:
        """``collective``, ``cast``, ``loop``, ``cond``, ``call`` or ``op``."""
        kind = _KIND_OF.get(self.primitive)  # one lookup: asked several times of every equation
        if kind is not None:
            return kind
        return "call" if self.blocks else "op"

    @property
    def axes(self) -> tuple[str, ...]:
        """The mesh axes a collective or cast works over (empty for other equations)."""
        for key in ("axes", "axis_name"):
            raw = self.param_values.get(key)
            if raw is not None:
                return tuple(raw) if isinstance(raw, (tuple, list, frozenset, set)) else (raw,)
        return ()

    @property
    def param_values(self) -> dict[str, Any]:
        """The raw values of the parameters shardscope keeps for collectives."""
        return dict(self._raw)

    _raw: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)

    def line(self) -> str:
        """``out:f32[5]{V:s} = prim[k=v] in0 in1``: the canonical one-line form."""
        outs = " ".join(v.declaration() for v in self.outputs) or "()"
        params = "[" + ", ".join(f"{k}={v}" for k, v in self.params) + "]" if self.params else ""
        args = " ".join(v.name for v in self.inputs)
        return f"{outs} = {self.primitive}{params} {args}".rstrip()


@dataclass(frozen=True)
class Site:
    """Where an equation sits: the loops around it, innermost last."""

    equation: Equation
    block: Block
    loops: tuple[Equation, ...]
    in_conditional: bool


@dataclass(frozen=True)
class Program:
    """A closed jaxpr as shardscope sees it."""

    root: Block

    def sites(self) -> Iterator[Site]:
        """Every equation, depth first in program order, with its enclosing loops."""
        yield from _sites(self.root, (), False)

    @property
    def equation_count(self) -> int:
        """How many equations there are, sub-jaxprs included."""
        return sum(1 for _ in self.sites())

    def canonical_text(self) -> str:
        """One line per equation, indented by nesting, with stable names: what a diff of two plans
        reads. A cast is named after what it casts (``pvary(scan_0.const0)``), not numbered: the
        plans that move casts (the deferred plan casts before the loop what the naive plan casts
        in it) would otherwise number every later cast, and every use of one, differently."""
        root = self.root
        names = _cast_names(root)
        lines = ["in " + " ".join(_declared(v, names) for v in root.inputs)]
        _render(root, 0, lines)
        lines.append("out " + " ".join(names.get(v.name, v.name) for v in root.outputs))
        return "\n".join(lines) + "\n"


def _sites(block: Block, loops: tuple, conditional: bool) -> Iterator[Site]:
    for eqn in block.equations:
        yield Site(eqn, block, loops, conditional)
        # A while's cond runs on every iteration too (one more time than its body); its trip
        # count is unknown either way, so both count as inside the loop.
        inner_loops = loops + (eqn,) if eqn.kind == "loop" else loops
        for sub in eqn.blocks:
            yield from _sites(sub, inner_loops, conditional or eqn.kind == "cond")


def _render(block: Block, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    names = _cast_names(block)
    for eqn in block.equations:
        lines.append(pad + (_renamed_line(eqn, names) if names else eqn.line()))
        for sub in eqn.blocks:
            inner = _cast_names(sub)
            head = " ".join(_declared(v, inner) for v in sub.inputs)
            lines.append(f"{pad}  {{ {sub.role} {head}")
            _render(sub, depth + 2, lines)
            lines.append(f"{pad}  }} -> " + " ".join(inner.get(v.name, v.name) for v in sub.outputs))


def _cast_names(block: Block) -> dict[str, str]:
    """The canonical text's names of ``block``'s casts' results: ``pvary(x)`` for the cast of
    ``x`` (of a cast of a cast: ``pvary(preduced(x))``); the k-th cast of the same value to
    another type, ``pvary(x)#k``. Every other name stays as the model has it."""
    names: dict[str, str] = {}
    made: dict[str, str] = {}  # a canonical name -> the type it was given first
    for eqn in block.equations:
        if eqn.kind != "cast":
            continue
        for operand, out in zip(eqn.inputs, eqn.outputs):
            if out.name == "_":
                continue
            name = f"{eqn.primitive}({names.get(operand.name, operand.name)})"
            typed, k = out.type_str + out.vma_str, 1
            candidate = name
            while made.get(candidate, typed) != typed:  # the same cast of the same value is the same value
                k += 1
                candidate = f"{name}#{k}"
            made[candidate] = typed
            names[out.name] = candidate
    return names


def _declared(value: Value, names: dict[str, str]) -> str:
    return f"{names.get(value.name, value.name)}:{value.type_str}{value.vma_str}"


def _renamed_line(eqn: Equation, names: dict[str, str]) -> str:
    """:meth:`Equation.line` with the block's casts named by :func:`_cast_names`."""
    outs = " ".join(_declared(v, names) for v in eqn.outputs) or "()"
    params = "[" + ", ".join(f"{k}={v}" for k, v in eqn.params) + "]" if eqn.params else ""
    args = " ".join(names.get(v.name, v.name) for v in eqn.inputs)
    return f"{outs} = {eqn.primitive}{params} {args}".rstrip()


# --------------------------------------------------------------------------- conversion


def qualify(block_id: str, name: str) -> str:
    """The program-wide id of ``name`` defined in the block ``block_id``."""
    return f"{block_id}/{name}" if block_id else name
def from_jaxpr(closed_jaxpr: ClosedJaxpr | Jaxpr) -> Program:
    """Convert a JAX ``ClosedJaxpr`` (or ``Jaxpr``) into a :class:`Program`."""
    jaxpr = cast("Jaxpr", getattr(closed_jaxpr, "jaxpr", closed_jaxpr))  # a ClosedJaxpr's, or the Jaxpr given
    names = [f"const{i}" for i in range(len(jaxpr.constvars))] + [f"in{i}" for i in range(len(jaxpr.invars))]
    return Program(_block(jaxpr, "", "program", names, {}))


class _Namer:
    """Names the variables of one block: a counter per primitive.

    ``facts`` is shared by every block of one program: what a value takes from its aval, by
    the aval's identity (a program of 10k equations has about a dozen distinct aval objects,
    and reading one costs more than the lookup). The dict holds each aval, so no id is reused
    while it lives.
    """

    def __init__(self, facts: dict[int, tuple[Any, _AvalFacts]]) -> None:
        self.counts: Counter[str] = Counter()
        self.values: dict[Any, Value] = {}  # a variable's value, made once for all its uses
        self.facts = facts

    def next_id(self, primitive: str) -> str:
        k = self.counts[primitive]
        self.counts[primitive] += 1
        return f"{primitive}_{k}"

    def bind(self, var: Var, name: str) -> Value:
        value = self.values[var] = self.value(var, name)
        return value

    def use(self, atom: Var | Literal) -> Value:
        if _is_literal(atom):
            return self.value(atom, _literal_text(atom))
        value = self.values.get(atom)
        return value if value is not None else self.value(atom, "?")

    def value(self, atom: Var | Literal, name: str) -> Value:
        aval = atom.aval
        known = self.facts.get(id(aval))
        if known is None:
            known = self.facts[id(aval)] = (aval, _aval_facts(aval))
        # A frozen dataclass's __init__ sets each field through object.__setattr__ (about 6 us for
        # a Value's seven; a program of 50k equations has 140k values): the fields are written
        # into the instance's dict at once instead, which is all that __init__ leaves behind.
        value = object.__new__(Value)
        value.__dict__.update(zip(_VALUE_FIELDS, (name, *known[1])))
        return value


def _block(jaxpr: Jaxpr, block_id: str, role: str, input_names: list[str],
           facts: dict[int, tuple[Any, _AvalFacts]], backward: bool = False) -> Block:
    """One jaxpr as a block; ``backward``: it is the body of an equation JAX made by transposing
    (whose own equations' name stacks do not say so)."""
    namer = _Namer(facts)
    invars = list(jaxpr.constvars) + list(jaxpr.invars)
    inputs = tuple(namer.bind(v, name) for v, name in zip(invars, input_names, strict=True))
    equations = tuple(_equation(eqn, namer, block_id, backward) for eqn in jaxpr.eqns)
    outputs = tuple(namer.use(v) for v in jaxpr.outvars)
    return Block(block_id, role, inputs, outputs, equations)


def _equation(eqn: JaxprEqn, namer: _Namer, block_id: str, backward: bool = False) -> Equation:
    """``backward``: the equation is inside one JAX made by transposing (a VJP's backward loop),
    whose body's own names do not say so."""
    primitive = eqn.primitive.name
    subs = tuple(sub_jaxprs(eqn))
    # only an equation that holds others, or a collective, asks: the name stack's text is not free
    backward = backward or bool(subs or primitive in COLLECTIVE_PRIMITIVES) and _is_backward(eqn)
    name = namer.next_id(primitive)
    eqn_id = qualify(block_id, name)
    inputs = tuple(namer.use(v) for v in eqn.invars)
    blocks = tuple(
        _block(sub, eqn_id if role == "body" else f"{eqn_id}.{role}", role, _sub_input_names(sub, name, role, eqn.params),
               namer.facts, backward)
        for role, sub in subs
    )
    many = len(eqn.outvars) > 1
    outputs = tuple(
        namer.value(v, "_") if _is_drop(v) else namer.bind(v, f"{name}.{i}" if many else name)
        for i, v in enumerate(eqn.outvars)
    )
    trip = eqn.params.get("length") if primitive == "scan" else None
    # Every field, written at once as for a Value (:meth:`_Namer.value`): the frozen __init__'s
    # twelve object.__setattr__ calls cost more than the rest of a plain equation's conversion.
    made = object.__new__(Equation)
    made.__dict__.update(
        id=eqn_id,
        name=name,
        primitive=primitive,
        inputs=inputs,
        outputs=outputs,
        params=_short_params(eqn.params),
        blocks=blocks,
        trip_count=trip,
        source=equation_source(eqn, own=primitive in LOOP_PRIMITIVES)
        if primitive in COLLECTIVE_PRIMITIVES or primitive in LOOP_PRIMITIVES else "",
        written=written_operand(eqn, backward) if primitive in COLLECTIVE_PRIMITIVES else "",
        assigned=assigned_result(eqn) if primitive in COLLECTIVE_PRIMITIVES and not backward else "",
        rule_source=rule_source(eqn) if primitive in COLLECTIVE_PRIMITIVES and backward else "",
        written_as=loop_function_of(eqn) if primitive in LOOP_PRIMITIVES else "",
        origin=user_frames_of(eqn) if primitive in ORIGIN_PRIMITIVES and (primitive != PSUM_INVARIANT or backward) else (),
        _raw=tuple((k, v) for k, v in eqn.params.items() if k in ("axes", "axis_name")),
        auto_axes=auto_axes(eqn) if primitive in COLLECTIVE_PRIMITIVES else (),
    )
    return made


def auto_axes(eqn: JaxprEqn) -> tuple[tuple[str, int], ...]:
    """The mesh axes of more than one device that ``eqn``'s operands are typed whole along, left
    to the partitioner (a partial-auto ``shard_map``'s Auto axes: its types are per device along
    its manual axes only), each with its size; empty inside a shard_map that is manual over its
    whole mesh, and where the types carry no mesh."""
    for atom in eqn.invars:
        mesh = getattr(getattr(atom.aval, "sharding", None), "mesh", None)
        auto = getattr(mesh, "auto_axes", None)
        if mesh is not None and auto is not None:
            sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
            return tuple((name, sizes[name]) for name in auto if sizes.get(name, 1) > 1)
    return ()


ORIGIN_PRIMITIVES = frozenset({"pvary", "pcast", PSUM_INVARIANT})
"""The equations that keep their :attr:`Equation.origin`: a ``psum_invariant`` made by
transposing a ``pvary`` has the ``pvary``'s (how it is named after the value it is the gradient of)."""


def user_frames_of(eqn: JaxprEqn) -> tuple[tuple[str, int, str], ...]:
    """The user's frames (outside JAX) that made ``eqn``: ``((file, line, function), ...)``.

    JAX transposes an equation under the source information of the equation it transposes, so
    the ``psum_invariant`` that is the transpose of a ``pvary`` has the same frames.
    """
    from jax._src import source_info_util

    return tuple((f.file_name, f.start_line, f.function_name)
                 for f in source_info_util.user_frames(eqn.source_info.traceback))


def equation_source(eqn: JaxprEqn, own: bool = False) -> str:
    """``file.py:42 (fn)``: the innermost frame outside JAX that made ``eqn``.

    When that frame is shardscope's own (a plan's chunk loop, the deferred plan's ``psum``
    after the loop, made in shardscope's plan bodies) the source is empty, and the plan names
    its collectives itself (:func:`shardscope.pipeline.analysis.inspect_plan`); with ``own`` it is kept,
    so that a loop can be told to be the plan's (:func:`shardscope.engine.jaxpr.loop_names.loop_words`).
    Frames further out (the analysis, the CLI, a test) never name an equation.
    """
    from jax._src import source_info_util

    frames = tuple(source_info_util.user_frames(eqn.source_info.traceback))
    frame = users_first(frames, lambda f: f.file_name)  # the user's line that called a flax layer
    if frame is None or (not own and is_shardscope_file(frame.file_name)):
        return ""
    return f"{frame.file_name}:{frame.start_line} ({frame.function_name})"


def rule_source(eqn: JaxprEqn) -> str:
    """For a backward-pass collective a ``jax.custom_vjp``'s backward rule wrote, the rule's line
    (``file.py:24 (_bwd)``), which JAX's frames do not keep (they are the custom function's
    call's); ``""`` for any other."""
    rule = _rule_site(eqn)
    return rule.text() if rule is not None else ""


def written_operand(eqn: JaxprEqn, backward: bool) -> str:
    """A collective's operand as its call writes it (``y`` of ``lax.ppermute(y, 'stage', perm)``);
    for the transpose JAX makes of that call, the gradient of it (``grad(y)``); ``""`` when the
    user's line does not say (a collective a library made, or one written in a call it cannot read)."""
    rule = _rule_site(eqn) if backward else None
    if rule is not None:  # the user's own backward code: no transpose of it
        return written_argument(rule.file, rule.line, rule.column) if rule.called else ""
    frame = _users_frame(eqn)
    if frame is None or is_shardscope_file(frame.file_name):
        return ""
    written = written_argument(frame.file_name, frame.start_line, frame.start_column)
    return f"grad({written})" if written and backward else written


def assigned_result(eqn: JaxprEqn) -> str:
    """The variable the program assigns the collective ``eqn``'s result to (``total`` of
    ``total = lax.psum(x, 'data')``, through the returns of the functions around it); ``""``
    when no statement names it."""
    from jax._src import source_info_util

    frames = [(f.file_name, f.start_line, f.start_column, f.function_name)
              for f in source_info_util.user_frames(eqn.source_info.traceback)]
    if not frames or is_shardscope_file(frames[0][0]):  # a plan's own sum: the plan names it
        return ""
    return assigned_name(frames, eqn.primitive.name)


def _rule_site(eqn: JaxprEqn) -> RuleSite | None:
    """Where the backward-pass collective ``eqn`` is written in a custom_vjp's rule, if it is."""
    frame = _users_frame(eqn)
    if frame is None:
        return None
    return backward_rule_site(frame.file_name, frame.start_line, frame.start_column, eqn.primitive.name)


def _is_backward(eqn: JaxprEqn) -> bool:
    """True for an equation JAX made by transposing (its name stack holds ``transpose(``). A
    ``psum_invariant`` made outside any transpose (the program's own ``lax.psum`` of a varying
    value, a forward sum in a scan's carry) sums no gradient, whatever ``pvary`` its line also
    made: it keeps no origin to be paired by."""
    return "transpose(" in str(eqn.source_info.name_stack)


def _users_frame(eqn: JaxprEqn) -> "Frame | None":
    from jax._src import source_info_util

    frames = tuple(source_info_util.user_frames(eqn.source_info.traceback))
    return users_first(frames, lambda f: f.file_name)


LOOP_FUNCTIONS = frozenset({"scan", "fori_loop", "while_loop", "map"})
"""The ``jax.lax`` functions whose loops :func:`loop_function_of` names (others: empty, a neutral "loop")."""


def loop_function_of(eqn: JaxprEqn) -> str:
    """``fori_loop``: the JAX function called from the user's line that made the loop ``eqn``.

    The traceback (innermost first) runs through JAX's own frames up to the user's; the last
    JAX function before the user's frame, API wrappers skipped, is what the user called
    (``lax.fori_loop`` with static bounds binds ``scan``: its frame is ``fori_loop``). Checked
    on jax 0.10.2 and 0.12, forward and transposed loops alike (a transpose keeps the
    forward's traceback).
    """
    from jax._src import source_info_util

    traceback = eqn.source_info.traceback
    if traceback is None:
        return ""
    called = ""
    for code in traceback.raw_frames()[0]:
        if source_info_util.is_user_filename(code.co_filename):
            return called if called in LOOP_FUNCTIONS else ""
        if code.co_name != "reraise_with_filtered_traceback":  # jax's api_boundary wrapper
            called = code.co_name
    return ""
_PACKAGE_DIR = Path(__file__).resolve().parents[2]  # shardscope/, to tell its frames from the user's
_SHIPPED_DEMOS = "demo_files"


@functools.lru_cache(maxsize=256)
def is_shardscope_file(file_name: str) -> bool:
    """True when ``file_name`` is one of shardscope's own modules; the demos shipped in the package
    (``shardscope/demo_files``) are the user's code."""
    try:
        relative = Path(file_name).resolve().relative_to(_PACKAGE_DIR)
    except (ValueError, OSError):
        return False
    return relative.parts[0] != _SHIPPED_DEMOS


def source_line(source: str) -> str:
    """The text of the line a ``file:42 (fn)`` source points at (empty when unreadable)."""
    import linecache

    match = _SOURCE.match(source)
    return linecache.getline(match["file"], int(match["line"])).strip() if match else ""


def source_file(source: str) -> str | None:
    """The file of a ``file:42 (fn)`` source, with its directories (None when there is none)."""
    match = _SOURCE.match(source)
    return match["file"] if match else None


def short_source(source: str) -> str:
    """``train_step.py:42 (loss)``: a source without its directories."""
    match = _SOURCE.match(source)
    if not match:
        return source
    return f"{match['file'].rsplit('/', 1)[-1]}:{match['line']}{match['rest']}"


_SOURCE = re.compile(r"(?P<file>.+?):(?P<line>\d+)(?P<rest>( \(.*\))?)$")


def sub_jaxprs(eqn: JaxprEqn) -> list[tuple[str, Any]]:
    """The sub-jaxprs of an equation with a role name each (body, cond, branch0, ...)."""
    params = eqn.params
    name = eqn.primitive.name
    if name == "scan":
        return [("body", open_jaxpr(params["jaxpr"]))]
    if name == "while":
        return [("cond", open_jaxpr(params["cond_jaxpr"])), ("body", open_jaxpr(params["body_jaxpr"]))]
    if name == "cond":
        return [(f"branch{i}", open_jaxpr(b)) for i, b in enumerate(params["branches"])]
    subs = list(_jax_core().jaxprs_in_params(params))
    return [("body" if len(subs) == 1 else f"body{i}", open_jaxpr(j)) for i, j in enumerate(subs)]


def _sub_input_names(sub: Jaxpr, eqn_name: str, role: str, params: dict) -> list[str]:
    """Name a sub-jaxpr's inputs by their role: consts, carry, xs for loops."""
    invars = list(sub.constvars) + list(sub.invars)
    scan_groups = scan_operand_groups(params) if role == "body" else None
    if scan_groups is not None:  # scan
        consts, carry = scan_groups
        labels = _roles(("const", consts), ("carry", carry), ("xs", len(invars) - consts - carry))
    elif role == "body" and "body_nconsts" in params:  # while
        consts = params["body_nconsts"]
        labels = _roles(("const", consts), ("carry", len(invars) - consts))
    elif role == "cond" and "cond_nconsts" in params:
        consts = params["cond_nconsts"]
        labels = _roles(("cond_const", consts), ("carry", len(invars) - consts))
    else:
        prefix = "in" if role in ("body", "cond") else f"{role}.in"
        labels = [f"{prefix}{i}" for i in range(len(invars))]
    return [f"{eqn_name}.{label}" for label in labels]


def scan_operand_groups(params: dict) -> tuple[int, int] | None:
    """``(consts, carry)`` counts of a scan's operands, or None when ``params`` is not a scan's.

    jax 0.10 records them as ``num_consts``/``num_carry``; newer JAX (0.12) as ``ft_in``, a flat
    tree of three groups (consts, carry, xs) whose leaves are the operands.
    """
    if "num_carry" in params:
        return params["num_consts"], params["num_carry"]
    ft_in = params.get("ft_in")
    if ft_in is not None and hasattr(ft_in, "elts"):  # a flat tree built by scan itself
        sizes = [len(list(group.vals)) for group in ft_in.elts]
    elif ft_in is not None and hasattr(getattr(ft_in, "tree", None), "children"):  # a pytree (transposed scans)
        sizes = [child.num_leaves for child in ft_in.tree.children()]
    else:
        return None
    return (sizes[0], sizes[1]) if len(sizes) == 3 else None


def _roles(*groups: tuple[str, int]) -> list[str]:
    return [f"{name}{i}" for name, count in groups for i in range(count)]


def open_jaxpr(jaxpr: ClosedJaxpr | Jaxpr) -> Jaxpr:
    return cast("Jaxpr", getattr(jaxpr, "jaxpr", jaxpr))  # a ClosedJaxpr's, or the Jaxpr given


def _is_literal(atom: object) -> TypeGuard[Literal]:
    return isinstance(atom, _jax_core().Literal)


@functools.cache
def _jax_core() -> ModuleType:
    """``jax.extend.core``, imported once (an import statement costs a lookup on every call)."""
    import jax.extend.core

    return jax.extend.core


def _is_drop(var: object) -> bool:
    return type(var).__name__ == "DropVar"


def _literal_text(atom: Literal) -> str:
    value = np.asarray(atom.val)
    return str(value.item()) if value.ndim == 0 else f"array{list(value.shape)}"


_VALUE_FIELDS = tuple(f.name for f in fields(Value))
"""``Value``'s fields in order: the name, then what :func:`_aval_facts` returns."""

_AvalFacts = tuple[tuple[int, ...], str, frozenset[str], int, frozenset[str], frozenset[str]]
"""What a :class:`Value` takes from its aval: every field but the name, in the field order."""


def _aval_facts(aval: object) -> _AvalFacts:
    shape = tuple(int(d) for d in getattr(aval, "shape", ()))
    dtype = getattr(aval, "dtype", None)
    mat = getattr(aval, "manual_axis_type", None)
    varying = frozenset(getattr(mat, "varying", ()) or ())
    reduced = frozenset(getattr(mat, "reduced", ()) or ())
    unreduced = frozenset(getattr(mat, "unreduced", ()) or ())
    if dtype is None:
        return shape, type(aval).__name__, varying, 0, reduced, unreduced
    dtype_name, itemsize = _dtype_facts(dtype)
    return shape, dtype_name, varying, itemsize, reduced, unreduced


@functools.lru_cache(maxsize=None)
def _dtype_facts(dtype: np.dtype) -> tuple[str, int]:
    """``(name, itemsize)`` of a dtype, cached: ``str(np.dtype)`` is slow and runs per value.

    A PRNG key (``key<fry>``) is as large as its key data; ``float0`` holds nothing.
    """
    name = str(dtype)
    if name == "float0":
        return name, 0
    return name, (key_itemsize(dtype) if is_key_dtype(dtype) else np.dtype(dtype).itemsize)


_SKIPPED_PARAMS = {"jaxpr", "body_jaxpr", "cond_jaxpr", "branches", "call_jaxpr", "fun_jaxpr"}


def _short_params(params: dict) -> tuple[tuple[str, str], ...]:
    """Printable parameters: no sub-jaxprs, no private or unset ones, long values shortened."""
    core = _jax_core()
    jaxpr_types = (core.Jaxpr, core.ClosedJaxpr)
    kept = []
    for key, value in sorted(params.items()):
        if key.startswith("_") or key in _SKIPPED_PARAMS or value is None:
            continue
        if isinstance(value, jaxpr_types) or (
            isinstance(value, (tuple, list)) and value and isinstance(value[0], jaxpr_types)
        ):
            continue
        text = _param_text(value)
        kept.append((key, text if len(text) <= 80 else text[:77] + "..."))
    return tuple(kept)


def _param_text(value: object) -> str:
    """A parameter on one line; shardings print as their spec, meshes as their axis sizes."""
    kind = type(value)
    if kind is int or kind is bool or kind is float:  # most parameters: no address, no spaces
        return str(value)
    if kind is tuple:  # no spec, mesh or call: only the text is left to clean
        return _ADDRESS.sub("0x…", " ".join(str(value).split()))
    if hasattr(value, "spec") and hasattr(value, "mesh"):
        return str(value.spec)
    if hasattr(value, "axis_names") and hasattr(value, "axis_sizes"):
        return "Mesh(" + ", ".join(f"{n}={s}" for n, s in zip(value.axis_names, value.axis_sizes)) + ")"
    if callable(value):
        return f"<{getattr(value, '__name__', type(value).__name__)}>"
    # object reprs carry memory addresses, which would make the text differ between runs
    return _ADDRESS.sub("0x…", " ".join(str(value).split()))


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
