"""Importing a user's file: as ``python FILE`` would, once, with its demo or program functions.

A demo file's ``@shardscope.demo`` functions and a program file's ``@shardscope.program``
functions are found here (a file marks one kind); what is wrong with the file (not a file, not
Python text, a syntax error, an exception or ``sys.exit`` at import) is said in one message.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import importlib.util
import linecache
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from shardscope.activities import activity
from shardscope.errors import DemoFileError, LayoutsFileError
from shardscope.sources.demos import DemoFile, DemoFunction, demo_functions
from shardscope.sources.device_counts import device_count_error
from shardscope.sources.layouts import LayoutFile, layout_functions, no_layouts_error
from shardscope.sources.programs import ProgramFile, ProgramFunction, no_program_error, program_functions
from shardscope.sources.source_files import (
    code_file_name,
    demo_frames,
    imported_source_error,
    not_a_file_error,
    source_text_error,
)

if TYPE_CHECKING:
    from types import ModuleType


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
    programs, functions = marked_functions(module, path)
    if not functions:
        if programs:
            raise DemoFileError(
                f"{path} is a program file (@shardscope.program), not a demo file.",
                f"shardscope check {path} lints its programs (--target TARGET: on a TPU slice or GPUs too) and "
                f"shardscope {path} opens them in the explorer; report, diff and sweep build plans (and chunk sizes) "
                "from @shardscope.demo functions",
            )
        if layout_functions(module):
            raise DemoFileError(
                f"{path} is a layouts file (@shardscope.layouts), not a demo file.",
                f"shardscope layouts {path} --target TARGET ranks its layouts; report, diff and sweep build plans "
                "(and chunk sizes) from @shardscope.demo functions",
            )
        raise DemoFileError(
            f"{path} has no demo function.",
            "mark a function f(params, x) with @shardscope.demo(params=..., x=...)",
        )
    return DemoFile(path=path, functions=functions, fingerprint=fingerprint)


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
            _import_quietly(module, path, source)
    except (SystemExit, ProcessEnded) as exc:  # sys.exit(), argparse, os._exit at import: a message, not our exit
        sys.modules.pop(module_name, None)
        said = getattr(exc, "said", "")  # its last line on stderr (_import_quietly)
        called = "os._exit" if isinstance(exc, ProcessEnded) else "sys.exit"
        line = _user_line(exc, path)
        raise DemoFileError(
            f"The demo called {called}({exc.code!r}) while importing{_at_line(exc, path)}"
            + (f" (it said: {said})" if said else "") + ".",
            "shardscope imports demo files: keep scripts' command-line code under if __name__ == '__main__':",
            line=line,
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
            line=(str(where), exc.lineno) if exc.lineno else None,
        ) from exc
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise device_count_error(exc, path) or DemoFileError(
            f"Importing {path} failed: {type(exc).__name__}: {exc}",
            _where(exc, path),
            line=_user_line(exc, path),
        ) from exc
    return module, fingerprint


class ProcessEnded(BaseException):
    """``os._exit(code)`` called by the user's file while shardscope imports it.

    ``os._exit`` ends the process at once (no ``finally``, no flush, no terminal restored): the
    command would print nothing and exit with the file's status, and the explorer would leave
    the terminal in its alternate screen. A :class:`BaseException`, as :class:`SystemExit` is,
    so that the file's own ``except Exception`` does not swallow it.
    """

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def _process_exit_caught() -> Iterator[None]:
    """``os._exit`` raises :class:`ProcessEnded` in this thread of this process while the block runs.

    Any other thread (one the file or JAX started), and a child forked meanwhile (where
    ``os._exit`` is how a ``multiprocessing`` worker ends), still end their process as
    ``os._exit`` does; after the block the file's own later calls do too.
    """
    real_exit, thread, pid = os._exit, threading.get_ident(), os.getpid()

    def caught_exit(code: int) -> None:
        if threading.get_ident() == thread and os.getpid() == pid:
            raise ProcessEnded(code)
        real_exit(code)

    os._exit = caught_exit  # type: ignore[assignment]  # restored below
    try:
        yield
    finally:
        if os._exit is caught_exit:  # the file may have replaced it itself: leave that one
            os._exit = real_exit


def _import_quietly(module: ModuleType, path: Path, source: bytes) -> None:
    """Import the demo as ``python demo.py`` would see it (argv, sibling modules).

    What it writes to stderr is held back: passed on when the import ends, but when the demo
    exits (argparse's usage error) its last line goes into shardscope's one message instead.
    """
    said = io.StringIO()
    exited = False
    try:
        with _importable_siblings(path), _argv_of(path), contextlib.redirect_stderr(said), _process_exit_caught():
            _execute(module, path, source)
    except (SystemExit, ProcessEnded) as exc:
        exited = True
        exc.said = (said.getvalue().strip().splitlines() or [""])[-1]  # type: ignore[union-attr]  # read back by import_file
        raise
    finally:
        if not exited:
            sys.stderr.write(said.getvalue())


def _execute(module: ModuleType, path: Path, source: bytes) -> None:
    """Run the demo file's ``source`` (the bytes read and fingerprinted) in ``module``, compiled
    under :func:`code_file_name`.

    Compiled here, never through the import system's bytecode cache: a ``.pyc`` is trusted while
    its source's size and mtime (whole seconds) match, so a file rewritten within the second with
    as many bytes (``jnp.ones((5, 5))`` made ``jnp.ones((4, 5))``, then ``r``) ran its old code
    again wherever bytecode is written; and no ``__pycache__`` is left beside the user's file.
    """
    name = code_file_name(path)
    if name != str(path.resolve()):  # not the file's own name: tracebacks read the lines from here
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


def _at_line(exc: BaseException, path: Path) -> str:
    frames = demo_frames(exc, path)
    return f", line {frames[-1].lineno}" if frames else ""


def _user_line(exc: BaseException, path: Path) -> tuple[str, int] | None:
    """``(file, line)`` of the file's line where ``exc`` was raised (None when no frame is the file's)."""
    frames = demo_frames(exc, path)
    return (str(path), frames[-1].lineno) if frames and frames[-1].lineno else None


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


def load_file(path: str | Path) -> DemoFile | ProgramFile:
    """Import ``path`` as a fresh module: a :class:`ProgramFile` when it marks programs, else its
    :class:`~shardscope.sources.demos.DemoFile` (as ``shardscope check`` decides).

    Raises :class:`DemoFileError` when the file is missing, fails to import, or marks neither.
    """
    path = require_file(path)
    module, fingerprint = import_file(path)
    programs, demos = marked_functions(module, path)
    if programs:
        doc = (module.__doc__ or "").strip().split("\n")[0]
        return ProgramFile(path=path, functions=programs, fingerprint=fingerprint, description=doc)
    if not demos:
        raise unmarked_file_error(module, path)
    return DemoFile(path=path, functions=demos, fingerprint=fingerprint)


def unmarked_file_error(module: ModuleType, path: Path) -> DemoFileError:
    """The error for a file that marks neither programs nor demos; one that marks layouts
    functions is told which command reads them."""
    marked = layout_functions(module)
    if marked:
        return LayoutsFileError(f"{path} marks @shardscope.layouts functions ({', '.join(marked)}): they build a "
                                "step for any mesh, and this command reads @shardscope.program functions.",
                                f"shardscope layouts {path} --target tpu:v5e:2x4 ranks their layouts (in the "
                                "explorer: its Layouts tab, 7)", tuple(marked))
    return no_program_error(path)


def load_layout_file(path: str | Path) -> LayoutFile:
    """Import ``path`` as a fresh module and collect its :func:`~shardscope.sources.layouts.layouts` functions.

    Raises :class:`DemoFileError` when the file is missing, fails to import, or marks none.
    """
    path = require_file(path)
    module, fingerprint = import_file(path)
    functions = layout_functions(module)
    if not functions:
        raise no_layouts_error(path)
    return LayoutFile(path=path, functions=functions, fingerprint=fingerprint)


def marked_functions(module: ModuleType, path: Path) -> tuple[dict[str, ProgramFunction], dict[str, DemoFunction]]:
    """The program functions and the demo functions of ``module``: one of them is empty.

    Raises :class:`DemoFileError` when the file marks both kinds: shardscope reads a file as
    programs or as demos, and would otherwise drop one kind without a word.
    """
    programs, demos = program_functions(module), demo_functions(module)
    if programs and demos:
        raise DemoFileError(
            f"{path.name} marks both @shardscope.program functions ({', '.join(programs)}) and "
            f"@shardscope.demo functions ({', '.join(demos)}); shardscope reads one kind per file.",
            "put the programs and the demos in separate files and check or open each file on its own")
    return programs, demos
