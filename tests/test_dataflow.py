"""The dataflow graph: def -> use edges, into and out of loop bodies, back edges, feeding subgraphs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

from shardscope.engine.jaxpr import dataflow
from shardscope.engine.jaxpr.model import from_jaxpr


@pytest.fixture(scope="module")
def naive(analysis_of):
    return analysis_of("linear.py", devices=2, chunk_size=16).plans["naive"]


def node_of(graph, primitive, block_suffix=None):
    """The one equation node of ``primitive`` (optionally in a block whose id ends with ``block_suffix``)."""
    found = [n for n, d in graph.nodes(data=True) if d.get("primitive") == primitive
             and (block_suffix is None or d["block"].endswith(block_suffix))]
    assert len(found) == 1, (primitive, found)
    return found[0]


def inputs_of(graph, block_suffix):
    return {n: d for n, d in graph.nodes(data=True) if d["kind"] == "input" and d["block"].endswith(block_suffix)}


def test_def_use_edges_in_the_loop_body(naive):
    g = naive.graph
    psum = node_of(g, "psum_invariant")
    add = node_of(g, "add")
    dots = sorted(n for n, d in g.nodes(data=True) if d.get("primitive") == "dot_general")
    assert len(dots) == 2
    # dot_general_1 (the gradient x^T v) feeds the all-reduce, whose result is accumulated
    assert list(g.predecessors(psum)) == [dots[1]]
    assert list(g.successors(psum)) == [add]
    pvary = node_of(g, "pvary")
    assert g.has_edge(pvary, dots[0])


def test_edges_into_and_out_of_the_loop(naive):
    g = naive.graph
    scan = node_of(g, "scan")
    body = inputs_of(g, "scan_0")
    assert len(body) == 4  # const0 carry0 xs0 xs1
    reshapes = [n for n, d in g.nodes(data=True) if d.get("primitive") == "reshape"]
    for r in reshapes:  # the chunked x and v flow into the body's xs inputs
        assert any(s in body for s in g.successors(r)), r
    add = node_of(g, "add")
    assert g.has_edge(add, scan)  # body output -> loop equation
    assert not g.edges[add, scan].get("back")
    # everything in the body runs once per chunk
    for n, d in g.nodes(data=True):
        if d["block"] == g.nodes[add]["block"]:
            assert d["loops"] == (scan,) and d["executions"] == 2, n
    assert g.nodes[scan]["executions"] == 1 and g.nodes[scan]["trip_count"] == 2


def test_back_edge_from_carry_out_to_carry_in(naive):
    g = naive.graph
    back = [(u, v) for u, v, d in g.edges(data=True) if d.get("back")]
    (carry_in,) = [n for n, d in inputs_of(g, "scan_0").items() if n.endswith("scan_0.carry0")]
    assert back == [(node_of(g, "add"), carry_in)]
    assert not nx.is_directed_acyclic_graph(g)
    assert nx.is_directed_acyclic_graph(dataflow.forward_graph(g))


def test_feeding_subgraph_of_the_naive_psum(naive):
    g = naive.graph
    psum = node_of(g, "psum_invariant")
    sub = dataflow.feeding_subgraph(g, psum)
    block = g.nodes[psum]["block"]
    assert all(g.nodes[n]["block"] == block for n in sub)  # only nodes of the loop body
    prims = {g.nodes[n].get("primitive") for n in sub}
    assert "dot_general" in prims and "psum_invariant" in prims
    assert "add" not in prims and "pvary" not in prims  # downstream, or not on the path
    # dot_general_1 reads v's and x's chunks: both xs inputs feed it
    xs = {n for n in sub if g.nodes[n]["kind"] == "input"}
    assert len(xs) == 2 and all(".xs" in n for n in xs)
    assert nx.is_directed_acyclic_graph(sub)


def test_feeding_subgraph_of_the_deferred_psum(analysis_of):
    deferred = analysis_of("linear.py", devices=2, chunk_size=16).plans["deferred"]
    g = deferred.graph
    psum = node_of(g, "psum_invariant")
    sub = dataflow.feeding_subgraph(g, psum)
    assert node_of(g, "scan") in sub  # the whole loop feeds the one all-reduce after it
    assert not any(g.nodes[n].get("primitive") == "dot_general" for n in sub)  # not across the loop boundary


def test_graph_covers_every_equation(analysis_of):
    for demo in ("linear.py", "mlp.py", "rnn.py", "rbm.py"):
        plan = analysis_of(demo).plans["naive"]
        eq_nodes = [n for n, d in plan.graph.nodes(data=True) if d["kind"] != "input"]
        assert len(eq_nodes) == plan.program.equation_count, demo
        assert {s.equation.id for s in plan.program.sites()} == set(eq_nodes)
        for c in plan.collectives:
            assert plan.graph.nodes[c.equation_id]["executions"] == c.executions
            assert plan.graph.in_degree(c.equation_id) >= 1  # something feeds every all-reduce


def test_rnn_nested_loops(analysis_of):
    plan = analysis_of("rnn.py").plans["naive"]
    loops = dataflow.loops(plan.program)
    outer = [l for l in loops if not l.enclosing_ids]
    assert len(outer) == 1 and outer[0].trip_count == 2
    assert len(outer[0].collectives) == 3 and outer[0].executed_collectives == plan.jaxpr_runs_per_call
    inner_with_psum = [l for l in loops if l.enclosing_ids and l.collectives]
    assert len(inner_with_psum) == 1 and inner_with_psum[0].trip_count == 8
    (wh,) = inner_with_psum[0].collectives
    assert plan.graph.nodes[wh.equation_id]["loops"] == (outer[0].equation_id, inner_with_psum[0].equation_id)
    assert plan.graph.nodes[wh.equation_id]["executions"] == 16


def while_program():
    mesh = Mesh(np.array(jax.devices()[:2]), ("s",))

    def local(w, x):
        def cond(c):
            return c[0] < jnp.sum(w > 0)

        def body(c):
            return c[0] + 1, c[1] + lax.psum(x[0], "s")

        return lax.while_loop(cond, body, (0, jnp.zeros(3)))[1]

    f = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("s")), out_specs=P(), check_vma=True))
    return from_jaxpr(f.trace(jnp.ones(3), jnp.ones((8, 3))).jaxpr)


def test_while_cond_and_body_inputs_are_distinct_nodes():
    program = while_program()
    g = dataflow.build_graph(program)
    (loop,) = [s.equation for s in program.sites() if s.equation.primitive == "while"]
    cond_block, body_block = (b.id for b in loop.blocks)
    assert cond_block != body_block
    cond_inputs = {n for n, d in g.nodes(data=True) if d["kind"] == "input" and d["block"] == cond_block}
    body_inputs = {n for n, d in g.nodes(data=True) if d["kind"] == "input" and d["block"] == body_block}
    assert len(cond_inputs) == 3 and len(body_inputs) == 3  # cond: w, i, acc; body: x, i, acc
    assert not cond_inputs & body_inputs
    (psum,) = dataflow.collectives(program)
    assert psum.loop_trip_counts == (None,) and psum.executions is None and psum.bytes_per_call is None
    assert g.nodes[psum.equation_id]["executions"] is None
    # consts come from the right outer operands: w feeds the cond, x feeds the body
    (cond_const,) = [n for n in cond_inputs if ".cond_const" in n]
    (body_const,) = [n for n in body_inputs if ".const" in n]
    assert [p.rsplit(".", 1)[-1] for p in g.predecessors(cond_const)] == ["in0"]
    assert [p.rsplit(".", 1)[-1] for p in g.predecessors(body_const)] == ["in1"]
    # the comparison in the cond reads w, which comes from outside the loop
    lt = [n for n, d in g.nodes(data=True) if d.get("primitive") == "lt"]
    assert len(lt) == 1 and g.nodes[lt[0]]["block"] == cond_block
    ancestors = nx.ancestors(dataflow.forward_graph(g), lt[0])
    assert any(g.nodes[n]["block"] == "" for n in ancestors)
    # body output -> carry in of the next iteration: back edges into the body and the cond only
    back = [(u, v) for u, v, d in g.edges(data=True) if d.get("back")]
    assert back and all(v in body_inputs | cond_inputs for _, v in back)
    assert {v for _, v in back} & cond_inputs and {v for _, v in back} & body_inputs


def test_collective_bytes_are_operand_sizes():
    mesh = Mesh(np.array(jax.devices()[:4]), ("s",))

    def local(a, b):
        return lax.psum((a, b), "s")

    f = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("s"), P("s")), out_specs=P()))
    program = from_jaxpr(f.trace(jnp.ones((8, 3), jnp.float32), jnp.ones((4,), jnp.complex64)).jaxpr)
    found = dataflow.collectives(program)
    assert found and all(c.executions == 1 and not c.in_loop for c in found)
    # per-device shapes f32[2,3] + c64[1], however JAX groups the operands into equations
    assert sum(c.bytes_per_execution for c in found) == 2 * 3 * 4 + 1 * 8


def test_a_while_body_feeds_its_own_cond_on_the_next_iteration():
    import jax
    import jax.numpy as jnp
    from jax import lax

    from shardscope.engine.jaxpr.dataflow import build_graph
    from shardscope.engine.jaxpr.model import from_jaxpr

    def f(x):
        return lax.while_loop(lambda c: c[1] < c[0].sum(), lambda c: (c[0] * 2, c[1] + 1), (x, 0))

    program = from_jaxpr(jax.make_jaxpr(f)(jnp.ones(3)))
    graph = build_graph(program)
    back = {(u, v) for u, v, d in graph.edges(data=True) if d.get("back")}
    assert ("while_0/mul_0", "while_0.cond/while_0.carry0") in back
    assert ("while_0/add_0", "while_0.cond/while_0.carry1") in back
    assert ("while_0/mul_0", "while_0/while_0.carry0") in back
