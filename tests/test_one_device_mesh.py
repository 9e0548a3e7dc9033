"""A program over a mesh of one device: its collectives run over groups of one and exchange
nothing. ``shardscope.inspect`` says so first, with the hint ``inspect_on`` gives a program over
too few devices (the file's line that takes the count), instead of a bare ``all-reduce[]``;
``check`` says it in its text and in its JSON (``mesh_note``), one value rendered twice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

import shardscope
from _support import load_program_module, write_demo
from _tpu_text import replica_group_size


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


ONE_DEVICE_PROGRAM = """
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:{devices}]), ("batch",))
W = jnp.ones((4, 4))
xs = jnp.ones((3, 8, 4))


@shardscope.program(args=(W, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch")), out_specs=P())
def step(W, xs):
    def body(acc, x):
        return acc + lax.psum(jnp.sum(x @ W), "batch"), None
    total, _ = lax.scan(body, 0.0, xs)
    return total
"""


def _group_sizes(text: str) -> list[int]:
    """The size of each all-reduce's replica groups, read from the compiled text."""
    return [replica_group_size(line) for line in text.splitlines() if re.search(r" all-reduce\(", line)]


def test_check_says_the_one_device_note_in_its_text_and_its_json(tmp_path, shardscope_cli):
    """A program over ``jax.devices()[:1]`` with a psum in a scan: XLA compiles one all-reduce over
    a group of one device (read from its text); ``check`` prints the note first and ``check
    --json`` carries the same words as the program's ``mesh_note`` (it carried none)."""
    path = write_demo(tmp_path, "one_device.py", ONE_DEVICE_PROGRAM.format(devices=1))
    module = load_program_module(path)
    assert _group_sizes(module.step.lower(module.W, module.xs).compile().as_text()) == [1]

    text = shardscope_cli("check", path)
    assert text.returncode == 1, text.stderr  # the all-reduce[] in the scan is still deferrable
    said = " ".join(text.stdout.split())
    assert said.startswith("The program's mesh spans 1 device: its collectives (all-reduce[]) run over groups of one "
                           "device, on no mesh axis, and exchange nothing")
    assert "take 8 devices where one_device.py line 11 takes 1 (jax.devices()[:1])." in said

    result = shardscope_cli("check", path, "--json")
    assert result.returncode == 1, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    note = program["mesh_note"]
    assert note is not None and said.startswith(" ".join(note.split()))  # the text's first paragraph, word for word
    assert note.endswith("take 8 devices where one_device.py line 11 takes 1 (jax.devices()[:1]).")


def test_check_json_of_a_sharded_program_has_no_mesh_note(tmp_path, shardscope_cli):
    path = write_demo(tmp_path, "two_devices.py", ONE_DEVICE_PROGRAM.format(devices=2))
    module = load_program_module(path)
    assert _group_sizes(module.step.lower(module.W, module.xs).compile().as_text()) == [2]
    result = shardscope_cli("check", path, "--json")
    (program,) = json.loads(result.stdout)["programs"]
    assert program["mesh_note"] is None and "spans 1 device" not in shardscope_cli("check", path).stdout


def test_check_github_warns_of_the_one_device_note_on_the_file(tmp_path, shardscope_cli):
    """``check --format github`` annotates the note as a warning on the file (it fails nothing: the
    exit status is the text's), so a one-device check in CI does not pass in silence; a program
    over the devices it means gets none."""
    path = write_demo(tmp_path, "one_device.py", ONE_DEVICE_PROGRAM.format(devices=1))
    result = shardscope_cli("check", path, "--format", "github", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # as the text's: the deferrable all-reduce[] counts
    warnings = [line for line in result.stdout.splitlines() if line.startswith("::warning ")]
    assert len(warnings) == 1
    assert warnings[0].startswith("::warning file=one_device.py,title=shardscope%3A step runs over too few devices")
    assert "::step: The program's mesh spans 1 device: its collectives (all-reduce[]) run over groups of one" in warnings[0]
    assert sum(line.startswith("::error ") for line in result.stdout.splitlines()) == 1  # the finding, as before

    two = write_demo(tmp_path, "two_devices.py", ONE_DEVICE_PROGRAM.format(devices=2))
    assert "::warning" not in shardscope_cli("check", two, "--format", "github", cwd=tmp_path).stdout
