"""The source positions of a compiled module: the ``FileNames``, ``FunctionNames``,
``FileLocations`` and ``StackFrames`` tables that ``metadata={... stack_frame_id=N}`` points into.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardscope.engine.hlo.syntax import integer, unquote
from shardscope.engine.user_frames import users_first


@dataclass(frozen=True)
class SourceLocation:
    """A Python source position: ``file``, ``line``, the ``function`` it is in."""

    file: str
    line: int
    function: str = ""
    column: int = 0

    def text(self, short: bool = True) -> str:
        """``train.py:42 (loss)`` (the whole path when ``short`` is false)."""
        file = self.file.rsplit("/", 1)[-1] if short else self.file
        return f"{file}:{self.line}" + (f" ({self.function})" if self.function else "")

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class FileLocation:
    """An entry of the ``FileLocations`` table (ids are 1-based positions in the other tables)."""

    file_name_id: int
    function_name_id: int
    line: int
    column: int = 0


@dataclass(frozen=True)
class StackFrame:
    """An entry of the ``StackFrames`` table: a location and the frame that called it (0: none)."""

    file_location_id: int
    parent_frame_id: int


@dataclass(frozen=True)
class StackFrameIndex:
    """The module's stack-frame tables, which ``metadata={... stack_frame_id=N}`` points into.

    XLA prints every table 1-based and each parent as ``parent_frame_id + 1`` (the proto's
    1-based id plus one: ``HloModule::PrintStackFrameIndex``), so the printed ``1`` means "no
    parent"; the parse stores the proto's value (0 for none).
    """

    file_names: tuple[str, ...] = ()
    function_names: tuple[str, ...] = ()
    file_locations: tuple[FileLocation, ...] = ()
    frames: tuple[StackFrame, ...] = ()

    def stack(self, frame_id: int) -> tuple[SourceLocation, ...]:
        """The call stack of ``frame_id``, innermost first (empty when the id is unknown)."""
        found: list[SourceLocation] = []
        seen: set[int] = set()
        while 0 < frame_id <= len(self.frames) and frame_id not in seen:
            seen.add(frame_id)
            frame = self.frames[frame_id - 1]
            location = self._location(frame.file_location_id)
            if location is not None:
                found.append(location)
            frame_id = frame.parent_frame_id
        return tuple(found)

    def location(self, frame_id: int, users: bool = False) -> SourceLocation | None:
        """The innermost source position of ``frame_id``: the line that made the instruction
        (what the jaxpr's equations are matched by); with ``users``, the innermost in the
        user's own files (:func:`users_first`: the line shown)."""
        stack = self.stack(frame_id)
        if users:
            return users_first(stack, lambda location: location.file)
        return stack[0] if stack else None

    def _location(self, location_id: int) -> SourceLocation | None:
        if not 0 < location_id <= len(self.file_locations):
            return None
        loc = self.file_locations[location_id - 1]
        file = _table_entry(self.file_names, loc.file_name_id)
        function = _table_entry(self.function_names, loc.function_name_id)
        return SourceLocation(file, loc.line, function, loc.column)


def _table_entry(table: tuple[str, ...], one_based: int) -> str:
    return table[one_based - 1] if 0 < one_based <= len(table) else ""


_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_STRING_ENTRY = re.compile(r'^\s*+\d++\s++"([^"\\]*+(?:\\.[^"\\]*+)*+)"\s*+$', re.S)
_FIELDS_ENTRY = re.compile(r"(?<!\w)(\w++)=(-?\d++)")


def parse_stack_frames(text: str) -> "StackFrameIndex":
    """The stack-frame tables printed in a module's text (empty tables when it has none)."""
    return _stack_frames({table: _table_rows(text, table) for table in _TABLES})


def _table_rows(text: str, table: str) -> list[str]:
    """The numbered rows under the line ``table`` (``FileNames``, ...), up to the next other line."""
    start = text.find("\n" + table + "\n")
    if start < 0:
        return []
    rows = []
    end = text.find("\n\n", start + 1)
    for line in text[start + len(table) + 2 : end if end >= 0 else len(text)].splitlines():
        line = line.strip()
        if not line[:1].isdigit():
            break
        rows.append(line)
    return rows


def _stack_frames(tables: dict[str, list[str]]) -> StackFrameIndex:
    def strings(rows: list[str]) -> tuple[str, ...]:
        found = []
        for row in rows:
            match = _STRING_ENTRY.match(row)
            found.append(unquote('"' + match.group(1) + '"') if match else "")
        return tuple(found)

    def fields(rows: list[str]) -> list[dict[str, int]]:  # a number too long to be an id reads as 0 (no entry)
        return [{k: integer(v) or 0 for k, v in _FIELDS_ENTRY.findall(row)} for row in rows]

    locations = tuple(
        FileLocation(f.get("file_name_id", 0), f.get("function_name_id", 0), f.get("line", 0), f.get("column", 0))
        for f in fields(tables["FileLocations"])
    )
    # printed as parent_frame_id + 1 (HloModule::PrintStackFrameIndex): store the proto's value
    frames = tuple(
        StackFrame(f.get("file_location_id", 0), max(f.get("parent_frame_id", 0) - 1, 0))
        for f in fields(tables["StackFrames"])
    )
    return StackFrameIndex(strings(tables["FileNames"]), strings(tables["FunctionNames"]), locations, frames)


_FIELDS_ROW = re.compile(r"\d++\s++\{(?:\s*+\w++=-?\d++)*+\s*+\}")
_ID_FIELDS = {"FileLocations": (("file_name_id", "FileNames"), ("function_name_id", "FunctionNames")),
              "StackFrames": (("file_location_id", "FileLocations"), ("parent_frame_id", "StackFrames"))}
"""Each table's fields that point into another table (1-based; a frame's parent printed plus one)."""


def stack_frame_problem(text: str, index: StackFrameIndex) -> tuple[int, str] | None:
    """The first thing wrong with the stack-frame tables of ``text`` (``index`` their parse), as
    ``(line, what)``: a row numbered out of turn, a row that is not one (a table cut off), an id
    past the end of the table it points into. None when the tables hold together."""
    sizes = {"FileNames": len(index.file_names), "FunctionNames": len(index.function_names),
             "FileLocations": len(index.file_locations), "StackFrames": len(index.frames) + 1}
    for table in _TABLES:
        start = text.find("\n" + table + "\n")
        if start < 0:
            continue
        first_line = text.count("\n", 0, start) + 3
        for k, row in enumerate(_table_rows(text, table)):
            number = row.split(None, 1)[0]
            pattern = _STRING_ENTRY if table in ("FileNames", "FunctionNames") else _FIELDS_ROW
            if number != str(k + 1) or pattern.fullmatch(row) is None:
                return first_line + k, f"row {k + 1} of the {table} table is not one: {row[:60]!r}"
            for field, target in _ID_FIELDS.get(table, ()):
                found = re.search(r"\b" + field + r"=(-?\d++)", row)
                value = integer(found.group(1)) if found else None
                if value is None or not 0 < value <= sizes[target]:
                    return first_line + k, (f"{field}={found.group(1)[:20] if found else '?'} in the {table} table "
                                            f"points past the {target} table ({sizes[target]} rows)")
    return None
