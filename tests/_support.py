"""Helpers shared by the core tests: run the plans' programs and write demo files."""

from __future__ import annotations

import contextlib
import functools
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"
PYTHON = sys.executable


@functools.lru_cache(maxsize=None)
def plan_outputs(demo: str, devices: int = 2, chunk_size: int | None = None):
    """``(args, outputs)``: the plans' concrete inputs and the gradients each program returns, as numpy.

    A candidate plan JAX cannot trace here (the analysis lists it as unavailable) has no output;
    the baseline and the reference always do.
    """
    import jax

    from shardscope.sources.loading import load_demo_file
    from shardscope.plans.registry import build_plans
    from shardscope.config.settings import Settings

    settings = Settings(path=DEMOS / demo, devices=devices, chunk_size=chunk_size)
    built = build_plans(load_demo_file(settings.path).get(None), settings)
    as_numpy = lambda tree: jax.tree.map(np.asarray, tree)  # noqa: E731
    outputs = {}
    for name, fn in built.functions.items():
        plan = built.plans.get(name)
        try:
            outputs[name] = as_numpy(plan.gradient(fn(*built.args)) if plan else fn(*built.args))
        except Exception:
            if plan is None or plan.role == "baseline":
                raise
    return as_numpy(built.args), outputs


def write_demo(directory: Path, name: str, body: str) -> Path:
    """Write a demo file (dedented, with the usual imports) and return its path."""
    header = "import jax\nimport jax.numpy as jnp\nfrom jax import lax\n\nimport shardscope\n\n"
    path = directory / name
    path.write_text(header + textwrap.dedent(body))
    return path


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m shardscope ARGS`` in a fresh interpreter."""
    return subprocess.run(
        [PYTHON, "-m", "shardscope", *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT, timeout=timeout,
    )


def in_one_process(*commands, env: dict[str, str] | None = None,
                   timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """The command lines (``shardscope`` ARGS each) one after another in one fresh process
    (``tests/helpers/commands_in_one_process.py``), with ``env`` if given: each one's exit status,
    stdout and stderr. The first starts JAX as ``python -m shardscope`` would; the others find it
    started: for commands whose start-up the first shows (the same device count, the same
    environment)."""
    import json

    helper = ROOT / "tests" / "helpers" / "commands_in_one_process.py"
    argvs = [[str(word) for word in command] for command in commands]
    done = subprocess.run([PYTHON, str(helper), json.dumps(argvs)], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return [subprocess.CompletedProcess(["shardscope", *argv], r["returncode"], r["stdout"], r["stderr"])
            for argv, r in zip(argvs, json.loads(done.stdout))]


def run_main(*args: object) -> subprocess.CompletedProcess:
    """``shardscope.cli.main(ARGS)`` in this process, with what it wrote to ``sys.stdout`` and
    ``sys.stderr``: for a fixture shared by a module's tests (the ``shardscope_cli`` fixture,
    for one test, also reads the file descriptors)."""
    from shardscope.cli import main

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse: a usage error, --help, --version
            status = 0 if exc.code is None else exc.code
    return subprocess.CompletedProcess(["shardscope", *argv], status, out.getvalue(), err.getvalue())


DROPOUT = """
# typed keys (dtype key<fry>); eval_shape gives the dtype without starting JAX's backend
KEYS = jax.ShapeDtypeStruct((32,), jax.eval_shape(jax.random.key, 0).dtype)


@shardscope.demo(params=jax.ShapeDtypeStruct((4, 4), jnp.float32),
                 x={"inputs": jax.ShapeDtypeStruct((32, 4), jnp.float32), "key": KEYS})
def dropout(W, x):
    noise = jax.random.normal(jax.random.PRNGKey(0), (4,))  # a fixed key inside f
    keep = jax.vmap(lambda k: jax.random.bernoulli(k, 0.5, (4,)))(x["key"])  # one key per example
    h = jnp.tanh(x["inputs"] @ W + noise)
    return jnp.where(keep, h / 0.5, 0.0)
"""
"""A dropout model: typed PRNG keys in ``x`` (one per example) and a fixed legacy key inside ``f``."""


CARRY_FROM_ZEROS = """
@shardscope.demo(params=jax.ShapeDtypeStruct((4, 4), jnp.float32),
                 x=jax.ShapeDtypeStruct((32, 3, 4), jnp.float32))
def rnn(W, x):
    def step(h, u):
        return jnp.tanh(h @ W + u), None
    # jnp.zeros is invariant over the mesh; the carry becomes varying inside the loop
    h, _ = lax.scan(step, jnp.zeros((x.shape[0], 4)), jnp.swapaxes(x, 0, 1))
    return h
"""
"""An RNN whose scan starts from ``jnp.zeros``: invariant over the mesh, varying inside the loop (a trace error)."""


DYNAMIC_WHILE = """
def _varying(a):
    return frozenset(jax.typeof(a).manual_axis_type.varying)


@jax.custom_vjp
def matvec(W, x):
    return x @ W


def fwd(W, x):
    return x @ W, (W, x)


def bwd(res, g):
    W, x = res
    # all-reduce over the axes x varies over but W does not, one row at a time
    axes = tuple(sorted(_varying(x) - _varying(W)))
    n = jnp.sum(jnp.ones_like(g, dtype=jnp.int32))  # a trip count only known at run time

    def cond(c):
        return c[0] < n

    def body(c):
        i, acc = c
        row = g[i] * x[i]
        return i + 1, acc + (lax.psum(row, axes) if axes else row)

    _, dW = lax.while_loop(cond, body, (0, jnp.zeros_like(W)))
    return dW, jnp.outer(g, W)


matvec.defvjp(fwd, bwd)


@shardscope.demo(params=jax.ShapeDtypeStruct((5,), jnp.float32), x=jax.ShapeDtypeStruct((32, 5), jnp.float32))
def dyn(W, x):
    return matvec(W, x)
"""
"""A collective inside a ``while`` loop whose trip count is only known at run time (``custom_vjp``)."""


BRANCHY = """
@jax.jit
def layer(W, h):
    return jnp.tanh(h @ W)


@shardscope.demo(params={"W": jax.ShapeDtypeStruct((4, 4), jnp.float32), "c": jax.ShapeDtypeStruct((4,), jnp.float32)},
                 x=jax.ShapeDtypeStruct((32, 4), jnp.float32))
def branchy(p, x):
    h = jax.checkpoint(layer)(p["W"], x)
    return lax.cond(p["c"][0] > 0, lambda h: h * p["c"], lambda h: h - p["c"], h)
"""
"""Collectives inside ``jax.jit``, ``jax.checkpoint`` and both branches of a ``lax.cond``."""


def load_program_module(path: Path):
    """Import a program file (the devices are already set by conftest) and return the module."""
    from shardscope.sources.loading import import_file

    return import_file(path)[0]


# Each chunk picks a branch by its first example, so devices take different branches; the naive
# plan's all-reduces sit inside those branches (seen on jax 0.10.2: naive and deferred disagree).
GATED_COND_DEMO = '''
@shardscope.demo(
    params={"a": jax.ShapeDtypeStruct((5,), jnp.float32), "b": jax.ShapeDtypeStruct((5,), jnp.float32)},
    x=jax.ShapeDtypeStruct((64, 5), jnp.float32),
)
def gated(p, x):
    """A branch per chunk, picked by the chunk's first example."""
    return lax.cond(x[0, 0] > 0, lambda: jnp.tanh(x @ p["a"]) * 3, lambda: (x @ p["b"]) ** 2)
'''
