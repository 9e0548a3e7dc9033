"""The change a rewrite makes, as the code a user would write: a unified diff of their file.

The rewrite itself is of the traced program (what was checked); this writes the same change
into the source the findings point at, with the user's own names:

- a sum deferred in a ``shard_map`` program: ``local_params = jax.tree.map(lambda p:
  lax.pcast(p, 'batch', to='varying'), params)`` before the loop, the loop body reading
  ``local_params``, the accumulator's start cast to varying, ``grads = lax.psum(grads,
  'batch')`` after the loop (how ``demos/train_step.py``'s ``step_fixed`` reads);
- with Explicit axes: the parameters resharded ``reduced``, the accumulator started
  ``unreduced``, one ``jax.reshard`` after the loop;
- a loop-invariant collective: the call moved before the loop into a name the body reads.

The source is read with :mod:`ast`: the loop is the ``lax.scan``/``fori_loop``/``while_loop``
call on the finding's line, its body the function (or lambda) it is given, its accumulator
the start value it is given and the name its result is bound to. Where the code does not
have that shape (the body defined elsewhere, the value passed in rather than closed over,
only some carries accumulating, an Auto-axes program that must switch to Explicit axes), the
change is given as a snippet: the lines to add, with the user's names and lines, and what to
change by hand (``Patch.is_diff`` is False).
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from shardscope.collective_kinds import CALL_NOUNS, CALLS
from shardscope.engine.hlo.fixes import resharded
from shardscope.whatif.shard_map_snippet import StepSignature, is_output, per_device_snippet

LOOP_CALLS = {"scan": (0, 1), "fori_loop": (2, 3), "while_loop": (1, 2)}
"""The JAX loops a patch rewrites, with the positions of their body and of their start value."""


@dataclass(frozen=True)
class Patch:
    """A rewrite as code: ``text`` is a unified diff of ``path`` when ``is_diff`` (``patched``:
    the file with it applied), else a snippet to apply by hand; ``notes`` say why it is a snippet."""

    text: str
    is_diff: bool
    path: str | None = None
    notes: tuple[str, ...] = ()
    patched: str | None = field(default=None, repr=False)  # the whole file once changed (a diff's)


@dataclass(frozen=True)
class PatchRequest:
    """What the change is, as the rewrite knows it.

    ``kind``: ``defer`` or ``hoist``; ``route``: ``shard_map``, ``explicit`` or ``auto``;
    ``values``: the pytree paths it moves (``params['W1']``); ``loop_source``: the loop's
    ``/path/file.py:56 (step)``; ``collective_sources``: the lines of the moved collectives (a
    hoist); ``whole_carry``: every carry of the loop is an accumulator; ``inputs``: every input's
    pytree path, to tell whether the values are all of a pytree; ``specs``: each argument's name
    and its leaves' spec (:func:`~shardscope.engine.hlo.fixes.argument_specs_text`), which the
    values resharded ``reduced`` keep on their other dimensions.
    """

    kind: str
    route: str
    axes: tuple[str, ...]
    values: tuple[str, ...]
    loop_source: str
    collective_sources: tuple[str, ...] = ()
    whole_carry: bool = True
    inputs: tuple[str, ...] = ()
    primitive: str = ""
    specs: tuple[tuple[str, str], ...] = ()
    step: StepSignature | None = None  # a jit program's step run per device inside jax.shard_map
    computed: frozenset[str] = frozenset()  # the values the step computes (a loss): nothing to cast
    scalings: tuple[tuple[str, str], ...] = ()  # each loss: a mean over rows, a sum or unknown (loss_scaling)


def patch_for(request: PatchRequest) -> Patch:
    """The :class:`Patch` of one rewrite: a diff where the source has the usual shape, else a snippet."""
    if request.step is not None:
        return Patch(per_device_snippet(request.step, request.values, request.axes, _where(request), request.computed,
                                        dict(request.scalings)),
                     False, None, (
            "the step moves inside jax.shard_map and its split dimensions take each device's sizes: shardscope does "
            "not write that into the file",))
    match = _SOURCE.match(request.loop_source)
    if match is None:
        return _snippet(request, ("the loop's source line is not known",))
    path, line = match["file"], int(match["line"])
    try:
        text = Path(path).read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError) as exc:
        return _snippet(request, (f"{path} cannot be read as Python ({type(exc).__name__})",))
    try:
        changed = _apply(text, _edits(request, text, tree, line))
    except _NoDiff as exc:
        return _snippet(request, (str(exc),))
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), changed.splitlines(keepends=True),
                                        fromfile=f"a/{Path(path).name}", tofile=f"b/{Path(path).name}"))
    return Patch(diff, True, path, patched=changed)


class _NoDiff(Exception):
    """The source does not have the shape a diff can be written for (the message says how)."""


@dataclass(frozen=True, order=True)
class _Edit:
    """Replace ``text[start:end]`` (offsets into the file) by ``new``."""

    start: int
    end: int
    new: str = field(compare=False)


# --------------------------------------------------------------------------- the loop in the source


@dataclass(frozen=True)
class _Loop:
    """The loop call on the finding's line, the statement holding it, the function around it,
    its body and its start value."""

    call: ast.Call
    primitive: str
    statement: ast.stmt
    function: ast.FunctionDef | ast.AsyncFunctionDef
    body: ast.AST | None
    init: ast.expr | None


def _find_loop(tree: ast.Module, line: int) -> _Loop:
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not functions:
        raise _NoDiff("the loop is not inside a function of the file")
    function = max(functions, key=lambda n: n.lineno)
    calls = [n for n in ast.walk(function) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)
             and _called(n) in LOOP_CALLS]
    if not calls:
        raise _NoDiff(f"no lax.scan, lax.fori_loop or lax.while_loop call is on line {line}")
    call = min(calls, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    primitive = _called(call)
    statement = next(s for s in function.body if s.lineno <= call.lineno <= (s.end_lineno or s.lineno))
    body_position, init_position = LOOP_CALLS[primitive]
    body_arg = _argument(call, body_position, ("f", "body_fun"))
    init = _argument(call, init_position, ("init", "init_val"))
    return _Loop(call, primitive, statement, function, _body(function, body_arg, call.lineno), init)


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")


def _argument(call: ast.Call, position: int, keywords: Sequence[str]) -> ast.expr | None:
    if position < len(call.args):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg in keywords), None)


def _body(function: ast.AST, body: ast.expr | None, before_line: int) -> ast.AST | None:
    """The function the loop runs: a lambda, or a def of that name in the same function."""
    if isinstance(body, ast.Lambda):
        return body
    if isinstance(body, ast.Name):
        defs = [n for n in ast.walk(function) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == body.id and n.lineno < before_line]
        return defs[-1] if defs else None
    return None


# --------------------------------------------------------------------------- the edits


def _edits(request: PatchRequest, text: str, tree: ast.Module, line: int) -> list[_Edit]:
    """The edits of one rewrite in the file's text (raises :class:`_NoDiff` when the code has
    another shape than the one a diff is written for)."""
    if request.route == "auto":
        raise _NoDiff("the program uses Auto axes: the fix switches its mesh to Explicit axes first, which "
                      "shardscope does not write into the file")
    loop = _find_loop(tree, line)
    offsets = _Offsets(text)
    if request.kind == "hoist":
        return _hoist_edits(request, loop, offsets, text, tree)
    root, whole = _root(request)
    if not whole:
        raise _NoDiff(f"only some of {root}'s leaves are summed in the loop: cast those before the loop by hand")
    if not request.whole_carry:
        raise _NoDiff("only some of the loop's carries accumulate the sum: start those unsummed by hand")
    if loop.body is None:
        raise _NoDiff(f"the loop's body is not a function defined next to it (a lambda or a def in {loop.function.name})")
    uses = _closure_uses(loop.body, root)
    if not uses:
        raise _NoDiff(f"the loop's body does not read {root} by name (it is passed in): cast it where it is passed")
    code = _shard_map_code(request, tree, root) if request.route == "shard_map" else _explicit_code(request, tree, root)
    edits = [_Edit(offsets.at(u.lineno, u.col_offset), offsets.at(u.end_lineno, u.end_col_offset), code.local)
             for u in uses]
    anchor = _anchor(loop)
    indent = " " * anchor.col_offset
    blank = "\n" if isinstance(anchor, (ast.FunctionDef, ast.AsyncFunctionDef)) else ""
    edits.append(_Edit(offsets.at(anchor.lineno, 0), offsets.at(anchor.lineno, 0),
                       f"{indent}{code.local} = {code.cast}\n{blank}"))
    edits.append(_start_edit(loop, offsets, text, code.start))
    edits += _finish_edit(loop, offsets, text, code.finish)
    return edits


@dataclass(frozen=True)
class _Code:
    """The lines of one style: the name the body reads, the cast that makes it, and how the
    accumulator's start and the loop's result are written (``start(code)``, ``finish(code)``)."""

    local: str
    cast: str
    start: Callable[[str], str]
    finish: Callable[[str], str]


def _shard_map_code(request: PatchRequest, tree: ast.Module, root: str) -> _Code:
    """``lax.pcast(..., to='varying')`` before the loop and for the start, ``lax.psum`` after."""
    lax, axes = _lax_name(tree), _axes_text(request.axes)
    if _is_pytree(request):
        return _Code(f"local_{root}", f"jax.tree.map(lambda p: {lax}.pcast(p, {axes}, to='varying'), {root})",
                     lambda code: f"jax.tree.map(lambda a: {lax}.pcast(a, {axes}, to='varying'), {code})",
                     lambda code: f"{lax}.psum({code}, {axes})")
    return _Code(f"local_{root}", f"{lax}.pcast({root}, {axes}, to='varying')",
                 lambda code: f"{lax}.pcast({code}, {axes}, to='varying')", lambda code: f"{lax}.psum({code}, {axes})")


def _explicit_code(request: PatchRequest, tree: ast.Module, root: str) -> _Code:
    """``jax.reshard`` to ``reduced`` before the loop, to ``unreduced`` for the start, and back
    after; each spec keeps the value's own dimensions (:func:`_resharded`)."""
    name = _spec_name(tree)

    def spec(leaf: str, kind: str) -> str:
        return _resharded(request, root, leaf, kind, name)

    if _is_pytree(request):
        return _Code(f"{root}_reduced", f"jax.tree.map(lambda p: jax.reshard(p, {spec('p', 'reduced')}), {root})",
                     lambda code: f"jax.tree.map(lambda a: jax.reshard(a, {spec('a', 'unreduced')}), {code})",
                     lambda code: f"jax.tree.map(lambda a: jax.reshard(a, {spec('a', '')}), {code})")
    return _Code(f"{root}_reduced", f"jax.reshard({root}, {spec(root, 'reduced')})",
                 lambda code: f"jax.reshard({code}, {spec(code, 'unreduced')})",
                 lambda code: f"jax.reshard({code}, {spec(code, '')})")


def _resharded(request: PatchRequest, root: str, leaf: str, kind: str, name: str = "P") -> str:
    """The spec ``leaf`` (of the argument ``root``) is resharded to: its argument's own spec with
    ``kind`` (``reduced``, ``unreduced``, none) over the summed axes, as the rewrite checked keeps
    it; ``P(reduced=...)`` alone would gather the dimensions sharded over other axes."""
    return resharded(dict(request.specs).get(root, ""), leaf, request.axes or ("data",), kind, name)


def _is_pytree(request: PatchRequest) -> bool:
    """True when the values are leaves of a pytree argument (``params['W1']``), not a bare array."""
    return any("[" in v or "." in v for v in request.values)


def _anchor(loop: _Loop) -> ast.stmt:
    """Where the cast goes: before the body's def when it sits in the loop's function, else
    before the loop's statement."""
    body = loop.body
    if isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)) and body in loop.function.body:
        return body
    return loop.statement


def _start_edit(loop: _Loop, offsets: "_Offsets", text: str, start: Callable[[str], str]) -> _Edit:
    """The accumulator's start value made unsummed: where it is assigned, or where it is passed."""
    init = loop.init
    if init is None:
        raise _NoDiff("the loop's start value is not given")
    if isinstance(init, ast.Name):
        assigned = [s for s in loop.function.body if isinstance(s, ast.Assign) and s.lineno < loop.statement.lineno
                    and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and s.targets[0].id == init.id]
        if assigned:
            value = assigned[-1].value
            code = ast.get_source_segment(text, value)
            assert code is not None and value.end_lineno is not None  # a node parsed from text has its positions
            return _Edit(offsets.at(value.lineno, value.col_offset), offsets.at(value.end_lineno, value.end_col_offset),
                         start(code))
    code = ast.get_source_segment(text, init)
    assert code is not None and init.end_lineno is not None  # a node parsed from text has its positions
    return _Edit(offsets.at(init.lineno, init.col_offset), offsets.at(init.end_lineno, init.end_col_offset), start(code))


def _finish_edit(loop: _Loop, offsets: "_Offsets", text: str, finish: Callable[[str], str]) -> list[_Edit]:
    """The one sum after the loop: on the name its carry is bound to, or around the loop's
    result where it is returned (``return lax.fori_loop(...)``, ``return lax.scan(...)[0]``)."""
    statement = loop.statement
    returned = statement.value if isinstance(statement, ast.Return) else None
    if returned is loop.call and loop.primitive != "scan" or (
            isinstance(returned, ast.Subscript) and returned.value is loop.call and _is_zero_index(returned.slice)):
        # two insertions around the returned value, so that the edits inside it (its start value) stay
        prefix, suffix = finish("\0").split("\0")
        return [_Edit(offsets.at(returned.lineno, returned.col_offset), offsets.at(returned.lineno, returned.col_offset),
                      prefix),
                _Edit(offsets.at(returned.end_lineno, returned.end_col_offset),
                      offsets.at(returned.end_lineno, returned.end_col_offset), suffix)]
    target = None
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and statement.value is loop.call:
        bound = statement.targets[0]
        if loop.primitive == "scan" and isinstance(bound, ast.Tuple) and bound.elts:
            bound = bound.elts[0]
        target = bound.id if isinstance(bound, ast.Name) else None
    if target is None:
        raise _NoDiff("the loop's result is not bound to a name (grads, _ = lax.scan(...)): sum it after the loop by hand")
    indent = " " * statement.col_offset
    assert statement.end_lineno is not None  # a statement parsed from text has its positions
    end = offsets.at(statement.end_lineno + 1, 0)
    return [_Edit(end, end, f"{indent}{target} = {finish(target)}\n")]


def _is_zero_index(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


def _hoist_edits(request: PatchRequest, loop: _Loop, offsets: "_Offsets", text: str, tree: ast.Module) -> list[_Edit]:
    """The collective's call moved before the loop into a name the body reads."""
    edits = []
    body_locals = _locals(loop.body) if loop.body is not None else set()
    for k, source in enumerate(request.collective_sources):
        match = _SOURCE.match(source)
        if match is None:
            raise _NoDiff("the collective's source line is not known")
        line = int(match["line"])
        calls = [n for n in ast.walk(loop.function) if isinstance(n, ast.Call) and n.lineno == line
                 and _called(n) in _COLLECTIVE_CALLS]
        if len(calls) != 1:
            raise _NoDiff(f"line {line} does not hold one collective call shardscope can move")
        call = calls[0]
        names = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
        if names & body_locals:
            raise _NoDiff(f"the {_called(call)} on line {line} reads values made inside the loop's body")
        operand = call.args[0] if call.args else None
        base = operand.id if isinstance(operand, ast.Name) else "value"
        name = f"{base}_{_NOUN.get(_called(call), 'moved')}" + (str(k) if k else "")
        code = ast.get_source_segment(text, call)
        edits.append(_Edit(offsets.at(call.lineno, call.col_offset), offsets.at(call.end_lineno, call.end_col_offset),
                           name))
        indent = " " * loop.statement.col_offset
        anchor = _anchor(loop)
        edits.append(_Edit(offsets.at(anchor.lineno, 0), offsets.at(anchor.lineno, 0), f"{indent}{name} = {code}\n"))
    return edits


_COLLECTIVE_CALLS = CALLS
_NOUN = CALL_NOUNS


# --------------------------------------------------------------------------- names


def _root(request: PatchRequest) -> tuple[str, bool]:
    """The argument the values belong to (``params`` of ``params['W1']``), and whether they are all of it."""
    roots = {m.group() for v in request.values if (m := re.match(r"[A-Za-z_]\w*", v))}
    if len(roots) != 1:
        raise _NoDiff("the summed values are not the leaves of one argument")
    root = roots.pop()
    leaves = {n for n in request.inputs if n == root or n.startswith(root + "[") or n.startswith(root + ".")}
    return root, not leaves or leaves <= set(request.values)


def _closure_uses(body: ast.AST, root: str) -> list[ast.Name]:
    """The reads of ``root`` in ``body`` that reach the function around it (not a parameter of
    ``body`` nor a name it assigns)."""
    if root in _locals(body):
        return []
    return sorted((n for n in ast.walk(body) if isinstance(n, ast.Name) and n.id == root and isinstance(n.ctx, ast.Load)),
                  key=lambda n: (n.lineno, n.col_offset))


def _locals(body: ast.AST) -> set[str]:
    """The names ``body`` (a def or lambda, and what it nests) binds: parameters and assignments."""
    found: set[str] = set()
    for node in ast.walk(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            found |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
            found |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
    return found


def _lax_name(tree: ast.Module) -> str:
    """How the file spells ``jax.lax``: ``lax`` when it imports it so, else ``jax.lax``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "jax" and any(a.name == "lax" for a in node.names):
            alias = next(a for a in node.names if a.name == "lax")
            return alias.asname or "lax"
        if isinstance(node, ast.Import) and any(a.name == "jax.lax" and a.asname for a in node.names):
            return next(a.asname for a in node.names if a.name == "jax.lax" and a.asname)
    return "jax.lax"


def _spec_name(tree: ast.Module) -> str:
    """How the file spells ``PartitionSpec`` (``P`` when imported so), else ``jax.P``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("jax.sharding", "jax"):
            for alias in node.names:
                if alias.name in ("PartitionSpec", "P"):
                    return alias.asname or alias.name
    return "jax.P"


def _axes_text(axes: tuple[str, ...]) -> str:
    return repr(axes[0]) if len(axes) == 1 else repr(tuple(axes))


# --------------------------------------------------------------------------- text


class _Offsets:
    """Offsets into a file's text from ``ast``'s (1-based line, 0-based UTF-8 column) positions."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int | None, column: int | None) -> int:
        """The offset of ``(line, column)``; past the last line, the end of the text."""
        line = line or 1
        if line > len(self.lines):
            return self.starts[-1]
        raw = self.lines[line - 1].encode()[: column or 0].decode(errors="ignore")
        return self.starts[line - 1] + len(raw)


def _apply(text: str, edits: list[_Edit]) -> str:
    """``text`` with every edit made (from the last to the first, so offsets stay right; edits
    never overlap: one that wraps a value is two insertions around it)."""
    ordered = sorted(edits, reverse=True)
    for later, earlier in zip(ordered, ordered[1:]):
        if earlier.end > later.start:
            raise _NoDiff("two changes overlap in the source")
    for edit in ordered:
        text = text[: edit.start] + edit.new + text[edit.end:]
    return text


def _where(request: PatchRequest) -> str:
    return request.loop_source.rsplit("/", 1)[-1] or "the loop"


def _snippet(request: PatchRequest, notes: tuple[str, ...]) -> Patch:
    """The change in words and lines, with the program's own names, to make by hand."""
    where = _where(request)
    axes = _axes_text(request.axes) if request.axes else "'data'"
    values = ", ".join(request.values) or "the summed values"
    root = _snippet_root(request.values)
    each = (lambda f: f"jax.tree.map(lambda p: {f('p')}, {root})") if any("[" in v for v in request.values) \
        else (lambda f: f(root))
    if request.kind == "hoist":
        lines = [f"# the {request.primitive or 'collective'} of {values} does not change inside the loop at {where}:",
                 "# call it once before the loop (its result stays alive through the loop) and read that inside"]
    elif request.route == "shard_map":
        lines = [f"# the sum of {values} only accumulates in the loop at {where}:",
                 f"local_{root} = {each(lambda p: f'lax.pcast({p}, {axes}, to={chr(39)}varying{chr(39)})')}"
                 "  # before the loop",
                 f"# read local_{root} inside the loop body instead of {root}",
                 f"acc0 = jax.tree.map(lambda a: lax.pcast(a, {axes}, to='varying'), acc0)  # the accumulator's start",
                 f"acc = lax.psum(acc, {axes})  # once, after the loop"]
    else:
        lines = [f"# the sum of {values} only accumulates in the loop at {where}:"]
        if request.route == "auto":
            lines += ["# switch the mesh to Explicit axes first: mesh = jax.make_mesh(shape, names, "
                      "axis_types=(AxisType.Explicit,) * len(names)); jax.set_mesh(mesh)"]
        start, finish = _resharded(request, root, "a", "unreduced"), _resharded(request, root, "a", "")
        if request.values and all(v in request.computed or is_output(v) for v in request.values):
            # a loss the step computes: no parameter to reshard, each device adds its own into the accumulator
            lines += [f"# add each iteration's {values} into the accumulator as it is (no sum over the devices in the loop)"]
        else:
            cast = each(lambda p: f"jax.reshard({p}, {_resharded(request, root, p, 'reduced')})")
            lines += [f"{root}_reduced = {cast}  # before the loop",
                      f"# take the gradient of {root}_reduced inside the loop body"]
        lines += [f"acc0 = jax.tree.map(lambda a: jax.reshard(a, {start}), acc0)  # the accumulator's start",
                  f"acc = jax.tree.map(lambda a: jax.reshard(a, {finish}), acc)  # once, after the loop"]
    return Patch("\n".join(lines) + "\n", False, None, notes)


def _snippet_root(values: tuple[str, ...]) -> str:
    """The argument the values belong to, or ``params`` when they are not one argument's."""
    roots = {m.group() for v in values for m in [re.match(r"[A-Za-z_]\w*", v)] if m}
    return roots.pop() if len(roots) == 1 else "params"


_SOURCE = re.compile(r"(?P<file>.+?):(?P<line>\d+)(?: \(.*\))?$")
