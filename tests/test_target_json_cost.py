"""``check --json`` with a target costs each target plan's collectives on the interconnect once per
figure it gives, not once per place the plan appears.

The JSON lists each program's plan on the target under the program and again under ``targets``
(all programs), and a plan's verdict, savings and step estimate each want the interconnect's time
of every collective's groups: on a Llama-shaped step over 256 chips that was 190,000 group costs
and most of the JSON's CPU time (``benchmarks/check_at_scale.py``). The count of
:func:`~shardscope.costmodel.collective_times.collectives_seconds_per_call` calls is the measure (a
timing would follow the machine's load). libtpu ships for Linux x86-64 only: elsewhere this skips.
"""

from __future__ import annotations

import platform
import sys
import textwrap
from collections import Counter

import pytest

from shardscope.costmodel import collective_times, savings
from shardscope.pipeline.check import check_file
from shardscope.render import check as render_check, targets as render_targets
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
    return path, found.inspections


def _costed_plans(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts each plan's :func:`collectives_seconds_per_call`, by the plan's identity, wherever the
    renderers call it from."""
    calls: Counter = Counter()
    real = collective_times.collectives_seconds_per_call

    def counted(plan):
        calls[id(plan)] += 1
        return real(plan)

    for module in (collective_times, savings, render_targets, render_check):
        if hasattr(module, "collectives_seconds_per_call"):
            monkeypatch.setattr(module, "collectives_seconds_per_call", counted)
    return calls


def test_the_json_costs_each_target_plan_once_per_figure(checked, monkeypatch):
    path, inspections = checked
    plans = [plan for ins in inspections for plan in ins.targets]
    assert len(plans) == 2 and all(plan.step is not None for plan in plans)  # a step estimate: both figures given
    calls = _costed_plans(monkeypatch)
    data = to_json(path, inspections)
    # each plan's interconnect_s_per_call and its step estimate's collectives: two figures, each costed once
    assert {id(plan): calls[id(plan)] for plan in plans} == {id(plan): 2 for plan in plans}
    for plan, (ins, program) in zip(plans, zip(inspections, data["programs"])):
        variant = data["targets"]["tpu:v5e:2x2"]["variants"][ins.function]
        assert variant["interconnect_s_per_call"] == collective_times.collectives_seconds_per_call(plan)
        assert variant["step_estimate"]["collectives_s"] == variant["interconnect_s_per_call"]
        assert program["targets"]["tpu:v5e:2x2"]["verdict"] == variant["verdict"]


def test_the_targets_of_all_programs_are_what_each_programs_own_make(checked):
    """``targets`` (every program) is merged from each program's own rendering: the same object
    as rendering all programs at once, and each program's entry its own variant."""
    path, inspections = checked
    data = to_json(path, inspections)
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
    path, inspections = checked
    data = to_json(path, inspections)
    for ins in inspections:
        (plan,) = ins.targets
        listed = list(data["targets"]["tpu:v5e:2x2"]["variants"][ins.function]["cost_analysis"])
        assert len(listed) > 2 and "flops" in listed
        assert listed == sorted(listed) == sorted(plan.cost)
