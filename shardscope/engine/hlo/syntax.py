"""The bracket, comma and string syntax of HLO text that every part of its parse shares."""

from __future__ import annotations

import re

_OPEN, _CLOSE = "([{", ")]}"
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]{},]')
_ESCAPE = re.compile(rb"\\([0-7]{1,3}|x[0-9a-fA-F]{2}|.)")
_ESCAPES = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}
COMMENT = re.compile(r"/\*.*?\*/")
"""``/*index=5*/``: the comments XLA prints inside long operand and tuple lists."""


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


def unquote(value: str) -> str:
    """A C-escaped quoted string (``"params[\\'W\\']"``) as its text; other values unchanged."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return value
    raw = value[1:-1]
    if "\\" not in raw:
        return raw
    return _ESCAPE.sub(_unescape, raw.encode("utf-8")).decode("utf-8", "replace")


def _unescape(match: re.Match) -> bytes:
    code = match.group(1)
    if code[:1].isdigit():
        return bytes([int(code, 8) & 0xFF])
    if code[:1] == b"x" and len(code) == 3:
        return bytes([int(code[1:], 16)])
    return _ESCAPES.get(code, code)


def to_int(value: str | None) -> int:
    """``value`` as an int (0 when absent or not a number)."""
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
