"""A target plan is costed once, where the pipeline makes it (``TargetPlan.costs``): rendering
``check --json`` (each program's plan on the target, and again under ``targets``) costs nothing.

On a Llama-shaped step over 256 chips the JSON's rendering once cost every collective's groups
8 times per plan, 190,000 group costs and most of the JSON's CPU time
(``benchmarks/check_at_scale.py``). The count of calls of the interconnect's model is the measure
(a timing would follow the machine's load). libtpu ships for Linux x86-64 only: elsewhere this skips.
"""

from __future__ import annotations

import platform
import sys
import textwrap
from collections import Counter

import pytest

from shardscope.engine.hlo import costing
from shardscope.engine.hlo.interconnect_times import TargetInterconnect
from shardscope.pipeline.check import check_file
from shardscope.render.check import to_json
from shardscope.render.targets import targets_json
from shardscope.targets.plans import load_targets, parse_targets

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")

TWO_PROGRAMS = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    W = jax.ShapeDtypeStruct((16, 16), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((4, 64, 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    def loss(W, x):
        return jnp.mean(jnp.tanh(x @ W) ** 2)

    def local(W, x):
        def body(g, xs):
            return g + lax.psum(jax.grad(loss)(W, xs), "data"), None

        g, _ = lax.scan(body, jnp.zeros_like(W), x)
        return g

    def local_fixed(W, x):
        def body(g, xs):
            return g + jax.grad(loss)(W, xs), None

        g, _ = lax.scan(body, jnp.zeros_like(W), x)
        return lax.psum(g, "data")

    def program(f):
        return shardscope.program(args=(W, x))(
            jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P())))

    step = program(local)
    step_fixed = program(local_fixed)
''')


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """The two programs checked on a v5e:2x2 slice (4 chips, as the file's mesh), in this process."""
    path = tmp_path_factory.mktemp("json_cost") / "two_steps.py"
    path.write_text(TWO_PROGRAMS)
    found = check_file(path, targets=load_targets(parse_targets(["tpu:v5e:2x2"])))
    assert not found.failed and [ins.function for ins in found.inspections] == ["step", "step_fixed"]
    return path, found


def _timed_runs(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts the runs the interconnect's model costs, by the plan's target, wherever they are asked for."""
    calls: Counter = Counter()
    real = TargetInterconnect.time

    def counted(self, c, payload_bytes=None):
        calls[self.target] += 1
        return real(self, c, payload_bytes)

    monkeypatch.setattr(TargetInterconnect, "time", counted)
    return calls


def test_rendering_the_json_costs_nothing_each_plan_carries_its_costs(checked, monkeypatch):
    path, found = checked
    plans = [plan for ins in found.inspections for plan in ins.targets]
    assert len(plans) == 2 and all(plan.step is not None and plan.costs is not None for plan in plans)
    calls = _timed_runs(monkeypatch)
    data = to_json(path, found)
    assert calls == Counter()  # the plans were costed where they were made
    for plan, (ins, program) in zip(plans, zip(found.inspections, data["programs"])):
        variant = data["targets"]["tpu:v5e:2x2"]["variants"][ins.function]
        interconnect = plan.costs.interconnect
        by_hand = sum(c.executions * interconnect.time(c).seconds for c in plan.compiled.collectives)
        assert variant["interconnect_s_per_call"] == pytest.approx(by_hand, rel=1e-12)
        assert variant["step_estimate"]["collectives_s"] == variant["interconnect_s_per_call"]
        assert program["targets"]["tpu:v5e:2x2"]["verdict"] == variant["verdict"]


def test_a_target_plan_is_costed_once_where_it_is_made(checked, monkeypatch):
    """Each collective of each plan is costed once for the plan's figures (its run, the seconds per
    call, the step estimate) and once more per finding it keeps in a loop (the saving's smaller run)."""
    path, _ = checked
    made: Counter = Counter()
    real = costing.cost_plan

    def counted(plan):
        made[plan.target] += 1
        return real(plan)

    monkeypatch.setattr(costing, "cost_plan", counted)
    found = check_file(path, targets=load_targets(parse_targets(["tpu:v5e:2x2"])))
    assert made == Counter({"tpu:v5e:2x2": 2})  # two programs, one plan each
    calls = _timed_runs(monkeypatch)
    to_json(path, found)
    assert calls == Counter()


def test_the_targets_of_all_programs_are_what_each_programs_own_make(checked):
    """``targets`` (every program) is merged from each program's own rendering: the same object
    as rendering all programs at once, and each program's entry its own variant."""
    path, found = checked
    inspections = found.inspections
    data = to_json(path, found)
    named = [(ins.function, f"the {ins.function} program", ins) for ins in inspections]
    assert data["targets"] == targets_json(named)
    assert list(data["targets"]["tpu:v5e:2x2"]) == list(targets_json(named)["tpu:v5e:2x2"])  # the keys' order too
    for ins, program in zip(inspections, data["programs"]):
        whole = data["targets"]["tpu:v5e:2x2"]
        own = program["targets"]["tpu:v5e:2x2"]
        assert own == {k: v for k, v in whole.items() if k != "variants"} | whole["variants"][ins.function]


def test_the_target_compilers_cost_analysis_is_listed_by_key(checked):
    """libtpu hands ``cost_analysis()`` over in another order in every process: the JSON lists it
    by key, so that two runs' ``--json`` compare byte for byte but for their timings."""
    path, found = checked
    data = to_json(path, found)
    for ins in found.inspections:
        (plan,) = ins.targets
        listed = list(data["targets"]["tpu:v5e:2x2"]["variants"][ins.function]["cost_analysis"])
        assert len(listed) > 2 and "flops" in listed
        assert listed == sorted(listed) == sorted(plan.cost)
