"""Each target's interconnect: a compiled collective's time from its replica groups laid on the
machine, what deferring a finding saves there, and ``check --min-saving``.

Expected times are the formulas of docs/guides/interconnects.md applied here by hand: the bytes
from the shapes the programs below are written with, the devices a group spans from JAX's own
mesh layout over libtpu's or the CUDA plugin's devices (``mesh_utils.create_device_mesh``, as
``jax.make_mesh`` lays a mesh), the bandwidths and latencies from the cited figures written
out below (never read back from shardscope's tables).
"""

from __future__ import annotations

import json
import math
import re
import platform
import sys
import textwrap

import jax
import pytest
from jax.experimental import mesh_utils

from _gpu_plugin import needs_gpu_plugin
from _nccl_by_hand import BASE, NET, NVLINK, nvls_all_reduce, ring_all_reduce, tree_all_reduce
from shardscope.hardware.fabrics import torus_time
from shardscope.hardware.gpu_nodes import gpu_node
from shardscope.hardware.tpu_generations import generation_of
from shardscope.costmodel.savings import parse_min_saving
from shardscope.errors import SettingsError
from shardscope.targets import registry


_LINUX_X86 = sys.platform.startswith("linux") and platform.machine() == "x86_64"
needs_libtpu = pytest.mark.skipif(not _LINUX_X86, reason="libtpu ships for Linux x86-64 only")
needs_plugin = needs_gpu_plugin

# The cited figures (the machine records: shardscope/hardware/tpu_generations.py, gpu_nodes.py),
# written out for the hand derivations.
V5E_LINK = 4.5e10  # B/s one way per ICI link (scaling book, interconnect table)
V5P_LINK = 9e10
ICI_HOP = 1e-6  # s per ICI hop
H100_NVLINK = 450e9  # B/s one way per GPU (900 GB/s bidirectional), for the all-to-all
H100_NIC = 46e9  # B/s per 400 Gb/s port as NCCL reaches it: "46-48GB/s per NIC" (nccl-tests issue 290)
A100_NIC = 24e9  # 192 GB/s of all-reduce bus bandwidth over a DGX A100's 8 x 200 Gb/s (NVIDIA/nccl issue 812)
NET_STEP_SIMPLE = 14.0  # us: NCCL's tuner, one ring step on the network with Simple (tuning.cc hwLatencies)


def h100_one_host_all_reduce(size: int, n: int) -> float:
    """NCCL's fastest all-reduce on n H100 of one host (tests/_nccl_by_hand.py). Its search lays 12
    ring and tree channels of 30 GB/s (18 NVLinks x 20.6 = 370.8: 6 of 60, doubled) and n NVLS
    channels, each GPU carrying (n + 1) x speed: 40 GB/s for 8 (60 and 50 exceed 370.8), booked 60
    through the switch; 60 for 4 (5 x 60 = 300). Hopper's caps: LL 141, ring LL128 36.7 a channel,
    tree 38.7, tree LL128 36.7; NVLS efficiency 0.85."""
    nvls = {8: (40.0, 60.0), 4: (60.0, 60.0)}[n]
    return min(*ring_all_reduce(size, n, 1, 12, 30.0, 141.0, 36.7).values(),
               *tree_all_reduce(size, n, 1, 12, 30.0, 38.7, 141.0, 36.7).values(),
               nvls_all_reduce(size, n, n, *nvls, 0.85))

GRADIENT_BYTES = 1024 * 1024 * 4  # f32[1024,1024]

PSUMS = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("outer", "inner"))
    g = jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P()))

    def local(g):
        g = lax.pcast(g, ("outer", "inner"), to="varying")
        return lax.psum(jnp.sin(g), "inner"), lax.psum(jnp.cos(g), ("outer", "inner"))

    step = shardscope.program(args=(g,))(jax.jit(jax.shard_map(
        local, mesh=mesh, in_specs=P(), out_specs=(P("outer"), P()))))
''')


def _grid(target: str, shape: tuple[int, ...]):
    """The target's devices as JAX lays a mesh of ``shape`` over them."""
    devices = registry.load_target(registry.parse_target(target)).devices
    return mesh_utils.create_device_mesh(shape, devices=list(devices))


def _collectives_by_group_size(data: dict, target: str) -> dict[int, dict]:
    (program,) = data["programs"]
    found = {}
    for c in program["targets"][target]["compiled_collectives"]:
        found[c["interconnect"]["devices"]] = c
    return found


@needs_libtpu
def test_an_all_reduce_of_a_4_mib_gradient_on_a_v5e_slice_costs_the_torus_formula(tmp_path, shardscope_cli):
    """tpu:v5e:2x4, a (2, 4) mesh: the psum over ``inner`` runs on 4 chips, the one over both on
    all 8. A v5e axis wraps only when it has 16 chips: every axis here is a line, one way at
    4.5e10 B/s per link. All-reduce = reduce-scatter + all-gather:
    max(2 alpha * hops, 2 (n-1)/n * S / sum of the spanned axes' links)."""
    path = tmp_path / "psums.py"
    path.write_text(PSUMS)
    result = shardscope_cli("check", path, "--target", "tpu:v5e:2x4", "--json")
    assert result.returncode == 0, result.stderr
    by_size = _collectives_by_group_size(json.loads(result.stdout), "tpu:v5e:2x4")
    grid = _grid("tpu:v5e:2x4", (2, 4))
    for n, chips in ((4, [d.coords for d in grid[0, :]]), (8, [d.coords for d in grid.flat])):
        spans = [len({c[axis] for c in chips}) for axis in range(3) if len({c[axis] for c in chips}) > 1]
        hops = sum(k - 1 for k in spans)  # lines: k - 1 hops end to end
        links = V5E_LINK * len(spans)  # one link one way per spanned axis
        expected = max(2 * hops * ICI_HOP, 2 * (n - 1) / n * GRADIENT_BYTES / links)
        timed = by_size[n]
        assert timed["kind"] == "all-reduce" and timed["bytes"] == GRADIENT_BYTES
        assert timed["interconnect"]["seconds_per_run"] == pytest.approx(expected, rel=1e-12)
    # JAX lays a row of the (2, 4) mesh on a 2x2 square of chips: two axes of 2 chips, two links
    # at once, 2 hops; bandwidth-bound at 70 us (a line of 4 chips would take twice that)
    assert by_size[4]["interconnect"]["seconds_per_run"] == pytest.approx(2 * 3 / 4 * GRADIENT_BYTES / (2 * V5E_LINK))


@needs_plugin
def test_the_same_all_reduces_on_two_hosts_of_four_h100s_take_nccls_choice_in_a_host_and_across(
        tmp_path, shardscope_cli):
    """gpu:h100:2x4: ``inner`` is the 4 GPUs of one host (NVLink): NCCL's ring with LL128,
    min(0.92 x 12 x 30, 12 x 36.7) x 4/6 GB/s and 14 + 6 x 1.9 us, beats its NVLS on 4 GPUs (4 x
    min(60 x 0.85 x 3/4 x 2, 60) = 240 GB/s). Both axes span the 2 hosts: a group of 8, 4 per host
    on their 4 ports; NCCL's tree with LL128 at 4 MiB (its derivation: tests/test_nccl.py,
    test_the_tree_is_costed_with_its_correction_for_the_size)."""
    path = tmp_path / "psums.py"
    path.write_text(PSUMS)
    result = shardscope_cli("check", path, "--target", "gpu:h100:2x4", "--json")
    assert result.returncode == 0, result.stderr
    by_size = _collectives_by_group_size(json.loads(result.stdout), "gpu:h100:2x4")
    grid = _grid("gpu:h100:2x4", (2, 4))
    assert len({tuple(d.coords[:2]) for d in grid[0, :]}) == 1  # a row is one host's GPUs
    S = GRADIENT_BYTES
    assert by_size[4]["interconnect"]["seconds_per_run"] == pytest.approx(h100_one_host_all_reduce(S, 4), rel=1e-12)
    assert by_size[4]["interconnect"]["seconds_per_run"] == pytest.approx(
        ring_all_reduce(S, 4, 1, 12, 30.0, 141.0, 36.7)["LL128"], rel=1e-12)
    assert by_size[4]["interconnect"]["algorithm"] == "NCCL ring (LL128) over NVLink"
    across = min(*tree_all_reduce(S, 8, 2, 8, 48.0, 41.4, 39.0, 36.7).values(),
                 *ring_all_reduce(S, 8, 2, 8, 24.0, 39.0, 36.7).values())
    assert by_size[8]["interconnect"]["seconds_per_run"] == pytest.approx(across, rel=1e-12)
    assert by_size[8]["interconnect"]["algorithm"] == "NCCL tree (LL128) over NVLink and 4 network ports per host (2 hosts)"


def test_an_all_to_all_across_hosts_cannot_pool_the_ports():
    """nccl-tests issue 267: 'Alltoall cannot aggregate the bandwidth of multiple NICs': each GPU
    sends its share for the other host, S (n - g) / n, over its own port (plus one Simple step
    on the network, 14 us)."""
    node = gpu_node("h100")
    assert node is not None
    group = [(0, host, gpu) for host in range(2) for gpu in range(8)]
    payload = 2**28
    timed = node.fabric.time("all_to_all", payload, group, (1, 2, 8))
    expected = max(payload * 7 / 16 / H100_NVLINK, payload * 8 / 16 / H100_NIC) + NET_STEP_SIMPLE * 1e-6
    assert timed.seconds == pytest.approx(expected, rel=1e-12)


@needs_libtpu
@pytest.mark.parametrize(("topology", "group_chips", "wraps"), [
    ("v5e:16x16", 16, True),  # a whole axis of the 16x16 pod: a ring
    ("v5e:4x4", 4, False),  # a smaller slice has no wraparound links
    ("v5p:4x4x4", 4, True),  # a whole 4x4x4 cube: the optical switches close every axis
    ("v5p:2x2x2", 2, False),
])
def test_a_torus_axis_is_a_ring_only_where_the_slice_has_wraparound_links(topology, group_chips, wraps):
    """An all-reduce over one axis of the slice (libtpu's chips in JAX's layout): on a ring the
    data goes both ways (2 links' worth) in floor(k/2) hops; on a line one way in k - 1 hops."""
    devices = registry.load_target(registry.parse_target(f"tpu:{topology}"))
    shape = tuple(int(n) for n in topology.split(":")[1].split("x"))
    grid = mesh_utils.create_device_mesh(shape, devices=list(devices.devices))
    row = [tuple(d.coords) for d in grid.reshape(-1, shape[-1])[0]]
    assert len(row) == group_chips
    generation = generation_of(devices.device_kind, topology)
    assert generation is not None
    fabric = generation.ici
    slice_shape = tuple(max(d.coords[axis] for d in devices.devices) + 1 for axis in range(3))
    assert any(fabric.wraps(slice_shape)) == wraps
    link = {"v5e": 4.5e10, "v5p": 9e10}[topology.split(":")[0]]
    k = group_chips
    bandwidth, hops = (2 * link, k // 2) if wraps else (link, k - 1)
    expected = max(2 * hops * ICI_HOP, 2 * (k - 1) / k * GRADIENT_BYTES / bandwidth)
    timed = torus_time("psum", GRADIENT_BYTES, row, fabric, slice_shape, fabric.wraps(slice_shape))
    assert timed.seconds == pytest.approx(expected, rel=1e-12)
    assert ("ring" in timed.algorithm) == wraps


SIZES = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    MICRO, FEATURES = 4, 1024
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    W = jax.ShapeDtypeStruct((FEATURES, FEATURES), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((MICRO, 64, FEATURES), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))


    def loss(W, xb):
        return jnp.mean(jnp.tanh(xb @ W) ** 2)


    @shardscope.program(args=(W, x))
    @jax.jit
    def small(W, x):
        def body(total, xb):
            return total + loss(W, xb), None
        total, _ = lax.scan(body, jnp.zeros(()), x)
        return total


    @shardscope.program(args=(W, x))
    @jax.jit
    def large(W, x):
        def body(acc, xb):
            grads = jax.vmap(jax.grad(loss), in_axes=(None, 0))(W, xb[:, None, :])
            return acc + jnp.mean(grads, axis=0), None
        acc, _ = lax.scan(body, jnp.zeros_like(W), x)
        return acc
''')
"""``small`` adds a 4-byte loss scalar per micro-batch, ``large`` a 4 MiB gradient (the mean of
per-example gradients): XLA:GPU keeps both all-reduces in the loop (each is divided after the
sum, which its code motion does not move)."""

MICRO = 4


def _all_reduce_on_8_h100s(size: int) -> float:
    return h100_one_host_all_reduce(size, 8)


@needs_plugin
def test_min_saving_fails_only_on_the_finding_that_saves_that_much(tmp_path, shardscope_cli):
    """Deferring one of 4 runs per call leaves 1: 3 runs of the all-reduce saved, each NCCL's
    choice on 8 H100s. The scalar saves ~45 us (latency: the ring with LL), the gradient ~121 us
    (NVLS): --min-saving 100us
    fails on the gradient only; without it both fail, as before."""
    path = tmp_path / "sizes.py"
    path.write_text(SIZES)
    default = shardscope_cli("check", path, "--target", "gpu:h100:8", "--json")
    assert default.returncode == 1, default.stderr
    data = json.loads(default.stdout)
    assert data["exit_code"] == 1 and "min_saving" not in data
    targets = {p["function"]: p["targets"]["gpu:h100:8"] for p in data["programs"]}
    expected = {"small": (4, 3 * _all_reduce_on_8_h100s(4)),
                "large": (GRADIENT_BYTES, 3 * _all_reduce_on_8_h100s(GRADIENT_BYTES))}
    for function, (size, saved) in expected.items():
        (saving,) = targets[function]["savings"]
        assert (saving["bytes_per_run"], saving["runs_per_call"], saving["runs_after"]) == (size, MICRO, 1)
        assert saving["seconds_per_step"] == pytest.approx(saved, rel=1e-12)
        # The share is of the step estimate's upper bound back to back (as a training loop
        # dispatches calls): compute, memory and every collective's time on the interconnect, none
        # of it hidden, without the waited-on call's overhead.
        step = targets[function]["step_estimate"]
        assert step["collectives_s"] == pytest.approx(targets[function]["interconnect_s_per_call"])
        assert step["upper_s"] == pytest.approx(step["seconds"] + step["collectives_s"])
        assert step["dispatched_upper_s"] == pytest.approx(step["dispatched_s"] + step["collectives_s"])
        assert saving["step_s"] == pytest.approx(step["dispatched_upper_s"])
        assert saving["share_of_step"] == pytest.approx(saved / step["dispatched_upper_s"])
    assert expected["small"][1] < 100e-6 <= expected["large"][1]
    shares = {function: targets[function]["savings"][0]["share_of_step"] for function in expected}
    assert shares["small"] < shares["large"]  # ~47% and ~50%: a share between the two fails on the large one alone
    between = f"{100 * (shares['small'] + shares['large']) / 2:.6f}%"
    by_share = json.loads(shardscope_cli("check", path, "--target", "gpu:h100:8", "--json",
                                         "--min-saving", between).stdout)
    assert [(f["function"], f["target"]) for f in by_share["below_min_saving"]] == [("small", "gpu:h100:8")]

    filtered = shardscope_cli("check", path, "--target", "gpu:h100:8", "--json", "--min-saving", "100us")
    assert filtered.returncode == 1, filtered.stderr
    data = json.loads(filtered.stdout)
    assert data["min_saving"]["seconds"] == pytest.approx(100e-6)
    assert [(f["function"], f["target"]) for f in data["below_min_saving"]] == [("small", "gpu:h100:8")]

    only_small = shardscope_cli("check", path, "-f", "small", "--target", "gpu:h100:8", "--min-saving", "100us")
    assert only_small.returncode == 0, only_small.stderr
    text = " ".join(only_small.stdout.split())
    assert "saves less than --min-saving 100us per step (~45 us): not counted." in text
    assert "check passed on gpu:h100:8" in text
    assert shardscope_cli("check", path, "-f", "small", "--target", "gpu:h100:8").returncode == 1  # the default
    assert shardscope_cli("check", path, "-f", "small", "--target", "gpu:h100:8",
                          "--min-saving", "1ms").returncode == 0
    annotations = shardscope_cli("check", path, "--target", "gpu:h100:8", "--format", "github", "--min-saving", "100us")
    (line,) = [line for line in annotations.stdout.splitlines() if line.startswith("::error")]
    assert "(large)" in line and f"It moves {GRADIENT_BYTES:,} B per run, 4 runs per call" in line


@needs_plugin
def test_a_gpu_verdict_on_a_scalar_left_in_the_loop_gives_its_bytes(tmp_path, shardscope_cli):
    """Issue 39 item 10: the verdict says how much the 4-byte scalar moves and what deferring it saves."""
    path = tmp_path / "sizes.py"
    path.write_text(SIZES)
    result = shardscope_cli("check", path, "-f", "small", "--target", "gpu:h100:8")
    text = " ".join(result.stdout.split())
    assert "the deferral is worth writing. Its all-reduce of out moves 4 B per run, 4 runs per call; deferring it " \
           "saves ~45 us per step on gpu:h100:8, " in text
    # the share says what it is of: the serialized upper bound, which overlap may undercut
    assert re.search(r"saves ~45 us per step on gpu:h100:8, \d+% of the step's upper bound back to back \(serialized; "
                     r"overlap may hide it\)\.", text)


@needs_plugin
@pytest.mark.parametrize(("args", "message"), [
    (("--min-saving", "1ms"), "no --target was given"),
    (("--target", "gpu:h100:8", "--min-saving", "5 parsecs"), "is not a unit of time"),
])
def test_min_saving_refusals_are_one_message(tmp_path, shardscope_cli, args, message):
    path = tmp_path / "sizes.py"
    path.write_text(SIZES)
    result = shardscope_cli("check", path, "-f", "small", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("text", "seconds", "share"), [
    ("1ms", 1e-3, None), ("50us", 50e-6, None), ("0.2s", 0.2, None), ("250ns", 250e-9, None),
    ("1%", None, 0.01), ("2.5 %", None, 0.025),
])
def test_min_saving_reads_a_time_or_a_share(text, seconds, share):
    threshold = parse_min_saving(text)
    assert threshold.share == share
    assert (threshold.seconds is None) == (seconds is None)
    if seconds is not None:
        assert threshold.seconds == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["-1ms", "150%", "fast", "1 ms%", "inf"])
def test_min_saving_refuses_what_is_neither(text):
    with pytest.raises(SettingsError):
        parse_min_saving(text)


def test_presets_targets_lists_each_machines_interconnect_with_its_sources(shardscope_cli):
    result = shardscope_cli("presets", "--targets", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["target"]: row for row in json.loads(result.stdout)}
    assert {"tpu:v5e:...", "tpu:v5p:...", "tpu:v4:...", "tpu:v6e:...", "gpu:h100:HOSTSxDEVICES"} <= set(rows)
    assert rows["tpu:v5e:..."]["bandwidth_Bps"] == V5E_LINK and rows["gpu:h100:HOSTSxDEVICES"]["network_Bps"] == H100_NIC
    assert all("https://" in row["source"] and "latency" in row["source"] for row in rows.values())


@needs_libtpu
def test_the_report_puts_each_plans_compiled_collectives_on_the_targets_own_interconnect(shardscope_cli):
    """linear on tpu:v5e:2x4: the naive plan's one all-reduce (of params: f32[5], 20 B) runs
    once per call over all 8 chips, which span an axis of 2 chips and one of 4, lines both
    (no v5e axis of 16): 1 + 3 hops, twice (reduce-scatter + all-gather) at 1 us each = 8 us;
    the bytes take 2 (7/8) 20 / (2 x 4.5e10) s, under a nanosecond: latency-bound."""
    bandwidth_s = 2 * 7 / 8 * 20 / (2 * V5E_LINK)
    assert bandwidth_s < 8e-6
    result = shardscope_cli("report", "linear", "--target", "tpu:v5e:2x4", "-r", "1", "--json")
    assert result.returncode == 0, result.stderr
    target = json.loads(result.stdout)["targets"]["tpu:v5e:2x4"]
    assert target["interconnect"]["description"] == "ICI of a v5e 2x4 slice (wraparound on no axis)"
    assert target["variants"]["naive"]["interconnect_s_per_call"] == pytest.approx(8e-6, rel=1e-12)
    text = " ".join(shardscope_cli("report", "linear", "--target", "tpu:v5e:2x4", "-r", "1").stdout.split())
    assert ("tpu:v5e:2x4's compiled collectives on its own interconnect (ICI of a v5e 2x4 slice (wraparound on no "
            "axis)): naive 8 us/call") in text


@needs_plugin
def test_findings_that_share_one_instruction_share_its_saving_by_their_bytes(shardscope_cli):
    """fsdp's naive plan on gpu:h100:2x4: XLA:GPU combines the gradients of w1 (f32[64,256],
    65,536 B) and w2 (f32[256,16], 16,384 B) into one reduce-scatter that stays in the chunk loop
    (2 iterations). Both are findings: deferring both takes the instruction out, 1 of its 2 runs
    saved, each NCCL's ring reduce-scatter over 8 GPUs on 2 hosts (7 steps, 1 between the hosts;
    (7/8) T over the group's 4 ports per host, at its fastest protocol); each finding's part is
    its share of the instruction's bytes."""
    w1, w2 = 64 * 256 * 4, 256 * 16 * 4
    result = shardscope_cli("report", "fsdp", "--target", "gpu:h100:2x4", "--json", "-r", "1")
    assert result.returncode == 0, result.stderr
    savings = {s["values"]: s for s in result_savings(json.loads(result.stdout), "gpu:h100:2x4", "naive")}
    # NCCL's ring channels for 4 GPUs a host: one 48 GB/s channel per port, doubled to 8 x 24
    # (tests/test_nccl.py); LL half of 192 under its cap of 39 (Intel, 2 hosts), LL128 0.92 x 192
    # under 8 x 36.7; the bus bandwidth times 8/7, (7/8) T moved; latency base + 6 x max(NVLink
    # step, 1 us of CPU overhead, 3 for Simple) + 1 network step
    bus = {"LL": min(39.0, 0.5 * 192), "LL128": min(0.92 * 192, 8 * 36.7), "Simple": 192.0}
    one_run = min(1e-6 * (BASE["ring"][i] + 6 * max(NVLINK["ring"][i], 3.0 if p == "Simple" else 1.0) + NET["ring"][i])
                  + 7 / 8 * (w1 + w2) / (bus[p] * 1e9) for i, p in enumerate(("LL", "LL128", "Simple")))
    assert savings["grad(params['w1'])"]["bytes_per_run"] == w1 and savings["grad(params['w2'])"]["bytes_per_run"] == w2
    assert savings["grad(params['w1'])"]["seconds_per_step"] == pytest.approx(one_run * w1 / (w1 + w2), rel=1e-12)
    assert savings["grad(params['w2'])"]["seconds_per_step"] == pytest.approx(one_run * w2 / (w1 + w2), rel=1e-12)


def result_savings(data: dict, target: str, plan: str) -> list[dict]:
    return data["targets"][target]["variants"][plan]["savings"]


@needs_plugin
def test_with_a_step_estimate_a_saving_is_a_share_of_the_step_and_min_saving_takes_a_percentage(tmp_path):
    """The step estimate joins through ``saving_of(plan, p, interconnect, step_s)``: the large
    gradient's ~121 us saving is 12% of a 1 ms step, which a 10% threshold counts and a 20% one does not."""
    from shardscope.engine.hlo.costing import interconnect_of, saving_of
    from shardscope.engine.hlo.plan_costs import MinSaving
    from shardscope.pipeline.one_program import inspect_on
    from shardscope.sources.loading import load_file

    path = tmp_path / "sizes.py"
    path.write_text(SIZES)
    large = load_file(path).functions["large"]
    (plan,) = inspect_on("gpu:h100:8", large.fn, large.spec.args, large.spec.kwargs).targets
    (finding,) = plan.staying_findings
    saving = saving_of(plan, finding, interconnect_of(plan), step_s=1e-3)
    saved = 3 * _all_reduce_on_8_h100s(GRADIENT_BYTES)
    assert saving.share_of_step == pytest.approx(saved / 1e-3, rel=1e-12)
    assert saving.words().endswith(f"per step on gpu:h100:8, {saved / 1e-3:.0%} of the step's upper bound back "
                                   "to back (serialized; overlap may hide it)")
    assert saving.to_json()["share_is"].startswith("of the step's serialized upper bound")
    assert MinSaving("10%", share=0.10).counts(saving) and not MinSaving("20%", share=0.20).counts(saving)


def test_a_torus_all_to_all_moves_the_whole_array_a_quarter_ring_away():
    """An all-to-all over a ring of 16 v5e chips (the 16x16 pod's axis, which wraps), each chip
    holding S bytes: chip i sends S/16 to each of the 15 others, each the shorter way round,
    1, 1, 2, 2, ..., 7, 7, 8 hops (64 in all). The ring's 2 x 16 directed links carry
    16 x (S/16) x 64 byte-hops, at 4.5e10 B/s one way per link (the scaling book's v5e ICI
    figure): 2 S / W, the scaling book's all-gather over a bidirectional ring, V / W_bidi = 16 S /
    (2W), over 4. Never less than what one chip injects: 15/16 S over its two links."""
    link, chips, payload = 4.5e10, 16, 16 * 2**20
    row = [(x, 0, 0) for x in range(chips)]
    generation = generation_of("TPU v5 lite", "v5e:16x16")
    assert generation is not None
    fabric = generation.ici
    slice_shape = (16, 16, 1)
    distances = sum(min(d, chips - d) for d in range(1, chips))
    assert distances == 64
    byte_hops = chips * (payload / chips) * distances
    expected = byte_hops / (2 * chips) / link
    assert expected == pytest.approx(chips * payload / (2 * link) / 4)  # the scaling book's V / W_bidi / 4
    timed = torus_time("all_to_all", payload, row, fabric, slice_shape, fabric.wraps(slice_shape))
    assert timed.bandwidth_s == pytest.approx(expected, rel=1e-12)
    assert timed.bandwidth_s >= (chips - 1) / chips * payload / (2 * link)  # what one chip sends out


def test_an_all_to_all_on_a_3d_torus_loads_each_axis_with_its_share():
    """Issue 44: an MoE dispatch (1 GiB per chip) over all 64 chips of tpu:v5p:4x4x4 (a whole
    cube: every axis a ring of 4) took the time of one ring of 64 chips, 31.3 ms. Routed one
    axis at a time, the bytes on axis d are the ones whose destination differs there: each chip
    sends S/64 to 16 chips at each coordinate of the axis, 0, 1, 2, 1 hops away (4 in all), so
    the axis carries 64 x 16 x (S/64) x 4 = 64 S byte-hops over its 2 x 64 directed links of
    9e10 B/s: S / (2 W), ~6 ms. The three axes' links run at once."""
    generation = generation_of("TPU v5", "v5p:4x4x4")
    assert generation is not None and generation.ici.link_Bps == V5P_LINK
    cube = [(x, y, z) for x in range(4) for y in range(4) for z in range(4)]
    payload = 2**30
    per_axis = 64 * 16 * (payload / 64) * (0 + 1 + 2 + 1) / (2 * 64) / V5P_LINK
    timed = torus_time("all_to_all", payload, cube, generation.ici, (4, 4, 4), generation.ici.wraps((4, 4, 4)))
    assert timed.bandwidth_s == pytest.approx(per_axis, rel=1e-12)
    assert timed.seconds == pytest.approx(payload / (2 * V5P_LINK), rel=1e-12)
    assert 5.5e-3 < timed.seconds < 6.5e-3
    one_ring_of_64 = 63 / 64 * 64 * payload / (3 * 2 * V5P_LINK) / 4  # what it was costed at
    assert one_ring_of_64 == pytest.approx(31.3e-3, rel=1e-3)


def test_an_all_to_all_on_lines_is_bound_by_the_middle_link_of_the_longest():
    """tpu:v5e:2x4 has no wraparound: a group of all 8 chips spans a line of 2 and a line of 4.
    On a line of k the middle link carries, one way, (k/2 chips) x (k/2 coordinates) x S/k:
    S/2 / W for k = 2 and S / W for k = 4; the slowest axis sets the time, 1.75x under the
    former cost (the whole group as one line: 7/8 x 8 S / (2 x 2 W))."""
    generation = generation_of("TPU v5 lite", "v5e:2x4")
    assert generation is not None
    group = [(x, y, 0) for x in range(2) for y in range(4)]
    payload = 2**26
    timed = torus_time("all_to_all", payload, group, generation.ici, (2, 4, 1), generation.ici.wraps((2, 4, 1)))
    middle_of_4 = 2 * 2 * payload / 4 / V5E_LINK
    assert timed.bandwidth_s == pytest.approx(middle_of_4, rel=1e-12)
    former = 7 / 8 * 8 * payload / (2 * V5E_LINK) / 2
    assert former / timed.bandwidth_s == pytest.approx(1.75)


TENSOR_PARALLEL = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
    L, D, H, MB, B = 3, 64, 256, 4, 32
    params = {"w_in": jax.ShapeDtypeStruct((L, D, H), jnp.float32, sharding=NamedSharding(mesh, P(None, None, "model"))),
              "w_out": jax.ShapeDtypeStruct((L, H, D), jnp.float32, sharding=NamedSharding(mesh, P(None, "model", None))),
              "ln": jax.ShapeDtypeStruct((L, D), jnp.float32, sharding=NamedSharding(mesh, P()))}
    xs = jax.ShapeDtypeStruct((MB, B, D), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    def forward(p, x):
        def layer(h, w):
            return h + jax.nn.gelu((h * w["ln"]) @ w["w_in"]) @ w["w_out"], None
        h, _ = lax.scan(layer, x, p)
        return jnp.mean(h ** 2)

    @shardscope.program(args=(params, xs))
    @jax.jit
    def step(p, xs):
        def micro_batch(acc, x):
            return jax.tree.map(jnp.add, acc, jax.grad(forward)(p, x)), None
        g, _ = lax.scan(micro_batch, jax.tree.map(jnp.zeros_like, p), xs)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)
''')


@needs_libtpu
def test_a_finding_the_target_splits_over_two_instructions_gives_each_ones_bytes_and_runs(tmp_path):
    """The CPU sums the three gradients over data in one all-reduce, 12 runs (4 micro-batches x 3
    layers); XLA:TPU keeps w_in's and w_out's in both loops (each device's shards: 64 x 128 and
    128 x 64 f32, 65,536 B per run, 12 runs) and moves ln's (3 x 64 f32, 768 B) out of the layer
    loop (4 runs; jax 0.12's XLA moves it out of both). No run moves 65,536 + 768 B."""
    from shardscope.pipeline.check import check_file
    from shardscope.targets.plans import load_targets, parse_targets

    path = tmp_path / "tensor_parallel.py"
    path.write_text(TENSOR_PARALLEL)
    (ins,) = check_file(path, targets=load_targets(parse_targets(["tpu:v5e:2x4"]))).inspections
    (plan,) = ins.targets
    assert plan.costs is not None
    (saving,) = plan.costs.savings.values()  # costed where the plan was made
    w_shards, ln = 2 * 64 * (256 // 2) * 4, 3 * 64 * 4
    ln_in_loop = any(c.in_loop and c.bytes_per_execution == ln for c in plan.compiled.collectives)
    expected = [(ln, 4), (w_shards, 12)] if ln_in_loop else [(w_shards, 12)]
    assert sorted((size, runs) for _, size, runs in saving.parts) == expected
    words = saving.words()
    assert f"{w_shards + ln:,} B per run" not in words and "16 runs" not in words
    assert f"{w_shards:,} B per run, 12 runs per call" in words
    assert (f"{ln:,} B per run, 4 runs per call" in words) == ln_in_loop


@needs_plugin
def test_github_annotations_name_every_collective_the_target_keeps_in_a_loop_without_need(tmp_path):
    """--format github is read by CI instead of the text: each target collective whose own
    verdict flags it in a loop (what fails the check) is in an annotation, also one that carries
    no CPU collective's value (XLA:GPU's own sum of w_in's and w_out's gradients under jax 0.10,
    which failed the check with no annotation at all)."""
    from shardscope.pipeline.check import check_file
    from shardscope.render.github import workflow_commands
    from shardscope.targets.plans import load_targets, parse_targets

    path = tmp_path / "tensor_parallel.py"
    path.write_text(TENSOR_PARALLEL)
    checked = check_file(path, targets=load_targets(parse_targets(["gpu:h100:8"])))
    (ins,) = checked.inspections
    (plan,) = ins.targets
    flagged = [t.name for t in plan.compiled.collectives if t.in_loop and t.verdict.flagged]
    assert flagged and checked.exit_status == 1
    text = "\n".join(workflow_commands(path, checked, cwd=tmp_path))
    for name in flagged:
        assert re.search(re.escape(name) + r"(?![.\d])", text), (name, text)


def test_v5es_one_ici_model_matches_the_scaling_books_measured_all_gather():
    """The scaling book (sharding chapter, pop quiz 2) profiles an all-gather over the 4-chip axis
    of a v5e {'X': 8, 'Y': 4} mesh (no wraparound: a line), bf16[512, 8192] per chip: 680 us
    measured. The torus's line all-gather, (n-1)/n x n S / W at 4.5e10 B/s one way, gives 559 us,
    0.82x of it, inside 0.8-1.25x; a ring at 200 GB/s per chip (Google's 400 GB/s bidirectional,
    halved) would give 3/4 x 4 S / 2e11 + 3 x 1 us = 129 us, 5x too fast."""
    generation = generation_of("TPU v5 lite", "v5e:8x4")
    assert generation is not None
    line = [(0, y, 0) for y in range(4)]
    per_chip = 512 * 8192 * 2
    timed = torus_time("all_gather", per_chip, line, generation.ici, (8, 4, 1), generation.ici.wraps((8, 4, 1)))
    expected = max(3 * ICI_HOP, 3 / 4 * 4 * per_chip / V5E_LINK)
    assert timed.seconds == pytest.approx(expected, rel=1e-12)
    measured = 680e-6
    assert 0.8 <= timed.seconds / measured <= 1.25
    flat_ring = 3 / 4 * 4 * per_chip / 200e9 + 3 * 1e-6
    assert measured / flat_ring > 5


def test_a_groups_torus_lines_hold_every_link_a_route_between_its_chips_takes():
    """Two chips on a diagonal of a 3-D torus: the route from (0,0,0) to (1,1,1), one axis after
    another, turns at (1,0,0) and (1,1,0), on the line along y through x=1, z=0, which neither chip
    is on; a collective of (1,0,0) and (1,1,0) uses that link, so the two share it. On a 2-D torus,
    and for a group that is a whole box, the lines are those through its own chips."""
    from shardscope.hardware.fabrics import torus_lines

    diagonal = torus_lines([(0, 0, 0), (1, 1, 1)])
    assert (1, (1, 0)) in diagonal  # along y (axis 1) at x=1, z=0: the route's second hop
    assert diagonal & torus_lines([(1, 0, 0), (1, 1, 0)])
    # a box: each line through its own chips, nothing more
    assert torus_lines([(0, 0), (0, 1), (1, 0), (1, 1)]) == {(0, (0,)), (0, (1,)), (1, (0,)), (1, (1,))}
    # disjoint rows of a 2-D torus share nothing
    assert not torus_lines([(0, 0), (0, 1)]) & torus_lines([(1, 0), (1, 1)])
    assert torus_lines([(0, 0)]) == frozenset() and torus_lines([]) == frozenset()
