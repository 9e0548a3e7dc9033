"""A program over a mesh of one device: its collectives run over groups of one and exchange
nothing. ``shardscope.inspect`` says so first, with the hint ``inspect_on`` gives a program over
too few devices (the file's line that takes the count), instead of a bare ``all-reduce[]``."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

import shardscope


def summed_step(devices: int):
    """A jitted step that all-reduces its product over the mesh axis ``s`` of ``devices`` devices."""
    mesh = Mesh(np.array(jax.devices()[:devices]), ("s",))

    def body(w, x):
        return jax.lax.psum(x @ w, "s")

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("s")), out_specs=P()))


ARGS = (jnp.ones((4, 4)), jnp.ones((8, 4)))


def test_a_one_device_program_with_collectives_says_they_exchange_nothing_and_how_to_shard_it():
    inspection = shardscope.inspect(summed_step(1), *ARGS)
    text = " ".join(str(inspection).split())
    assert text.startswith("The program's mesh spans 1 device: its collectives (all-reduce[]) run over groups of one "
                           "device, on no mesh axis, and exchange nothing")
    # inspect_on's hint for a program over too few devices: no line of this file takes the count
    # in figures (a slice of ``devices``), and the 8 CPU devices started here are there to take
    assert jax.device_count() == 8
    assert text.split(". To see it, ")[1].startswith(
        "build the program's mesh over 8 devices in the file (jax.devices()[:8]).")
    assert "<b>The program's mesh spans 1 device" in inspection._repr_html_()
    assert [c.axes for c in inspection.paired] == [()]  # the all-reduce[] the note is about


def test_a_sharded_program_has_no_such_note():
    inspection = shardscope.inspect(summed_step(2), *ARGS)
    assert inspection.one_device == "" and "spans 1 device" not in str(inspection)
    assert [c.axes for c in inspection.paired] == [("s",)]
