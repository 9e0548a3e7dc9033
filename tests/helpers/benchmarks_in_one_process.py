"""Several benchmarks' smallest cells (``--smoke``), one after another, in one fresh process.

``python tests/helpers/benchmarks_in_one_process.py JSON`` takes a JSON list of ``[name, out]``
pairs and runs ``benchmarks.NAME.main(["--smoke", "--out", OUT])`` for each in turn, as ``python
-m benchmarks.NAME --smoke --out OUT`` would, with the sizes each set in the environment restored after it
(a benchmark sets the sizes of its programs there: ``SHARDSCOPE_*``). It prints one JSON object: each name's
``error`` (its traceback, or None when it returned normally) and the CPU seconds it took.

For the benchmarks whose smoke cell starts no process of its own (tests/test_benchmark_smoke.py
lists them): each would otherwise spend a second starting Python, JAX and shardscope. The first
sets the CPU device count (8) as its fresh process would; the others find JAX started with it.
"""

import contextlib
import importlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the benchmarks package, as `python -m benchmarks.NAME` from the root finds it
OWN = "SHARDSCOPE_"
"""The environment a benchmark sets for its programs' sizes (``SHARDSCOPE_TRANSFORMER_LAYERS``, ...),
restored after it; what shardscope sets for JAX and libtpu stays, as in the process a command runs in."""


def run(name: str, out: str) -> dict:
    """One benchmark's smoke cell: its error (None when it ran) and its CPU seconds."""
    environment = {key: value for key, value in os.environ.items() if key.startswith(OWN)}
    started = time.process_time()
    error = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its progress lines: this process's stdout is the result
            status = importlib.import_module(f"benchmarks.{name}").main(["--smoke", "--out", out])
        if status not in (None, 0):
            error = f"benchmarks.{name}.main returned {status}"
    except BaseException:  # noqa: BLE001 - SystemExit included: each one's failure is reported, the others still run
        error = traceback.format_exc()
    finally:  # the sizes it set for its programs (SHARDSCOPE_*), not what JAX and libtpu started with
        for key in {*environment, *os.environ}:
            if key.startswith(OWN) and os.environ.get(key) != environment.get(key):
                if key in environment:
                    os.environ[key] = environment[key]
                else:
                    del os.environ[key]
    return {"error": error, "cpu_s": time.process_time() - started}


if __name__ == "__main__":
    os.chdir(ROOT)  # as `python -m benchmarks.NAME` runs from the repository's root
    cells = json.loads(sys.argv[1])
    results = {name: run(name, out) for name, out in cells}
    sys.stdout.write(json.dumps(results))
