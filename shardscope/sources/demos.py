"""Demo files: plain Python modules whose functions are marked with :func:`demo`.

A demo function is ``f(params, x) -> y``: ``params`` is replicated over the mesh unless
``param_specs`` shards some leaves (FSDP), the leading axis of every leaf of ``x`` and ``y`` is
the batch ``N`` that is sharded and chunked.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import importlib.util
import linecache
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from shardscope.errors import DemoFileError, SettingsError
from shardscope.plans.mesh import Mesh, is_axis_name
from shardscope.distributed.interrupts import activity
from shardscope.sources.source_files import imported_source_error, not_a_file_error, source_text_error

_MARK = "__shardscope_demo__"


@dataclass(frozen=True)
class DemoSpec:
    """What :func:`demo` records: example ``params`` and ``x`` (pytrees of arrays or shapes)."""

    params: Any
    x: Any
    seed: int = 0
    description: str = ""
    param_specs: Any = None
    mesh: Mesh | None = None


def demo(*, params: Any, x: Any, seed: int = 0, description: str = "", param_specs: Any = None,
         mesh: str | Mesh | None = None) -> Callable:
    """Mark ``f(params, x)`` as a function shardscope can analyse.

    ``params`` and ``x`` are pytrees of ``jax.ShapeDtypeStruct`` or concrete arrays; the leading
    axis of every leaf of ``x`` is the batch. Shapes are filled with reproducible random values
    drawn from ``seed`` (complex dtypes get random real and imaginary parts). ``param_specs`` is
    a pytree of ``jax.sharding.PartitionSpec`` matching ``params`` (default: every leaf
    replicated); a leaf split over a mesh axis enters ``shard_map`` sharded (FSDP / ZeRO-3) and
    each plan gathers it where the model needs it whole. ``mesh`` (``"data=4"``,
    ``"data=4,model=2"``) is the mesh the demo runs on when the user gives none (``--mesh``,
    ``--devices``, ``--axis``); without it, a demo whose ``param_specs`` name mesh axes gets
    one derived from them (:func:`derived_mesh`), any other the default ``s=2``.
    """
    demo_mesh = _demo_mesh(mesh)

    def mark(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        spec = DemoSpec(params=params, x=x, seed=seed, description=doc, param_specs=param_specs, mesh=demo_mesh)
        setattr(fn, _MARK, spec)
        return fn

    return mark


def _demo_mesh(mesh: str | Mesh | None) -> Mesh | None:
    """``@shardscope.demo(mesh=...)`` as a :class:`Mesh`; a ``ValueError`` in one line when it is not one
    (raised while the file is imported: the message names the file's line)."""
    if mesh is None or isinstance(mesh, Mesh):
        return mesh
    try:
        return Mesh.parse(str(mesh))
    except SettingsError as exc:
        raise ValueError(f"mesh={mesh!r} is not a mesh: {exc.message} Write it as name=size pairs, "
                         "e.g. mesh=\"data=4\" or mesh=\"data=4,model=2\".") from None


def derived_mesh(params: Any, param_specs: Any) -> Mesh | None:
    """A mesh with every axis ``param_specs`` names, for a demo that gives no ``mesh``; else None.

    Each axis gets size 2 (the default device count), or 1 where 2 does not divide a dimension
    it splits: the demo then opens on a mesh its parameters fit, not on one without their axes.
    """
    import jax
    from jax.sharding import PartitionSpec

    if param_specs is None:
        return None
    is_spec = lambda s: isinstance(s, PartitionSpec)  # noqa: E731
    try:
        specs = jax.tree.map(lambda _, spec: spec, params, param_specs, is_leaf=is_spec)
    except (TypeError, ValueError):
        return None  # a structure mismatch: the plans say so in words
    sizes: dict[str, int] = {}
    for leaf, spec in zip(jax.tree.leaves(params), jax.tree.leaves(specs, is_leaf=is_spec)):
        if not is_spec(spec):
            return None  # not a PartitionSpec: the plans say so in words
        shape = tuple(getattr(leaf, "shape", ()))
        for dim, entry in enumerate(spec):
            axes = () if entry is None else tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)
            for axis in axes:
                sizes.setdefault(axis, 2)
            if dim < len(shape) and axes and shape[dim] % 2 ** len(axes):
                sizes.update({axis: 1 for axis in axes})
    if not sizes or not all(is_axis_name(axis) for axis in sizes):
        return None
    return Mesh(tuple(sizes.items()))


@dataclass(frozen=True)
class DemoFunction:
    """One function found in a demo file, with its recorded example inputs."""

    name: str
    fn: Callable
    spec: DemoSpec

    @property
    def description(self) -> str:
        """What the demo computes, in one line (``@shardscope.demo(description=...)`` or its docstring)."""
        return self.spec.description

    @property
    def default_mesh(self) -> Mesh | None:
        """The mesh this demo runs on when the user gives none: its ``mesh``, or one derived from
        its ``param_specs``; None for the default ``s=2``."""
        return self.spec.mesh or derived_mesh(self.spec.params, self.spec.param_specs)


@dataclass(frozen=True)
class DemoFile:
    """The demo functions of one file, in the order they were defined."""

    path: Path
    functions: dict[str, DemoFunction]
    fingerprint: str

    @property
    def names(self) -> list[str]:
        """The function names a user can pick, in file order."""
        return list(self.functions)

    def get(self, name: str | None) -> DemoFunction:
        """The demo called ``name`` (the first one when ``name`` is None)."""
        if name is None:
            return next(iter(self.functions.values()))
        try:
            return self.functions[name]
        except KeyError:
            raise SettingsError(
                f"{self.path.name} has no demo function {name!r}.",
                f"available: {', '.join(self.names)}",
            ) from None


def carried_over(name: str | None, old_names: list[str], new_names: list[str]) -> str | None:
    """The function to keep after a demo file was reloaded.

    ``name`` if the file still has it; else, when it was renamed on disk, the function now in its
    place (a rename keeps the position); else None (the first demo).
    """
    if name is None or name in new_names:
        return name
    if name in old_names and old_names.index(name) < len(new_names):
        return new_names[old_names.index(name)]
    return None


def file_fingerprint(path: Path) -> str:
    """A digest of the file's bytes: a reload is needed when it changes.

    Raises :class:`DemoFileError` when ``path`` is no longer a regular file (reading a FIFO
    would block until a writer comes, ``/dev/zero`` never ends).
    """
    return hashlib.sha256(require_file(path).read_bytes()).hexdigest()[:16]


def require_file(path: str | Path) -> Path:
    """``path`` as a :class:`Path`, or :class:`DemoFileError` when there is no such file."""
    path = Path(path)
    if path.is_dir():
        scripts = sorted(p.name for p in path.glob("*.py"))
        raise DemoFileError(
            f"{path} is a directory, not a demo file.",
            f"give one of the Python files in it ({', '.join(scripts[:8])}{', ...' if len(scripts) > 8 else ''})"
            if scripts
            else "give the path to a Python file with functions marked @shardscope.demo(...)",
        )
    if not path.is_file():  # missing, or a device, a FIFO, a socket: said without opening it
        raise not_a_file_error(path)
    return path


def load_demo_file(path: str | Path) -> DemoFile:
    """Import ``path`` as a fresh module and collect its demo functions.

    Raises :class:`DemoFileError` when the file is missing, fails to import, or has no demo.
    """
    path = require_file(path)
    module, fingerprint = import_file(path)
    from shardscope.sources.programs import marked_functions

    programs, functions = marked_functions(module, path)
    if not functions:
        if programs:
            raise DemoFileError(
                f"{path} is a program file (@shardscope.program), not a demo file.",
                f"shardscope check {path} lints its programs and shardscope {path} opens them in the explorer; "
                "report and diff build plans from @shardscope.demo functions",
            )
        raise DemoFileError(
            f"{path} has no demo function.",
            "mark a function f(params, x) with @shardscope.demo(params=..., x=...)",
        )
    return DemoFile(path=path, functions=functions, fingerprint=fingerprint)


def demo_functions(module: Any) -> dict[str, DemoFunction]:
    """The functions of ``module`` marked with :func:`demo`, in definition order."""
    return {
        name: DemoFunction(name, value, getattr(value, _MARK))
        for name, value in vars(module).items()
        if callable(value) and isinstance(getattr(value, _MARK, None), DemoSpec)
    }


def import_file(path: Path) -> tuple[Any, str]:
    """Import ``path`` as a fresh module: ``(module, fingerprint of its bytes)``.

    Raises :class:`DemoFileError` with the failing line when the import fails.
    """
    source = path.read_bytes()
    not_text = source_text_error(path, source)
    if not_text is not None:
        raise not_text
    fingerprint = hashlib.sha256(source).hexdigest()[:16]  # as file_fingerprint
    module_name = f"_shardscope_demo_{path.stem}_{fingerprint}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise DemoFileError(f"Cannot import {path}", "demo files are plain .py files")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with activity(f"importing {path}", code_file_name(path)):  # named if interrupted meanwhile
            _import_quietly(module, spec.loader, path)
    except SystemExit as exc:  # sys.exit() or argparse at import: a message, not our exit
        sys.modules.pop(module_name, None)
        raise DemoFileError(
            f"The demo called sys.exit({exc.code!r}) while importing{_at_line(exc, path)}"
            + (f" (it said: {exc.said})" if getattr(exc, "said", "") else "") + ".",
            "shardscope imports demo files: keep scripts' command-line code under if __name__ == '__main__':",
        ) from None
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        not_text = imported_source_error(exc, path)
        if not_text is not None:
            raise not_text from exc
        # the error may be in a module the demo imports: name the file it is in
        where = Path(exc.filename) if exc.filename else path
        imported = "" if _same_file(where, path) else f" (imported by {path.name})"
        raise DemoFileError(
            f"Syntax error in {where} line {exc.lineno}{imported}: {exc.msg}",
            f"fix {where.name} and run again",
        ) from exc
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise DemoFileError(
            f"Importing {path} failed: {type(exc).__name__}: {exc}",
            _where(exc, path),
        ) from exc
    return module, fingerprint


def code_file_name(path: Path) -> str:
    """The file name the demo's code is compiled under: its absolute path, made valid UTF-8.

    JAX hands every function's file name to XLA as source information; a name with a byte that
    is not UTF-8 (a Latin-1 ``é``) fails there with ``std::bad_cast``. Such bytes become U+FFFD.
    """
    name = str(path.resolve())
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _import_quietly(module: Any, loader: Any, path: Path) -> None:
    """Import the demo as ``python demo.py`` would see it (argv, sibling modules).

    What it writes to stderr is held back: passed on when the import ends, but when the demo
    exits (argparse's usage error) its last line goes into shardscope's one message instead.
    """
    said = io.StringIO()
    exited = False
    try:
        with _importable_siblings(path), _argv_of(path), contextlib.redirect_stderr(said):
            _execute(module, loader, path)
    except SystemExit as exc:
        exited = True
        exc.said = (said.getvalue().strip().splitlines() or [""])[-1]  # type: ignore[attr-defined]
        raise
    finally:
        if not exited:
            sys.stderr.write(said.getvalue())


def _execute(module: Any, loader: Any, path: Path) -> None:
    """Run the demo file in ``module`` (compiled under :func:`code_file_name` if it differs)."""
    name = code_file_name(path)
    if name == str(path.resolve()):
        loader.exec_module(module)
        return
    source = path.read_bytes()
    linecache.cache[name] = (len(source), None, source.decode("utf-8", "replace").splitlines(True), name)
    exec(compile(source, name, "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - a demo is code


@contextlib.contextmanager
def _argv_of(path: Path) -> Iterator[None]:
    """``sys.argv`` as ``python demo.py`` would set it: argparse at import sees no shardscope flags."""
    saved = sys.argv
    sys.argv = [str(path)]
    try:
        yield
    finally:
        sys.argv = saved


def demo_frames(exc: BaseException, path: Path) -> list[traceback.FrameSummary]:
    """The frames of ``exc``'s traceback that run code of the demo file ``path``."""
    names = {str(path.resolve()), code_file_name(path)}
    frames = []
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            if frame.filename in names or str(Path(frame.filename).resolve()) in names:
                frames.append(frame)
        except OSError:
            continue
    return frames


def _at_line(exc: BaseException, path: Path) -> str:
    frames = demo_frames(exc, path)
    return f", line {frames[-1].lineno}" if frames else ""


@contextlib.contextmanager
def _importable_siblings(path: Path) -> Iterator[None]:
    """Let the demo import modules that sit next to it, as ``python demo.py`` would."""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _where(exc: BaseException, path: Path) -> str:
    """Point at the line of the demo file where the import failed."""
    frames = demo_frames(exc, path)
    if frames:
        return f"see {path.name} line {frames[-1].lineno}: {frames[-1].line}"
    return "fix the file and run again"
