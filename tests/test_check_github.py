"""``check --format github``: GitHub Actions workflow commands, one per finding, on the user's line.

The expected line is found in the program's own text here, the number of findings by counting
the all-reduces inside while bodies of the compiled module; the escapes follow GitHub's rules
for workflow commands (``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A``; in a property also
``:`` -> ``%3A`` and ``,`` -> ``%2C``).
"""

from __future__ import annotations

import platform
import re
import runpy
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from _support import DEMOS, ROOT
from _tpu_text import all_reduces


_PROGRAM = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    import shardscope

    mesh = jax.make_mesh((4,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


    @shardscope.program(args=(jax.ShapeDtypeStruct((16,), jnp.float32), jax.ShapeDtypeStruct((8, 16), jnp.float32)))
    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "batch")), out_specs=P())
    def step(w, xs):
        def body(acc, x):
            grad = lax.psum(jnp.sum(x) * w, "batch")
            return acc + grad, None

        total, _ = lax.scan(body, jnp.zeros_like(w), xs)
        return total
""")


def _write(folder: Path, name: str = "step.py", text: str = _PROGRAM) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _annotations(stdout: str) -> list[tuple[dict[str, str], str]]:
    """Each ``::error k=v,...::message`` line as its properties and its message (still escaped)."""
    found = []
    for line in stdout.splitlines():
        assert line.startswith("::error "), line
        head, message = line[len("::error "):].split("::", 1)
        found.append((dict(part.split("=", 1) for part in head.split(",")), message))
    return found


def test_each_finding_is_one_error_at_the_users_line_relative_to_the_working_directory(tmp_path, shardscope_cli):
    path = _write(tmp_path / "src")
    step = runpy.run_path(str(path))["step"]
    args = (jax.ShapeDtypeStruct((16,), jnp.float32), jax.ShapeDtypeStruct((8, 16), jnp.float32))
    compiled = step.lower(*args).compile().as_text()
    in_loops = [depth for _, depth in all_reduces(compiled) if depth > 0]
    assert in_loops == [1]  # the psum in the scan's body: one all-reduce in the while body
    psum_line = next(n for n, line in enumerate(_PROGRAM.splitlines(), 1) if "lax.psum(" in line)

    result = shardscope_cli("check", path, "--format", "github", cwd=tmp_path)
    assert result.returncode == shardscope_cli("check", path).returncode == 1, result.stderr
    ((where, message),) = _annotations(result.stdout)
    assert where["file"] == "src/step.py" and where["line"] == str(psum_line)
    assert where["title"] == "shardscope%3A deferrable all-reduce in a loop (step)"
    # the program's own psum, no gradient (issue 45, item 5): named by the variable its line assigns
    # (`grad = lax.psum(...)` in _PROGRAM; issue 45, item 7), and its fix moves it after the loop
    assert message.startswith("step: psum_invariant of grad -> all-reduce")
    assert ", x8/call: deferrable." in message and "Fix: move the lax.psum" in message  # 8 scan iterations


def test_a_clean_program_prints_nothing_and_exits_0(tmp_path, shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step_fixed", "--format", "github",
                            cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")


def test_properties_and_messages_are_escaped_as_github_reads_them(tmp_path, shardscope_cli):
    """A folder named with ``,`` and ``%``, and a program that fails to trace: its message and hint
    are one annotation on the file, the line break between them escaped."""
    failing = _PROGRAM.replace("return total", "return total + undefined_name")
    path = _write(tmp_path / "a,b%", text=failing)
    result = shardscope_cli("check", path, "--format", "github", cwd=tmp_path)
    assert result.returncode == 2
    ((where, message),) = _annotations(result.stdout)
    assert where == {"file": "a%2Cb%25/step.py", "title": "shardscope%3A step was not checked"}
    assert "NameError" in message and "%0Ahint: " in message and "\n" not in message


@pytest.mark.parametrize(("args", "message"), [
    (("--json",), "--json and --format github ask for two outputs."),
    (("--what-if",), "--what-if's patches are not annotations."),
])
def test_github_with_another_output_is_one_message_and_exit_2(args, message, shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--format", "github", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_file_reached_through_a_linked_folder_keeps_the_path_the_user_gave(shardscope_cli):
    """demos/ links to the package's demo files: JAX names their real path, the annotation the given one."""
    assert DEMOS.is_symlink()
    text = (DEMOS / "train_step.py").read_text().splitlines()
    # the gradients' sum comes from where the replicated params meet the sharded micro-batch
    line = next(n for n, source in enumerate(text, 1) if "prediction = jnp.tanh(x @ params" in source)
    result = shardscope_cli("check", "demos/train_step.py", "--function", "step", "--format", "github", cwd=ROOT)
    ((where, _),) = _annotations(result.stdout)
    assert (where["file"], where["line"]) == ("demos/train_step.py", str(line))


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")
def test_with_a_target_each_finding_the_slice_keeps_in_a_loop_is_one_error(shardscope_cli):
    """rnn's naive plan on v5e:2x2: the compiler keeps Wh's all-reduce in the chunk loop (its
    TPU text, compiled here, has one all-reduce inside a while body) and moves the rest out."""
    from test_target_cli import _plan_texts

    texts = _plan_texts("rnn.py", "rnn", "v5e:2x2", 4)
    kept = {plan: sum(1 for _, depth in all_reduces(tpu) if depth > 0) for plan, (_, tpu) in texts.items()}
    assert kept == {"naive": 1, "deferred": 0}
    source = (DEMOS / "rnn.py").read_text().splitlines()
    wh_line = next(n for n, text in enumerate(source, 1) if 'h @ params["Wh"]' in text)
    result = shardscope_cli("check", "demos/rnn.py", "--target", "tpu:v5e:2x2", "--format", "github", cwd=ROOT)
    assert result.returncode == shardscope_cli("check", DEMOS / "rnn.py", "--target", "tpu:v5e:2x2").returncode == 1
    ((where, message),) = _annotations(result.stdout)
    assert where == {"file": "demos/rnn.py", "line": str(wh_line),
                     "title": "shardscope%3A all-reduce stays in a loop on tpu%3Av5e%3A2x2 (rnn[naive])"}
    assert "params['Wh']" in message and "On tpu:v5e:2x2: left 1 of 2 loops." in message


_ACCUMULATE = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    params = {"W": jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(mesh, P())),
              "b": jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P()))}
    xs = jax.ShapeDtypeStruct((4, 32, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    def loss_fn(params, x):
        return jnp.mean(jnp.tanh(x @ params["W"] + params["b"]) ** 2)

    @shardscope.program(args=(params, xs))
    @jax.jit
    def step(params, xs):
        def micro(acc, x):
            l, g = jax.value_and_grad(loss_fn)(params, x)
            return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g)), None
        (total, grads), _ = lax.scan(micro, (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params)), xs)
        return total, grads
""")


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")
def test_with_a_target_each_annotation_is_the_targets_finding_with_the_fix_the_text_gives(tmp_path, shardscope_cli):
    """Gradient accumulation that sums the loss too: the CPU runs one combined all-reduce of the
    loss and both gradients in the scan's body (a tuple of 3 in its text, compiled here); XLA:TPU
    moves the gradients' out and keeps only the loss's f32[] there. The exit status judges the TPU's
    plan, so the one annotation is that 4 B sum's, with the fix the text report gives on the TPU
    (not the CPU's fix of 548 B of gradients the compiler already moves)."""
    from test_judged_plan import _modules

    from shardscope.targets.plans import load_targets, parse_targets

    path = _write(tmp_path, "acc.py", _ACCUMULATE)
    tpu_text, cpu_text = _modules(path, load_targets(parse_targets(["tpu:v5e:2x4"]))[0])
    assert [shape.split("{")[0] for shape, depth in all_reduces(tpu_text) if depth > 0] == ["f32[]"]  # layout cut
    (cpu_in_loop,) = [shape for shape, depth in all_reduces(cpu_text) if depth > 0]
    assert cpu_in_loop.startswith("(") and cpu_in_loop.count("f32[") == 3  # the loss's and both gradients' sum
    loss_line = next(n for n, line in enumerate(_ACCUMULATE.splitlines(), 1) if "return jnp.mean(" in line)

    text = shardscope_cli("check", path, "--target", "tpu:v5e:2x4", cwd=tmp_path)
    github = shardscope_cli("check", path, "--target", "tpu:v5e:2x4", "--format", "github", cwd=tmp_path)
    assert github.returncode == text.returncode == 1, github.stderr
    said = " ".join(text.stdout.split())  # the text report, its wrapping undone
    fixes = re.findall(r"step: fix on v5e:2x4 for its all-reduce of l: (.*?) step: memory:", said)
    assert len(fixes) == 1 and "check failed on tpu:v5e:2x4: step" in said
    ((where, message),) = _annotations(github.stdout)
    assert where == {"file": "acc.py", "line": str(loss_line),
                     "title": "shardscope%3A all-reduce stays in a loop on tpu%3Av5e%3A2x4 (step)"}
    reason, fix = message.split(" Fix: ")
    assert fix == fixes[0].replace("%", "%25")  # the annotation's fix is the text's, escaped as GitHub reads it
    assert "of l in " in reason and ": deferrable there." in reason and "the 4 B accumulator" in reason  # f32[]
