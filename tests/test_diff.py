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


def _changed(diff: list[str]) -> tuple[list[str], list[str]]:
    body = [line for line in diff if not line.startswith(("---", "+++", "@@"))]
    return [l[1:] for l in body if l.startswith("-")], [l[1:] for l in body if l.startswith("+")]


def test_a_real_mlps_diff_shows_the_moved_casts_and_sums_not_a_renumbering():
    """A user's chunked VJP of a 3-layer MLP (tests/fixtures/programs/chunked_mlp.py): the deferred
    program casts its weights before the loop and sums after it. Numbered casts made every later
    cast, and every line that read one, differ by a number only (113 changed lines, 76 of them
    such). Here no removed line equals an added one once every number in a name is blanked out,
    and every changed line is a cast, a sum, the loop, or a line that reads a cast weight or a sum."""
    import re
    from pathlib import Path

    from shardscope.config.settings import Settings
    from shardscope.pipeline.run import analyze

    path = Path(__file__).resolve().parent / "fixtures" / "programs" / "chunked_mlp.py"
    analysis = analyze(Settings(path, repeats=1), measure=False)
    removed, added = _changed(list(analysis.comparison.diff))

    def numbers_blanked(line: str) -> str:
        return re.sub(r"\d+", "#", line)

    assert not {numbers_blanked(l) for l in removed} & {numbers_blanked(l) for l in added}
    weights = {"scan_0.const0", "scan_0.const1", "scan_0.const2"}  # W1, W2, W3 inside the loop
    for line in removed + added:
        reads = set(line.split(" = ", 1)[-1].split())
        assert ("pvary" in line or "psum_invariant" in line or line.lstrip().startswith(("scan_0.", "{ body", "} ->"))
                or reads & weights or re.match(r"\s*add_\d+:\S+ = add scan_0\.carry\d ", line)), line
    assert len(removed) + len(added) < 40  # three weights: their casts, sums, uses and the loop's lines
