"""The compiled modules a real run wrote with ``XLA_FLAGS=--xla_dump_to=DIR``: ``check --xla-dump``.

XLA writes each module it compiles several times over (``module_0014.jit_step.before_optimizations.txt``,
``...cpu_after_optimizations.txt``, the buffer assignment, the memory report); the plan of what ran
is the ``*after_optimizations.txt`` one, the module as the compiler left it, with its flags and
for its hardware. A folder holds one per compiled program: the step's is the one with
collectives (the small jits of a run, ``jit_convert_element_type``, ``jit_broadcast_in_dim``, have
none). One file may also be given: any module's text.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from shardscope.activities import activity
from shardscope.engine.hlo.sites import COLLECTIVE_OPCODES
from shardscope.engine.hlo.text import HloModule
from shardscope.engine.hlo.well_formed import MAX_TEXT_CHARACTERS, read_module
from shardscope.errors import SettingsError, file_kind

__all__ = ["DumpedModule", "described", "dumped_modules", "newest", "pick_modules", "same_modules"]

AFTER_OPTIMIZATIONS = "*after_optimizations.txt"
"""The files of a dump folder that hold a compiled module (not its ``-buffer-assignment.txt`` nor
``-memory-usage-report.txt``, which end otherwise)."""

DUMP_HINT = "XLA_FLAGS=--xla_dump_to=DIR python train.py writes them; pass DIR, or one of its *after_optimizations.txt files"
MAX_FILE_BYTES = MAX_TEXT_CHARACTERS
"""The largest module file read (256 MiB): a larger one is refused by its size, before it is read."""
_READ_BYTES = 1 << 24
"""How much of a file one read takes: a large file is read in steps, so that Ctrl+C is seen between them."""

_BACKENDS = (("tpu", "tpu"), ("gpu", "gpu"), ("sm_", "gpu"), ("cpu", "cpu"))
"""What a dump file's name says of the compiler: ``module_0014.jit_step.cpu_after_optimizations.txt``,
``...sm_9.0_gpu_after_optimizations.txt``, ``...tpu_after_optimizations.txt``."""


@dataclass(frozen=True)
class DumpedModule:
    """One compiled module of a dump: its file, its parse, the backend its file names."""

    path: Path
    text: str
    module: HloModule
    backend: str

    @property
    def name(self) -> str:
        """The module's name (``jit_step``)."""
        return self.module.name or self.path.stem

    @property
    def collectives(self) -> int:
        """How many collective instructions it holds."""
        return sum(1 for inst in self.module.instructions() if inst.opcode in COLLECTIVE_OPCODES)

    @property
    def program_text(self) -> str:
        """The module's text without its source-location tables (``FileNames``, ``FunctionNames``,
        ``FileLocations``, ``StackFrames``): a step compiled again at the same shapes compiles to the
        same text but for the line it was called from, which only those tables hold."""
        return _SOURCE_TABLES.sub("", self.text)

    def describe(self, compilations: int = 1) -> str:
        """``jit_step (module_0014.jit_step.cpu_after_optimizations.txt, 2 collectives)``; with
        ``compilations`` > 1, that it was compiled that many times to this same module."""
        count = self.collectives
        again = f", compiled {compilations} times to this same module" if compilations > 1 else ""
        return f"{self.name} ({self.path.name}{again}, {count} collective{'' if count == 1 else 's'})"


_SOURCE_TABLES = re.compile(r"^(?:FileNames|FunctionNames|FileLocations|StackFrames)\n(?:.+\n)*", re.MULTILINE)
"""A source-location table of a module's header: its title line and its rows, up to the blank line."""


def same_modules(modules: list[DumpedModule]) -> list[list[DumpedModule]]:
    """``modules`` grouped by what they compile to (name and :attr:`~DumpedModule.program_text`),
    each group newest first, the groups in the order of their newest: a step compiled twice at
    the same shapes is one group of two, at other shapes two groups."""
    groups: dict[tuple[str, str], list[DumpedModule]] = {}
    for module in modules:
        groups.setdefault((module.name, module.program_text), []).append(module)
    ordered = [sorted(group, key=lambda m: (_written(m.path), m.path.name), reverse=True) for group in groups.values()]
    return sorted(ordered, key=lambda group: modules.index(group[0]))


def described(modules: list[DumpedModule]) -> str:
    """Each module described once: a module compiled several times to the same text is one entry
    that says how many times (its newest file named); other compilations are listed each."""
    return ", ".join(group[0].describe(len(group)) for group in same_modules(modules))


def dumped_modules(path: Path) -> list[DumpedModule]:
    """Every compiled module at ``path``: a dump folder's ``*after_optimizations.txt`` files, in
    the order XLA numbered them, or one module's text file. A missing path, a folder without
    one, a file that is not HLO text or ends inside a computation: one :class:`SettingsError` each."""
    if not path.exists() and not path.is_symlink():
        raise SettingsError(f"--xla-dump {path}: no such file or folder.", DUMP_HINT)
    if path.is_dir():
        files = sorted(path.glob(AFTER_OPTIMIZATIONS))
        if not files:
            held = sum(1 for _ in path.iterdir())
            raise SettingsError(
                f"--xla-dump {path}: the folder holds {held} file{'' if held == 1 else 's'}, and no compiled module "
                f"({AFTER_OPTIMIZATIONS}).", DUMP_HINT)
        return [_read(p) for p in files]
    return [_read(path)]


def pick_modules(modules: list[DumpedModule], name: str | None) -> list[DumpedModule]:
    """The step's module(s) among ``modules``: the one ``name`` names (the module's name,
    ``jit_step``, the function's, ``step``, or its file's), else the only one with collectives
    (the only module at all when none has any). Several candidates: one :class:`SettingsError`
    listing them."""
    if name is not None:
        named = [m for m in modules if name in (m.name, m.name.removeprefix("jit_"), m.path.name, m.path.stem)]
        if not named:
            raise SettingsError(f"--xla-dump holds no module named {name}: it holds {_listed(modules)}.",
                                "pass one of those names with -f")
        return [newest(named)]  # a program compiled twice (its arguments changed, a run before): the newest
    with_collectives = [m for m in modules if m.collectives]
    candidates = with_collectives or modules
    if len(candidates) == 1:
        return candidates
    names = {m.name for m in candidates}
    if len(names) == 1:  # the same program compiled again (in this run, or an earlier run's left there): the newest
        return [newest(candidates)]
    raise SettingsError(
        f"--xla-dump holds {len(same_modules(candidates))} modules{' with collectives' if with_collectives else ''}: "
        f"{described(candidates)}.",
        f"name the step's with -f (shardscope check --xla-dump DIR -f {candidates[-1].name})")


def newest(modules: list[DumpedModule]) -> DumpedModule:
    """The module written last: by its file's time (a folder may hold an earlier run's dump,
    whose module numbers, counted from 0 in each process, can be higher), then by its number."""
    return max(modules, key=lambda m: (_written(m.path), m.path.name))


def _written(path: Path) -> float:
    """When ``path`` was last written (0 when it cannot be told)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _listed(modules: list[DumpedModule]) -> str:
    """The modules with collectives, each described, and how many others there are."""
    with_collectives = [m for m in modules if m.collectives]
    shown = [described(with_collectives)] if with_collectives else []
    others = len(modules) - len(with_collectives)
    if others:
        shown.append(f"{others} module{'' if others == 1 else 's'} without collectives")
    return ", ".join(shown)


def _read(path: Path) -> DumpedModule:
    """One module file read and parsed: not a regular file, larger than :data:`MAX_FILE_BYTES`, not
    UTF-8 text: a :class:`SettingsError`; not a module XLA would print (cut off, edited, not HLO):
    an :class:`~shardscope.errors.HloTextError` naming the line (:func:`read_module`)."""
    with activity(f"reading {path.name}"):
        text = read_text(path)
        module = read_module(text, f"--xla-dump {path}")
    return DumpedModule(path, text, module, _backend(path.name, text))


def read_text(path: Path) -> str:
    """The text of the file at ``path``, refused by its type before it is opened for reading (a
    FIFO would block, /dev/zero never ends) and by its size before it is read; read in steps of
    :data:`_READ_BYTES`, never past :data:`MAX_FILE_BYTES` whatever the file says of its size."""
    try:
        kind = os.stat(path).st_mode  # through symlinks: a link to /dev/zero is /dev/zero
    except OSError as exc:
        raise SettingsError(f"--xla-dump {path} cannot be read: {exc.strerror or exc}.", DUMP_HINT) from None
    if not stat.S_ISREG(kind):
        raise SettingsError(f"--xla-dump {path} is {file_kind(kind)}, not a module's text file.", DUMP_HINT)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO swapped in: no wait
    except OSError as exc:
        raise SettingsError(f"--xla-dump {path} cannot be read: {exc.strerror or exc}.", DUMP_HINT) from None
    with os.fdopen(descriptor, "rb") as file:
        opened = os.fstat(file.fileno())  # what was opened, if the path changed since
        if not stat.S_ISREG(opened.st_mode):
            raise SettingsError(f"--xla-dump {path} is {file_kind(opened.st_mode)}, not a module's text file.",
                                DUMP_HINT)
        if opened.st_size > MAX_FILE_BYTES:
            raise SettingsError(f"--xla-dump {path} holds {opened.st_size:,} bytes; shardscope reads module files of "
                                f"at most {MAX_FILE_BYTES:,} ({MAX_FILE_BYTES // 2**20} MiB).", DUMP_HINT)
        data = _read_bounded(file, path)
    try:
        return data.decode("utf-8").replace("\r\n", "\n")  # a dump copied through Windows reads as XLA wrote it
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SettingsError(f"--xla-dump {path}, line {line}: byte {exc.start:,} is not UTF-8 text "
                            f"({data[exc.start:exc.start + 1]!r}): it is binary, not HLO text.", DUMP_HINT) from None


def _read_bounded(file: BinaryIO, path: Path) -> bytes:
    """Every byte of ``file``, read a step at a time; more than :data:`MAX_FILE_BYTES` (a file that
    grew while it was read): a :class:`SettingsError`."""
    parts: list[bytes] = []
    size = 0
    while True:
        part = file.read(_READ_BYTES)
        if not part:
            return b"".join(parts)
        size += len(part)
        if size > MAX_FILE_BYTES:
            raise SettingsError(f"--xla-dump {path} holds more than {MAX_FILE_BYTES:,} bytes; shardscope reads module "
                                f"files of at most {MAX_FILE_BYTES // 2**20} MiB.", DUMP_HINT)
        parts.append(part)


def _backend(file_name: str, text: str) -> str:
    """The compiler a module is for: its dump file's name says it; a file named otherwise, its
    text (TPU layouts carry tiles, ``T(8,128)``; GPU modules call cuBLAS or Triton); else the CPU."""
    stem = file_name.rsplit("after_optimizations", 1)[0] if "after_optimizations" in file_name else ""
    for mark, backend in _BACKENDS:
        if mark in stem.rsplit(".", 1)[-1]:
            return backend
    if re.search(r"\{[\d,]*:T\(\d", text):
        return "tpu"
    if "__cublas" in text or "__triton" in text or "__cudnn" in text:
        return "gpu"
    return "cpu"
