"""Words a user reads (issue 45, items 18 and 28): a count of one is singular, a range whose two
ends print alike is one figure, a size has its unit, ``--min-saving 0`` needs none, a share
threshold quotes the share, and a one-device program is not told to pick a topology of 1 chips."""

from __future__ import annotations

import pytest

from shardscope.hardware.fit import GIB, MemoryFit
from shardscope.engine.hlo.roofline import range_words
from shardscope.costmodel.savings import parse_min_saving
from shardscope.engine.counts import runs_per_call
from shardscope.errors import SettingsError


def test_one_run_per_call_is_singular():
    assert runs_per_call("1") == "1 run/call"
    assert runs_per_call("4") == "4 runs/call" and runs_per_call("≤ 4") == "≤ 4 runs/call"


def test_a_range_whose_ends_print_alike_is_one_figure():
    assert range_words(0.02161, 0.021612) == "~21.6 ms"  # not "21.6 ms to 21.6 ms"
    assert range_words(591e-6, 599e-6) == "591 us to 599 us"


def test_a_needed_size_over_a_gib_has_its_unit():
    assert MemoryFit("v5e", 8 * GIB, int(15.75 * GIB)).line() == "8 GiB of 15.75 GiB per device"


def test_min_saving_zero_needs_no_unit_and_another_bare_number_is_told_its_missing_unit():
    zero = parse_min_saving("0")
    assert zero.seconds == 0.0 and zero.share is None
    with pytest.raises(SettingsError) as refused:
        parse_min_saving("5")
    assert refused.value.message == "--min-saving '5' has no unit: a time saved per step needs one, a share a %."
    assert "5ms" in refused.value.hint and "5%" in refused.value.hint
    with pytest.raises(SettingsError, match=r"'parsecs' is not a unit of time"):
        parse_min_saving("5parsecs")


def test_a_share_threshold_quotes_the_share_the_finding_saves():
    from shardscope.engine.hlo.plan_costs import MinSaving, Saving

    # deferring saves 3 of 4 runs of 10 us: 30 us of a 1 ms step
    saving = Saving(target="tpu:v5e:2x4", collective="all-reduce.6", kind="all-reduce", values="grad(w)",
                    bytes_per_run=4096, runs_per_call=4, runs_after=1, seconds_per_run=10e-6,
                    seconds_per_step=3 * 10e-6, step_s=1e-3)
    share, time = MinSaving("60%", share=0.6), MinSaving("1ms", seconds=1e-3)
    assert share.amount(saving) == " (~3% of the step)"
    assert time.amount(saving) == " (~30 us)"


_ONE_DEVICE = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from shardscope.errors import ShardscopeError
from shardscope.pipeline.one_program import inspect_on

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))  # a notebook that forgot jax_num_cpu_devices: 1 device
x = jax.ShapeDtypeStruct((32, 4), jnp.float32, sharding=NamedSharding(mesh, P("data")))
try:
    inspect_on("tpu:v5e:2x4", jax.jit(lambda x: jnp.sum(x * 2.0)), (x,), {})
except ShardscopeError as exc:
    print(exc.message)
    print(exc.hint)
"""


@pytest.mark.slow
def test_a_one_device_program_is_told_to_start_the_devices_not_to_pick_a_topology_of_one_chip(tmp_path):
    import subprocess

    from _support import PYTHON, ROOT
    from test_targets import LIBTPU_SHIPS

    if not LIBTPU_SHIPS:
        pytest.skip("libtpu ships for Linux x86-64 only")
    script = tmp_path / "one_device.py"
    script.write_text(_ONE_DEVICE)
    result = subprocess.run([PYTHON, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    message, hint = result.stdout.strip().splitlines()[-2:]
    assert message == "<lambda> runs on 1 device; tpu:v5e:2x4 has 8."
    assert "1 chips" not in hint and "topology" not in hint
    # jax.devices()[:8] cannot take 8 of the 1 device started: only starting 8 helps
    assert "in the file" not in hint
    assert hint.startswith("start 8 CPU devices to trace it over") and "a notebook: restart the kernel" in hint


_TWO_PROGRAMS = """
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
X = jax.ShapeDtypeStruct((32, 4), jnp.float32, sharding=NamedSharding(mesh, P("data")))


@shardscope.program(args=(X,))
@jax.jit
def first(x):
    return jnp.sum(x * 2.0)


@shardscope.program(args=(X,))
@jax.jit
def second(x):
    return jnp.sum(x * 3.0)
"""


def test_a_device_count_error_shared_by_the_files_programs_is_said_once(tmp_path, shardscope_cli):
    from test_targets import LIBTPU_SHIPS

    if not LIBTPU_SHIPS:
        pytest.skip("libtpu ships for Linux x86-64 only")
    (tmp_path / "two.py").write_text(_TWO_PROGRAMS)
    result = shardscope_cli("check", "two.py", "--target", "tpu:v5e:2x2", cwd=tmp_path)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("shardscope: error:")]
    assert errors == ["shardscope: error: first, second run on 8 devices; tpu:v5e:2x2 has 4."]
    assert len([line for line in result.stderr.splitlines() if line.startswith("hint:")]) == 1
