"""A demo file that starts JAX when imported (listing the devices) gets the devices asked for:
the count is set before the file is imported. One that sets its own smaller count first gets
what JAX started with, and a count above it is refused in words."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

DEMO = '''
import jax
import jax.numpy as jnp
import shardscope
{set_count}
STARTED_WITH = len(jax.devices())  # starts JAX's backend at import


@shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((64, 5), jnp.float32))
def lin(W, x):
    return x @ W
'''


def _report(path, devices):
    return subprocess.run([sys.executable, "-m", "shardscope", "report", str(path), "--devices", str(devices),
                           "--json", "--repeats", "1"], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a fresh process: its device count
def test_a_file_that_lists_the_devices_at_import_gets_the_count_asked_for(tmp_path):
    demo = tmp_path / "lists_devices.py"
    demo.write_text(textwrap.dedent(DEMO.format(set_count="")))
    four = _report(demo, 4)
    assert four.returncode == 0, four.stderr
    assert json.loads(four.stdout)["devices"] == 4


@pytest.mark.slow  # a fresh process: its device count
def test_a_file_that_sets_its_own_count_gets_it_and_more_is_refused_in_words(tmp_path):
    demo = tmp_path / "sets_one_device.py"
    demo.write_text(textwrap.dedent(DEMO.format(set_count='jax.config.update("jax_num_cpu_devices", 1)')))
    one = _report(demo, 1)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["devices"] == 1
    two = _report(demo, 2)
    assert two.returncode == 2 and "Traceback" not in two.stderr
    assert "2 devices asked for, but JAX started with 1 before shardscope could set the count" in two.stderr
    assert "--devices 1 or fewer" in two.stderr and "do not set jax_num_cpu_devices" in two.stderr
