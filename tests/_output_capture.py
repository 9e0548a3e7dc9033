"""What the commands print on the shipped demos, kept so that a change to how it is computed or
rendered shows every output it alters (``tests/test_output_capture.py`` compares a fresh run with it).

Every demo's ``check`` (text, ``--json``, ``--format github``), the same on ``tpu:v5e:2x4`` and
``gpu:h100:8`` together (the pipeline demo, whose mesh has 4 devices, on ``tpu:v5e:2x2`` and
``gpu:h100:4`` too), ``report`` (text and ``--json``, with the targets on two demos) and
``diff`` on the demos of functions marked ``@shardscope.demo``. Each command runs in one process
with 8 CPU devices, stdout not a terminal and ``COLUMNS`` at :data:`COLUMNS`, as the test runs it.
What varies from run to run (compile and run times, the ratios measured from them) is masked
(:func:`masked`); every count, byte, verdict, sentence, exit status, error and model estimate is
kept. A table is kept as its rows' cells, since its column widths follow its widest cell.

Rewrite the capture (after a change that alters an output on purpose; say which in the commit)::

    .venv/bin/python tests/_output_capture.py            # every command
    .venv/bin/python tests/_output_capture.py linear     # the commands whose name holds "linear"
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "tests" / "fixtures" / "outputs"
COLUMNS = 1000
"""Wide enough that no prose line wraps and no table cell folds: a time one digit longer moves no word."""
JAX_VERSION = "0.10.2"
"""The JAX the capture was made with (the reference environment): another prints other modules."""

DEMOS = ("deep", "dispatch_step", "explicit_accumulate", "fsdp", "fsdp_accumulate", "gspmd_accumulate", "linear",
         "mlp", "pipeline", "rbm", "reshard_clash", "rnn", "train_step")
"""Every shipped demo (``demos/``)."""
DEMO_FUNCTIONS = ("deep", "fsdp", "linear", "mlp", "rbm", "rnn")
"""The demos of ``@shardscope.demo`` functions: ``diff`` reads their plans."""
REPORTED = ("fsdp", "linear", "rnn")
"""The demos ``report`` runs (each plan timed twice; the deep demo's report takes minutes)."""
TARGETS = ("--target", "tpu:v5e:2x4", "--target", "gpu:h100:8")
TARGETS4 = ("--target", "tpu:v5e:2x2", "--target", "gpu:h100:4")
FORMATS = {"text": (), "json": ("--json",), "github": ("--format", "github")}
DEEP = (("SHARDSCOPE_DEEP_DEPTH", "6"),)
"""The deep demo at 6 layers (its own knob; 128 by default, minutes a command): the same plans, fewer of each."""


@dataclass(frozen=True)
class Command:
    """One command line of the capture, by the name its stored file has."""

    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set while it runs."""

    @property
    def path(self) -> Path:
        return STORE / f"{self.name}.json"


def commands() -> list[Command]:
    """Every command the capture holds."""
    found = []
    for demo in DEMOS:
        file = f"demos/{demo}.py"
        env = DEEP if demo == "deep" else ()
        for fmt, flags in FORMATS.items():
            found.append(Command(f"check-{demo}-{fmt}", ("check", file, *flags), env))
            found.append(Command(f"check-{demo}-targets-{fmt}", ("check", file, *TARGETS, *flags), env))
    for fmt, flags in FORMATS.items():  # the pipeline demo's mesh has 4 devices: targets of 4
        found.append(Command(f"check-pipeline-targets4-{fmt}", ("check", "demos/pipeline.py", *TARGETS4, *flags)))
    for demo in DEMO_FUNCTIONS:
        found.append(Command(f"diff-{demo}", ("diff", f"demos/{demo}.py"), DEEP if demo == "deep" else ()))
    for demo in REPORTED:
        file = f"demos/{demo}.py"
        found.append(Command(f"report-{demo}-text", ("report", file, "-r", "2")))
        found.append(Command(f"report-{demo}-json", ("report", file, "-r", "2", "--json")))
        found.append(Command(f"report-{demo}-targets-text", ("report", file, "-r", "2", *TARGETS)))
        found.append(Command(f"report-{demo}-targets-json", ("report", file, "-r", "2", *TARGETS, "--json")))
    return found


# --------------------------------------------------------------------------- masking

_BOX = re.compile(r"[┏┓┗┛┣┫┳┻╋━┃┡┩╇┢┪╈┠┨┯┷┿─│┌┐└┘├┤┬┴┼═║╔╗╚╝]")
MEASURED_ROWS = ("compile", "compile for the target", "run median", "run min / max")
"""The table rows whose cells are measured times: every number in them is masked."""
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_PROSE_MASKS = (
    (re.compile(r"\bcompile \d+(?:\.\d+)? s\b"), "compile <time>"),
    (re.compile(r"\brun median \d+(?:\.\d+)? ms\b"), "run median <time>"),
    (re.compile(r"\bmedian ratio \d+(?:\.\d+)?x"), "median ratio <ratio>"),
    (re.compile(r"\b(\S+) is \d+(?:\.\d+)?x (?:faster|slower) than (\S+)"), r"<comparison of \1 and \2>"),
    (re.compile(r"\bno measurable difference between (\S+) and (\S+)"), r"<comparison of \1 and \2>"),
    (re.compile(r"\(per-round ratios [^)]*\)"), "(<ratios>)"),
    (re.compile(r" \(cache\)"), ""),  # a compile the persistent cache served: it follows what ran before
)
"""The measured words of prose: a reference's compile and run times, a timed comparison."""

MEASURED_KEYS = frozenset({"compile_s", "trace_s", "run_s", "speedup", "speedup_spread", "speedup_interval",
                           "compile_from_cache"})
"""The JSON keys whose values are measured (a model's ``seconds_per_step`` or ``step_s`` is not), or
follow what ran before (``compile_from_cache``: whether the persistent cache served the compile)."""


def masked_text(text: str) -> str:
    """``text`` as the capture keeps it: a table row as its cells (``| a | b |``: column widths
    follow the widest cell, which may be a time), rules dropped, measured numbers masked."""
    lines = []
    for line in text.splitlines():
        if "│" in line or "┃" in line:
            cells = [cell.strip() for cell in _BOX.split(line)]
            cells = [cell for cell in cells if cell] if cells else cells
            if cells and cells[0] in MEASURED_ROWS:
                cells = [cells[0], *(_NUMBER.sub("<n>", cell).replace(" (cache)", "") for cell in cells[1:])]
            lines.append("| " + " | ".join(cells) + " |")
        elif _BOX.sub("", line).strip() or not line.strip():
            if line.strip() and not _BOX.sub("", line).strip():
                continue
            if line.startswith("(cache): "):  # said when a cache served a compile: it follows what ran before
                continue
            for pattern, replacement in _PROSE_MASKS:
                line = pattern.sub(replacement, line)
            lines.append(line.rstrip())
    return "\n".join(lines)


def masked_json(value: object, key: str = "") -> object:
    if key in MEASURED_KEYS:
        return "<measured>"
    if isinstance(value, dict):
        return {k: masked_json(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [masked_json(v, key) for v in value]
    if isinstance(value, str) and key == "text":  # a timed comparison's sentence
        return masked_text(value)
    return value


def masked(stdout: str, argv: tuple[str, ...]) -> object:
    """What the capture keeps of a command's stdout: its JSON with measured values masked, or its
    text as :func:`masked_text` keeps it."""
    if "--json" in argv:
        return masked_json(json.loads(stdout))
    return masked_text(stdout)


# --------------------------------------------------------------------------- running


def run(command: Command) -> dict[str, object]:
    """The command's exit status and its stdout (masked), run in this process."""
    from shardscope.cli import main

    streams = [io.TextIOWrapper(io.BytesIO(), encoding="utf-8") for _ in range(2)]  # diff writes to .buffer
    out, err = streams
    cwd = Path.cwd()
    os.chdir(ROOT)
    before = {key: os.environ.get(key) for key, _ in command.env}
    os.environ.update(dict(command.env))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(command.argv))
            except SystemExit as exc:
                status = 0 if exc.code is None else int(exc.code)
    finally:
        os.chdir(cwd)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    stdout, stderr = (_written(stream) for stream in streams)
    return {"argv": list(command.argv), "returncode": status, "stdout": masked(stdout, command.argv),
            "stderr": masked_text(stderr)}


def _written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]


def stored(command: Command) -> dict[str, object]:
    """The capture of ``command``."""
    return json.loads(command.path.read_text())


def main(argv: list[str]) -> int:
    """Rewrite the capture of every command (or of those whose name holds one of ``argv``)."""
    os.environ["COLUMNS"] = str(COLUMNS)
    from _xla_flags import unoptimized_machine_code

    unoptimized_machine_code()  # as the test run compiles (tests/conftest.py)
    from shardscope.distributed.compile_cache import start_compilation_cache
    from shardscope.targets.host import ensure_devices

    start_compilation_cache()
    ensure_devices(8)
    import jax

    if jax.__version__ != JAX_VERSION:
        print(f"the capture is made with jax {JAX_VERSION}; this is {jax.__version__}", file=sys.stderr)
        return 2
    STORE.mkdir(parents=True, exist_ok=True)
    for command in commands():
        if argv and not any(word in command.name for word in argv):
            continue
        result = run(command)
        command.path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        print(f"{command.name}: exit {result['returncode']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
