"""The layered box drawing the Graph tab uses: layers, connectors, long edges, pruning."""

from __future__ import annotations

import networkx as nx
from rich.text import Text

from shardscope.app.views.layered import Box, draw, layers_of, prune


def boxes_for(graph: nx.DiGraph) -> dict[str, Box]:
    return {node: Box((Text(node),)) for node in graph.nodes}


def lines_of(graph: nx.DiGraph) -> list[str]:
    return draw(graph, boxes_for(graph)).plain.splitlines()


def row_of(lines: list[str], name: str) -> int:
    return next(k for k, line in enumerate(lines) if f" {name} " in line)


def test_layers_put_each_node_as_late_as_its_uses_allow():
    graph = nx.DiGraph([("x", "mul"), ("w", "mul"), ("mul", "psum"), ("const", "psum")])
    layers = layers_of(graph)
    assert layers == [["w", "x"], ["const", "mul"], ["psum"]]


def test_diamond_draws_boxes_in_layer_order_with_one_arrow_per_target():
    graph = nx.DiGraph([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    lines = lines_of(graph)
    assert row_of(lines, "a") < row_of(lines, "b") == row_of(lines, "c") < row_of(lines, "d")
    assert sum(line.count("▼") for line in lines) == 3  # b, c and d each have one entry point
    assert sum(line.count("╭") for line in lines) >= 4  # four boxes (plus connector corners)
    # a's one bus splits at a junction to reach both b and c
    between = lines[row_of(lines, "a") + 2 : row_of(lines, "b") - 1]
    assert any(set(line) & set("├┤┬┴") for line in between)
    # and b's and c's connectors merge into d's single entry
    between = lines[row_of(lines, "b") + 2 : row_of(lines, "d") - 1]
    assert any(set(line) & set("├┤┬┴") for line in between)


def test_an_edge_that_skips_a_layer_runs_straight_through_it():
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("a", "c")])
    lines = lines_of(graph)
    b_row = row_of(lines, "b")
    b_line = lines[b_row]
    # besides b's own borders, the long edge a -> c passes b's layer as a vertical line
    assert b_line.count("│") == 3


def test_every_box_is_closed():
    graph = nx.DiGraph([("in0", "dot"), ("in1", "dot"), ("dot", "psum")])
    lines = lines_of(graph)
    for name in ("in0", "in1", "dot", "psum"):
        row = row_of(lines, name)
        col = lines[row].index(f" {name} ") - 1
        assert lines[row][col] == "│" and lines[row - 1][col] == "╭" and lines[row + 1][col] == "╰"


def test_prune_keeps_the_nodes_nearest_the_sink_and_names_the_rest():
    graph = nx.DiGraph()
    nx.add_path(graph, [f"n{k}" for k in range(10)])  # n0 -> n1 -> ... -> n9
    kept, elided = prune(graph, max_nodes=4)
    assert set(kept.nodes) == {"n6", "n7", "n8", "n9"}
    assert elided == [f"n{k}" for k in range(6)]


def test_prune_caps_a_layer_and_drops_what_only_feeds_dropped_nodes():
    graph = nx.DiGraph()
    for k in range(8):
        graph.add_edge(f"src{k}", f"mid{k}")
        graph.add_edge(f"mid{k}", "sink")
    kept, elided = prune(graph, max_nodes=100, max_per_layer=3)
    assert {"sink", "mid0", "mid1", "mid2", "src0", "src1", "src2"} == set(kept.nodes)
    assert len(elided) == 10 and "src7" in elided
