"""GitHub's workflow commands, written: ``::error file=PATH,line=N,title=TITLE::MESSAGE`` (or ``::warning``).

A GitHub Actions run turns each such line on a step's output into an annotation on the pull
request. PATH is relative to the working directory (the checkout, where a workflow's steps run).
GitHub's rules for workflow commands escape ``%``, ``\\r`` and ``\\n`` in the message, and also
``:`` and ``,`` in a property's value. No JAX here: an error that stops ``check --format github``
before JAX starts (a file that does not import, a bad option) is annotated too.
"""

from __future__ import annotations

import os
from pathlib import Path

from shardscope.errors import ShardscopeError


def error_command(where: dict[str, str], title: str, message: str) -> str:
    """``::error file=...,line=...,title=...::message``, escaped."""
    return _command("error", where, title, message)


def warning_command(where: dict[str, str], title: str, message: str) -> str:
    """``::warning file=...,line=...,title=...::message``, escaped: an annotation that fails nothing."""
    return _command("warning", where, title, message)


def _command(level: str, where: dict[str, str], title: str, message: str) -> str:
    properties = ",".join(f"{key}={_property(value)}" for key, value in {**where, "title": title}.items())
    return f"::{level} {properties}::{_data(message)}"


def stopped_command(error: ShardscopeError, path: Path, cwd: Path | None = None, title: str | None = None) -> str:
    """The annotation of an error that stopped the check of ``path`` (a syntax error, an import
    that fails, a bad option; ``title`` for one that stopped a part of it, a target): at the
    user's line it names, else on the file."""
    message = error.message + (f"\nhint: {error.hint}" if error.hint else "")
    return error_command(error_where(error.line, path, os.path.abspath(cwd or Path.cwd())),
                         title or f"shardscope: {path.name} was not checked", message)


def error_where(line: tuple[str, int] | None, path: Path, here: str) -> dict[str, str]:
    """The checked file, at the user's line an error is about when it names one."""
    if line is None:
        return {"file": relative(path, here)}
    written = path if same_file(Path(line[0]), path) else Path(line[0])
    return {"file": relative(written, here), "line": str(line[1])}


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (False when either cannot be resolved)."""
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def relative(path: Path, here: str) -> str:
    """``path`` relative to ``here``, as GitHub names a file of the checkout (``/`` between folders)."""
    return Path(os.path.relpath(os.path.abspath(path), here)).as_posix()


def _data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's runner reads it back."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A workflow command's property value: its message escapes, and ``:`` and ``,`` too."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")
