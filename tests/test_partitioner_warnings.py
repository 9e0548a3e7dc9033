"""The partitioner's warnings: an involuntary full rematerialization read in the program's terms
(the value, its line, both layouts over the mesh, the cost, the compiled gathers, a fix checked
by compiling it), reshards named as such, and the log line kept from the terminal while the
user's own stderr output still reaches it.

Expected values come from the programs themselves: layouts and sizes derived by hand below, the
line found in the program's text, the gathers counted in the compiled HLO text, the fix compiled
here with plain JAX in a process of its own (its stderr read as the terminal would get it).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import shardscope
from shardscope.testing import assert_no_rematerialization
from shardscope.engine.compilation import compile_capturing
from shardscope.engine.compile_log import capturing_stderr
from shardscope.engine.hlo.partitioner_warnings import INVOLUNTARY_REMAT, read_warning
from shardscope.engine.hlo.replica_groups import MeshShape
from _support import PYTHON, ROOT

CLASH = textwrap.dedent('''\
    import sys

    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    import shardscope

    print("the user's own line on stderr", file=sys.stderr)
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    a = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, P("y", None, "x")))
    b = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, P(None, ("x", "y"), None)))


    @shardscope.program(args=(a, b))
    @jax.jit
    def clash(a, b):
        return a + b
    ''')
AGREE = CLASH.replace('P("y", None, "x")', 'P(None, ("x", "y"), None)')
ADD_LINE = CLASH.splitlines().index("    return a + b") + 1
SOURCE, TARGET = "P('y', None, 'x')", "P(None, ('x', 'y'), None)"
# f32[4,16,8]: 4*16*8*4 bytes; each of the 8 devices holds one eighth of it under either layout
TENSOR_BYTES, SHARD_BYTES = 4 * 16 * 8 * 4, 4 * 16 * 8 * 4 // 8

# the two notations as jax 0.10.2 and 0.12 print the same warning (from real compiles of CLASH)
V10 = ("[SPMD] Involuntary full rematerialization. The compiler cannot go from sharding {devices=[2,1,4]<=[4,2]T(1,0)} "
       "to {devices=[1,8,1]<=[8]} efficiently for HLO operation %param = f32[2,16,2]{2,1,0} parameter(0), "
       "sharding={devices=[2,1,4]<=[4,2]T(1,0)}, metadata={op_name=\"a\"}. As the last resort, SPMD will replicate "
       "the tensor and then partition it to obtain the target sharding, which is inefficient.")
V12 = ("[SPMD] Involuntary full rematerialization. The compiler cannot go from sharding {mesh['x'=4,'y'=2], [{'y'}, {}, "
       "{'x'}]} to {mesh['x'=4,'y'=2], [{}, {'x', 'y'}, {}]} efficiently for HLO operation %param = "
       "f32[2,16,2]{2,1,0} parameter(0), sharding={mesh['x'=4,'y'=2], [{'y'}, {}, {'x'}]}, metadata={op_name=\"a\"}. "
       "As the last resort, SPMD will replicate the tensor and then partition it to obtain the target sharding.")
MESH = MeshShape(("x", "y"), (4, 2))


@pytest.mark.parametrize("message", [V10, V12], ids=["jax-0.10", "jax-0.12"])
def test_both_notations_read_into_the_mesh_terms(message):
    # [2,1,4]<=[4,2]T(1,0): devices iota(8).reshape(4,2).T, cut 2 ways on dim 0 (the size-2 axis, y)
    # and 4 ways on dim 2 (x); [1,8,1]<=[8]: dim 1 over all 8 in mesh order, x major then y
    warning = read_warning(message, MESH)
    assert warning.kind == INVOLUNTARY_REMAT
    assert (warning.op_name, warning.source_layout, warning.target) == ("a", SOURCE, TARGET)
    assert warning.shape == (4, 16, 8) and (warning.bytes, warning.shard_bytes) == (TENSOR_BYTES, 2 * 16 * 2 * 4)


def test_any_other_partitioner_line_is_kept_whole():
    warning = read_warning("[SPMD] something else the partitioner says", MESH)
    assert warning.kind != INVOLUNTARY_REMAT and warning.message.endswith("says")


def _program(source: str, tmp_path, name: str = "clash.py"):
    path = tmp_path / name
    path.write_text(source)
    return path


def _compiled_add(a_spec, b_spec):
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    a = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, a_spec))
    b = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, b_spec))

    def clash(a, b):
        return a + b

    return clash, a, b


SHARDY = [False, True] if hasattr(jax.config, "jax_use_shardy_partitioner") else [None]


@pytest.fixture(params=SHARDY, ids=lambda s: "default" if s is None else f"shardy={s}")
def shardy(request):
    if request.param is None:
        yield None
        return
    before = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", request.param)
    yield request.param
    jax.config.update("jax_use_shardy_partitioner", before)


def test_the_add_of_two_clashing_layouts_is_one_finding_at_its_line(shardy):
    fn, a, b = _compiled_add(P("y", None, "x"), P(None, ("x", "y"), None))
    inspection = shardscope.inspect(fn, a, b)
    [warning] = inspection.rematerializations
    # Shardy moves a to b's layout; GSPMD (Shardy off) moves b to a's
    assert (warning.op_name, warning.source_layout, warning.target) in {("a", SOURCE, TARGET), ("b", TARGET, SOURCE)}
    line = fn.__code__.co_firstlineno + 1  # `return a + b`, the line after the def
    assert warning.source.startswith(f"test_partitioner_warnings.py:{line} ")
    assert (warning.bytes, warning.moved_bytes) == (TENSOR_BYTES, TENSOR_BYTES - SHARD_BYTES)
    text = inspection.call.compiled.as_text()
    gathers = set(re.findall(r"%(all-gather[\w.\-]*) = ", text))
    assert gathers and set(warning.collectives) == gathers
    assert warning.fix is not None and warning.fix.verified and warning.fix.bytes_after < warning.fix.bytes_before
    assert inspection.fails_check
    # the fix, compiled here: the same add with both in one layout has no gather at all
    agreed = P(None, ("x", "y"), None) if warning.op_name == "a" else P("y", None, "x")
    fixed, a2, b2 = _compiled_add(agreed, agreed)
    assert "all-gather" not in jax.jit(fixed).lower(a2, b2).compile().as_text()
    assert not shardscope.inspect(fixed, a2, b2).rematerializations


def test_a_cached_executable_still_reports_its_rematerialization():
    # the tests' compilation cache is on: the second compile is read back, not compiled
    fn, a, b = _compiled_add(P("y", None, "x"), P(None, ("x", "y"), None))
    first = compile_capturing(jax.jit(fn).trace(a, b).lower())[1]
    second = compile_capturing(jax.jit(fn).trace(a, b).lower())[1]
    assert first and first == second


def test_a_reshard_in_the_layer_loop_runs_once_per_layer():
    # the weights are split along their output features over x while the activations are split
    # by rows: each layer's matmul needs its whole weight, so the partitioner gathers it in the loop
    layers = 3
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    w = jax.ShapeDtypeStruct((layers, 64, 64), jnp.float32, sharding=NamedSharding(mesh, P(None, None, "x")))
    x = jax.ShapeDtypeStruct((16, 64), jnp.float32, sharding=NamedSharding(mesh, P("x", None)))

    def block(w, x):
        def layer(h, w_l):
            h = jnp.tanh(h @ w_l)
            return jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P(("x", "y"), None))), None
        return jax.lax.scan(layer, x, w)[0]

    inspection = shardscope.inspect(block, w, x)
    text = inspection.call.compiled.as_text()
    bodies = set(re.findall(r"body=%?([\w.\-]+)", text))
    gathered = [c for c in inspection.compiled.collectives if c.kind == "all-gather"]
    assert bodies and gathered
    for c in gathered:
        assert c.is_reshard and c.executions == layers and c.computation in bodies
        assert "gathered over x" in c.layout_change
    assert "a reshard (w: dimension 1 gathered over x), not a reduction" in str(inspection)


def _cli(*args, cwd=ROOT):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([PYTHON, "-m", "shardscope", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


@pytest.mark.slow  # a real process's terminal (the --json beside it runs in the test's process)
def test_check_fails_on_the_rematerialization_and_keeps_the_log_line_off_the_terminal(tmp_path, shardscope_cli):
    result = _cli("check", _program(CLASH, tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Involuntary" not in result.stderr and "spmd_partitioner" not in result.stderr
    assert "the user's own line on stderr" in result.stderr
    assert f"involuntary full rematerialization of a at clash.py:{ADD_LINE} (clash): {SOURCE} -> {TARGET}" \
        in result.stdout
    assert "fix verified" in result.stdout
    data = json.loads(shardscope_cli("check", tmp_path / "clash.py", "--json").stdout)
    [finding] = data["partitioner_findings"] if "partitioner_findings" in data else data["programs"][0][
        "partitioner_findings"]
    assert finding["kind"] == "involuntary-rematerialization" and finding["fix"]["verified"]
    assert (finding["from"], finding["to"], finding["bytes"]) == (SOURCE, TARGET, TENSOR_BYTES)
    assert data["exit_code"] == 1


@pytest.mark.slow  # a real process's terminal
def test_a_program_without_a_warning_has_no_finding_and_prints_nothing_to_stderr(tmp_path):
    result = _cli("check", _program(AGREE.replace('print("the user\'s own line on stderr", file=sys.stderr)\n', ""),
                                    tmp_path, "agree.py"))
    assert result.returncode == 0, result.stdout
    assert result.stderr == ""
    assert "rematerialization" not in result.stdout


CAPTURE = textwrap.dedent('''\
    import os
    from shardscope.engine.compile_log import capturing_stderr

    with capturing_stderr() as kept:
        os.write(2, b"mine, before\\n")
        os.write(2, b"W1204 05:00:43.162335   16662 spmd_partitioner.cc:666] [SPMD] a partitioner line\\n")
        os.write(2, b"mine, after\\n")
    print(kept)
    ''')


def test_the_capture_passes_every_other_line_through():
    result = subprocess.run([PYTHON, "-c", CAPTURE], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.strip() == "['[SPMD] a partitioner line']"
    assert result.stderr == "mine, before\nmine, after\n"


QUIET_CAPTURE = textwrap.dedent('''\
    import os, sys
    from shardscope.engine.compile_log import capturing_stderr

    with capturing_stderr(quiet=sys.argv[1] == "quiet") as kept:
        os.write(2, b"mine, before\\n")
        os.write(2, b"W1204 05:00:43.162335   16662 tpu_spmd_partitioner.cc:459] Collective matmul V1 is enabled.\\n")
        os.write(2, b"W1204 05:00:43.162335   16662 spmd_partitioner.cc:666] [SPMD] a partitioner line\\n")
        os.write(2, b"W1204 05:00:43.675882   16670 llo_module.h:502] The log function has NOT been set.\\n")
        os.write(2, b"mine, after\\n")
    print(kept)
    ''')


@pytest.mark.parametrize("quiet", [True, False])
def test_a_quiet_capture_keeps_the_compilers_other_log_lines_off_the_terminal(quiet):
    """A compiler asked to log only so that its partitioner's lines are read (libtpu, started by
    shardscope): its other log lines are dropped; anything else written meanwhile still passes."""
    result = subprocess.run([PYTHON, "-c", QUIET_CAPTURE, "quiet" if quiet else "loud"], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.stdout.strip() == "['[SPMD] a partitioner line']"
    others = "" if quiet else ("W1204 05:00:43.162335   16662 tpu_spmd_partitioner.cc:459] Collective matmul V1 is "
                               "enabled.\nW1204 05:00:43.675882   16670 llo_module.h:502] The log function has NOT "
                               "been set.\n")
    assert result.stderr == "mine, before\n" + others + "mine, after\n"


class _Lowered:
    """A module whose compile writes ``line`` to descriptor 2 as XLA's partitioner would (and
    nothing when ``line`` is empty: a compiler that says nothing, or a cache that served it)."""

    def __init__(self, line: bytes = b"") -> None:
        self.line = line

    def as_text(self, debug_info: bool = False) -> str:
        return "module @same_text_for_every_compiler"

    def compile(self) -> "_Lowered":
        if self.line:
            os.write(2, self.line)
        return self


def test_each_compiler_reads_back_only_its_own_partitioner_lines(tmp_path):
    """A target lowers the CPU's module (the same text): the lines kept beside the compilation
    cache for it are the target's own, never the CPU's, whichever compiled first."""
    from shardscope.engine.compilation import compile_lowered, partitioner_messages

    cpu_line = b"W1204 05:00:43.162335   16662 spmd_partitioner.cc:654] [SPMD] Involuntary full rematerialization (cpu)\n"
    tpu_line = b"W1204 05:00:43.162335   16663 spmd_partitioner.cc:654] [SPMD] Involuntary full rematerialization (tpu)\n"
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_enable_compilation_cache)
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_enable_compilation_cache", True)
    try:
        assert partitioner_messages(compile_lowered(_Lowered(cpu_line))) == ("[SPMD] Involuntary full rematerialization (cpu)",)
        assert partitioner_messages(compile_lowered(_Lowered(), "tpu:v5e:2x4")) == ()  # not the CPU's
        assert partitioner_messages(compile_lowered(_Lowered(tpu_line), "tpu:v5e:2x4")) == (
            "[SPMD] Involuntary full rematerialization (tpu)",)
        # served again without a word: each reads back its own
        assert partitioner_messages(compile_lowered(_Lowered(), "tpu:v5e:2x4")) == (
            "[SPMD] Involuntary full rematerialization (tpu)",)
        assert partitioner_messages(compile_lowered(_Lowered())) == ("[SPMD] Involuntary full rematerialization (cpu)",)
    finally:
        jax.config.update("jax_compilation_cache_dir", before[0])
        jax.config.update("jax_enable_compilation_cache", before[1])


BROKEN_TERMINAL = textwrap.dedent('''\
    import os, sys, threading, time
    from shardscope.engine.compile_log import compiling_beside, capturing_stderr

    r, w = os.pipe(); os.close(r)  # a descriptor 2 whose reader went away (EPIPE: Python ignores SIGPIPE)
    saved = os.dup(2); os.dup2(w, 2)
    def log(message):
        os.write(2, f"W1207 08:20:30.632653 {threading.get_native_id():>7} hlo_pass.cc:1] {message}\\n".encode())
        os.write(2, f"W1207 08:20:30.632653 {threading.get_native_id():>7} spmd_partitioner.cc:1] [SPMD] {message}\\n".encode())
    done, kept = threading.Event(), []
    def body():
        with compiling_beside(frozenset()) as shared, shared.joined(host=False), capturing_stderr() as got:
            log("one")
            time.sleep(0.2)
            log("two")
        kept.extend(got)
        done.set()
    threading.Thread(target=body, daemon=True).start()
    ended = done.wait(10)
    os.dup2(saved, 2)
    print(ended, kept)
    ''')


def test_a_terminal_that_went_away_neither_hangs_the_compile_nor_loses_its_lines():
    """``check ... 2>&1 | head -1``: writing to descriptor 2 fails once its reader has gone; the
    compile's window still closes, with its partitioner's lines (it waited for ever before)."""
    result = subprocess.run([PYTHON, "-c", BROKEN_TERMINAL], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.strip() == "True ['[SPMD] one', '[SPMD] two']", result.stderr


def test_the_capture_gives_descriptor_2_back():
    before = os.fstat(2)
    with capturing_stderr():
        assert os.fstat(2).st_ino != before.st_ino
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)


def test_testing_fails_on_the_rematerialization_unless_allowed():
    fn, a, b = _compiled_add(P("y", None, "x"), P(None, ("x", "y"), None))
    with pytest.raises(AssertionError, match="1 involuntary full rematerialization"):
        assert_no_rematerialization(fn, a, b)
    value = assert_no_rematerialization(fn, a, b, allow=["involuntary-rematerialization"]).rematerializations[0].op_name
    assert_no_rematerialization(fn, a, b, allow=[value])


DURING = textwrap.dedent('''\
    import os, sys, time
    from shardscope.engine.compile_log import capturing_stderr

    with capturing_stderr():
        os.write(2, b"\\x1b[2Jdrawn while compiling")  # a screen update: no newline
        time.sleep(0.5)
        with open(sys.argv[1], "rb") as terminal:
            print(terminal.read())
    ''')


def test_output_during_the_capture_reaches_the_terminal_at_once(tmp_path):
    # the explorer draws on stderr from its own thread while a worker compiles: no wait for the end
    terminal = tmp_path / "terminal"
    with open(terminal, "wb") as fd2:
        result = subprocess.run([PYTHON, "-c", DURING, str(terminal)], stdout=subprocess.PIPE, stderr=fd2, text=True,
                                cwd=ROOT, timeout=120)
    assert result.stdout.strip() == repr(b"\x1b[2Jdrawn while compiling")


def test_check_annotates_the_rematerialization_at_its_line_for_github(tmp_path, shardscope_cli):
    result = shardscope_cli("check", _program(CLASH, tmp_path), "--format", "github", cwd=tmp_path)
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if "rematerialization" in line]
    assert line.startswith(f"::error file=clash.py,line={ADD_LINE},title=shardscope%3A involuntary full")


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only")
def test_with_a_target_the_cpus_rematerialization_still_has_its_fix_compiled(tmp_path, shardscope_cli):
    """``check --target`` judges the target, and the CPU's finding keeps the fix it has without
    one: a given the layout b has, compiled, with no gather left (as AGREE compiles: no
    all-gather in its HLO). Before, with a target the fix was 'not compiled here'."""
    assert "all-gather" not in jax.jit(lambda a, b: a + b).lower(*_compiled_add(
        P(None, ("x", "y"), None), P(None, ("x", "y"), None))[1:]).compile().as_text()
    data = json.loads(shardscope_cli("check", _program(CLASH, tmp_path), "--target", "tpu:v5e:2x4", "--json").stdout)
    [finding] = data["partitioner_findings"]
    assert finding["from"] == SOURCE and finding["to"] == TARGET
    assert finding["fix"] is not None and finding["fix"]["verified"] and finding["fix"]["bytes_after"] == 0


QUIET_BESIDE = textwrap.dedent('''\
    import os, sys, threading
    from shardscope.engine.compile_log import capturing_stderr, compiling_beside

    def target():
        with shared.joined(host=False), capturing_stderr(quiet=True, quieted=sys.argv[1]):
            tid = threading.get_native_id()
            os.write(2, f"W1204 05:00:43.162335 {tid} llo_module.h:502] a warning\\n".encode())
            os.write(2, f"E1204 05:00:43.162340 {tid} tpu_client.cc:81] an error\\n".encode())
            os.write(2, f"F1204 05:00:43.162345 {tid} topology.cc:90] Check failed\\n".encode())

    with compiling_beside(frozenset()) as shared:
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()
    ''')


@pytest.mark.parametrize("quieted", ["IW", "IWE"])
def test_a_quiet_window_beside_another_compile_drops_the_levels_it_names_and_never_a_fatal_line(quieted):
    result = subprocess.run([PYTHON, "-c", QUIET_BESIDE, quieted], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "a warning" not in result.stderr
    assert ("an error" in result.stderr) is ("E" not in quieted)
    assert "Check failed" in result.stderr
