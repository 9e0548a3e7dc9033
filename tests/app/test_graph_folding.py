"""The Graph tab folds a real model's drawing to the collectives and the paths into them.

The program is a user's chunked VJP of a 3-layer MLP (tests/fixtures/programs/chunked_mlp.py): its
loop body is the whole backward pass, about ninety equations. What the folded drawing must keep is
read from the program itself here: its three weights (the loop's constants), their three casts to
varying, and the three sums of their gradients, each named by the weight it reduces.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from app_support import eventually, press
from rich.console import Console
from view_support import run_view as run

from shardscope.app.views import GraphView
from shardscope.app.views.graph import FOLD_ABOVE, plan_graph

PROGRAM = Path(__file__).resolve().parents[1] / "fixtures" / "programs" / "chunked_mlp.py"
WEIGHTS = ("W1", "W2", "W3")


@pytest.fixture(scope="module")
def analysis():
    from shardscope.config.settings import Settings
    from shardscope.pipeline.run import analyze

    return analyze(Settings(PROGRAM, repeats=1), measure=False)


def _boxes(text: str) -> list[str]:
    """The first line of every box drawn (``│ name │`` under a ``╭``), left to right, top to bottom."""
    lines = text.splitlines()
    firsts = []
    for above, line in zip(lines, lines[1:]):
        for match in re.finditer("╭", above):
            cell = line[match.start():]
            if cell.startswith("│"):
                firsts.append(cell[1:].split("│", 1)[0].strip())  # empty: a connector's corner
    return firsts


def _plain(renderable, width: int = 200) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def test_the_naive_loop_body_folds_to_weights_casts_and_sums(analysis):
    naive = analysis.plans["naive"]
    body = [c for c in naive.collectives if c.in_loop]
    assert len(body) == len(WEIGHTS) and naive.graph.number_of_nodes() > FOLD_ABOVE
    folded = _plain(plan_graph(naive, folded=True))
    boxes = _boxes(folded)
    consts = [b for b in boxes if b.startswith("scan_0.const")]
    casts = [b for b in boxes if b.endswith(" cast")]
    sums = [b for b in boxes if b.startswith("grad(p[")]
    assert len(consts) == len(casts) == len(sums) == len(WEIGHTS)
    assert sorted(sums) == [f"grad(p['{w}'])" for w in WEIGHTS]
    folds = re.findall(r"⋮ (\d+) ops \+ 2 inputs", folded)  # the chunk's x and y, folded with the ops
    assert len(folds) == len(WEIGHTS) and all(int(n) > 0 for n in folds)
    # nothing else is drawn: the three boxes under a fold are the ops that compute the sums' operands
    others = [b for b in boxes if b and b not in consts + casts + sums and not b.startswith("⋮")]
    assert others == []
    drawing = folded[folded.index("╭"):]
    assert max(len(line.rstrip()) for line in drawing.splitlines()) <= 89  # a 120-column tab beside the sidebar
    unfolded = _plain(plan_graph(naive, folded=False))
    assert len(_boxes(unfolded)) > len(boxes) and "⋮" not in unfolded


def test_f_unfolds_and_folds_the_drawing_in_a_worker(analysis):
    view = GraphView()

    async def script(app, pilot):
        view.show_analysis(analysis)
        await eventually(pilot, lambda: "⋮" in view.plain, "the folded drawing shows")
        folded = view.plain
        assert "folded to the collectives and the paths into them" in folded
        await press(pilot, "f")
        await eventually(pilot, lambda: "every op that feeds a collective drawn" in view.plain, "f unfolded it")
        assert view.unfolded and "⋮" not in view.plain
        await press(pilot, "f")
        await eventually(pilot, lambda: view.plain == folded, "f folded it again")

    run(view, script)
