"""The replica-group decoder on the forms XLA prints, against real meshes of both JAX versions.

Expected groups are computed here from mesh coordinates (devices that share every coordinate
but the reduced axes), never by the decoder's own helpers.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import _compiled_programs as programs
from shardscope.engine.hlo import text as hlo_text
from shardscope.engine.hlo.replica_groups import MeshShape, ReplicaGroupsError, decode, decode_pairs, mesh_axes_of, pair_axes_of

FIXTURES = Path(__file__).parent / "fixtures" / "hlo"


def expected_groups(sizes: tuple[int, ...], names: tuple[str, ...], axes: tuple[str, ...]) -> set[frozenset[int]]:
    """Positions in ``mesh.devices.flat`` grouped by their coordinates off ``axes``."""
    groups: dict[tuple, set[int]] = {}
    for position in range(int(np.prod(sizes))):
        coords = np.unravel_index(position, sizes)
        key = tuple(int(c) for c, name in zip(coords, names) if name not in axes)
        groups.setdefault(key, set()).add(position)
    return {frozenset(g) for g in groups.values()}


def meshes() -> dict[str, Mesh]:
    devices = np.array(jax.devices()[:8])
    return {
        "1d": Mesh(devices, ("x",)),
        "2d": Mesh(devices.reshape(4, 2), ("data", "model")),
        "2d_permuted": Mesh(devices[[5, 2, 7, 0, 3, 6, 1, 4]].reshape(4, 2), ("data", "model")),
        "3d": Mesh(devices.reshape(2, 2, 2), ("a", "b", "c")),
    }


def _collective_line(text: str, opcode: str) -> hlo_text.Instruction:
    (inst,) = [i for i in hlo_text.parse(text).instructions() if i.opcode == opcode]
    return inst


CASES = [(mesh, axes) for mesh, names in [("1d", ("x",)), ("2d", ("data", "model")), ("2d_permuted", ("data", "model")),
                                          ("3d", ("a", "b", "c"))]
         for count in range(1, len(names) + 1) for axes in itertools.permutations(names, count)
         if mesh != "3d" or count < 3]


@pytest.mark.parametrize("shardy", programs.shardy_modes())
@pytest.mark.parametrize("mesh_name,axes", CASES, ids=[f"{m}-{'+'.join(a)}" for m, a in CASES])
def test_shard_map_psum_over_any_axes(mesh_name, axes, shardy):
    mesh = meshes()[mesh_name]
    rest = tuple(a for a in mesh.axis_names if a not in axes)
    fn = jax.jit(jax.shard_map(lambda v: lax.psum(v, axes), mesh=mesh, in_specs=P(tuple(mesh.axis_names)),
                               out_specs=P(rest or None)))
    with programs.partitioner(shardy):
        inst = _collective_line(fn.lower(jnp.ones((8, 4))).compile().as_text(), "all-reduce")
    groups = decode(inst.replica_groups, 8)
    names = tuple(mesh.axis_names)
    assert {frozenset(g) for g in groups} == expected_groups(tuple(mesh.shape[n] for n in names), names, axes)
    found = mesh_axes_of(groups, MeshShape.of(mesh))
    assert set(found) == set(axes)
    if len(axes) > 1 and mesh_name == "3d":  # the groups list (c, a) in that order: the order is kept
        assert found == axes


@pytest.mark.parametrize("shardy", programs.shardy_modes())
@pytest.mark.parametrize("axes,permuted", [(("model",), False), (("model",), True), (("data",), False),
                                           (("data", "model"), False), (("model", "data"), True)])
def test_partitioner_all_reduce_named_after_the_program_mesh(axes, permuted, shardy):
    """A GSPMD/Shardy all-reduce prints its own axis names (``axis_N``, size-1 axes, device_ids):
    its groups still name the program's axes, also on a mesh whose devices are permuted."""
    case, _, compiled = programs.compile_case(programs.contracted_matmul, axes, permuted, shardy=shardy)
    inst = _collective_line(compiled.as_text(), "all-reduce")
    groups = decode(inst.replica_groups, 8)
    assert {frozenset(g) for g in groups} == expected_groups((4, 2), ("data", "model"), axes)
    assert set(mesh_axes_of(groups, MeshShape.of(case.mesh))) == set(axes)
    if permuted:  # positions in mesh.devices.flat, which are not the devices' ids here
        ids = [d.id for d in case.mesh.devices.flat]
        assert ids != sorted(ids)


def test_each_printed_form_is_met_in_real_modules():
    """Across this version's live modules and both versions' captured ones, every form occurs."""
    texts = [path.read_text() for path in FIXTURES.glob("jax-*/*.txt")]
    texts += [programs.compiled_text(programs.contracted_matmul, ("model",), False, shardy=s) for s in programs.shardy_modes()]
    forms = set()
    for text in texts:
        for inst in hlo_text.parse(text).instructions():
            if inst.replica_groups is None:
                continue
            groups = decode(inst.replica_groups, 8)
            assert sum(len(g) for g in groups) == 8 and len({i for g in groups for i in g}) == 8
            raw = inst.replica_groups
            forms.add("mesh+device_ids" if "device_ids=" in raw else "mesh" if raw.startswith("mesh[")
                      else "iota" if raw.startswith("[") else "explicit")
    assert {"mesh", "iota", "explicit"} <= forms


def test_forms_written_by_hand():
    # iota: iota(8).reshape(2,4).transpose(1,0).reshape(4,2), rows are groups
    assert decode("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert decode("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert decode("{{0,4},{1,5}}") == ((0, 4), (1, 5))
    assert decode("{}", 4) == ((0, 1, 2, 3),)
    # mesh with device_ids as an iota and as a list: the same devices
    iota = decode("mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], device_ids=([4,2]T(1,0)) {'axis_1'}")
    listed = decode("mesh['axis_0'=1,'axis_1'=2,'axis_2'=4], device_ids=(0,2,4,6,1,3,5,7) {'axis_1'}")
    assert iota == listed == ((0, 1), (2, 3), (4, 5), (6, 7))
    # sub-axes: 'x':(1)2 is the major half of x=8, (4)2 the minor one; unquoted names too
    assert decode("mesh['x'=8] {'x':(1)2}") == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert decode("mesh[x=8] {x:(4)2}") == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert decode("mesh['x'=8] {'x':(1)4}") == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert decode("maximal_mesh[device_id=3]") == ((3,),)
    assert decode("mesh['a'=2,'b'=4] {}") == tuple((i,) for i in range(8))
    with pytest.raises(ReplicaGroupsError):
        decode("replica groups?")


def test_axes_of_groups_on_a_mesh_with_size_one_axes():
    mesh = MeshShape(("pod", "data", "model"), (1, 4, 2))
    assert mesh_axes_of(((0, 2, 4, 6), (1, 3, 5, 7)), mesh) == ("data",)
    assert mesh_axes_of(tuple((i,) for i in range(8)), mesh) == ()
    # half of data and model: data's minor part of 2 (Shardy's sub-axis data:(2)2), then model
    assert mesh_axes_of(((0, 1, 2, 3), (4, 5, 6, 7)), mesh) == ("data:(2)2", "model")
    assert mesh_axes_of(((0, 1),), mesh) is None  # not every device


@pytest.mark.parametrize("shardy", programs.shardy_modes())
def test_collective_permute_pairs_name_the_axis_they_shift_along(shardy):
    mesh = meshes()["2d_permuted"]
    perm = [(i, (i + 1) % 4) for i in range(4)]
    fn = jax.jit(jax.shard_map(lambda v: lax.ppermute(v, "data", perm), mesh=mesh,
                               in_specs=P(("data", "model")), out_specs=P(("data", "model"))))
    with programs.partitioner(shardy):
        inst = _collective_line(fn.lower(jnp.ones((8, 4))).compile().as_text(), "collective-permute")
    pairs = decode_pairs(inst.source_target_pairs)
    # data index i -> i+1 at the same model index: position 2*i + m -> 2*((i+1) % 4) + m
    assert set(pairs) == {(2 * i + m, 2 * ((i + 1) % 4) + m) for i in range(4) for m in range(2)}
    assert pair_axes_of(pairs, MeshShape.of(mesh)) == ("data",)
    assert re.fullmatch(r"\{(\{\d+,\d+\},?)+\}", inst.source_target_pairs)


def test_pairs_name_every_axis_some_pair_moves_along():
    """On a (2, 3, 4) mesh, position p is (p // 12, p // 4 % 3, p % 4): the axes named are those
    on which some source and its target differ, in the mesh's order, whatever the pairs' order."""
    mesh = MeshShape(("a", "b", "c"), (2, 3, 4))
    assert pair_axes_of(((0, 1), (1, 2)), mesh) == ("c",)  # (0,0,0)->(0,0,1)->(0,0,2)
    assert pair_axes_of(((5, 17), (0, 1)), mesh) == ("a", "c")  # (0,1,1)->(1,1,1), then along c
    assert pair_axes_of([(23, 0), (4, 8)], mesh) == ("a", "b", "c")  # a list, as a caller may pass
    assert pair_axes_of(((3, 3),), mesh) == ()  # a device to itself moves along no axis
    assert pair_axes_of((), mesh) == ()
    assert pair_axes_of(((0, 24),), mesh) is None  # past the mesh's 24 positions
    assert pair_axes_of(((-1, 0),), mesh) is None


def test_groups_over_a_part_of_an_axis_are_named_as_shardy_names_the_sub_axis():
    """A reshape that splits a sharded batch leaves collectives over part of ``data``: the groups
    Shardy prints as ``{'x':(1)4}`` and ``{'x':(4)2}`` (decoded here) are named ``data:(1)4`` and
    ``data:(4)2`` on a mesh whose one axis is ``data``; the name decodes back to the same groups."""
    mesh = MeshShape(("data",), (8,))
    for sub in ("(1)4", "(4)2", "(2)2"):
        groups = decode(f"mesh['x'=8] {{'x':{sub}}}")
        assert mesh_axes_of(groups, mesh) == (f"data:{sub}",)
        assert set(decode(f"mesh['data'=8] {{'data':{sub}}}")) == set(groups)
