"""A ``lax.while_loop`` whose bound is a constant (``lambda c: c[0] < 10``): the jaxpr does not
say how many times it runs (a ``while`` has no ``length``), XLA's loop analysis does
(``known_trip_count`` 10). The one psum of a gradient in its body compiles to one all-reduce in
the while body; ``check`` paired none of them (the compiled loop's 10 is not the jaxpr's unknown)
and listed the psum a second time, as dead: "the compiler removed it", though it runs 10 times.
The same for a while_loop nested in a scan, and one whose condition has a psum of its own.

Expected numbers come from the compiled text, parsed here (the all-reduces, their shapes, the
while loops' trip counts), and from the jaxpr, walked here (its psum equations, in every
sub-jaxpr: a while's cond and body, a scan's body, the shard_map's); never from shardscope.
"""

from __future__ import annotations

import json
import re

import jax
import pytest

import shardscope
from _support import load_program_module, write_demo

PROGRAM = '''
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
X = jax.ShapeDtypeStruct((10, 32, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "d")))
W = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P()))


@shardscope.program(args=(W, X))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "d")), out_specs=P(), check_vma=True)
def wl(w, xs):
    def body(c):
        i, acc = c
        g = jax.grad(lambda w: jnp.sum(xs[i] @ w))(w)
        return i + 1, acc + g
    _, acc = lax.while_loop(lambda c: c[0] < 10, body, (0, jnp.zeros_like(w)))
    return acc


@shardscope.program(args=(W, X))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "d")), out_specs=P(), check_vma=True)
def inscan(w, xs):
    def step(acc, x):
        def body(c):
            i, a = c
            return i + 1, a + jax.grad(lambda w: jnp.sum(x * i @ w))(w)
        _, a = lax.while_loop(lambda c: c[0] < 4, body, (0, acc))
        return a, None
    acc, _ = lax.scan(step, jnp.zeros_like(w), xs)
    return acc


@shardscope.program(args=(W, X))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "d")), out_specs=P(), check_vma=True)
def condsum(w, xs):
    def cond(c):
        i, acc, r = c
        return (i < 10) & (lax.psum(r, "d") < 1e9)
    def body(c):
        i, acc, r = c
        return i + 1, acc + jax.grad(lambda w: jnp.sum(xs[i] @ w))(w), r + jnp.sum(xs[i])
    _, acc, _ = lax.while_loop(cond, body, (0, jnp.zeros_like(w), lax.pcast(jnp.float32(0), "d", to="varying")))
    return acc
'''

PROGRAMS = ("wl", "inscan", "condsum")
SUMS = frozenset({"psum", "psum_invariant"})
DTYPE_BYTES = {"f32": 4, "bf16": 2, "s32": 4}


def _jaxpr_sums(jaxpr) -> int:
    """The psum equations of ``jaxpr`` and of every jaxpr its equations hold."""
    found = 0
    for eqn in jaxpr.eqns:
        found += eqn.primitive.name in SUMS
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found += _jaxpr_sums(inner)
    return found


def _compiled(text: str) -> list[dict]:
    """Each all-reduce instruction of the compiled text: its computation, its result's bytes, and
    the trip counts of the while loops around it (outermost first, None where XLA does not know)."""
    computations: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            name = head.group(1)
            computations[name] = []
        elif name is not None:
            computations[name].append(line)
    # while loops: the computation that holds the loop, its body and condition, its trip count
    loops = {}
    for holder, lines in computations.items():
        for line in lines:
            m = re.search(r"\swhile\(.*condition=%?([\w.\-]+), body=%?([\w.\-]+)", line)
            if m:
                trip = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
                for inner in m.groups():
                    loops[inner] = (holder, int(trip.group(1)) if trip else None)

    def trips(computation: str) -> list[int | None]:
        found = []
        while computation in loops:
            computation, trip = loops[computation]
            found.insert(0, trip)
        return found

    sums = []
    for computation, lines in computations.items():
        for line in lines:
            m = re.search(r"= (\w+)\[([\d,]*)\]\{?[\d,]*\}? all-reduce\(", line)
            if m:
                elements = 1
                for d in filter(None, m.group(2).split(",")):
                    elements *= int(d)
                sums.append({"computation": computation, "bytes": elements * DTYPE_BYTES[m.group(1)],
                             "trips": trips(computation)})
    return sums


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return load_program_module(write_demo(tmp_path_factory.mktemp("while"), "wl.py", PROGRAM))


def _expected(module, name: str) -> tuple[int, list[dict]]:
    fn = getattr(module, name)
    args = (module.W, module.X)
    sums = _jaxpr_sums(jax.make_jaxpr(fn)(*args).jaxpr)
    return sums, _compiled(fn.lower(*args).compile().as_text())


def test_the_compiled_text_keeps_every_psum_in_its_while_loop(module):
    """What the tests below expect, read by hand: one all-reduce per psum (two in condsum), each
    in a while loop; the constant bounds' trip counts are known to XLA (10, and 4 inside the
    scan's 10), condsum's (its condition reads a sum) is not."""
    by_name = {name: _expected(module, name) for name in PROGRAMS}
    assert {name: (sums, len(compiled)) for name, (sums, compiled) in by_name.items()} == {
        "wl": (1, 1), "inscan": (1, 1), "condsum": (2, 2)}
    assert [c["trips"] for c in by_name["wl"][1]] == [[10]]
    assert [c["trips"] for c in by_name["inscan"][1]] == [[10, 4]]
    assert all(c["trips"] == [None] for c in by_name["condsum"][1])
    assert by_name["wl"][1][0]["bytes"] == 16 * 16 * 4


@pytest.mark.parametrize("name", PROGRAMS)
def test_each_psum_of_a_while_loop_pairs_with_its_all_reduce(module, name):
    sums, compiled = _expected(module, name)
    ins = shardscope.inspect(getattr(module, name), module.W, module.X)
    assert [(p.label, p.value) for p in ins.paired if p.dead or p.unpaired or p.compiled is None] == []
    rows = [p for p in ins.paired if p.compiled is not None]
    assert len(rows) == len(compiled)
    assert sum(len(p.equations) for p in rows) == sums
    assert all(p.written_by == "program" and p.equations for p in rows)
    assert sorted((tuple(p.loop_trip_counts), p.bytes_per_execution) for p in rows) == \
        sorted((tuple(c["trips"]), c["bytes"]) for c in compiled)
    for p, c in zip(sorted(rows, key=lambda p: p.bytes_per_execution), sorted(compiled, key=lambda c: c["bytes"])):
        if None not in c["trips"]:
            runs = 1
            for t in c["trips"]:
                runs *= t
            assert p.executions == runs


@pytest.mark.parametrize("name", PROGRAMS)
def test_check_text_and_json_agree_on_a_while_loops_psum(shardscope_cli, module, name):
    """``check`` lists each all-reduce once, none dead, and its JSON says the same: every jaxpr
    psum paired, none unpaired or dead, each row's verdict the text's."""
    sums, compiled = _expected(module, name)
    path = module.__file__
    text = shardscope_cli("check", path, "-f", name)
    assert text.returncode in (0, 1), text.stderr
    assert "dead" not in text.stdout and "removed it" not in text.stdout, text.stdout
    table = [line.split() for line in text.stdout.splitlines() if re.match(r"^\s*\d+\s+\S+\[d\]\s", line)]
    assert len(table) == len(compiled), text.stdout
    assert all(row[1] == "all-reduce[d]" for row in table), text.stdout

    result = shardscope_cli("check", path, "-f", name, "--json")
    (program,) = json.loads(result.stdout)["programs"]
    assert program["unpaired_equations"] == []
    assert len(program["collectives"]) == sums
    assert not any(c["dead"] for c in program["collectives"])
    assert len(program["compiled_collectives"]) == len(compiled)
    paired = sorted(e for c in program["compiled_collectives"] for e in c["equations"])
    assert paired == sorted(c["equation"] for c in program["collectives"])
    assert [row[-1] for row in table] == [
        c["verdict"] if c["loop_trip_counts"] else "-" for c in program["compiled_collectives"]]


def _strict_loops(compiled, written) -> bool:
    """Pairing's loop test as it was: a jaxpr's unknown trip count matched only an unknown one."""
    remaining = iter(u for u in written if u != 1)
    return all(any(t == u for u in remaining) for t in compiled if t != 1)


def test_an_equation_no_instruction_carries_reads_dead_in_the_text_and_the_json(shardscope_cli, module, monkeypatch):
    """With pairing's old loop test the psum of ``wl`` pairs with no instruction: its row's verdict
    is dead, and every rendering says so (the text's note and cell, ``--json``'s verdict and
    ``dead``, left out of ``findings`` and of ``flagged`` alike); it said ``-`` in the table and
    ``deferrable``, ``"dead": false``, among the findings in the JSON."""
    import shardscope.engine.hlo.pairing as pairing

    monkeypatch.setattr(pairing, "_loops_among", _strict_loops)
    sums, compiled = _expected(module, "wl")
    text = shardscope_cli("check", module.__file__, "-f", "wl")
    table = [line.split() for line in text.stdout.splitlines() if re.match(r"^\s*\d+\s+\S+\[d\]\s", line)]
    assert [(row[1], row[-1]) for row in table] == [("all-reduce[d]", "deferrable"), ("psum_invariant[d]", "dead")], \
        text.stdout
    said = " ".join(text.stdout.split())  # the notes wrap at the terminal's width
    assert "#2 psum_invariant of grad(w): no compiled instruction was found for it" in said
    assert ": dead. No instruction of the compiled module is its own" in said

    (program,) = json.loads(shardscope_cli("check", module.__file__, "-f", "wl", "--json").stdout)["programs"]
    (equation,) = program["collectives"]
    assert program["unpaired_equations"] == [equation["equation"]]
    assert (equation["verdict"], equation["dead"], equation["executions"], equation["fix"]) == ("dead", True, 0, None)
    assert program["findings"] == [] and program["flagged"] == 1 == len(compiled) == sums
