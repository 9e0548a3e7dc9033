"""The benchmarks' one harness: a declared column says its unit and which way is better, and every
benchmark of ``benchmarks/`` declares its section (no benchmark renders itself)."""

from __future__ import annotations

import ast

from _support import ROOT

from benchmarks import render, run
from benchmarks.harness import Column, Each, Prose, Table, ratio_column


def test_a_column_states_its_unit_its_better_side_and_its_target():
    column = ratio_column("check / JAX", lambda row: row["r"], better="lower", target=1.2, strong=True)
    assert column.header() == "check / JAX ↓, target <= 1.2x"
    assert column.cell({"r": 1.1}) == "**1.10x** (met)"
    assert column.cell({"r": 1.25}) == "**1.25x** (missed)"
    timing = Column("wall", lambda row: row, unit="ms", scale=1e3, better="lower")
    assert timing.header() == "wall (ms) ↓"
    assert timing.cell({"median": 0.0021, "min": 0.002, "max": 0.0035}) == "2.10 (2.00-3.50)"
    assert Column("bytes", lambda row: row, digits=None).cell(1234567) == "1,234,567"
    assert timing.cell(None) == "-"


def test_a_table_renders_its_rows_and_leaves_out_an_empty_one():
    table = Table((Column("name", lambda r: r[0], align="left"), Column("n", lambda r: r[1], digits=None)),
                  rows=lambda result: result, heading="Counts")
    assert table.lines([("a", 1000)]) == ["### Counts", "", "| name | n |", "|---|---:|", "| a | 1,000 |", ""]
    assert table.lines([]) == []
    each = Each(lambda result: result, (Prose(lambda item: [f"item {item}"]),))
    assert each.lines([1, 2]) == ["item 1", "", "item 2", ""]


def test_every_benchmark_declares_its_section_and_none_renders_itself():
    declared = render.benchmarks()
    assert {b.name for b in declared} == set(run.BENCHMARKS) | set(run.ALONE)
    assert len({b.heading for b in declared}) == len(declared)
    for benchmark in declared:
        tables = [block for block in benchmark.blocks if isinstance(block, Table)]
        for table in tables:
            assert all(column.title or column.align == "left" for column in table.columns)
    # only the renderer writes BENCHMARKS.md; no module of benchmarks/ is another renderer of it
    assert not list((ROOT / "benchmarks").glob("render_*.py"))
    writers = [path.name for path in (ROOT / "benchmarks").glob("*.py")
               if "BENCHMARKS.md" in {node.value for node in ast.walk(ast.parse(path.read_text()))
                                      if isinstance(node, ast.Constant) and isinstance(node.value, str)}]
    assert writers == ["render.py"], writers
