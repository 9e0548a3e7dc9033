"""``check --xla-dump``: the plan of the modules a real run compiled, read from its dump, nothing traced.

Each module the dump holds for the step becomes an :class:`~shardscope.engine.joined.inspection.Inspection`
with the compiled plan ``check`` builds from a compiled module (:func:`~shardscope.engine.hlo.compiled.compiled_plan`)
and no jaxpr: the findings, the fixes, the JSON and the exit status are ``check``'s, and a
profile of the same run maps onto it as onto any compiled plan (its module's name and
instruction names are the run's own). What the dump cannot say: the mesh's axis names (groups
are shown as device ids) and which collectives the program wrote itself (no jaxpr to pair with).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.dump_files import DumpedModule, dumped_modules, pick_modules
from shardscope.engine.hlo.sites import COLLECTIVE_OPCODES
from shardscope.engine.hlo.text import Instruction, parse
from shardscope.engine.joined.inspection import Inspection
from shardscope.engine.jaxpr.model import Block, Program
from shardscope.pipeline.check import FileCheck

__all__ = ["arguments", "compilations_note", "dump_check", "dump_inspection"]

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
    """Which of several compilations of the step was read, and what else is there: the same module
    compiled again (the same text but for its source-location tables: one program) or another
    module of the same name (other shapes), each with its file's time ("" when compiled once)."""
    same = [m for m in modules if m.name == chosen.name and m.path != chosen.path]
    if not same:
        return ""
    newest = all(_mtime(chosen.path) >= _mtime(m.path) for m in same)  # -f may name an older one
    which = "the newest" if newest else "as asked, not the newest"
    identical = [m for m in same if m.program_text == chosen.program_text]
    different = [m for m in same if m.program_text != chosen.program_text]
    if not different:  # compiled again at the same shapes: one program, whichever file is read
        return (f"--xla-dump holds {len(same) + 1} compilations of {chosen.name} to the same module (one program, "
                f"compiled {len(same) + 1} times): read {chosen.path.name}, {which} ({_clock(chosen.path)}); the "
                f"same module in {_files(identical)}.")
    also = f"; the same module in {_files(identical)}" if identical else ""
    return (f"--xla-dump holds {len(same) + 1} compilations of {chosen.name}: read {chosen.path.name}, {which} "
            f"({_clock(chosen.path)}){also}; another module in {_files(different)}. Pass one file to read another.")


def _files(modules: list[DumpedModule]) -> str:
    """``module_0014...txt (10:20:02), module_0016...txt (10:20:05)``, in the order XLA numbered them."""
    return ", ".join(f"{m.path.name} ({_clock(m.path)})" for m in sorted(modules, key=lambda m: m.path.name))


def _mtime(path: Path) -> float:
    """When ``path`` was written (0 when it cannot be told)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _clock(path: Path) -> str:
    """When ``path`` was written, ``2026-12-06 10:35:24``."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
    except OSError:
        return "time unknown"


def dump_inspection(dumped: DumpedModule) -> Inspection:
    """The :class:`Inspection` of one dumped module: its compiled plan, for the backend its file
    names, with the step's arguments as its entry parameters say (a fix through ``jax.shard_map``
    passes one spec per argument)."""
    plan = compiled_plan(dumped.module, backend=dumped.backend, style=_style(dumped), arguments=arguments(dumped))
    return Inspection(function=dumped.name, program=NO_JAXPR, collectives=(), compiled=plan, dumped=dumped.path.name)


def _style(dumped: DumpedModule) -> str:
    """How the program was written, for the fixes' wording: ``shard_map`` when its collectives'
    ``op_name`` passes through one (``jit(step)/shard_map/while/body/psum``), else ``auto``."""
    collectives = (i for i in dumped.module.instructions() if i.opcode in COLLECTIVE_OPCODES)
    return "shard_map" if any("shard_map" in i.metadata.op_name.split("/") for i in collectives) else "auto"


_ROOT_NAME = re.compile(r"[A-Za-z_]\w*")
_SDY_DIMS = re.compile(r"\[((?:\{[^}]*\}(?:,\s*)?)*)\]")
_TILES = re.compile(r"devices=\[([\d,]+)\]")


def arguments(dumped: DumpedModule) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each argument of the step, as its entry parameters say: the name of the pytree each
    parameter's ``op_name`` roots in (``params['w1']`` is ``params``), one per run of parameters
    of that name, and its ``PartitionSpec`` from the parameter's sharding (Shardy's, with the
    mesh's axis names, when the module or its ``before_optimizations`` file keeps it; else the
    tiles, with ``'data'`` standing for an axis the dump does not name; ``P(...)`` where nothing
    says), the one most of its parameters have standing for all. Empty when the parameters
    carry no names."""
    entry = dumped.module.entry
    if entry is None:
        return ()
    before = _before_optimizations(dumped)
    found: list[tuple[str, list[str]]] = []
    for param in entry.parameters:
        root = _ROOT_NAME.match(param.metadata.op_name or "")
        if root is None:
            return ()
        spec = _spec(param) or (_spec(before[param.parameter_number]) if param.parameter_number in before else "")
        spec = spec or "P(...)"  # the dump does not say: the user's to fill in
        if found and found[-1][0] == root.group(0):
            found[-1][1].append(spec)
        else:
            found.append((root.group(0), [spec]))
    return tuple((name, (max(set(specs), key=specs.count),)) for name, specs in found)


def _before_optimizations(dumped: DumpedModule) -> dict[int | None, Instruction]:
    """The entry parameters of the same module before XLA's passes, by number (its file beside
    the compiled one: ``module_0014.jit_step.before_optimizations.txt``), where they keep their
    shardings; empty without it."""
    stem = dumped.path.name.split(".")
    path = dumped.path.with_name(".".join(stem[:2]) + ".before_optimizations.txt") if len(stem) > 2 else None
    if path is None or not path.is_file():
        return {}
    try:
        entry = parse(path.read_text()).entry
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return {param.parameter_number: param for param in entry.parameters} if entry is not None else {}


def _spec(param: Instruction) -> str:
    """``P(None, 'data')`` from a parameter's sharding ("" when it has none): Shardy's (a frontend
    attribute on jax 0.10, ``sharding={mesh['data'=8], [{}, {'data'}, {}]}`` on 0.12), with the
    mesh's axis names, else GSPMD's tiles."""
    sharding = param.attribute("sharding") or ""
    shardy = param.frontend_attributes.get("xla.sdy.sharding", "") or (sharding if "mesh[" in sharding else "")
    dims = _SDY_DIMS.search(shardy.split("]", 1)[1] if shardy.startswith("{mesh[") else shardy)
    if dims:
        axes = [re.findall(r"[\"']([^\"']+)[\"']", dim) for dim in re.findall(r"\{[^}]*\}", dims.group(1))]
        return _written([repr(names[0]) if len(names) == 1 else
                         f"({', '.join(repr(a) for a in names)})" if names else "None" for names in axes])
    if "replicated" in sharding or "maximal" in sharding:
        return "P()"
    tiles = _TILES.search(sharding)
    if not tiles:
        return ""
    counts = [int(t) for t in tiles.group(1).split(",")]
    if "last_tile_dim_replicate" in sharding or "last_tile_dims" in sharding:
        counts = counts[:-1]
    return _written(["'data'" if n > 1 else "None" for n in counts])


def _written(dims: list[str]) -> str:
    """``P(None, 'data')``: the dimensions' axes, trailing ``None``s left out."""
    while dims and dims[-1] == "None":
        dims.pop()
    return f"P({', '.join(dims)})"
