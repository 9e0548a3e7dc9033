"""The plan diff: unified text and the side-by-side rows a two-column view shows."""

from __future__ import annotations

from shardscope.render.diff import side_by_side, unified
from shardscope.render.text import diff_text

BEFORE = "a\nb\nc\nd\n"
AFTER = "a\nB\nc\nd\ne\n"


def test_unified():
    lines = unified(BEFORE, AFTER, "naive", "deferred")
    assert lines[:2] == ["--- naive", "+++ deferred"]
    assert "-b" in lines and "+B" in lines and "+e" in lines
    assert not any(l.endswith("\n") for l in lines)
    assert unified(BEFORE, BEFORE, "naive", "deferred") == []


def test_side_by_side_rebuilds_both_texts():
    rows = side_by_side(BEFORE, AFTER)
    assert [r.left for r in rows if r.left is not None] == BEFORE.splitlines()
    assert [r.right for r in rows if r.right is not None] == AFTER.splitlines()
    assert [r.tag for r in rows] == ["equal", "replace", "equal", "equal", "insert"]
    assert rows[-1].left is None and rows[-1].right == "e"


def test_side_by_side_of_the_seed_case(analysis_of):
    a = analysis_of("linear.py", devices=2, chunk_size=16)
    naive, deferred = a.plans["naive"].canonical_text, a.plans["deferred"].canonical_text
    rows = side_by_side(naive, deferred)
    assert [r.left for r in rows if r.left is not None] == naive.splitlines()
    assert [r.right for r in rows if r.right is not None] == deferred.splitlines()
    removed = [r.left for r in rows if r.tag in ("delete", "replace") and r.left and "psum_invariant" in r.left]
    assert removed  # the all-reduce left the loop body
    assert a.export_stem() == "linear-naive-vs-deferred-2dev-c16"  # the file (named as its function), the pair
    assert a.export_stem(a.compare("deferred", "reduced")) == "linear-deferred-vs-reduced-2dev-c16"
    text = diff_text(a)
    assert text.splitlines()[0] == "# shardscope: linear.py::linear"
    assert "# naive: 2 runs/call, 1 of 1 collective equations in loops, 40 B/call" in text.splitlines()
    assert "# deferred: 1 run/call, all 1 collective equations once per call, 20 B/call" in text.splitlines()
