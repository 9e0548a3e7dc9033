"""An inspection in a real Jupyter kernel and in a user's pytest suite (issue 45, items 23, 25,
26 and 27).

The kernel is ipykernel's, driven by nbclient (the ``test`` extra installs both): rich detects
it, and a console that followed that detection wrote its text to the notebook instead of the
string ``str()`` returns. The program is a ``shard_map`` that sums a gradient over ``batch`` in
each of 4 scan iterations: one compiled all-reduce in the loop, deferrable (the sum commutes
with the scan's sum), as its jaxpr says (``psum`` of a value added into the carry).
"""

from __future__ import annotations

import html as html_module
import subprocess
import textwrap

import pytest
from _support import PYTHON, ROOT

from test_gpu_targets import needs_plugin
from test_targets import needs_libtpu

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

_SETUP = textwrap.dedent("""
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    import shardscope

    mesh = jax.make_mesh((8,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch")), out_specs=P())
    def step(w, xs):
        def body(acc, x):
            return acc + lax.psum(jnp.sum(x) * w, "batch"), None

        return lax.scan(body, jnp.zeros_like(w), xs)[0]


    w = jax.ShapeDtypeStruct((16,), jnp.float32)
    xs = jax.ShapeDtypeStruct((4, 64, 16), jnp.float32)
    insp = shardscope.inspect(step, w, xs)
""")


def _run_notebook(*cells: str) -> list[list[dict]]:
    """Each cell's outputs, run in a fresh ipykernel."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
                            ).execute()
    return [cell["outputs"] for cell in notebook.cells]


def _text(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") if o["output_type"] == "stream" else o.get("data", {}).get("text/plain", "")
                   for o in outputs)


@pytest.mark.slow
def test_print_str_and_a_cells_last_expression_show_the_table_in_a_kernel():
    _, printed, shown, as_string, what_if = _run_notebook(
        _SETUP, "print(insp)", "insp", "len(str(insp)), str(insp).count('deferrable')", "insp.what_if()")
    assert "all-reduce[batch]" in _text(printed) and "deferrable" in _text(printed)
    (result,) = shown  # one output: the inspection's own, not rich's <pre> beside it
    assert result["output_type"] == "execute_result"
    assert "deferrable" in result["data"]["text/plain"] and "<table>" in result["data"]["text/html"]
    length, deferrable = eval(_text(as_string))  # noqa: S307 - the kernel's repr of a tuple of two ints
    assert length > 200 and deferrable >= 1
    (rewrites,) = what_if
    plain = rewrites["data"]["text/plain"]
    assert plain.startswith("<WhatIf of step: 1 rewrite, 1 verified>") and len(plain) < 1000, plain[:2000]


def test_a_what_if_and_its_rewrites_read_as_a_line_each():
    """Outside a kernel too: ``repr`` is what a person reads, not the arguments' arrays."""
    namespace: dict = {}
    exec(_SETUP.replace('jax.config.update("jax_num_cpu_devices", 8)\n', ""), namespace)  # noqa: S102 - the test's program
    found = namespace["insp"].what_if()
    (rewrite,) = found.rewrites
    assert repr(found) == f"<WhatIf of step: 1 rewrite, 1 verified>\n  {rewrite.summary()}"
    assert repr(rewrite) == f"<Rewrite verified: {rewrite.summary()}>"


@pytest.mark.slow
@needs_libtpu
@needs_plugin
def test_an_inspection_on_two_targets_shows_both_in_text_and_html():
    _, text, html = _run_notebook(_SETUP, "two = shardscope.inspect_on(['tpu:v5e:2x4', 'gpu:h100:8'], step, w, xs)\n"
                                          "print(two)", "print(two._repr_html_())")
    outputs = (_text(text), html_module.unescape(_text(html)))
    for target in ("tpu:v5e:2x4", "gpu:h100:8"):
        for output in outputs:
            assert f"on {target}: " in output
    for output in outputs:
        assert output.count("memory: ") == 2 and output.count("step estimate ") == 2
        assert "on the CPU: XLA:CPU's plan" in output


_USER_TEST = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})

    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import numpy as np
    from jax.sharding import Mesh

    import _target_verdict_programs as programs
    from shardscope import testing


    def test_the_loss_is_summed_once():
        built = programs.total_loss_adamw(Mesh(np.array(jax.devices()[:8]), ("data",)))
        testing.assert_no_deferrable_collectives_in_loops_on("tpu:v5e:2x4", built.fn, *built.args)
""")


@pytest.mark.slow
@needs_libtpu
def test_an_on_assertion_fails_with_the_table_and_the_fix_and_no_frames_of_shardscope(tmp_path):
    """The loss summed over micro-batches stays in its loop on the TPU (tests/test_target_verdicts.py
    counts it in the compiled module): the user's pytest shows the target's table, its fix and
    verdict, and its own line, not shardscope's."""
    (tmp_path / "test_user.py").write_text(_USER_TEST.format(tests=str(ROOT / "tests")))
    result = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 1, result.stdout
    assert "shardscope/testing.py" not in result.stdout
    errors = "\n".join(line[2:] for line in result.stdout.splitlines() if line.startswith("E "))
    assert "keeps 1 collective(s) in loops on tpu:v5e:2x4" in errors
    assert "on tpu:v5e:2x4: XLA:TPU's plan" in errors  # the target's table, labelled
    assert "verdict" in errors and "deferrable" in errors and "Fix:" in errors
    assert "on the CPU: XLA:CPU's plan" in errors


_FORGOT_DEVICES = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]), ("batch",))  # one device: jax_num_cpu_devices was never set


    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch")), out_specs=P())
    def step(w, xs):
        def body(acc, x):
            return acc + lax.psum(jnp.sum(x) * w, "batch"), None

        return lax.scan(body, jnp.zeros_like(w), xs)[0]


    insp = shardscope.inspect(step, jax.ShapeDtypeStruct((16,), jnp.float32), jax.ShapeDtypeStruct((4, 64, 16), jnp.float32))
""")


@pytest.mark.slow
def test_a_notebook_that_forgot_the_device_count_is_told_its_mesh_spans_one_device():
    """The cell's mesh takes ``jax.devices()[:8]`` of the 1 device JAX started: the inspection
    says so first (text and HTML), with how to start 8, instead of a pass; an assertion fails."""
    cell = _FORGOT_DEVICES.strip("\n")
    line = next(n for n, text in enumerate(cell.splitlines(), 1) if "np.array(jax.devices()[:8])" in text)
    _, text, html, assertion = _run_notebook(
        cell, "print(insp)", "print(insp._repr_html_())",
        "from shardscope.testing import assert_no_collectives_in_loops\n"
        "try:\n    assert_no_collectives_in_loops(step, jax.ShapeDtypeStruct((16,), jnp.float32), "
        "jax.ShapeDtypeStruct((4, 64, 16), jnp.float32))\nexcept AssertionError as exc:\n    print('FAILED', exc)")
    first = _text(text).splitlines()[0]
    assert first.startswith(f"The program's mesh spans 1 device while its cell line {line} asks for 8 (")
    assert "JAX started with 1 CPU device" in _text(text)
    assert "jax.config.update('jax_num_cpu_devices', 8)" in " ".join(_text(text).split())
    assert "restart the kernel" in html_module.unescape(_text(html))
    assert _text(assertion).startswith("FAILED The program's mesh spans 1 device")
