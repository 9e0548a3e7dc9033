"""The bracket, comma, string and number syntax of HLO text that every part of its parse shares.

Every pattern here reads its text in one pass whatever the text holds: a quoted string that is
never closed ends at the end of the text (it is not retried from every later quote), a comment
that is never closed likewise, and no pattern can try a long run of characters from each of its
positions. The parse reads any text a user points shardscope at in time linear in its length.
"""

from __future__ import annotations

import re

_OPEN, _CLOSE = "([{", ")]}"
QUOTED = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?'
"""A C-escaped quoted string, or what is left of the text when its closing quote never comes."""
_TOKENS = re.compile(QUOTED + r"|[()\[\]{},]", re.S)
_ESCAPE = re.compile(rb"\\([0-7]{1,3}|x[0-9a-fA-F]{2}|.)", re.S)
_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}
COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)
"""``/*index=5*/``: the comments XLA prints inside long operand and tuple lists."""
MAX_DIGITS = 19
"""The most digits a number of the text may have: every count, size and id of a module is an
int64 (19 digits); a longer run of digits is not a number XLA printed."""
_INTEGER = re.compile(r"[+-]?[0-9]{1,%d}" % MAX_DIGITS)
STATEMENT_TOKENS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(")?|[()\[\]{},]|//', re.S)
"""The tokens of an instruction's brackets: a quoted string (its closing quote captured: missing when
the string runs on past the text), a bracket, a comma, a ``//`` comment's start."""
STRING_REST = re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+(")?', re.S)
"""The rest of a quoted string begun on an earlier line (its closing quote captured)."""
ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*+\[[^\]]*+\](?:\{[^}]*+\})?|[a-z][a-z0-9]*+\b")
"""An array's shape as an instruction prints it (``f32[8,16]{1,0}``), or a type alone."""
OPCODE = re.compile(r"\s*+([a-z][\w\-]*+)\(")
"""An opcode and the ``(`` opening its operands, right where the text is read."""
OPCODE_ANYWHERE = re.compile(r"(?<![\w\-])[a-z][\w\-]*+\(")
"""An opcode and its ``(`` anywhere in a text (each word tried once: no run is tried from each of its letters)."""


def matching(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start`` (``start=-1``: an implied opening
    bracket before the text). The length of the text when it is never closed."""
    depth = 0
    for match in _TOKENS.finditer(text, start + 1 if start >= 0 else 0):
        token = match.group()
        if token in _OPEN:
            depth += 1
        elif token in _CLOSE:
            if depth == 0:
                return match.start()
            depth -= 1
    return len(text)


def split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes (empty parts dropped)."""
    parts, depth, last = [], 0, 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token == ",":
            if depth == 0:
                parts.append(text[last : match.start()])
                last = match.end()
        elif token in _OPEN:
            depth += 1
        elif token in _CLOSE:
            depth -= 1
    parts.append(text[last:])
    return [part for part in parts if part.strip()]


def nesting(text: str) -> tuple[int, int]:
    """``(deepest nesting, final depth)`` of the brackets of ``text`` outside quotes: ``(3, 0)``
    for ``f(g(h()))``; a final depth other than 0 is a bracket left open (or one closed twice)."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif token in _CLOSE:
            depth -= 1
    return deepest, depth


def unquote(value: str) -> str:
    """A C-escaped quoted string (``"params[\\'W\\']"``) as its text; other values unchanged."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    raw = value[1:-1]
    if "\\" not in raw:
        return raw
    return _ESCAPE.sub(_unescape, raw.encode("utf-8", "surrogatepass")).decode("utf-8", "replace")


def _unescape(match: re.Match) -> bytes:
    code = match.group(1)
    if code[:1].isdigit():
        return bytes([int(code, 8) & 0xFF])
    if code[:1] == b"x" and len(code) == 3:
        return bytes([int(code[1:], 16)])
    return _ESCAPES.get(code, code)


def integer(value: str | None) -> int | None:
    """``value`` as an int when it is one (an optional sign and at most :data:`MAX_DIGITS`
    digits, spaces around allowed), else None: never a 5,000-digit number nor an exception."""
    if value is None:
        return None
    match = _INTEGER.fullmatch(value.strip())
    return int(match.group()) if match is not None else None


def to_int(value: str | None) -> int:
    """``value`` as an int (0 when absent or not a number of at most :data:`MAX_DIGITS` digits)."""
    number = integer(value)
    return number if number is not None else 0
