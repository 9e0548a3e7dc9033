"""``check --xla-dump``: the plan of the modules a real run compiled, read from its dump, nothing traced.

Each module the dump holds for the step becomes an :class:`~shardscope.engine.inspection.Inspection`
with the compiled plan ``check`` builds from a compiled module (:func:`~shardscope.engine.hlo.compiled.compiled_plan`)
and no jaxpr: the findings, the fixes, the JSON and the exit status are ``check``'s, and a
profile of the same run maps onto it as onto any compiled plan (its module's name and
instruction names are the run's own). What the dump cannot say: the mesh's axis names (groups
are shown as device ids) and which collectives the program wrote itself (no jaxpr to pair with).
"""

from __future__ import annotations

import time
from pathlib import Path

from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.dump_files import DumpedModule, dumped_modules, pick_modules
from shardscope.engine.hlo.sites import COLLECTIVE_OPCODES
from shardscope.engine.inspection import Inspection
from shardscope.engine.jaxpr.model import Block, Program
from shardscope.pipeline.check import FileCheck

__all__ = ["compilations_note", "dump_check", "dump_inspection"]

NO_JAXPR = Program(Block("", "program", (), (), ()))
"""The program of a dumped module: the dump holds no jaxpr."""


def dump_check(path: Path, name: str | None = None) -> FileCheck:
    """What ``check`` finds in the dump at ``path``: the inspection of the step's module (the one
    ``name`` names; see :func:`~shardscope.engine.hlo.dump_files.pick_modules`), and which of
    several compilations of it was read (the newest), said in a note."""
    modules = dumped_modules(path)
    picked = pick_modules(modules, name)
    notes = tuple(note for module in picked if (note := compilations_note(module, modules)))
    return FileCheck([dump_inspection(module) for module in picked], notes=notes)


def compilations_note(chosen: DumpedModule, modules: list[DumpedModule]) -> str:
    """``read module_0009.jit_step...txt, the newest of 2 compilations of jit_step (10:35:24); also
    there: module_0014...txt (10:20:02)`` ("" when the step was compiled once)."""
    same = [m for m in modules if m.name == chosen.name and m.path != chosen.path]
    if not same:
        return ""
    others = ", ".join(f"{m.path.name} ({_clock(m.path)})" for m in sorted(same, key=lambda m: m.path.name))
    return (f"--xla-dump holds {len(same) + 1} compilations of {chosen.name}: read {chosen.path.name}, the newest "
            f"({_clock(chosen.path)}); also there: {others}. Pass one file to read another.")


def _clock(path: Path) -> str:
    """When ``path`` was written, ``2026-12-06 10:35:24``."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
    except OSError:
        return "time unknown"


def dump_inspection(dumped: DumpedModule) -> Inspection:
    """The :class:`Inspection` of one dumped module: its compiled plan, for the backend its file names."""
    plan = compiled_plan(dumped.module, backend=dumped.backend, style=_style(dumped))
    return Inspection(function=dumped.name, program=NO_JAXPR, collectives=(), compiled=plan, dumped=dumped.path.name)


def _style(dumped: DumpedModule) -> str:
    """How the program was written, for the fixes' wording: ``shard_map`` when its collectives'
    ``op_name`` passes through one (``jit(step)/shard_map/while/body/psum``), else ``auto``."""
    collectives = (i for i in dumped.module.instructions() if i.opcode in COLLECTIVE_OPCODES)
    return "shard_map" if any("shard_map" in i.metadata.op_name.split("/") for i in collectives) else "auto"
