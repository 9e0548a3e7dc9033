"""The shard_map route of a jit program (issue 45, item 8): where the Explicit-axes rewrite fails
(JAX refuses to type a ``reshape`` of the sharded batch into micro-batches with Explicit axes),
the step runs per device inside ``jax.shard_map``, each device accumulating its own part, one
``psum`` after the loop.

Expected counts are recounted from the compiled texts (``_what_if_programs.recount``); the
gradient and loss come from numpy (``reshaped_reference``, float64) and from the fix written by
hand as the route's snippet says; never from shardscope.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import _what_if_programs as wp
from shardscope.whatif.what_if import FAILED, VERIFIED, rewrites_of, subject_of


def _rewrite(nested: bool = False, flipped: bool = False):
    step, args = wp.reshaped_micro_batches(nested=nested, flipped=flipped)
    subject = subject_of(step, args)
    (rewrite,) = rewrites_of(subject)
    return subject, rewrite


def _assert_matches_numpy(outputs, args) -> None:
    """The rewrite's gradient and loss against numpy's, within float32's rounding of the largest entry."""
    grads, loss = jax.tree.map(np.asarray, outputs)
    expected_grads, expected_loss = wp.reshaped_reference(*args)
    assert jax.tree.structure(grads) == jax.tree.structure(expected_grads)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(expected_grads)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    np.testing.assert_allclose(float(loss), expected_loss, rtol=1e-5)


@pytest.mark.parametrize("nested", [False, True], ids=["dict", "nested pytree"])
def test_a_reshaped_batch_is_rewritten_through_shard_map_when_explicit_axes_refuse_it(nested):
    """The issue's step: Explicit axes refuse its reshape, so the rewrite runs the step per
    device: the gradients' and the loss's all-reduce runs once per call instead of once per
    micro-batch, and the gradient and loss are numpy's."""
    subject, rewrite = _rewrite(nested)
    naive = wp.recount(subject.compiled.as_text())
    assert naive["in_loop"] == {"all-reduce": 1} and naive["runs"]["all-reduce"] == wp.MICRO

    assert rewrite.status == VERIFIED and rewrite.route == "shard_map", rewrite.reason
    (tried,) = rewrite.tried
    assert tried.route == "auto" and tried.status == FAILED and "reshape" in tried.reason
    rewritten = wp.recount(rewrite.program.compiled.as_text())
    assert rewritten["in_loop"] == {} and rewritten["runs"] == {"all-reduce": 1}
    assert rewrite.plan_check.instruction_runs == (wp.MICRO, 1)
    _assert_matches_numpy(rewrite.program.run(*subject.run_arguments), subject.run_arguments[0])
    assert rewrite.output_check is not None and rewrite.output_check.agree

    fixed, _ = wp.reshaped_micro_batches(nested=nested, fixed=True)  # the snippet's fix, by hand
    args = subject.run_arguments[0]
    assert wp.recount(fixed.trace(*args).lower().compile().as_text())["runs"] == rewritten["runs"]
    _assert_matches_numpy(fixed(*args), args)


def test_the_shard_map_route_says_what_the_fix_is_with_one_spec_per_argument():
    """The snippet: the step inside jax.shard_map with one in_spec per argument (the specs they
    come in), the parameters cast before the loop, and the gradients and the loss summed and
    divided by the 8 devices after it (each device's mean is over its own rows)."""
    _, rewrite = _rewrite()
    text = rewrite.patch.text
    assert not rewrite.patch.is_diff and rewrite.axes == ("data",)
    assert "@jax.shard_map(mesh=mesh, in_specs=(P(), P('data'), P('data')), out_specs=P())" in text
    assert "def step(params, x, y):" in text
    assert "local_params = jax.tree.map(lambda p: lax.pcast(p, 'data', to='varying'), params)" in text
    assert "the gradients and value" in text and "divided by 8 (lax.pmean)" in text  # value: the loss, as the step names it
    assert "acc = jax.tree.map(lambda a: lax.psum(a, 'data') / 8, acc)" in text


def test_a_step_neither_route_rewrites_gets_one_reason_per_route():
    """The batch reversed before the reshape: Explicit axes refuse the program and a per-device
    step cannot reverse a split dimension on each device alone. Failed, with both reasons."""
    subject, rewrite = _rewrite(flipped=True)
    assert wp.recount(subject.compiled.as_text())["in_loop"].get("all-reduce") == 1  # still flagged
    assert rewrite.status == FAILED and not rewrite.verified
    assert [(a.route, a.status) for a in rewrite.tried] == [("auto", FAILED), ("shard_map", FAILED)]
    first, second = rewrite.reason.split("; the shard_map rewrite failed: ")
    assert first.startswith("the Explicit-axes rewrite failed: ") and first[len("the Explicit-axes rewrite failed: "):]
    assert second.startswith("a rev along a dimension split over 'data' (in ")  # jnp.flip's own jit: _flip, flip
    assert "(at _what_if_programs.py:" in second and "(reshaped_micro_batches.<locals>.step)" in second
    assert "(failed: the Explicit-axes rewrite failed: " in rewrite.summary()


RESHAPED = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardscope

MICRO, BATCH, D_IN, D_HIDDEN = 4, 64, 16, 32
mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
params = {"w1": jax.ShapeDtypeStruct((D_IN, D_HIDDEN), jnp.float32, sharding=NamedSharding(mesh, P())),
          "w2": jax.ShapeDtypeStruct((D_HIDDEN, 1), jnp.float32, sharding=NamedSharding(mesh, P()))}
x = jax.ShapeDtypeStruct((BATCH, D_IN), jnp.float32, sharding=NamedSharding(mesh, P("data")))
y = jax.ShapeDtypeStruct((BATCH, 1), jnp.float32, sharding=NamedSharding(mesh, P("data")))


def loss(params, x, y):
    return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"] - y) ** 2)


@shardscope.program(args=(params, x, y))
@jax.jit
def step(params, x, y):
    xs, ys = x.reshape(MICRO, BATCH // MICRO, D_IN), y.reshape(MICRO, BATCH // MICRO, 1)

    def micro_batch(carry, batch):
        grads, total = carry
        value, g = jax.value_and_grad(loss)(params, *batch)
        return (jax.tree.map(jnp.add, grads, g), total + value), None

    (grads, total), _ = lax.scan(micro_batch, (jax.tree.map(jnp.zeros_like, params), jnp.zeros(())), (xs, ys))
    return jax.tree.map(lambda g: g / MICRO, grads), total / MICRO
'''


def test_check_what_if_reports_the_route_it_took_and_the_one_it_tried(shardscope_cli, tmp_path):
    """``check --what-if`` on the issue's file: verified through shard_map, the Explicit-axes
    failure kept beside it (JSON ``tried``, the text's route line); the runs per call are the
    compiled texts' (the original's all-reduce 4 times and its two all-gathers once; the fix's
    one all-reduce)."""
    path = tmp_path / "reshaped.py"
    path.write_text(RESHAPED)
    result = shardscope_cli("check", path, "--what-if", "--json", "-r", 3)
    assert result.returncode == 1, result.stderr
    (program,) = json.loads(result.stdout)["programs"]
    (rewrite,) = program["what_if"]
    assert rewrite["status"] == "verified" and rewrite["route"] == "shard_map" and rewrite["outputs_match"]
    assert [(t["route"], t["status"]) for t in rewrite["tried"]] == [("auto", "failed")]
    assert "reshape" in rewrite["tried"][0]["reason"]
    step, args = wp.reshaped_micro_batches()
    fixed, _ = wp.reshaped_micro_batches(fixed=True)
    before = wp.recount(step.trace(*args).lower().compile().as_text())["runs"]
    after = wp.recount(fixed.trace(*args).lower().compile().as_text())["runs"]
    assert rewrite["executed_collectives"] == {"original": sum(before.values()), "rewrite": sum(after.values())}
    assert "jax.shard_map(mesh=mesh, in_specs=(P(), P('data'), P('data'))" in rewrite["snippet"]
    text = " ".join(shardscope_cli("check", path, "--what-if", "-r", 3).stdout.split())
    assert ("route: shard_map, the step run per device inside jax.shard_map; tried first: the Explicit-axes "
            "rewrite failed: with Explicit axes JAX does not trace this program") in text


def test_an_embedding_lookup_and_checkpointed_layers_are_rewritten_through_shard_map():
    """A scanned, checkpointed transformer under jit (tests/_user_programs.py): Explicit axes
    refuse its embedding lookup; run per device, the lookup's gradient (a scatter-add of each
    device's rows) and the layers' gradients (summed inside the checkpointed backward scan) all
    leave the micro-batch loop, and the outputs are the original's (JAX's own, compared in numpy)."""
    import _user_programs as up

    case = up.scanned_transformer(False)
    subject = subject_of(case.fn, case.args)
    (rewrite,) = rewrites_of(subject)
    naive = wp.recount(subject.compiled.as_text())
    assert naive["runs"]["all-reduce"] == wp.MICRO * (case.notes["layers"] + 1)  # the layers' sums and the embedding's
    assert rewrite.status == VERIFIED and rewrite.route == "shard_map" and "gather" in rewrite.tried[0].reason
    assert wp.recount(rewrite.program.compiled.as_text())["runs"] == {"all-reduce": 1}
    args, _ = subject.run_arguments
    wp.assert_same(wp.outputs(subject.compiled, args), jax.tree.map(np.asarray, rewrite.program.run(args, {})),
                   rtol=1e-5)


def _group_size(line: str) -> int:
    """The devices of one replica group of a compiled all-reduce, in any of the three forms the
    printer writes (explicit ``{{0,1},...}``, iota ``[4,2]<=[8]``, mesh axes ``mesh['a'=2,...]
    {'a'}``)."""
    import re

    if explicit := re.search(r"replica_groups=\{\{([^}]*)\}", line):
        return len(explicit.group(1).split(","))
    if iota := re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line):
        return int(iota.group(2))
    mesh = re.search(r"mesh\[([^\]]*)\][^{]*\{([^}]*)\}", line)
    sizes = {name: int(size) for name, size in re.findall(r"'(\w+)'=(\d+)", mesh.group(1))}
    return int(np.prod([sizes[name] for name in re.findall(r"'(\w+)'", mesh.group(2))]))


def test_the_check_fix_divides_the_loss_by_the_devices_of_its_whole_axis():
    """The reshape leaves the partitioner's all-reduce groups of 2 devices (read in the compiled
    text); the fix's shard_map sums over all of ``data`` (8 devices, the mesh's), so the loss's
    mean is its psum divided by 8, not 2."""
    import shardscope

    step, args = wp.reshaped_micro_batches()
    text = step.trace(*args).lower().compile().as_text()
    assert {_group_size(line) for line in text.splitlines() if " all-reduce(" in line} == {2}
    (c,) = [c for c in shardscope.inspect(step, *args).paired if c.in_loop]
    fix = " ".join(c.verdict.fix.split())
    assert "return lax.psum(it, 'data') / 8 (lax.pmean)" in fix and "/ 2" not in fix


def test_an_fsdp_weight_is_gathered_on_the_shard_map_route():
    """FSDP (tests/_compiled_programs.py): the weight is sharded over ``data`` like the batch.
    Run per device, it is gathered where the batch is split over the same axis, as the
    partitioner does; the micro-batch loop's sum moves after the loop (4 runs of the all-reduce
    per call become 1, recounted) and the gradient is numpy's. Taken directly here: the program's
    own route (Explicit axes) gives this one already."""
    import _compiled_programs as cp
    from shardscope.whatif.build import build
    from shardscope.whatif.groups import finding_groups
    from shardscope.whatif.what_if import Rewrite, verify

    case = cp.fsdp_accumulate()
    subject = subject_of(case.fn, case.args)
    (group,) = finding_groups(subject)
    built = build(subject, group, "shard_map")
    base = Rewrite(kind=group.kind, route=built.route, loop=group.loop, loop_words="", findings=group.findings,
                   equations=(), status=FAILED, reason="")
    rewrite = verify(subject, base, built.program, built.kind, built.moved)
    assert rewrite.status == VERIFIED, rewrite.reason
    naive = wp.recount(subject.compiled.as_text())["runs"]
    rewritten = wp.recount(rewrite.program.compiled.as_text())["runs"]
    assert naive["all-reduce"] == wp.MICRO and rewritten["all-reduce"] == 1
    assert "all-gather" in rewritten  # the weight, gathered per micro-batch as in the original
    grads = jax.tree.map(np.asarray, rewrite.program.run(*subject.run_arguments))
    expected = cp.reference_gradient(*case.args)
    for name in expected:
        np.testing.assert_allclose(grads[name], expected[name], rtol=0, atol=1e-5 * np.abs(expected[name]).max())
