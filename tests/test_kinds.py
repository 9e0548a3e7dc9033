"""Every collective kind is one row of :data:`shardscope.collective_kinds.KINDS`: no other module writes
a list of collective primitives, opcodes or ``jax.lax`` calls, and the lists the rest of the package
reads are the table's. The costs of a collective-broadcast follow XLA's and JAX's semantics."""

from __future__ import annotations

import ast
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.extend.core import Primitive
from jax.sharding import NamedSharding, PartitionSpec as P

import shardscope
from shardscope.hardware import collective_models
from shardscope.hardware.fabrics import torus_time
from shardscope.costmodel.projection import ring_terms
from shardscope import collective_kinds as kinds
from shardscope.engine.jaxpr.model import CAST_PRIMITIVES, COLLECTIVE_PRIMITIVES

PACKAGE = Path(shardscope.__file__).parent
HOME = PACKAGE / "collective_kinds.py"

VOCABULARY = (kinds.PRIMITIVES | kinds.CALLS | set(kinds.NAMES)
              | {f"{name}-{phase}" for name in kinds.NAMES for phase in ("start", "done")})
"""Every string that names a collective: primitives, their ``*_start`` forms, ``jax.lax`` calls, opcodes."""


def _lists_of_collectives(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """``(line, names)`` of each set, tuple, list or dict written in ``tree`` that holds two or
    more collective names as string literals."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            items: list[ast.expr | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = [*node.keys, *node.values]
        else:
            continue
        named = [i.value for i in items if isinstance(i, ast.Constant) and i.value in VOCABULARY]
        if len(named) >= 2:
            found.append((node.lineno, named))
    return found


def test_no_module_but_kinds_writes_a_list_of_collectives():
    written = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        for line, names in _lists_of_collectives(ast.parse(path.read_text(), str(path))):
            written[f"{path.relative_to(PACKAGE)}:{line}"] = names
    assert written == {}


def _compared_with_a_collective(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each comparison (``==``, ``in``) with a collective name written as a literal."""
    return [(node.lineno, c.value) for node in ast.walk(tree) if isinstance(node, ast.Compare)
            for c in (node.left, *node.comparators) if isinstance(c, ast.Constant) and c.value in VOCABULARY]


def test_no_module_but_kinds_compares_with_a_collective_named_as_a_literal():
    """One kind or primitive asked by name goes through kinds' named constants (``ALL_TO_ALL``,
    ``PSUM_INVARIANT``), so a search for the name finds every place that asks for it."""
    compared = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        for line, name in _compared_with_a_collective(ast.parse(path.read_text(), str(path))):
            compared[f"{path.relative_to(PACKAGE)}:{line}"] = name
    assert compared == {}
    assert _compared_with_a_collective(ast.parse('if kind == "all-gather" or p in ("psum",): pass')) != []


def _collectives_written(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each string literal in ``tree`` that is exactly a collective's name, one
    alone too (a label, a set of opcodes with one collective among them, a kind handed on); the
    docstrings' examples and prose that holds a name (``"all-gather over axis 0"``) are not."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in VOCABULARY
            and id(node) not in docstrings]


def test_no_module_but_kinds_writes_a_collectives_name_as_a_literal():
    """One name alone (``Built(..., "all-reduce")``, ``{"add", "all-reduce-done"}``) is written as
    kinds' named constant (``ALL_REDUCE``, ``ALL_REDUCE_DONE``), as two in a list are derived."""
    written = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        for line, name in _collectives_written(ast.parse(path.read_text(), str(path))):
            written[f"{path.relative_to(PACKAGE)}:{line}"] = name
    assert written == {}, "name the collective with shardscope.collective_kinds' constant"


def test_the_scan_finds_a_single_collective_written_as_a_literal():
    tree = ast.parse('"""all-reduce in prose."""\nBuilt(p, "all-reduce")\nKEEPS = {"add", "all-reduce-done"}\n'
                     'WORDS = "all-gather over axis 0"\nf"{x} psum"\n')
    assert _collectives_written(tree) == [(2, "all-reduce"), (3, "all-reduce-done")]


def test_the_scan_finds_a_list_of_collectives_where_one_is_written():
    tree = ast.parse('REDUCE = frozenset({"psum", "pmax"})\nPASSING = {"copy", "all-gather", "all-to-all"}\n'
                     'ONE = ("psum", "add")\n')
    assert sorted(_lists_of_collectives(tree)) == [(1, ["psum", "pmax"]), (2, ["all-gather", "all-to-all"])]


def test_every_collective_primitive_this_jax_defines_is_in_a_row():
    """JAX's own parallel primitives (``jax._src.lax.parallel``'s, this version's: 0.12 adds
    ``pbroadcast_dynamic``, ``unreduced_pmax`` and ``unreduced_pmin``) against the table. The
    ``*_done`` halves of async pairs only wait; the casts and ``axis_index`` move nothing."""
    from jax._src.lax import parallel

    defined = {p.name for p in vars(parallel).values() if isinstance(p, Primitive)}
    moving = {p for p in defined if not p.endswith("_done")} - CAST_PRIMITIVES - {"axis_index", "preduced"}
    assert moving - COLLECTIVE_PRIMITIVES == set()
    assert {"psum", "all_gather", "reduce_scatter", "all_to_all", "ppermute", "pbroadcast"} <= moving


def test_every_primitive_has_one_cost_shape_and_each_model_list_is_its_shape():
    assert set(kinds.SHAPE_OF) == kinds.PRIMITIVES
    assert collective_models.REDUCE == {"psum", "psum_invariant", "pmax", "pmin", "unreduced_psum", "unreduced_pmax",
                                        "unreduced_pmin", "psum_start", "psum_invariant_start", "unreduced_psum_start"}
    assert collective_models.PAIRS == {"ppermute", "ppermute_start", "psend", "precv"}
    assert collective_models.BROADCAST == {"pbroadcast", "pbroadcast_dynamic", "pbroadcast_start"}
    assert not collective_models.BROADCAST & collective_models.SCATTER


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_a_pbroadcast_sends_the_sources_whole_value_down_a_chain(devices):
    """JAX's ``pbroadcast`` (``jax._src.lax.parallel``: "copied from the source index") lowers to
    XLA's collective-broadcast: one device's ``S`` bytes reach every other. Pipelined down a chain,
    that is ``n-1`` steps and ``S`` bytes through each link (not a reduce-scatter's ``(n-1)/n S``)."""
    payload = 1 << 20
    assert ring_terms("pbroadcast", payload, devices) == (devices - 1, payload)
    assert ring_terms("pbroadcast_start", payload, devices) == (devices - 1, payload)


def test_pbroadcast_is_xlas_collective_broadcast_of_the_whole_value_from_its_source():
    """The semantics the cost rests on, read from JAX's own lowering (JAX lowers ``pbroadcast`` on
    GPUs only; ``jax.export`` lowers for CUDA here): one ``collective_broadcast`` whose group
    starts at the source, its result the operand's whole shape on every device (a reduce-scatter's
    would be a ``1/n`` shard)."""
    mesh = jax.make_mesh((4,), ("x",))
    f = jax.shard_map(lambda x: jax.lax.pbroadcast(x, "x", source=2), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    x = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    text = jax.export.export(jax.jit(f), platforms=["cuda"])(x).mlir_module()
    ops = [line for line in text.splitlines() if "stablehlo.collective_broadcast" in line]
    assert len(ops) == 1
    assert "replica_groups = dense<[[2, 0, 1, 3]]>" in ops[0]
    assert ": (tensor<2xf32>) -> tensor<2xf32>" in ops[0]
    assert kinds.OF_PRIMITIVE["pbroadcast"] == "collective-broadcast"


def test_on_a_torus_and_on_nccl_a_broadcast_moves_the_whole_value_once():
    from shardscope.hardware.nccl import NcclPath, candidates
    from shardscope.hardware.gpu_nodes import gpu_node
    from shardscope.hardware.tpu_generations import generation_of

    payload = 8 << 20
    node = gpu_node("h100")
    assert node is not None
    path = NcclPath(8, 1, 8, node.fabric.nccl, node.fabric.nvlink_Bps, node.fabric.nic_Bps)

    def simple_ring(model: str) -> float:
        (ring,) = [c for c in candidates(model, payload, path) if (c.algorithm, c.protocol) == ("ring", "Simple")]
        return ring.nbytes / ring.bandwidth_Bps

    # the same ring, but every link carries S, not (n-1)/n S: the wire time is n/(n-1) the reduce-scatter's
    assert simple_ring("pbroadcast") == pytest.approx(simple_ring("reduce_scatter") * 8 / 7)

    generation = generation_of("", "v5e:4x1")
    assert generation is not None
    fabric = generation.ici
    row = [(i, 0) for i in range(4)]
    torus = fabric.wraps((4, 1))
    timed_torus = torus_time("pbroadcast", payload, row, fabric, (4, 1), torus)
    # the source's bytes leave over its links of the row: both ways round a ring, one way down a line
    assert timed_torus.bandwidth_s == pytest.approx(payload / ((2 if torus[0] else 1) * fabric.link_Bps))
    assert "broadcast" in timed_torus.algorithm
