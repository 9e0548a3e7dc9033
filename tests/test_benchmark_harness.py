"""The benchmarks' one harness: a declared column says its unit and which way is better, and every
benchmark of ``benchmarks/`` declares its section (no benchmark renders itself)."""

from __future__ import annotations

import ast
import sys

import pytest
from _support import ROOT

from benchmarks import render, run
from benchmarks.common import alternating_rounds
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


def test_the_rounds_alternate_the_order_and_refuse_an_unexpected_status(tmp_path):
    """check_at_scale's and check_ratios' rounds (``common.alternating_rounds``): each command in a
    process of its own, the order reversed every other round, each kind's environment its own."""
    log = tmp_path / "order"
    write = "import os, sys; open(sys.argv[1], 'a').write(os.environ.get('KIND', '?') + ' '); sys.exit(int(sys.argv[2]))"
    commands = {"check": [sys.executable, "-c", write, str(log), "1"], "bare": [sys.executable, "-c", write, str(log), "0"]}
    runs = alternating_rounds("toy", commands, 3, envs={"check": {"KIND": "check"}, "bare": {"KIND": "bare"}},
                              statuses={"check": (0, 1)})
    assert log.read_text().split() == ["check", "bare", "bare", "check", "check", "bare"]
    assert [r["returncode"] for r in runs["check"]] == [1, 1, 1] and [r["returncode"] for r in runs["bare"]] == [0] * 3
    with pytest.raises(RuntimeError, match="toy check exited with 1"):
        alternating_rounds("toy", commands, 1)  # check's 1 is not among the default statuses (0 only)
