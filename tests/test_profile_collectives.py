"""A step's collectives together, as a profile measured them (``MeasuredPlan.collectives_s``): the
time a device spends in collectives per call, never more than the step it is shown beside.

Two collectives whose slowest devices differ (a real profile on 8 CPU devices, each device slow
before another all-reduce), and two async all-reduces in flight at once (an accelerator's
start/done windows, written by hand): summing each collective's slowest device counted the
same time twice (8.13 ms of collectives in an 8.05 ms step, seen on the CPU). Every expected
number is derived in the test from the trace's events: on the CPU through XProf's own converter,
not shardscope's reader.
"""

from __future__ import annotations

import functools
import re
import statistics

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

from _profiles import module_calls
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.measured import profile_onto
from shardscope.measure.profile_capture import capture
from shardscope.measure.profile_read import ModuleRun, OpRun, Profile, read_profile

CALLS, DEVICES = 6, 8


def _imbalanced_step():
    """Two all-reduces; device 0 computes before the first, device 1 before the second, so each
    sum waits on another device and the device that waits longest differs between them."""
    mesh = Mesh(jax.devices()[:DEVICES], ("s",))

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("s")), out_specs=P())
    def step(w, x):
        i = lax.axis_index("s")

        def heavy(v):
            for _ in range(6):
                v = jnp.tanh(v @ w)
            return v

        a = lax.cond(i == 0, heavy, lambda v: v, x)
        b = lax.cond(i == 1, heavy, lambda v: v, lax.psum(a, "s") + x)
        return lax.psum(b, "s")

    return step, jnp.full((256, 256), 0.01), jnp.ones((DEVICES * 256, 256))


@pytest.fixture(scope="module")
def imbalanced_trace(tmp_path_factory):
    """The imbalanced step called CALLS times under jax.profiler, and its compiled module's text."""
    step, w, x = _imbalanced_step()
    compiled = step.lower(w, x).compile()
    folder = tmp_path_factory.mktemp("trace")
    capture({"step": lambda: compiled(w, x)}, CALLS, folder)
    return folder, compiled.as_text()


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """The time covered by ``intervals``, each instant once."""
    covered, end = 0.0, float("-inf")
    for begin, finish in sorted(intervals):
        covered += max(finish - max(begin, end), 0.0)
        end = max(end, finish)
    return covered


def _by_hand(folder, module: str, names: set[str]) -> tuple[float, float]:
    """From XProf's events of ``module``: per call (after the first), each device's time in the
    events named ``names`` (their union), the most of any device; and the step, each device from
    its first event's start to its last one's end, the slowest. Medians over the calls (us)."""
    calls = module_calls(folder, module)
    ordered = sorted(calls.values(), key=lambda c: min(e["ts"] for line in c.values() for e in line))
    collectives, steps = [], []
    for call in ordered[1:]:
        collectives.append(max(_union_us([(e["ts"], e["ts"] + e["dur"]) for e in line if e["name"] in names])
                               for line in call.values()))
        steps.append(max(max(e["ts"] + e["dur"] for e in line) - min(e["ts"] for e in line) for line in call.values()))
    return statistics.median(collectives), statistics.median(steps)


def test_collectives_whose_slowest_devices_differ_are_one_device_s_time(imbalanced_trace):
    pytest.importorskip("xprof")  # the hand count reads the trace with XProf's converter
    folder, text = imbalanced_trace
    names = set(re.findall(r"^\s*(?:ROOT )?%?([\w.\-]+) = \S+ all-reduce\(", text, re.M))
    assert len(names) == 2
    measured = profile_onto(compiled_plan(text), read_profile(folder))
    collectives_us, step_us = _by_hand(folder, "jit_step", names)
    assert measured.calls == CALLS and {c.name for c in measured.collectives} == names
    assert measured.collectives_s == pytest.approx(collectives_us * 1e-6, rel=1e-3)
    assert measured.step_s == pytest.approx(step_us * 1e-6, rel=1e-3)
    assert measured.collectives_s <= measured.step_s
    assert measured.collectives_overlapped_s == 0.0  # a CPU device runs its program on one thread


ASYNC_MODULE = """HloModule jit_step, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[1024], y: f32[1024]) -> (f32[1024], f32[1024], f32[1024]) {
  %x = f32[1024]{0} parameter(0)
  %y = f32[1024]{0} parameter(1)
  %ars.1 = f32[1024]{0} all-reduce-start(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  %ars.2 = f32[1024]{0} all-reduce-start(%y), channel_id=2, replica_groups={{0,1}}, to_apply=%add
  %fusion = f32[1024]{0} multiply(%x, %y)
  %ard.1 = f32[1024]{0} all-reduce-done(%ars.1)
  %ard.2 = f32[1024]{0} all-reduce-done(%ars.2)
  ROOT %t = (f32[1024]{0}, f32[1024]{0}, f32[1024]{0}) tuple(%ard.1, %ard.2, %fusion)
}
"""

# Each call, on each device's timeline (us from the module run's start; every run lasts 10 us):
#   device 0: ars.1 0-0.5 ... ard.1 7-8     (window 0-8)     fusion 2-6
#             ars.2 1-1.5 ... ard.2 8.5-9   (window 1-9)
#   device 1: ars.1 0-0.5 ... ard.1 2-3     (window 0-3)     fusion 4-7
#             ars.2 0.5-1 ... ard.2 9-9.5   (window 0.5-9.5)
# Per collective, slowest device: ars.1 8 us (device 0), ars.2 9 us (device 1): 17 us "in a 10 us
# step". Per device, the windows' union: device 0 0-9 = 9 us, device 1 0-9.5 = 9.5 us; the most
# is device 1's, 9.5 us, and the compute in it there is the fusion, 4-7 = 3 us. Device 0's
# fusion (4 us) is another device's and is not added.
_TIMELINE = {
    "tpu:0": [("ars.1", 0, 0.5), ("ars.2", 1, 0.5), ("fusion", 2, 4), ("ard.1", 7, 1), ("ard.2", 8.5, 0.5)],
    "tpu:1": [("ars.1", 0, 0.5), ("ars.2", 0.5, 0.5), ("ard.1", 2, 1), ("fusion", 4, 3), ("ard.2", 9, 0.5)],
}
RUN_US, ASYNC_CALLS = 10.0, 3


def _async_profile() -> Profile:
    """ASYNC_CALLS calls of ASYNC_MODULE on two accelerator devices, each laid out as _TIMELINE,
    100 us apart."""
    ops, runs = [], []
    for k in range(ASYNC_CALLS):
        at = 100.0 * k
        for device, line in _TIMELINE.items():
            runs.append(ModuleRun(device, "jit_step", "7", f"run{k}", at, RUN_US))
            ops += [OpRun(device, "jit_step", "7", f"run{k}", name, at + start, dur) for name, start, dur in line]
    return Profile("hand-made", ("",), tuple(ops), tuple(runs), platform="tpu", device_kind="TPU v5 Lite")


def test_async_collectives_in_flight_at_once_are_counted_once():
    measured = profile_onto(compiled_plan(ASYNC_MODULE), _async_profile())
    assert measured.calls == ASYNC_CALLS and measured.step_s == pytest.approx(RUN_US * 1e-6)
    assert {c.name: c.per_step_s for c in measured.collectives} == pytest.approx({"ars.1": 8e-6, "ars.2": 9e-6})
    assert measured.collectives_s == pytest.approx(9.5e-6)
    assert measured.collectives_overlapped_s == pytest.approx(3e-6)
    json = measured.to_json()
    assert (json["collectives_s"], json["collectives_overlapped_s"]) == pytest.approx((9.5e-6, 3e-6))
