"""Piped at 80 columns, every command prints its values whole.

``COLUMNS=80`` and stdout a pipe (``capture_output``): a table is at most 120 columns wide (a
long cell wraps inside its column; the presets' reference table keeps its natural width, a
row per preset), prose wraps between words, and no value is cut (``params['l2'][…``,
``psum_invariant[batc…``) or folded in prose (a URL over three lines). The values to look for
come from each command's ``--json`` (or the presets' own table), not from the text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from _support import DEMOS, PYTHON, ROOT, write_demo


def at_80_columns() -> dict[str, str]:
    """The environment with ``COLUMNS=80``, as it is when the command starts: what the test's run set
    in it reaches the command too (the newest run's measurement names the test there)."""
    return {**os.environ, "COLUMNS": "80", "TERM": "xterm"}


URL = re.compile(r"https?://[^\s,;)]+")


def piped(*args: str) -> str:
    """stdout of ``shardscope ARGS`` through a pipe at 80 columns."""
    result = subprocess.run([PYTHON, "-m", "shardscope", *map(str, args)], capture_output=True, text=True,
                            cwd=ROOT, env=at_80_columns(), timeout=600)
    assert result.returncode in (0, 1), result.stderr
    return result.stdout


def json_of(result: subprocess.CompletedProcess) -> dict:
    """The ``--json`` of a command run in the test's process, with the exit statuses ``piped`` allows."""
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def assert_whole(values: set[str], text: str) -> None:
    assert values
    missing = sorted(value for value in values if value not in text)
    assert not missing, (missing, text)
    assert "…" not in text


def cell_text(text: str, row_marker: str, column: str, next_column: str) -> str:
    """The cell of ``column`` in the table row holding ``row_marker``, read down the lines it
    wraps onto (the columns' spans from the header line that names both)."""
    lines = text.splitlines()
    header = next(line for line in lines if column in line and next_column in line)
    start, end = header.index(column), header.index(next_column)
    row = next(i for i, line in enumerate(lines) if row_marker in line)
    parts = [lines[row][start:end].strip()]
    for line in lines[row + 1:]:
        if not line.strip() or line[:start].strip():  # a blank line, or the next row
            break
        parts.append(line[start:end].strip())
    return "".join(parts)


def one_line_holding(text: str, *values: str) -> str:
    """The one line holding every value: a table row is never wrapped inside."""
    lines = [line for line in text.splitlines() if all(value in line for value in values)]
    assert len(lines) == 1, (values, text)
    return lines[0]


@pytest.mark.slow  # a real process's piped stdout
def test_check_prints_every_collective_and_value_whole(tmp_path, shardscope_cli):
    # a leaf path longer than 13 columns, as params['l2']['kernel'] is in a flax model
    path = tmp_path / "long_names.py"
    path.write_text(PROGRAM)
    text = piped("check", path)
    data = json_of(shardscope_cli("check", path, "--json"))
    cells = {f"{c['kind']}[{','.join(c['axes'])}]" for c in data["compiled_collectives"]} | {
        c["value"] for c in data["compiled_collectives"]}
    assert "grad(params['encoder_layer']['kernel'])" in cells and "all-reduce[batch_axis]" in cells
    assert_whole(cells, text)
    for c in data["compiled_collectives"]:  # the row, its value cell read down its wrapped lines
        assert cell_text(text, f"{c['kind']}[{','.join(c['axes'])}]", "value", "loops") == c["value"]
    assert_whole({f"{c['primitive']} of {c['value']}" for c in data["collectives"]}, text)  # the pairing


PROGRAM = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

import shardscope

mesh = Mesh(np.array(jax.devices()[:2]), ("batch_axis",))
params = {"encoder_layer": {"kernel": jax.ShapeDtypeStruct((4, 4), jnp.float32)}}
xs = jax.ShapeDtypeStruct((2, 8, 4), jnp.float32)


@shardscope.program(args=(params, xs))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch_axis")), out_specs=P())
def accumulate(params, xs):
    def body(acc, x):
        grads = jax.grad(lambda p: jnp.sum(jnp.tanh(x @ p["encoder_layer"]["kernel"])))(params)
        return jax.tree.map(jnp.add, acc, grads), None

    return lax.scan(body, jax.tree.map(jnp.zeros_like, params), xs)[0]
'''


def test_presets_print_one_row_per_preset_with_its_urls_whole():
    from shardscope.costmodel.interconnects import PRESETS

    text = piped("presets")
    for link in PRESETS:
        row = one_line_holding(text, link.name, link.description)
        assert link.source in row  # the whole source, URLs and all, in the preset's row
        assert all(url in row for url in URL.findall(link.source))
    assert len(text.splitlines()) < 3 * len(PRESETS) + 6  # rows, not ~150 wrapped lines


LONG_NAMES_DEMO = """
@shardscope.demo(params={"encoder_layer_0": {"attention_kernel": jax.ShapeDtypeStruct((4, 4), jnp.float32)},
                         "decoder_layer_0": {"projection_bias": jax.ShapeDtypeStruct((4,), jnp.float32)}},
                 x=jax.ShapeDtypeStruct((16, 4), jnp.float32))
def long_names(params, x):
    return jnp.tanh(x @ params["encoder_layer_0"]["attention_kernel"]) + params["decoder_layer_0"]["projection_bias"]
"""


@pytest.mark.slow  # a real process's piped stdout
def test_report_prints_values_and_the_sources_url_whole(tmp_path, shardscope_cli):
    path = write_demo(tmp_path, "long_names.py", LONG_NAMES_DEMO)
    args = ("report", path, "--repeats", "2", "--project", "nvlink-h100:8")
    text, data = piped(*args), json_of(shardscope_cli(*args, "--json"))
    values = {c["value"] for plan in data["variants"].values() for c in plan["collectives"]}
    assert_whole(values | set(URL.findall(data["projection"]["source"])), text)
    for name, plan in data["variants"].items():
        for c in plan["collectives"]:  # each collective's row, whole, on one line
            assert re.search(rf"│{name}\s*│ {c['primitive']}\s*│ s\s*│ {re.escape(c['value'])}\s*│", text), c
    assert "grad(params['encoder_layer_0']['attention_kernel'])" in values  # the plans sum the parameters' gradients


def test_prose_wraps_between_words_and_keeps_long_words_whole():
    from io import StringIO

    from shardscope.render.console import PipeConsole

    buffer = StringIO()
    url = "https://arxiv.org/abs/2507.04786/" + "x" * 60
    words = ["word"] * 30 + [url] + ["tail"] * 5
    PipeConsole(wrap=40, file=buffer).print(" ".join(words))
    lines = buffer.getvalue().splitlines()
    assert [w for line in lines for w in line.split()] == words
    assert all(len(line) <= 40 for line in lines if line != url) and url in lines


@pytest.mark.slow  # a real process's piped stdout
def test_sweep_and_calibrate_rows_are_whole():
    sweep = piped("sweep", DEMOS / "linear.py", "--repeats", "1", "--chunk-sizes", "1,32")
    for plan in ("naive", "deferred"):
        one_line_holding(sweep, f"│     1 │ {plan} ")
    assert "…" not in sweep
    calibrate = piped("calibrate", "--devices", "2", "--sizes", "1KiB,64KiB", "-r", "2")
    link = re.search(r"--link (\S+)", calibrate)
    number = r"[\d.]+(e[+-]?\d+)?"
    assert link and re.fullmatch(rf"{number},{number}", link.group(1)), calibrate
    assert "…" not in calibrate


@pytest.mark.parametrize("command", [("presets",)])
def test_a_terminal_keeps_the_terminals_width(command):
    """In a terminal (script(1) gives the command one), rich lays tables out to its width as before."""
    if not os.path.exists("/usr/bin/script"):
        pytest.skip("script(1) is not installed")
    result = subprocess.run(["/usr/bin/script", "-qec", f"{PYTHON} -m shardscope {' '.join(command)}", "/dev/null"],
                            capture_output=True, text=True, cwd=ROOT, env=at_80_columns(), timeout=300)
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", result.stdout)
    assert max(len(line) for line in plain.splitlines()) <= 80
