"""Whether a step fits in a target's memory: the line it is said in, and XLA:TPU's refusal as a finding.

A program whose product of two 100,000 x 100,000 matrices must be held between two matmuls
needs 100,000^2 x 2 bytes (bf16: XLA:TPU keeps the f32 matmul's result in bf16 at JAX's default
precision) = 18.6 GiB per v5e chip, which has 16 GiB: libtpu refuses to compile it for
``tpu:v5e:2x2`` ("RESOURCE_EXHAUSTED: Ran out of memory on HBM ..."), while the CPU compiles it
(nothing runs). That refusal is a finding of the run, not its failure.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from shardscope.hardware.catalogue import chip_of
from shardscope.hardware.chips import GIB
from shardscope.hardware.fit import MemoryFit, needed_bytes, refusal_fit, size_words
from shardscope.pipeline.check import check_file, EXIT_FLAGGED

N = 100_000

PROGRAMS = textwrap.dedent(f"""\
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    N = {N}


    @shardscope.program(args=(jax.device_put(jnp.float32(1.0), NamedSharding(mesh, P())),))
    @jax.jit
    def too_big(x):
        a = jnp.broadcast_to(x, (N, N)) * jnp.arange(N, dtype=jnp.float32)
        b = a @ a
        return (b @ b).sum()


    @shardscope.program(args=(jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("data"))),
                              jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, P()))))
    @jax.jit
    def small(x, w):
        return jnp.tanh(x @ w).sum()
""")


def test_the_fit_line_says_how_much_of_the_chip_a_step_needs():
    assert MemoryFit("v5p", int(17.7 * GIB), int(95.74 * GIB)).line() == "17.7 GiB of 95.74 GiB per device"
    assert MemoryFit("v5e", int(21.3 * GIB), 16 * GIB).line() == "does not fit: 21.3 GiB on a 16 GiB v5e chip"
    # a step far below a GiB says its size in its own unit, not 1.72e-05 GiB
    assert MemoryFit("v5e", 18_432, int(15.75 * GIB)).line() == "18 KiB of 15.75 GiB per device"
    assert MemoryFit("v5e", 3 * 2**20 // 2, int(15.75 * GIB)).line() == "1.5 MiB of 15.75 GiB per device"
    assert MemoryFit("v5e", 20, int(15.75 * GIB)).line() == "20 B of 15.75 GiB per device"
    assert MemoryFit("h100", int(11.9 * 2**20), 80 * GIB).line() == "11.9 MiB of 80 GiB per device"  # not 0.0116 of 80
    assert MemoryFit("v5e", int(21.3 * GIB), 16 * GIB).fits is False
    assert MemoryFit("gpu", GIB, None).fits is None


def test_what_a_step_needs_is_its_arguments_outputs_and_temporaries_less_what_aliases():
    memory = {"argument_size_in_bytes": 300, "output_size_in_bytes": 200, "temp_size_in_bytes": 1000,
              "alias_size_in_bytes": 200, "peak_memory_in_bytes": 1000}  # a CPU's peak: the temporaries alone
    assert needed_bytes(memory) == 300 + 200 + 1000 - 200
    assert needed_bytes({**memory, "peak_memory_in_bytes": 5000}) == 5000  # XLA's peak when it is larger


def test_on_a_tpu_a_step_needs_libtpus_peak():
    # libtpu's temp_size_in_bytes is not its temporaries' peak (a scanned step: more; a small one: 0)
    memory = {"argument_size_in_bytes": 3_249_062_400, "output_size_in_bytes": 3_249_047_040,
              "temp_size_in_bytes": 17_720_600_064, "alias_size_in_bytes": 3_249_046_016,
              "peak_memory_in_bytes": 15_108_645_888}  # Llama-2 70B's step, fsdp=256 on v5e (BENCHMARKS 11)
    assert needed_bytes(memory, "tpu") == 15_108_645_888
    summed = 3_249_062_400 + 3_249_047_040 + 17_720_600_064 - 3_249_046_016  # 19.53 GiB
    assert needed_bytes(memory) == needed_bytes(memory, "gpu") == summed
    assert needed_bytes({**memory, "peak_memory_in_bytes": 0}, "tpu") == summed


SCANNED = textwrap.dedent("""\
    import jax
    import jax.numpy as jnp
    from jax import lax

    import shardscope

    LAYERS, WIDTH = 16, 1024


    def step(w, x):
        def loss(w):
            @jax.checkpoint
            def layer(h, wl):
                return jnp.tanh(h @ wl.astype(jnp.bfloat16)), None

            h, _ = lax.scan(layer, x, w)
            return jnp.mean(h.astype(jnp.float32) ** 2)

        return w - 0.1 * jax.grad(loss)(w)


    def args(rows):
        return (jax.ShapeDtypeStruct((LAYERS, WIDTH, WIDTH), jnp.float32), jax.ShapeDtypeStruct((rows, WIDTH), jnp.bfloat16))


    fits = shardscope.program(args=args(393_216))(jax.jit(step, donate_argnums=0))
    too_big = shardscope.program(args=args(425_984))(jax.jit(step, donate_argnums=0))
""")


def test_a_tpu_step_fits_where_libtpu_compiles_it_and_not_where_it_refuses(tmp_path):
    """A scan of 16 layers under remat keeps each layer's input (rows x 1,024 bf16) for the backward
    pass: 16 x 393,216 x 1,024 x 2 B = 12 GiB, 13 GiB at 425,984 rows. libtpu compiles the first for
    a v5e chip (15.75 GiB) and refuses the second: its own verdicts, which the fit must repeat;
    arguments + outputs + temporaries - aliases said neither fits."""
    from shardscope.targets.plans import load_targets, parse_targets

    path = tmp_path / "scanned.py"
    path.write_text(SCANNED)
    checked = check_file(path, targets=load_targets(parse_targets(["tpu:v5e:1x1"])))
    by_name = {ins.function: ins.targets[0] for ins in checked.inspections}
    fits, too_big = by_name["fits"], by_name["too_big"]
    assert too_big.refused and too_big.fit is not None and too_big.fit.fits is False
    assert not fits.refused and fits.fit is not None and fits.fit.fits is True
    memory = fits.memory
    assert fits.fit.needed_bytes == memory["peak_memory_in_bytes"]
    residuals = 16 * 393_216 * 1024 * 2
    assert residuals + memory["argument_size_in_bytes"] <= fits.fit.needed_bytes <= fits.fit.capacity_bytes
    summed = sum(memory[k] for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")) \
        - memory["alias_size_in_bytes"]
    assert summed > fits.fit.capacity_bytes  # the sum said a step libtpu compiles does not fit


def test_libtpus_refusal_is_read_for_what_the_step_needed_and_what_the_chip_has():
    message = ("XlaRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
               "temporaries (18.64G) exceeds available HBM (15.75G).")
    fit = refusal_fit(message, chip_of("TPU v5 lite"))
    assert fit is not None and fit.refused and fit.fits is False
    assert fit.needed_bytes == int(18.64 * GIB) and fit.capacity_bytes == int(15.75 * GIB)
    assert fit.line() == "does not fit: 18.64 GiB on a 15.75 GiB v5e chip (the compiler refused it)"
    assert refusal_fit("INVALID_ARGUMENT: something else", None) is None


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """``check`` of the two programs against ``tpu:v5e:2x2`` (libtpu compile-only)."""
    from shardscope.targets.plans import load_targets, parse_targets

    path = tmp_path_factory.mktemp("fit") / "steps.py"
    path.write_text(PROGRAMS)
    return check_file(path, targets=load_targets(parse_targets(["tpu:v5e:2x2"])))


def test_a_step_xla_tpu_refuses_for_memory_is_a_finding_and_its_cpu_plan_is_kept(checked):
    assert checked.failed == ()  # before: "failed to trace or compile", and no CPU plan shown
    by_name = {ins.function: ins for ins in checked.inspections}
    too_big = by_name["too_big"]
    assert too_big.compiled is not None and too_big.compiled.backend == "cpu"  # the CPU's plan stands
    (plan,) = too_big.targets
    assert plan.refused and plan.does_not_fit and plan.compiled.collectives == ()
    assert plan.fit is not None
    assert plan.fit.needed_bytes is not None and plan.fit.needed_bytes >= N * N * 2  # b in bf16
    assert plan.fit.capacity_bytes is not None and plan.fit.capacity_bytes < 16 * GIB
    assert plan.fit.line().startswith("does not fit: 18.")
    assert checked.exit_status == EXIT_FLAGGED


def test_a_step_that_fits_says_how_much_of_the_chip_it_uses_and_its_estimate(checked):
    small = next(ins for ins in checked.inspections if ins.function == "small")
    (plan,) = small.targets
    assert plan.fit is not None and plan.fit.fits is True
    # each device holds its 16x256 block of x and all of w (f32), the scalar out: at least that
    assert plan.fit.needed_bytes is not None and plan.fit.needed_bytes >= 4 * (16 * 256 + 256 * 256)
    assert plan.fit.line().endswith("of 15.75 GiB per device")
    assert plan.step is not None
    # the dot of each device: 2 x 16 x 256 x 256 flops at v5e's 197 TFLOP/s; what its fusion
    # does besides (elementwise work) at the vector unit's 5.7e12 operations/s measured on v5e
    matmul = 2 * 16 * 256 * 256
    dot = next(t for t in plan.step.instructions if t.flops >= matmul)
    assert dot.compute_s == pytest.approx(matmul / 197e12 + (dot.flops - matmul) / 5.7e12)


def test_assert_fits_on_passes_a_step_that_fits_and_fails_one_that_does_not():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from shardscope.testing import assert_fits_on

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))  # as many devices as the slice has chips

    def step(x, w):
        return jnp.tanh(x @ w).sum()

    x = jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("data")))
    w = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, P()))
    inspection = assert_fits_on("tpu:v5e:2x2", jax.jit(step), x, w)
    assert inspection.targets[0].fit.fits is True

    def big(x):
        a = jnp.broadcast_to(x, (N, N)) * jnp.arange(N, dtype=jnp.float32)
        b = a @ a
        return (b @ b).sum()

    with pytest.raises(AssertionError, match=r"big on tpu:v5e:2x2: does not fit: 18\.\d+ GiB on a 15\.75 GiB v5e chip"):
        assert_fits_on("tpu:v5e:2x2", jax.jit(big), jax.device_put(jnp.float32(1.0), NamedSharding(mesh, P())))


def test_a_step_that_does_not_fit_is_a_github_error_on_the_file(checked, tmp_path):
    from shardscope.render.github import workflow_commands

    lines = workflow_commands(tmp_path / "steps.py", checked, cwd=tmp_path)
    (line,) = [line for line in lines if "does not fit" in line]
    assert line.startswith("::error file=steps.py,title=shardscope%3A too_big does not fit on tpu%3Av5e%3A2x2::")
    assert "too_big on tpu:v5e:2x2: does not fit: 18." in line


def test_a_refused_step_shows_no_compiled_collective_count_on_the_target(checked):
    """libtpu refused too_big: there is no compiled module on the slice, so its table says "-" for
    the compiled collectives and their runs (not "0 (0 in while)", which claims a plan without
    collectives), and the JSON's count is null; the CPU's runs stay beside it."""
    from rich.console import Console

    from shardscope.render.targets import target_plan_json, target_table

    too_big = next(ins for ins in checked.inspections if ins.function == "too_big")
    console = Console(width=200, record=True)
    console.print(target_table("tpu:v5e:2x2", [("too_big", too_big)]))
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in console.export_text().splitlines() if line.count("│") == 3}
    assert rows["compiled collectives"] == "-" and rows["compiled runs per call"] == "-"
    assert target_plan_json("too_big", too_big.targets[0])["compiled_executed_collectives"] is None


def test_a_share_of_the_step_as_min_saving_still_fails_a_step_the_target_refused(checked):
    """``--min-saving 1%`` weighs findings against the step estimate; too_big has neither (libtpu
    refused it), and small has no finding to weigh: nothing to refuse the option for, and the
    refusal still fails the check (it was "no step estimate for tpu:v5e:2x2", exit 2)."""
    from shardscope.costmodel.savings import parse_min_saving
    from shardscope.pipeline.check import judged

    weighed = judged(checked, parse_min_saving("1%"))  # no SettingsError
    assert weighed.exit_status == EXIT_FLAGGED


def test_the_target_assertions_on_a_step_of_jitted_calls_say_what_they_can_tell():
    """demos/dispatch_step.py's step is not jitted: it calls grad_fn once per micro-batch (4),
    each call its own module with one all-reduce (counted in grad_fn's own compiled HLO here).
    No target compiles the step, so the fit and the counts on a target are one clear error
    (they were a bare ValueError), and the deferrable check fails on the per-call sums as check
    --target does."""
    from _support import DEMOS, load_program_module

    from shardscope.errors import TargetError
    from shardscope.testing import assert_fits_on, assert_no_deferrable_collectives_in_loops_on, collective_counts_on

    demo = load_program_module(DEMOS / "dispatch_step.py")
    hlo = demo.grad_fn.lower(demo.W, demo.XS[0]).compile().as_text()
    assert len(re.findall(r"= \S+ all-reduce(?:-start)?\(", hlo)) == 1
    with pytest.raises(TargetError, match="step is not jitted"):
        assert_fits_on("tpu:v5e:2x2", demo.step, demo.W, demo.XS)
    with pytest.raises(TargetError, match="step is not jitted"):
        collective_counts_on("tpu:v5e:2x2", demo.step, demo.W, demo.XS)
    with pytest.raises(AssertionError, match=rf"all-reduce of grad\(w\) in grad_fn, {demo.MICRO_BATCHES} calls per step"):
        assert_no_deferrable_collectives_in_loops_on("tpu:v5e:2x2", demo.step, demo.W, demo.XS)


# --------------------------------------------------------------------------- a GPU's memory: what JAX may use

H100_DESCRIPTION = (Path(__file__).resolve().parent.parent / "shardscope" / "gpu_descriptions" / "h100.txtpb")


def _described_memory() -> int:
    """``device_memory_size`` of shardscope's H100 description, read from the file here."""
    return int(re.search(r"device_memory_size:\s*(\d+)", H100_DESCRIPTION.read_text()).group(1))


@pytest.mark.parametrize(("environ", "fraction"), [
    ({}, 0.75),  # JAX's default: XLA's allocator takes 75% of the memory
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, 0.75),  # grown to as needed, up to the same pool
    ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"}, 0.9),
    ({"XLA_CLIENT_MEM_FRACTION": "0.5"}, 0.5),
    ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, 1.0),  # no pool at all
])
def test_a_gpu_chip_holds_what_a_jax_process_may_use_of_it(environ, fraction):
    """jaxlib reads XLA_PYTHON_CLIENT_MEM_FRACTION (or XLA_CLIENT_MEM_FRACTION) into XLA's GPU
    allocator, whose pool is that share of the memory (75% unset) whether it preallocates it or
    grows to it; the platform allocator has none. A step's fit is against that share."""
    from shardscope.hardware.gpu_nodes import described_chip, gpu_machine, gpu_node

    machine = gpu_machine(described_chip("h100", H100_DESCRIPTION.read_text()), gpu_node("h100"), environ)
    assert machine.chip is not None
    assert machine.chip.capacity_bytes == int(_described_memory() * fraction)
    assert machine.memory_words.startswith("what a JAX process may use of the 80 GiB")


def test_a_step_at_79_9_of_80_gib_does_not_fit_on_an_h100():
    """Issue 44: a step that needs 79.9 GiB 'fit' a 80 GiB H100; JAX's default pool is 60 GiB."""
    from shardscope.hardware.fit import memory_fit
    from shardscope.hardware.gpu_nodes import described_chip, gpu_machine, gpu_node

    machine = gpu_machine(described_chip("h100", H100_DESCRIPTION.read_text()), gpu_node("h100"), {})
    fit = memory_fit({"argument_size_in_bytes": int(79.9 * GIB)}, machine.chip, "h100", allowance=machine.memory_words)
    assert _described_memory() == 80 * GIB
    assert fit.capacity_bytes == 60 * GIB and fit.fits is False
    assert fit.line().startswith("does not fit: 79.9 GiB on a 60 GiB h100 chip (what a JAX process may use of the "
                                 "80 GiB: JAX's default pool, 75% of the memory, preallocated)")


@pytest.mark.parametrize(("size", "words"), [
    (20, "20 B"), (140 * 1024, "140 KiB"), (999 * 2**20, "999 MiB"),
    # 1,010 MiB free under a 15.75 GiB chip: the 175B anchor's pick said "1.01e+03 MiB" before
    (1010 * 2**20, "1,010 MiB"), (1023 * 2**20 + 2**19, "1,024 MiB"), (1000 * 1024, "1,000 KiB"),
])
def test_sizes_are_written_in_figures_never_in_exponents(size, words):
    assert size_words(size) == words
