"""Several shardscope command lines, one after another, in one fresh process.

``python commands_in_one_process.py JSON`` takes a JSON list of command lines (each a list of
words, as ``shardscope`` takes them), runs ``shardscope.cli.main`` on each in turn and prints one
JSON list: each command's ``returncode``, ``stdout`` and ``stderr``. The first command starts
JAX as ``python -m shardscope`` would; the others find it started: for commands whose start-up is
already shown by the first (the same command on the same file, or commands that need the same
device count or environment: ``tests/_support.in_one_process``).
"""

import contextlib
import io
import json
import sys

from shardscope.cli import main


def run(argv: list[str]) -> dict:
    """One command line's exit status and what it wrote to ``sys.stdout`` and ``sys.stderr``."""
    streams = [io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="surrogateescape") for _ in range(2)]
    out, err = streams  # with a buffer: diff writes its bytes to sys.stdout.buffer
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse: a usage error
            status = 0 if exc.code is None else exc.code
    written = []
    for stream in streams:
        stream.flush()
        written.append(stream.buffer.getvalue().decode("utf-8", "surrogateescape"))  # type: ignore[attr-defined]
    return {"returncode": status, "stdout": written[0], "stderr": written[1]}


if __name__ == "__main__":
    results = [run(argv) for argv in json.loads(sys.argv[1])]
    sys.stdout.write(json.dumps(results))
