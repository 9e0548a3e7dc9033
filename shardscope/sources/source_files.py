"""What a path given as a demo or program file is, when it is not Python source text.

Every command takes a file and imports it. A path that is no regular file (a device, a FIFO,
a socket, a dangling symbolic link) is named for what it is, without opening it: reading
``/dev/zero`` never ends and opening a FIFO blocks until a writer comes. A regular file that
is not Python text (a NUL byte, bytes that are not in its encoding) is said to be so, with
the offset of the first bad byte, rather than as a syntax error at "line None".
"""

from __future__ import annotations

import codecs
import io
import os
import tokenize
import traceback
from pathlib import Path
from types import TracebackType

from shardscope.errors import DemoFileError, file_kind

HINT = "give the path to a Python file with functions marked @shardscope.demo(...) or @shardscope.program(...)"

def not_a_file_error(path: Path) -> DemoFileError:
    """The error for ``path`` when it is not a regular file (nor a directory): what it is instead."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return DemoFileError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist.", HINT)
        return DemoFileError(f"No such file: {path}", HINT)
    except OSError as exc:
        return DemoFileError(f"Cannot look at {path}: {exc.strerror or exc}.", HINT)
    return DemoFileError(f"{path} is {file_kind(mode)}, not a Python file.", HINT)


def source_text_error(path: Path, source: bytes) -> DemoFileError | None:
    """Why ``source`` (the bytes of ``path``) is not Python text, or None when it is.

    Python reads source in the encoding its coding line declares (UTF-8 by default) and refuses
    a NUL byte anywhere.
    """
    nul = source.find(b"\0")
    if nul >= 0:
        return DemoFileError(
            f"{path} is not Python source text: it holds a NUL byte (at byte {nul:,}); it looks like a binary file.",
            HINT,
        )
    encoding = "utf-8"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        codecs.decode(source, encoding)
        return None
    except SyntaxError as exc:  # an unknown encoding, or a first line that is not UTF-8
        bad = _first_undecodable(source, "utf-8")
        if bad is None:
            return DemoFileError(f"{path} is not Python source text: {exc.msg}.", HINT)
    except UnicodeDecodeError as exc:
        bad = exc.start
    return DemoFileError(
        f"{path} is not Python source text: byte 0x{source[bad]:02x} at byte {bad:,} is not {encoding.upper()}.",
        "save the file as UTF-8, or declare its encoding in a coding line (# -*- coding: latin-1 -*-)",
    )


def _first_undecodable(source: bytes, encoding: str) -> int | None:
    """The offset of the first byte of ``source`` that ``encoding`` cannot decode (None: all can)."""
    try:
        source.decode(encoding)
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def imported_source_error(exc: SyntaxError, path: Path) -> DemoFileError | None:
    """A module the demo imports is not Python text (Python says so with no file and no line):
    name that module's file when the traceback still has it, and the demo's import line."""
    if exc.lineno is not None:
        return None
    found = _source_path(exc.__traceback__)
    if found is not None:
        with open(found, "rb") as file:
            error = source_text_error(Path(found), file.read())
        if error is not None:
            return DemoFileError(f"{error.message.rstrip('.')} (imported by {path.name}).", f"fix or remove {found}")
    frames = demo_frames(exc, path)
    where = f"see {path.name} line {frames[-1].lineno}: {frames[-1].line}" if frames else "look at what it imports"
    return DemoFileError(f"A module {path.name} imports is not Python source text: {exc.msg}.", where)


def _source_path(tb: TracebackType | None) -> str | None:
    """The file importlib was compiling when the error was raised (its ``get_code``'s ``source_path``)."""
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "get_code" and isinstance(frame.f_locals.get("source_path"), str):
            found = frame.f_locals["source_path"]
        tb = tb.tb_next
    return found


def code_file_name(path: Path) -> str:
    """The file name the demo's code is compiled under: its absolute path, made valid UTF-8.

    JAX hands every function's file name to XLA as source information; a name with a byte that
    is not UTF-8 (a Latin-1 ``é``) fails there with ``std::bad_cast``. Such bytes become U+FFFD.
    """
    name = str(path.resolve())
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


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
