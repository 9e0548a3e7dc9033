"""A user's trainer as users write it, for the profile tests: ``jax.jit`` with shardings (no
shard_map), 4 micro-batches accumulated in a ``lax.scan`` (the partitioner's all-reduce runs in
every iteration), a train step and an eval step per iteration, dispatched ahead (nothing waits
until the end), on 8 CPU devices.

``shardscope check tests/_profiled_trainer.py`` checks ``train_step`` and ``eval_step`` (marked
below). ``python tests/_profiled_trainer.py DIR [--steps N] [--block] [--no-eval]`` runs the
training loop under ``jax.profiler.start_trace(DIR)``, as the guide "Your real run" says: each
step compiled before the trace (a loop profiled after its first steps) and not waited on, so
the trace's first calls overlap what was dispatched before it; ``--block`` waits on every step.

Its environment makes other programs of the same names (the mismatch tests):
``TRAINER_MICRO=8`` (micro-batches), ``TRAINER_DEVICES=4``; and
``TRAINER_PROCESSES=2 TRAINER_PROCESS=i TRAINER_COORDINATOR=127.0.0.1:PORT`` makes it one of the
processes of a job joined with ``jax.distributed`` over gloo, each holding 4 of the 8 devices and
writing its own ``.xplane.pb``.
"""

from __future__ import annotations

import argparse
import os
import sys

MICRO = int(os.environ.get("TRAINER_MICRO", "4"))
DEVICES = int(os.environ.get("TRAINER_DEVICES", "8"))
BATCH, D_IN, D_HIDDEN, D_OUT = 64, 256, 512, 128

import jax  # noqa: E402  (the environment above decides the program's shapes first)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import shardscope  # noqa: E402

if __name__ == "__main__":  # run as a script: the devices a user's job would have (shardscope sets its own)
    PROCESSES = int(os.environ.get("TRAINER_PROCESSES", "1"))
    jax.config.update("jax_num_cpu_devices", DEVICES // PROCESSES)
    if PROCESSES > 1:  # one process per host of a job, over gloo (TRAINER_COORDINATOR=127.0.0.1:PORT)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        address = os.environ["TRAINER_COORDINATOR"]
        jax.distributed.initialize(coordinator_address=address, num_processes=PROCESSES,
                                   process_id=int(os.environ["TRAINER_PROCESS"]), coordinator_bind_address=address)

mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("data",))
replicated = NamedSharding(mesh, P())
micro_split = NamedSharding(mesh, P(None, "data"))
batch_split = NamedSharding(mesh, P("data"))

params = {"w1": jax.ShapeDtypeStruct((D_IN, D_HIDDEN), jnp.float32, sharding=replicated),
          "w2": jax.ShapeDtypeStruct((D_HIDDEN, D_OUT), jnp.float32, sharding=replicated)}
xs = jax.ShapeDtypeStruct((MICRO, BATCH, D_IN), jnp.float32, sharding=micro_split)
ys = jax.ShapeDtypeStruct((MICRO, BATCH, D_OUT), jnp.float32, sharding=micro_split)
x_eval = jax.ShapeDtypeStruct((BATCH, D_IN), jnp.float32, sharding=batch_split)
y_eval = jax.ShapeDtypeStruct((BATCH, D_OUT), jnp.float32, sharding=batch_split)


def loss(params, x, y):
    """Mean squared error of a two-layer MLP."""
    hidden = jnp.tanh(x @ params["w1"])
    return jnp.mean((hidden @ params["w2"] - y) ** 2)


@shardscope.program(args=(params, xs, ys))
@jax.jit
def train_step(params, xs, ys):
    """The gradients of MICRO micro-batches added in a scan, then one SGD update."""

    def micro_batch(acc, batch):
        grads = jax.grad(loss)(params, *batch)
        return jax.tree.map(jnp.add, acc, grads), None

    grads, _ = lax.scan(micro_batch, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return jax.tree.map(lambda p, g: p - 0.01 * g / MICRO, params, grads)


@shardscope.program(args=(params, x_eval, y_eval))
@jax.jit
def eval_step(params, x, y):
    """The loss on one evaluation batch."""
    return loss(params, x, y)


def _filled(spec):
    """An array of ``spec``'s shape, placed with its sharding."""
    return jax.device_put(jnp.full(spec.shape, 0.01, spec.dtype), spec.sharding)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--block", action="store_true")
    parser.add_argument("--no-eval", action="store_true")
    args = parser.parse_args(argv)
    state = jax.tree.map(_filled, params)
    batch = _filled(xs), _filled(ys)
    held_out = _filled(x_eval), _filled(y_eval)
    state = train_step(state, *batch)  # compiled before the trace, as a loop profiled after its first steps
    losses = [eval_step(state, *held_out)] if not args.no_eval else []
    jax.profiler.start_trace(args.out)
    for _ in range(args.steps):
        state = train_step(state, *batch)
        if not args.no_eval:
            losses.append(eval_step(state, *held_out))
        if args.block:
            jax.block_until_ready(state)
    jax.block_until_ready((state, losses))
    jax.profiler.stop_trace()


if __name__ == "__main__":
    main(sys.argv[1:])
