"""Helpers shared by the core tests: run the plans' programs and write demo files."""

from __future__ import annotations

import functools
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

    from shardscope.demos import load_demo_file
    from shardscope.plans import build_plans
    from shardscope.settings import Settings

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


def load_program_module(path: Path):
    """Import a program file (the devices are already set by conftest) and return the module."""
    from shardscope.demos import import_file

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
