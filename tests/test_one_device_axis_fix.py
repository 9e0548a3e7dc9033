"""A jit step on a data=8 x model=1 mesh: ``model`` splits nothing, so the shard_map fix is the
plain one over every axis (no ``axis_names`` left to the partitioner, no partial-auto words),
in the check's fix text and in the what-if's verified snippet alike."""

from __future__ import annotations

from test_two_axis_shard_map_fix import STEP as TWO_AXIS_STEP, _subject as two_axis_subject
from shardscope.whatif.what_if import VERIFIED, rewrites_of

STEP = TWO_AXIS_STEP.replace(".reshape(4, 2)", ".reshape(8, 1)")
"""The two-axis test's step on a data=8 x model=1 mesh."""


def _subject(tmp_path):
    return two_axis_subject(tmp_path, STEP)[2]


def test_a_one_device_axis_takes_the_full_manual_route(tmp_path):
    subject = _subject(tmp_path)
    (finding,) = [c for c in subject.plan.collectives if c.verdict.kind == "deferrable"]
    assert "stays with the partitioner" not in finding.verdict.fix
    assert "Either use Explicit axes" in finding.verdict.fix  # the one-axis fix's two routes
    assert "in_specs=(P(), P(None, 'data'), P(None, 'data')), out_specs=P(), axis_names={'data'})" in finding.verdict.fix
    rewrite = next(r for r in rewrites_of(subject) if r.status == VERIFIED and r.route == "shard_map")
    assert "axis_names" not in rewrite.patch.text and "stays with the partitioner" not in rewrite.patch.text
    decorator = next(line for line in rewrite.patch.text.splitlines() if line.startswith("@jax.shard_map("))
    # the parameters' specs name 'model' alone, of one device: P() inside, as the verified program reads them
    assert decorator == "@jax.shard_map(mesh=mesh, in_specs=(P(), P(None, 'data'), P(None, 'data')), out_specs=P())"
