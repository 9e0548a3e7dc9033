"""The words of a verdict say why: weight decay added into the accumulator, a user's own exception
at trace time, a collective a target keeps in its loop, two unnamed collectives told apart.

Programs are written as users write them; expected words are derived here from what the program
does (the decay term is added in the loop body; the exception is raised on the user's line).
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import _what_if_programs as wp
from _tpu_text import all_reduces
import shardscope
from shardscope.engine.hlo.compiled import compiled_plan
from shardscope.engine.hlo.target_plan import compare_plans
from shardscope.render import targets as target_words

ADDED = "Something else is added into the accumulator"


def test_weight_decay_added_into_the_accumulator_is_the_reason_under_jit():
    mesh = Mesh(np.array(jax.devices()[:4]), ("dp",))
    params = jax.device_put({"w1": jnp.full((16, 32), 0.1), "w2": jnp.full((32, 4), 0.1)}, NamedSharding(mesh, P()))
    xs = jax.device_put(jnp.ones((4, 32, 16)), NamedSharding(mesh, P(None, "dp")))

    def loss_fn(params, x):
        return jnp.mean((jnp.tanh(x @ params["w1"]) @ params["w2"]) ** 2)

    @jax.jit
    def step(params, xs):
        def body(acc, x):
            g = jax.grad(loss_fn)(params, x)
            return jax.tree.map(lambda a, g, p: a + g + 1e-4 * p, acc, g, params), None  # weight decay

        return jax.lax.scan(body, jax.tree.map(jnp.zeros_like, params), xs)[0]

    text = step.lower(params, xs).compile().as_text()
    assert "all-reduce(" in text
    (c,) = shardscope.inspect(step, params, xs).compiled.collectives
    assert c.in_loop and c.verdict.kind == "needed"
    assert c.verdict.reason.startswith(ADDED) and "read inside the loop" not in c.verdict.reason


def test_weight_decay_added_into_the_accumulator_is_the_reason_under_shard_map():
    step, args = wp.weight_decay_added()
    inspection = shardscope.inspect(step, *args)
    (c,) = inspection.collectives
    assert c.verdict.kind == "needed" and c.verdict.reason.startswith(ADDED)
    (p,) = inspection.paired
    assert p.verdict.reason.startswith(ADDED)


def test_the_gradient_read_inside_the_loop_keeps_its_reason():
    """Not every needed sum gets the new words: one the loop reads (squared) keeps its own."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("dp",))
    w = jax.device_put(jnp.full((16, 4), 0.1), NamedSharding(mesh, P()))
    xs = jax.device_put(jnp.ones((4, 32, 16)), NamedSharding(mesh, P(None, "dp")))

    @jax.jit
    def step(w, xs):
        def body(acc, x):
            g = jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
            return acc + g * g, None

        return jax.lax.scan(body, jnp.zeros_like(w), xs)[0]

    (c,) = shardscope.inspect(step, w, xs).compiled.collectives
    assert c.verdict.kind == "needed" and "read inside the loop" in c.verdict.reason


_TP_MESH_SHAPE = (4, 2)  # data x model


def _tp_loss(W, h):
    out = h @ W
    return jnp.mean(out ** 2)


def _tp_loss_to_target(W, h, y):
    out = h @ W
    return jnp.mean((out - y) ** 2)


def _tp_step(loss, with_targets: bool):
    """A scan over micro-batches of a tensor-parallel matmul (``W`` by rows over ``model``, the
    activations by columns): the partitioner sums ``out`` over ``model`` in the loop body, and the
    loss reads that sum in the same iteration; ``(loss, grad)`` accumulate in the carry."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(_TP_MESH_SHAPE), ("data", "model"))
    W = jax.ShapeDtypeStruct((32, 8), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))
    hs = jax.ShapeDtypeStruct((4, 16, 32), jnp.float32, sharding=NamedSharding(mesh, P(None, "data", "model")))
    ys = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))

    @jax.jit
    def fwd(W, *batches):
        def body(acc, b):
            l, g = jax.value_and_grad(loss)(W, *b)
            return (acc[0] + l, acc[1] + g), None
        return jax.lax.scan(body, (jnp.zeros(()), jnp.zeros_like(W)), batches)[0]

    return fwd, ((W, hs, ys) if with_targets else (W, hs))


def _line_of(fn, text: str) -> str:
    """``test_verdict_reasons.py:N (fn)``: the line of ``fn``'s source that holds ``text``."""
    lines, start = inspect.getsourcelines(fn)
    (n,) = [start + k for k, line in enumerate(lines) if text in line]
    return f"{Path(__file__).name}:{n} ({fn.__name__})"


@pytest.mark.parametrize("loss, with_targets", [(_tp_loss, False), (_tp_loss_to_target, True)])
def test_a_tensor_parallel_sum_the_loss_reads_is_needed_for_that_read_not_for_a_carry(loss, with_targets):
    """The forward sum over ``model`` (one all-reduce of f32[4, 8] in the while body of the module
    compiled here: 16 rows / 4 over data, 8 columns) is needed because the loss squares it in the
    same iteration (and the backward pass reads it there): no carry is read by the next iteration,
    the loss and gradient carries are only added to. Subtracting the target (``out - y``) mixes the
    sum with another value, which is no carry either."""
    fwd, args = _tp_step(loss, with_targets)
    text = fwd.lower(*args).compile().as_text()
    in_loop = [shape for shape, depth in all_reduces(text) if depth > 0]
    assert "f32[4,8]" in [shape.split("{")[0] for shape in in_loop], in_loop

    (c,) = [c for c in shardscope.inspect(fwd, *args).compiled.collectives if c.in_loop and c.axes == ("model",)]
    assert c.bytes_per_execution == 4 * 8 * 4 and c.verdict.kind == "needed"
    reason = c.verdict.reason
    assert "carry that the loop also reads" not in reason and "next iteration" not in reason, reason
    assert "read inside the loop" in reason and "uses it in the same iteration" in reason, reason
    readers = {f"the integer_pow at {_line_of(loss, '** 2')}",  # the loss squares it
               f"the backward pass's dot_general at {_line_of(loss, 'out = h @ W')}"}  # W's gradient reads it
    assert any(reader in reason for reader in readers), reason


def test_a_sum_added_into_a_carry_the_next_iteration_reads_keeps_its_reason():
    """A recurrence ``h = h + tanh(h) @ W`` with ``W`` by rows over ``model``: the partitioner sums
    the matmul in the loop body and the sum goes into the carry ``h``, which the next iteration reads
    through ``tanh``: the carry is no accumulator."""
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(_TP_MESH_SHAPE), ("data", "model"))
    spec = NamedSharding(mesh, P("data", "model"))
    W = jax.ShapeDtypeStruct((32, 32), jnp.float32, sharding=NamedSharding(mesh, P("model", None)))
    h0 = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=spec)

    @jax.jit
    def recur(W, h0):
        def body(h, _):
            return jax.lax.with_sharding_constraint(h + jnp.tanh(h) @ W, spec), None
        return jax.lax.scan(body, h0, None, length=4)[0]

    assert [depth for _, depth in all_reduces(recur.lower(W, h0).compile().as_text())] == [1]
    (c,) = shardscope.inspect(recur, W, h0).compiled.collectives
    assert c.verdict.kind == "needed" and "carry that the loop also reads" in c.verdict.reason


RAISES = textwrap.dedent('''
    import jax
    import jax.numpy as jnp

    import shardscope


    def check_batch(x):
        if x.shape[0] % 3:
            raise ValueError(f"batch {x.shape[0]} must be a multiple of 3")


    @shardscope.program(args=(jax.ShapeDtypeStruct((8, 4), jnp.float32),))
    @jax.jit
    def step(x):
        check_batch(x)
        return x * 2
''')


def test_a_users_own_exception_at_trace_time_is_said_to_be_the_programs(tmp_path):
    """Its hint names the user's line, not a disagreement of types; the outcome line that says
    "each one's error follows" comes before the error, in one stream (2>&1) as on a terminal."""
    path = tmp_path / "raises.py"
    path.write_text(RAISES)
    line = RAISES.splitlines().index("        raise ValueError(f\"batch {x.shape[0]} must be a multiple of 3\")") + 1
    done = subprocess.run([sys.executable, "-m", "shardscope", "check", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 2
    out = " ".join(done.stdout.split())
    assert "ValueError: batch 8 must be a multiple of 3" in out
    assert f"hint: the program's own code raised it (raises.py:{line}, in check_batch), not JAX" in out
    assert "which types disagree" not in out
    assert out.index("error follows") < out.index("shardscope: error:")


def test_jax_s_own_error_keeps_the_types_hint(tmp_path, shardscope_cli):
    path = tmp_path / "shapes.py"
    path.write_text(RAISES.replace("check_batch(x)\n", "").replace("return x * 2", "return x @ jnp.ones((3, 3))"))
    result = shardscope_cli("check", path)
    assert result.returncode == 2 and "which types disagree" in result.stderr


INDIVISIBLE = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:6]).reshape(3, 2), ("data", "model"))
    w = jax.ShapeDtypeStruct((16, 8), jnp.float32)
    xs = jax.ShapeDtypeStruct((4, 32, 16), jnp.float32)


    @shardscope.program(args=(w, xs))
    @jax.jit
    def step(w, xs):
        @jax.shard_map(mesh=mesh, in_specs=(P(), P(None, "data")), out_specs=P(), axis_names={"data"})
        def accumulate(w, xs):
            return lax.psum(jnp.sum(xs @ w), "data")
        return accumulate(w, xs)
''')


def test_jax_s_shard_map_divisibility_error_is_blamed_on_the_shapes_and_the_mesh(tmp_path, shardscope_cli):
    """A batch of 32 split over a mesh axis of 3: JAX's shard_map refuses its inputs. JAX leaves
    its own frames out of the traceback, whose last frame is then the user's call
    ``accumulate(w, xs)``: the hint said "the program's own code raised it (...), not JAX"."""
    path = tmp_path / "indivisible.py"
    path.write_text(INDIVISIBLE)
    line = INDIVISIBLE.splitlines().index("    return accumulate(w, xs)") + 1
    result = shardscope_cli("check", path)
    assert result.returncode == 2
    hint = " ".join(result.stderr.split()).split("hint: ")[1]
    assert hint.startswith("JAX's shard_map checks its inputs against the mesh: it splits dimension 1 of accumulate's "
                           "parameter 'xs' (float32[4,32,16], size 32) over mesh axis 'data' of size 3, which does not "
                           "divide 32; give example arguments whose split dimensions the mesh divides")
    assert f"the shard_map is called at indivisible.py:{line}, in step" in hint
    assert "own code" not in result.stderr


OWN_ERRORS = textwrap.dedent('''
    import jax
    import jax.numpy as jnp

    import shardscope

    SIZES = {"small": 4}


    @shardscope.program(args=(jax.ShapeDtypeStruct((8, 4), jnp.float32),))
    @jax.jit
    def asserts(x):
        assert x.shape[0] == 4, "the batch must be 4"
        return x * 2


    @shardscope.program(args=(jax.ShapeDtypeStruct((8, 4), jnp.float32),))
    @jax.jit
    def looks_up(x):
        return x * SIZES["large"]


    @shardscope.program(args=(jax.ShapeDtypeStruct((8, 4), jnp.float32),))
    @jax.jit
    def maps(x):
        return jax.vmap(jnp.add)(x, x[:3])
''')


def test_errors_of_the_users_own_lines_stay_theirs(tmp_path, shardscope_cli):
    """An ``assert`` and a dict lookup's ``KeyError`` are the program's own: JAX's filtered
    traceback ends on them as it ends on a call into JAX, but neither line calls anything."""
    path = tmp_path / "own.py"
    path.write_text(OWN_ERRORS)
    lines = OWN_ERRORS.splitlines()
    for function, error, line in [("asserts", "AssertionError: the batch must be 4", '    assert x.shape[0] == 4, "the batch must be 4"'),
                                  ("looks_up", "KeyError: 'large'", '    return x * SIZES["large"]')]:
        result = shardscope_cli("check", path, "--function", function)
        assert result.returncode == 2 and error in result.stderr
        at = lines.index(line) + 1
        assert f"hint: the program's own code raised it (own.py:{at}, in {function}), not JAX" in result.stderr


def test_a_call_into_jax_that_raises_is_not_said_to_be_the_programs_own(tmp_path, shardscope_cli):
    """``jax.vmap`` of arrays of 8 and 3 rows: JAX's ValueError, whose filtered traceback ends on
    the user's call; the hint said "the program's own code raised it (...), not JAX"."""
    path = tmp_path / "own.py"
    path.write_text(OWN_ERRORS)
    at = OWN_ERRORS.splitlines().index("    return jax.vmap(jnp.add)(x, x[:3])") + 1
    result = shardscope_cli("check", path, "--function", "maps")
    assert result.returncode == 2 and "ValueError: vmap got inconsistent sizes" in result.stderr
    hint = " ".join(result.stderr.split()).split("hint: ")[1]
    assert hint.startswith(f"raised at own.py:{at}, in maps, by that line itself or by JAX beneath it")
    assert "own code" not in hint

LOSS_AFTER_GRADS = textwrap.dedent('''
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import shardscope

    mesh = Mesh(np.array(jax.devices()), ("data",))
    W = jax.ShapeDtypeStruct((16, 4), jnp.float32, sharding=NamedSharding(mesh, P()))
    xs = jax.ShapeDtypeStruct((4, 8 * len(jax.devices()), 16), jnp.float32, sharding=NamedSharding(mesh, P(None, "data")))


    def loss(W, x):
        return jnp.mean(jnp.tanh(x @ W) ** 2)


    @shardscope.program(args=(W, xs))
    @jax.jit
    def step(W, xs):
        def body(acc, x):
            l, g = jax.value_and_grad(loss)(W, x)
            return (acc[0] + g, acc[1] + l), None

        (g, l), _ = lax.scan(body, (jnp.zeros_like(W), jnp.float32(0)), xs)
        return W - 0.1 * g, l
''')


def test_the_target_row_of_a_sum_that_stays_shows_its_loop(tmp_path, shardscope_cli):
    """The gradients first, the loss after them: the slice moves W's sum out of the loop and
    keeps the loss's in it, so the table has a row for each (counted in the slice's module: a
    scalar all-reduce in the loop body, W's outside), the loss's with the loop's trip count."""
    pytest.importorskip("libtpu")
    from _tpu_text import all_reduces
    from shardscope.sources.loading import load_file
    from shardscope.targets import compile as targets, registry

    path = tmp_path / "grads_then_loss.py"
    path.write_text(LOSS_AFTER_GRADS)
    step = load_file(path).functions["step"]
    module = targets.compile_for_target(step.fn.trace(*step.spec.args),
                                        registry.load_target(registry.parse_target("tpu:v5e:2x4"))).hlo_text
    assert sorted((shape.split("{")[0], depth) for shape, depth in all_reduces(module)) == [("f32[16,4]", 0), ("f32[]", 1)]
    trips = str(step.spec.args[1].shape[0])  # the scan runs once per micro-batch
    result = shardscope_cli("check", path, "--target", "tpu:v5e:2x4", "--json")
    assert result.returncode == 1, result.stderr
    (placement,) = json.loads(result.stdout)["programs"][0]["targets"]["tpu:v5e:2x4"]["placements"]
    assert placement["values_left"] == ["grad(W)"]
    text = shardscope_cli("check", path, "--target", "tpu:v5e:2x4").stdout
    rows: dict[str, list[str]] = {}  # the first table's (piped at 120 columns, the CPU's half follows it)
    for cells in ([cell.strip() for cell in line.split("│")] for line in text.splitlines() if line.startswith("│step ")):
        rows.setdefault(cells[2], cells)
    # the loss is the value body assigns value_and_grad's first result to (l, g = ...), not out[1]
    (assigned,) = re.findall(r"(\w+), \w+ = jax\.value_and_grad\(loss\)", LOSS_AFTER_GRADS)
    assert sorted((cells[3], cells[4], cells[5]) for cells in rows.values()) == [("grad(W)", "-", "1"),
                                                                                (assigned, trips, trips)]


_TWO_SUMS = """HloModule m, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%body (p: (s32[], f32[4], f32[4])) -> (s32[], f32[4], f32[4]) {
  %p = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %u = f32[4]{0} get-tuple-element(%p), index=1
  %v = f32[4]{0} get-tuple-element(%p), index=2
  %su = f32[4]{0} sine(%u)
  %cv = f32[4]{0} cosine(%v)
  %ar1 = f32[4]{0} all-reduce(%su), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  %ar2 = f32[4]{0} all-reduce(%cv), channel_id=2, replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (s32[], f32[4]{0}, f32[4]{0}) tuple(%next, %ar1, %ar2)
}

%cond (q: (s32[], f32[4], f32[4])) -> pred[] {
  %q = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(6)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x0 = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}, f32[4]{0}) tuple(%zero, %x0, %x0)
  %loop = (s32[], f32[4]{0}, f32[4]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[4]{0} get-tuple-element(%loop), index=1
}
"""


def test_two_unnamed_collectives_are_told_apart():
    plan = compiled_plan(_TWO_SUMS)
    assert [c.value for c in plan.collectives] == ["", ""]  # nothing names their values
    placements = compare_plans(plan, plan).placements
    words, plural = target_words._what(placements)
    assert plural and words == "all-reduce ar1 and all-reduce ar2"
