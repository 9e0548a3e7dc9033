"""``shardscope check``: exit codes, the printed fix, the JSON fields, and every shipped demo."""

from __future__ import annotations

import json

import pytest
from _support import DEMOS

from shardscope.pipeline.check import check_file, exit_status

FINDING_KEYS = {"primitive", "axes", "loop_trip_counts", "executions", "bytes_per_call", "verdict", "source",
                "value", "fix"}


def test_check_step_exits_1_and_prints_the_fix(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "deferrable" in out and "params['W1']" in out and "params['W2']" in out
    assert "params = jax.tree.map(lambda p: lax.pcast(p, 'batch', to='varying'), params)" in " ".join(out.split())
    # XLA combines the sums of both weights' gradients into one all-reduce: its fix names both leaves
    assert "cast params (these are the gradients of its leaves params['W1'], params['W2'])" in " ".join(out.split())
    assert "check failed: step" in out


def test_check_step_fixed_exits_0(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step_fixed")
    assert result.returncode == 0, result.stderr
    assert "check passed" in result.stdout and "deferrable" not in result.stdout


def test_check_json_has_the_issue_fields(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "train_step.py", "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert [p["function"] for p in data["programs"]] == ["step", "step_fixed"]
    step, fixed = data["programs"]
    assert len(step["findings"]) == 2 and fixed["findings"] == []
    for finding in step["findings"]:
        assert FINDING_KEYS <= set(finding)
        assert finding["verdict"] == "deferrable" and finding["executions"] == 4
        assert finding["loop_trip_counts"] == [4] and finding["axes"] == ["batch"]
        assert finding["source"].startswith("train_step.py:") and finding["fix"]
    assert sorted(f["value"] for f in step["findings"]) == ["grad(params['W1'])", "grad(params['W2'])"]
    assert {c["verdict"] for c in fixed["collectives"]} == {"needed"}
    assert [c["bytes_per_call"] for c in fixed["collectives"]] == [2048, 128]


def test_check_json_of_one_function_has_its_fields_at_the_top(shardscope_cli):
    result = shardscope_cli("check", DEMOS / "pipeline.py", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["function"] == "pipeline" and data["exit_code"] == 0
    (finding,) = data["findings"]
    assert finding["primitive"] == "ppermute" and finding["verdict"] == "needed" and finding["fix"] is None
    assert data["collectives"] == data["findings"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("missing.py",), "No such file"),
        ((DEMOS / "train_step.py", "--function", "nope"), "has no program or demo function 'nope'"),
    ],
)
def test_check_user_errors_exit_2(args, message, shardscope_cli):
    result = shardscope_cli("check", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_missing_file_names_both_kinds_of_file_check_reads(shardscope_cli):
    result = shardscope_cli("check", "missing.py")
    assert result.returncode == 2 and "@shardscope.program" in result.stderr and "@shardscope.demo" in result.stderr


@pytest.mark.parametrize("call", ["step(a)", "step(a, b, c)"])
def test_example_arguments_that_do_not_fit_the_signature_say_so(call, tmp_path, shardscope_cli):
    """Python's own TypeError for the call (a missing or an extra argument) is about the example
    arguments, not about a value's types: the hint says which decorator's arguments to fix."""
    count = call.count(",") + 1
    args = ", ".join(["jax.ShapeDtypeStruct((4,), jnp.float32)"] * count)
    path = tmp_path / "arity.py"
    path.write_text(
        "import jax, jax.numpy as jnp\nimport shardscope\n\n"
        f"@shardscope.program(args=({args},))\n@jax.jit\ndef step(a, b):\n    return a + b\n")
    result = shardscope_cli("check", path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "do not match step's parameters" in result.stderr and "which types disagree" not in result.stderr


def test_check_a_file_without_programs_or_demos_exits_2(tmp_path, shardscope_cli):
    path = tmp_path / "plain.py"
    path.write_text("x = 1\n")
    result = shardscope_cli("check", path)
    assert result.returncode == 2
    assert "@shardscope.program" in result.stderr and "Traceback" not in result.stderr


def test_check_a_program_that_fails_to_trace_exits_2(tmp_path, shardscope_cli):
    path = tmp_path / "bad.py"
    path.write_text(
        "import jax, jax.numpy as jnp\nimport shardscope\n\n"
        "@shardscope.program(args=(jax.ShapeDtypeStruct((2, 3), jnp.float32),))\n"
        "def bad(x):\n    return x @ x\n"
    )
    result = shardscope_cli("check", path)
    assert result.returncode == 2
    assert "bad fails to trace" in result.stderr and "Traceback" not in result.stderr


def test_check_debug_on_a_trace_error_shows_jaxs_traceback_and_exits_2(tmp_path, shardscope_cli):
    """--debug prints the traceback down to JAX's own error, and the status stays 2 (1 is findings)."""
    path = tmp_path / "bad_and_good.py"
    path.write_text(BAD_AND_GOOD)
    result = shardscope_cli("check", path, "--function", "bad", "--debug")
    assert result.returncode == 2, result.stderr
    assert "Traceback (most recent call last)" in result.stderr and "bad fails to trace" in result.stderr
    assert "TypeError: dot_general requires contracting dimensions" in result.stderr
    assert "shardscope: error:" not in result.stderr  # the traceback instead of the short message


BAD_AND_GOOD = """
import jax, jax.numpy as jnp
import shardscope

X = jax.ShapeDtypeStruct((2, 3), jnp.float32)


@shardscope.program(args=(X,))
def bad(x):
    return x @ x


@shardscope.program(args=(X,))
def good(x):
    return jnp.sin(x) * 2


@shardscope.program(args=(X,))
def worse(x):
    return jnp.concatenate([x, x.T])
"""


@pytest.mark.parametrize("json_output", [False, True])
def test_check_checks_every_program_and_exits_2_when_one_fails_to_trace(tmp_path, shardscope_cli, json_output):
    """The programs that trace are checked; each one that does not gets its one message (no
    traceback) and the status is 2, over the others' findings; --json lists the failures."""
    path = tmp_path / "bad_and_good.py"
    path.write_text(BAD_AND_GOOD)
    result = shardscope_cli("check", path, *(["--json"] if json_output else []))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("shardscope: error: bad fails to trace") == 1
    assert result.stderr.count("shardscope: error: worse fails to trace") == 1
    if json_output:
        data = json.loads(result.stdout)
        assert data["exit_code"] == 2 and [p["function"] for p in data["programs"]] == ["good"]
        assert [f["function"] for f in data["failed"]] == ["bad", "worse"]
        assert all("fails to trace" in f["error"] and f["hint"] for f in data["failed"])
        assert data["programs"][0]["counts"] == {}
    else:
        assert result.stdout.startswith("good: 0 compiled collectives")
        assert "check failed: bad, worse: not checked" in result.stdout and "check passed" not in result.stdout


OVER_16 = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
import shardscope

mesh = Mesh(np.array(jax.devices()[:16]), ("x",))


@shardscope.program(args=(jax.ShapeDtypeStruct((32, 4), jnp.float32),))
@jax.jit
@jax.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P())
def total(x):
    return jax.lax.psum(x.sum(0), "x")
"""


@pytest.mark.parametrize("format", ["text", "json", "github"])
def test_a_program_over_fewer_devices_than_its_file_asks_for_is_not_checked(tmp_path, shardscope_cli, format):
    """``jax.devices()[:16]`` where check started 8 (this process's): the mesh is 8 devices, the
    check would prove nothing about the program as written. It is not checked, in every format
    (exit 2, the one rule), and the hint is the command's own remedy (--devices), not a notebook's."""
    path = tmp_path / "over_16.py"
    path.write_text(OVER_16)
    result = shardscope_cli("check", path.name, *([] if format == "text" else ["--format", format]), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    said = ("total was traced over 8 devices, while over_16.py line 6 asks for 16 (jax.devices()[:16]): check "
            "started 8, so the program is not sharded as written and its check would prove nothing.")
    assert f"shardscope: error: {said}\nhint: run check with --devices 16\n" in result.stderr
    assert "check passed" not in result.stdout
    if format == "json":
        data = json.loads(result.stdout)
        assert data["exit_code"] == 2 and data["programs"] == []
        assert data["failed"] == [{"function": "total", "error": said, "hint": "run check with --devices 16"}]
    if format == "github":
        assert "::error file=over_16.py,title=shardscope%3A total was not checked::" in result.stdout


def test_a_device_count_the_user_gave_is_theirs_and_the_note_says_what_the_file_asks(tmp_path, shardscope_cli):
    """``--devices 8`` given: check does not refuse the file that asks for 16 (a target's count is
    given the same way); the plan is checked (1 psum outside loops: exit 0) and the note says so."""
    path = tmp_path / "over_16.py"
    path.write_text(OVER_16)
    result = shardscope_cli("check", path.name, "--devices", "8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert said.startswith("The program's mesh spans 8 devices while over_16.py line 6 asks for 16") and "check passed" in said


def test_a_program_over_fewer_devices_than_started_is_checked_as_it_chose(tmp_path, shardscope_cli):
    """``jax.devices()[:2]`` of the 8 started is the program's own choice, whatever a comment or
    another line of the file says of a pod: it is checked (1 psum outside loops: exit 0)."""
    path = tmp_path / "over_2.py"
    path.write_text(OVER_16.replace("jax.devices()[:16]), (\"x\",))",
                                    "jax.devices()[:2]), (\"x\",))  # jax.make_mesh((16, 16), ...) on a pod"))
    assert "[:2]" in path.read_text()
    result = shardscope_cli("check", path)
    assert result.returncode == 0, result.stderr
    assert "check passed" in result.stdout and "asks for" not in result.stdout + result.stderr


@pytest.mark.parametrize("demo", ["linear.py", "mlp.py", "rnn.py", "rbm.py"])
def test_check_on_each_shipped_demo_flags_naive_and_passes_the_others(demo):
    found = {ins.function.split("[", 1)[1].rstrip("]"): ins for ins in check_file(DEMOS / demo).inspections}
    assert list(found)[:2] == ["naive", "deferred"]  # every plan the registry builds for it, in order
    naive = found.pop("naive")
    assert naive.flagged and all(c.verdict_kind == "deferrable" for c in naive.findings)
    # every collective equation belongs to one flagged instruction (XLA may combine several into one)
    assert _covered(naive.flagged) == {c.equation_id for c in naive.collectives}
    assert len(naive.flagged) == len(naive.compiled.findings)
    for name, plan in found.items():
        assert not plan.flagged and plan.findings == (), name
    assert exit_status([naive, *found.values()]) == 1 and exit_status(list(found.values())) == 0


def test_check_on_the_deep_demo(monkeypatch):
    monkeypatch.setenv("SHARDSCOPE_DEEP_DEPTH", "6")
    naive, *others = check_file(DEMOS / "deep.py").inspections
    assert naive.function == "deep[naive]"
    assert len(naive.collectives) == 12  # a weight and a bias per layer
    assert _covered(naive.flagged) == {c.equation_id for c in naive.collectives}  # however XLA combined them
    assert others and not any(plan.flagged for plan in others)


def _covered(flagged) -> set[str]:
    """The jaxpr collectives the flagged compiled collectives come from."""
    return {e.equation_id for c in flagged for e in c.equations}


def test_report_on_a_program_file_points_at_check(shardscope_cli):
    result = shardscope_cli("report", DEMOS / "train_step.py")
    assert result.returncode == 2
    assert "is a program file" in result.stderr and "shardscope check" in result.stderr
    assert "Traceback" not in result.stderr


def test_sweep_on_a_program_file_names_what_works_for_one(shardscope_cli):
    """sweep, like report and diff, needs a demo's plans and chunk sizes: its hint says so of
    sweep itself, and names check (on a target too) and the explorer for a program file."""
    result = shardscope_cli("sweep", DEMOS / "train_step.py")
    assert result.returncode == 2
    hint = " ".join(result.stderr.split()).split("hint:", 1)[1]
    assert "report, diff and sweep build plans" in hint
    assert f"shardscope check {DEMOS / 'train_step.py'}" in hint and "--target" in hint
    assert f"shardscope {DEMOS / 'train_step.py'} opens them in the explorer" in hint


def test_check_refuses_a_file_with_programs_and_demos(tmp_path, shardscope_cli):
    path = tmp_path / "both.py"
    path.write_text(
        "import jax, jax.numpy as jnp\nimport shardscope\n\n"
        "x = jax.ShapeDtypeStruct((8, 4), jnp.float32)\n\n"
        "@shardscope.program(args=(x,))\ndef total(x):\n    return x.sum()\n\n"
        "@shardscope.demo(params=jax.ShapeDtypeStruct((4,), jnp.float32), x=x)\n"
        "def model(params, x):\n    return x @ params\n"
    )
    for args in ((), ("--function", "model"), ("--function", "total")):
        result = shardscope_cli("check", path, *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert ("both.py marks both @shardscope.program functions (total) and @shardscope.demo functions (model)"
                in result.stderr)
        assert "separate files" in result.stderr


def test_a_cpu_verdict_suggests_targets_of_the_programs_own_device_count(shardscope_cli):
    """train_step.py lays its mesh over jax.devices()[:8]: the hint names an 8-chip v5e slice
    (2x4) and 8 H100s, which check --target can compile it for, never tpu:v5e:2x2 (4 chips)."""
    result = shardscope_cli("check", DEMOS / "train_step.py", "--function", "step")
    assert result.returncode == 1, result.stderr
    text = " ".join(result.stdout.split())
    assert "--target tpu:v5e:2x4 or --target gpu:h100:8 judges its plan instead" in text
    assert "tpu:v5e:2x2" not in text


@pytest.mark.parametrize(("count", "expected"), [
    (1, ("gpu:h100:1",)), (4, ("tpu:v5e:2x2", "gpu:h100:4")), (8, ("tpu:v5e:2x4", "gpu:h100:8")),
    (12, ("gpu:h100:3x4",)), (256, ("tpu:v5e:16x16", "gpu:h100:32x8")), (512, ("gpu:h100:64x8",)),
])
def test_the_targets_a_hint_names_have_the_programs_device_count(count, expected):
    from shardscope.targets.registry import targets_with

    assert targets_with(count) == expected  # a v5e slice Cloud TPU offers (none past 256), H100 hosts of 8 (or 4)
