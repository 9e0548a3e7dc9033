"""A demo file that starts JAX when imported (listing the devices) gets the devices JAX started
with: the hint's --devices works, and a count above it is refused in words."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

DEMO = '''
import jax
import jax.numpy as jnp
import shardscope

STARTED_WITH = len(jax.devices())  # starts JAX's backend at import, with one CPU device


@shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((64, 5), jnp.float32))
def lin(W, x):
    return x @ W
'''


def _report(path, devices):
    return subprocess.run([sys.executable, "-m", "shardscope", "report", str(path), "--devices", str(devices),
                           "--json", "--repeats", "1"], capture_output=True, text=True, timeout=300)


def test_the_device_count_jax_started_with_is_enough_and_more_is_refused_in_words(tmp_path):
    demo = tmp_path / "lists_devices.py"
    demo.write_text(textwrap.dedent(DEMO))
    one = _report(demo, 1)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["devices"] == 1
    two = _report(demo, 2)
    assert two.returncode == 2 and "Traceback" not in two.stderr
    assert "2 devices asked for, but JAX started with 1" in two.stderr
    assert "list the devices when imported" in two.stderr and "--devices 1 or fewer" in two.stderr
