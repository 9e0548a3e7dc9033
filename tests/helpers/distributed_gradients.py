"""One worker of a test: join JAX's distributed runtime, run the plans, print their gradients.

``python distributed_gradients.py ADDRESS PROCESSES ID DEVICES DEMO``; process 0 prints one JSON
object ``{plan: gradient as nested lists}`` (the W gradient is replicated on every device).
"""

import json
import os
import sys
from pathlib import Path

from shardscope.distributed.workers import WorkerRole, join_as_worker

address, processes, process_id, devices, demo = sys.argv[1:]
role = WorkerRole(address, int(processes), int(process_id), os.getppid())
join_as_worker(role, int(devices) // role.processes)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from shardscope.sources.loading import load_demo_file  # noqa: E402
from shardscope.plans.registry import build_plans  # noqa: E402
from shardscope.config.settings import Settings  # noqa: E402

settings = Settings(path=Path(demo), devices=int(devices))
built = build_plans(load_demo_file(settings.path).get(None), settings)
outputs = {name: jax.tree.map(lambda a: np.asarray(a).tolist(), fn(*built.args)) for name, fn in built.functions.items()}
if jax.process_index() == 0:
    print(json.dumps({"process_count": jax.process_count(), "devices": jax.device_count(), "outputs": outputs}))
jax.distributed.shutdown()
