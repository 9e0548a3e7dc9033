"""One hardware catalogue: a TPU generation's facts (its device kinds, its chip's figures, its ICI)
live in its record of :mod:`shardscope.hardware.tpu_generations`, a GPU's (its peaks, its node) in
its record of :mod:`shardscope.hardware.gpu_nodes`, and every lookup reads them there. These tests
fail when a generation's facts are split again: a device kind or a published figure written in
another module, a description file without a record, a lookup that misses a new record."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import shardscope
from shardscope.hardware import catalogue, gpu_nodes, tpu_generations
from shardscope.hardware.chips import tpu_chip
from shardscope.hardware.fabrics import TorusFabric
from shardscope.hardware.gpu_nodes import GPU_NODES
from shardscope.hardware.tpu_generations import TPU_GENERATIONS, TpuGeneration

PACKAGE = Path(shardscope.__file__).parent
TPU_HOME = PACKAGE / "hardware" / "tpu_generations.py"
GPU_HOME = PACKAGE / "hardware" / "gpu_nodes.py"


def _constants(tree: ast.AST) -> list[tuple[int, object]]:
    """``(line, value)`` of each constant in ``tree`` but the docstrings (examples in prose)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docstrings]


def _written_outside(home: Path, wanted) -> dict[str, object]:
    """Every constant of a module of the package but ``home`` for which ``wanted(value)`` holds."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == home:
            continue
        for line, value in _constants(ast.parse(path.read_text(), str(path))):
            if wanted(value):
                found[f"{path.relative_to(PACKAGE)}:{line}"] = value
    return found


def test_no_module_but_the_generations_writes_a_tpu_device_kind():
    kinds = {kind.lower() for g in TPU_GENERATIONS for kind in g.device_kinds}
    written = _written_outside(TPU_HOME, lambda v: isinstance(v, str) and v.strip().lower() in kinds)
    assert written == {}, "look a TPU up by its device kind with tpu_generations.generation_of"


def test_no_module_but_its_record_types_a_chips_published_figures():
    """v5e's 197e12 and 819e9, a GPU's peaks, NVLink's 450e9: typed in the record, derived elsewhere."""
    tpu = {g.chip.peak_flops["bf16"] for g in TPU_GENERATIONS} | {g.chip.memory_bandwidth_Bps for g in TPU_GENERATIONS}
    gpu = {peak for node in GPU_NODES for name, peak in node.peaks.items() if name != "f32" and name != "default"} \
        | {node.fabric.nvlink_Bps for node in GPU_NODES}
    is_figure = lambda figures: lambda v: isinstance(v, float) and v in figures  # noqa: E731
    assert _written_outside(TPU_HOME, is_figure(tpu)) == {}
    assert _written_outside(GPU_HOME, is_figure(gpu)) == {}


def test_the_scans_find_a_figure_and_a_device_kind():
    tree = ast.parse('"""TPU v5 lite in prose."""\nKIND = "TPU v5 lite"\nPEAK = 197e12\nWORDS = "on a TPU v5 lite"\n')
    assert [(line, v) for line, v in _constants(tree) if v in ("TPU v5 lite", 197e12)] == [(2, "TPU v5 lite"), (3, 197e12)]


def test_a_generations_chip_and_ici_are_its_own_and_its_names_are_found_once():
    kinds = [kind.lower() for g in TPU_GENERATIONS for kind in g.device_kinds]
    assert len(kinds) == len(set(kinds)) and len({g.name for g in TPU_GENERATIONS}) == len(TPU_GENERATIONS)
    for generation in TPU_GENERATIONS:
        assert generation.chip.name == generation.ici.generation == generation.name
        for kind in generation.device_kinds:
            assert tpu_generations.generation_of(kind) is generation
            assert catalogue.chip_of(kind.upper()) is generation.chip  # a profile's case
        assert catalogue.chip_named(generation.name) is generation.chip
        assert tpu_generations.generation_of("", f"{generation.topology_names[0]}:2x2") is generation


def test_the_generations_other_than_v5e_scale_its_measured_rates_by_their_own_figures():
    """v5e's vector rate (5.7e12 operations/s measured) at another chip's bf16 peak, its scatter rate
    (2.8e10 updates/s) at its memory bandwidth: from the records, not from figures typed twice."""
    v5e = tpu_generations.V5E.chip
    assert v5e.unit_rates["vector"] == pytest.approx(5.7e12) and v5e.unit_rates["scatter"] == pytest.approx(2.8e10)
    for generation in TPU_GENERATIONS[1:]:
        chip = generation.chip
        assert chip.unit_rates["vector"] == pytest.approx(5.7e12 * chip.peak_flops["bf16"] / 197e12)
        assert chip.unit_rates["scatter"] == pytest.approx(2.8e10 * chip.memory_bandwidth_Bps / 819e9)
        assert chip.checked == "" and "assumed" in chip.sources["overheads"]


def test_every_gpu_description_shardscope_ships_has_its_record_and_no_record_lacks_one():
    shipped = sorted(path.stem for path in gpu_nodes.DESCRIPTIONS.glob("*.txtpb"))
    assert shipped == sorted(node.name for node in GPU_NODES) == list(gpu_nodes.gpu_names())
    for node in GPU_NODES:
        chip = catalogue.chip_named(node.name)
        assert chip is not None and chip.peak_flops == node.peaks and chip.memory_bytes
        assert catalogue.chip_of(f"NVIDIA {node.name.upper()} 80GB HBM3") == chip


def test_a_new_generation_is_one_record_every_lookup_finds(monkeypatch):
    """The recipe of ``docs/contributing.md``: a record in ``TPU_GENERATIONS`` and nothing else."""
    from shardscope.cli import presets
    from shardscope.targets.registry import parse_target

    v7x = TpuGeneration("v7x", ("TPU7x",), ("v7x",),
                        tpu_chip("v7x", memory_gib=192, usable_gib=190, bandwidth=7.4e12, bf16=2.3e15, int8=None,
                                 source="a test's figures", measured_on=tpu_generations.V5E.chip),
                        TorusFabric("v7x", 1e11, 1e-6, "whole 4x4x4 cubes", "a test's figures"))
    monkeypatch.setattr(tpu_generations, "TPU_GENERATIONS", (*TPU_GENERATIONS, v7x))
    assert catalogue.chip_of("TPU7x") is v7x.chip and catalogue.chip_named("v7x") is v7x.chip
    assert "v7x" in catalogue.chip_names()
    assert parse_target("tpu:v7x:2x2x1").machine("TPU7x").chip is v7x.chip
    assert ("tpu:v7x:...", v7x.ici) in presets.target_fabrics()
