"""The compiled modules a real run wrote with ``XLA_FLAGS=--xla_dump_to=DIR``: ``check --xla-dump``.

XLA writes each module it compiles several times over (``module_0014.jit_step.before_optimizations.txt``,
``...cpu_after_optimizations.txt``, the buffer assignment, the memory report); the plan of what ran
is the ``*after_optimizations.txt`` one, the module as the compiler left it, with its flags and
for its hardware. A folder holds one per compiled program: the step's is the one with
collectives (the small jits of a run, ``jit_convert_element_type``, ``jit_broadcast_in_dim``, have
none). One file may also be given: any module's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from shardscope.engine.hlo.sites import COLLECTIVE_OPCODES
from shardscope.engine.hlo.text import HloModule, parse
from shardscope.errors import SettingsError

__all__ = ["DumpedModule", "dumped_modules", "newest", "pick_modules"]

AFTER_OPTIMIZATIONS = "*after_optimizations.txt"
"""The files of a dump folder that hold a compiled module (not its ``-buffer-assignment.txt`` nor
``-memory-usage-report.txt``, which end otherwise)."""

DUMP_HINT = "XLA_FLAGS=--xla_dump_to=DIR python train.py writes them; pass DIR, or one of its *after_optimizations.txt files"

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

    def describe(self) -> str:
        """``jit_step (module_0014.jit_step.cpu_after_optimizations.txt, 2 collectives)``."""
        count = self.collectives
        return f"{self.name} ({self.path.name}, {count} collective{'' if count == 1 else 's'})"


def dumped_modules(path: Path) -> list[DumpedModule]:
    """Every compiled module at ``path``: a dump folder's ``*after_optimizations.txt`` files, in
    the order XLA numbered them, or one module's text file. A missing path, a folder without
    one, a file that is not HLO text or ends inside a computation: one :class:`SettingsError` each."""
    if not path.exists():
        raise SettingsError(f"--xla-dump {path}: no such file or folder.", DUMP_HINT)
    if path.is_dir():
        files = sorted(p for p in path.glob(AFTER_OPTIMIZATIONS) if p.is_file())
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
        f"--xla-dump holds {len(candidates)} modules{' with collectives' if with_collectives else ''}: "
        f"{', '.join(m.describe() for m in candidates)}.",
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
    shown = [m.describe() for m in modules if m.collectives]
    others = len(modules) - len(shown)
    if others:
        shown.append(f"{others} module{'' if others == 1 else 's'} without collectives")
    return ", ".join(shown)


def _read(path: Path) -> DumpedModule:
    """One module file read and parsed; not HLO text, or cut off: a :class:`SettingsError`."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"--xla-dump {path} cannot be read: {exc}", DUMP_HINT) from exc
    module = parse(text)
    if not module.computations and module.unclosed is None:
        raise SettingsError(f"--xla-dump {path} is not HLO text: it holds no computation.", DUMP_HINT)
    if module.unclosed is not None or module.entry is None:
        where = module.unclosed or "its entry computation"
        raise SettingsError(f"--xla-dump {path} is cut off: it ends inside {where} (a truncated file, or a copy "
                            "that did not finish).", "copy the file again from the run's dump folder")
    return DumpedModule(path, text, module, _backend(path.name, text))


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
