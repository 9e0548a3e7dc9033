"""One judged plan per compiler, rendered many ways: a target's rows, its summary sentence, the
JSON, the GitHub annotations and the exit status read the same judgement (``TargetPlan.rows``,
``.findings``, ``.moved``, ``.kept``; ``FileCheck.exit_status``), so they cannot disagree.

The programs are the disagreements seen before (issue 50, item 3), each checked against the
target's compiled module read here with a regular expression:

- XLA:GPU keeps 7 loop-invariant collective-permutes in a while loop that XLA:CPU hoists: the rows
  said ``loop_invariant``, the summary "keeps 7 collectives in a loop, needed there (as on the
  CPU)", and the exit status was 0. Now each is a finding, named, and the check fails.
- An FSDP all-gather of stacked layers (a layer scan in a micro-batch scan): XLA:TPU runs both of
  its all-gathers 16 times, in both loops, and the summary said they "leave the loop". Now it says
  the target keeps them there, needed by its own verdict, and that the CPU called them loop-invariant.
"""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from _gpu_plugin import needs_gpu_plugin
from test_interconnects import needs_libtpu

from shardscope.verdict_kinds import FLAGGED, LOOP_INVARIANT

PERMUTES = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))
    W = jax.ShapeDtypeStruct((8 * 16, 16), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    N = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))

    def local(w, n):
        def cond(carry):
            return carry[0] < n

        def body(carry):
            i, acc = carry
            for shift in range(1, 8):  # seven neighbours' blocks of w, the same in every iteration
                acc = acc + jnp.tanh(lax.ppermute(w, "x", [(j, (j + shift) % 8) for j in range(8)]) * i)
            return i + 1, acc

        return lax.while_loop(cond, body, (0, jnp.zeros_like(w)))[1]

    @shardscope.program(args=(W, N))
    @jax.jit
    def step(w, n):
        return jax.shard_map(local, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))(w, n)
''')

FSDP_LAYERS = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    WS = jax.ShapeDtypeStruct((4, 64, 64), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))
    XS = jax.ShapeDtypeStruct((4, 64, 64), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    def loss(ws, x):
        h, _ = lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)  # 4 layers
        return jnp.mean(h ** 2)

    @shardscope.program(args=(WS, XS))
    @jax.jit
    def step(ws, xs):
        g, _ = lax.scan(lambda g, x: (g + jax.grad(loss)(ws, x), None), jnp.zeros_like(ws), xs)  # 4 micro-batches
        return ws - 0.1 * g
''')


def _computations(text: str) -> dict[str, list[str]]:
    """Each computation of an HLO module's text by name (its instructions' lines)."""
    found: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{$", line)
        if head:
            name = head.group(1)
            found[name] = []
        elif line.startswith("}"):
            name = None
        elif name is not None:
            found[name].append(line)
    return found


def _loops_around(text: str, opcode: str) -> dict[str, int]:
    """``{collective: loops around it}`` of each ``opcode`` collective of ``text``, by its channel and
    its groups (the pieces of XLA:TPU's async chain share both; XLA:GPU's permutes share a channel,
    not their pairs): each computation's depth is its callers' plus one for a while loop's body,
    through fusions and async wrappers (``calls=``) too."""
    computations = _computations(text)
    calls = {name: [(m.group(2), m.group(1) == "body") for line in lines
                    for m in re.finditer(r"\b(calls|body|condition|to_apply)=%?([\w.\-]+)", line)]
             for name, lines in computations.items()}
    entry = next(name for name in computations if re.search(rf"^ENTRY %?{re.escape(name)} ", text, re.M))
    depth = {entry: 0}
    frontier = [entry]
    while frontier:
        caller = frontier.pop()
        for callee, is_body in calls.get(caller, []):
            if callee in computations and depth.get(callee, -1) < depth[caller] + is_body:
                depth[callee] = depth[caller] + is_body
                frontier.append(callee)
    found: dict[str, int] = {}
    for name, lines in computations.items():
        for line in lines:
            instruction = re.match(rf"^\s*(?:ROOT )?%?([\w.\-]+) = .*? {re.escape(opcode)}(?:-start)?\(", line)
            if instruction and name in depth:
                channel = re.search(r"channel_id=(\d+)", line)
                groups = re.search(r"(?:source_target_pairs|replica_groups)=(\{\{[^=]*?\}\}|\S+)", line)
                key = f"{channel.group(1)} {groups.group(1) if groups else ''}" if channel else instruction.group(1)
                found[key] = max(found.get(key, 0), depth[name])
    return found


def _modules(path, devices) -> tuple[str, str]:
    """The target's compiled module text and the CPU's, of the file's ``step``."""
    from shardscope.sources.loading import load_file
    from shardscope.targets.compile import compile_for_target

    program = load_file(path).functions["step"]
    traced = program.fn.trace(*program.spec.args)
    return compile_for_target(traced, devices, "step").hlo_text, traced.lower().compile().as_text()


def _check(shardscope_cli, path, target: str, *flags: str):
    return shardscope_cli("check", path, "--target", target, *flags)


@needs_gpu_plugin
def test_loop_invariant_permutes_xla_gpu_keeps_in_the_loop_are_findings_everywhere(tmp_path, shardscope_cli):
    from shardscope.pipeline.check import check_file
    from shardscope.targets.plans import load_targets, parse_targets

    path = tmp_path / "permutes.py"
    path.write_text(PERMUTES)
    devices = load_targets(parse_targets(["gpu:h100:8"]))
    gpu_text, cpu_text = _modules(path, devices[0])
    assert sorted(_loops_around(gpu_text, "collective-permute").values()) == [1] * 7  # XLA:GPU keeps all 7 in the loop
    assert sorted(_loops_around(cpu_text, "collective-permute").values()) == [0] * 7  # XLA:CPU hoists them
    checked = check_file(path, targets=devices)
    (ins,) = checked.inspections
    (plan,) = ins.targets

    # the rows: seven findings, each loop_invariant; the exit status fails on them
    findings = plan.findings
    assert len(findings) == 7 and {row.verdict_kind for row in findings} == {LOOP_INVARIANT}
    assert all(row.finding == (row.verdict_kind in FLAGGED) for row in plan.rows)
    assert checked.exit_status == 1 and plan.fails_check

    # every rendering says so
    data = json.loads(_check(shardscope_cli, path, "gpu:h100:8", "--json").stdout)
    variant = data["targets"]["gpu:h100:8"]["variants"]["step"]
    assert data["exit_code"] == 1 and len(variant["findings"]) == 7 and variant["fails_check"]
    assert sorted(c["name"] for c in variant["compiled_collectives"] if c["flagged"]) == sorted(variant["findings"])
    assert "7 collective-permutes of w (outside loops on the CPU) stay in" in variant["verdict"]
    assert "needed" not in variant["verdict"]
    text_run = _check(shardscope_cli, path, "gpu:h100:8")
    assert text_run.returncode == 1 and "check failed on gpu:h100:8: step" in text_run.stdout
    github = _check(shardscope_cli, path, "gpu:h100:8", "--format", "github")
    annotations = [line for line in github.stdout.splitlines() if "collective-permute stays in a loop" in line]
    assert github.returncode == 1 and len(annotations) == 7


@needs_libtpu
def test_an_all_gather_the_target_keeps_in_both_loops_is_never_said_to_leave_them(tmp_path, shardscope_cli):
    from shardscope.pipeline.check import check_file
    from shardscope.targets.plans import load_targets, parse_targets

    path = tmp_path / "fsdp_layers.py"
    path.write_text(FSDP_LAYERS)
    devices = load_targets(parse_targets(["tpu:v5e:2x4"]))
    tpu_text, _ = _modules(path, devices[0])
    assert sorted(_loops_around(tpu_text, "all-gather").values()) == [2, 2]  # both in the layer and micro-batch loops
    checked = check_file(path, targets=devices)
    (ins,) = checked.inspections
    (plan,) = ins.targets
    gathers = [t for t in plan.compiled.collectives if t.kind == "all-gather"]
    assert len(gathers) == 2 and all(t.executions == 4 * 4 and len(t.loops) == 2 for t in gathers)  # layers x micro-batches
    moved = {id(p) for p in plan.moved}
    for p in plan.comparison.placements:
        if p.collective.kind == "all-gather":
            assert id(p) not in moved  # it still runs in the loops its CPU verdict could leave

    data = json.loads(_check(shardscope_cli, path, "tpu:v5e:2x4", "--json").stdout)
    variant = data["targets"]["tpu:v5e:2x4"]["variants"]["step"]
    verdict = variant["verdict"]
    assert "all-gather of ws" in verdict and "leave the loop" not in verdict and "leaves the loop" not in verdict
    # ws is the same in every micro-batch (the outer scan only closes over it): each layer's gather, in the
    # layer loops of the forward and the backward pass, is loop-invariant in the micro-batch loop around them
    gathered = [c for c in variant["compiled_collectives"] if c["kind"] == "all-gather"]
    assert len(gathered) == 2 and all(c["verdict"] == LOOP_INVARIANT and c["flagged"] and len(c["loops"]) == 2
                                      for c in gathered)
    assert "stay in the loop at fsdp_layers.py:12 (loss) (4 iterations) and the loop at fsdp_layers.py:18 (step)" in verdict


@pytest.mark.parametrize("demo", ["linear", "rnn", "fsdp", "fsdp_accumulate", "gspmd_accumulate", "train_step"])
@needs_gpu_plugin
@needs_libtpu
def test_rows_json_and_exit_status_read_one_judgement(demo, shardscope_cli):
    """On every target plan of the demos: the collectives the JSON flags are the plan's findings,
    a plan fails exactly when it has one (or a partitioner's full rematerialization, or no room),
    and the exit status fails exactly when a plan does."""
    from _support import DEMOS

    result = shardscope_cli("check", DEMOS / f"{demo}.py", "--target", "tpu:v5e:2x4", "--target", "gpu:h100:8", "--json")
    data = json.loads(result.stdout)
    failing = False
    for entry in data["targets"].values():
        for variant in entry["variants"].values():
            flagged = sorted(c["name"] for c in variant["compiled_collectives"] if c["flagged"] and c["loops"])
            assert flagged == sorted(variant["findings"])
            fits = variant["fit"] is None or variant["fit"]["fits"] is not False  # no demo rematerializes
            assert variant["fails_check"] == bool(flagged or not fits)
            assert (" stay in " in variant["verdict"] or " stays in " in variant["verdict"]) == bool(flagged)
            failing |= variant["fails_check"]
    assert data["exit_code"] == result.returncode == (1 if failing else 0)
