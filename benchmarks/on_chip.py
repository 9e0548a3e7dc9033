"""shardscope on a real TPU VM: the commands, the explorer and the library, each in a fresh process.

For a Cloud TPU VM (or any machine with TPU chips, JAX and libtpu), run from a checkout::

    PYTHONPATH=$PWD python benchmarks/on_chip.py [--out on_chip.json] [--only NAME ...]

It needs no network: JAX and libtpu as the machine has them, shardscope's other dependencies
(textual, rich, networkx, ...) installed from wheels. Each check starts its own processes (a
process that opens the chip holds it: nothing here runs two at a time, except the holder that
plays a training job) and prints one line, ``[ OK ]`` or ``[FAIL]``, its seconds and what it
saw; a summary follows, and ``--out`` writes every check's result as JSON. Exit status 0 when
every check passed, 1 otherwise, 2 when this machine has no TPU chip (nothing was run).

What it exercises (issue 38): the default analysis on simulated CPU devices although JAX's own
start-up on a TPU VM picks the chip; ``--target tpu:v5e:2x4``; both beside a process that holds
the chip; ``JAX_PLATFORMS=tpu`` and ``--on tpu`` beside it (one message each); ``report``,
``sweep`` and ``check --what-if`` timed on the chip with ``--on tpu``; the library where JAX
started on the chip; the explorer, driven by Textual's Pilot, on CPU devices and ``--on tpu``.
``tests/test_on_chip.py`` runs the same checks under pytest (skipped without a chip).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"
TIMEOUT_S = 420
HOLDER_READY_S = 120


@dataclass
class Result:
    """One check: whether it passed, what it saw, how long it took."""

    name: str
    ok: bool
    detail: str
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


def tpu_chips() -> int:
    """How many TPU chips this machine has (JAX's own PCI check; 0 without jax or libtpu)."""
    try:
        from jax._src import hardware_utils
    except ImportError:
        return 0
    return hardware_utils.num_available_tpu_chips_and_device_id()[0]


def environment(**changes: str | None) -> dict[str, str]:
    """This process's environment (PYTHONPATH and the TPU_ variables kept) without a platform
    choice of the shell's; ``changes`` set (None removes)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "ALLOW_MULTIPLE_LIBTPU_LOAD")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def shardscope(*args: object, **env: str | None) -> subprocess.CompletedProcess:
    """``python -m shardscope ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=TIMEOUT_S, env=environment(**env))


def python(code: str, *args: str, **env: str | None) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=TIMEOUT_S, env=environment(**env))


def last_json(text: str) -> Any:
    """The last line of ``text`` as JSON (the scripts below print one object last)."""
    return json.loads(text.strip().splitlines()[-1])


def flat(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces (rich wraps at 80)."""
    return " ".join(text.split())


def noise(stderr: str) -> list[str]:
    """Lines of ``stderr`` that are JAX's or libtpu's start-up noise or a traceback."""
    words = ("hugepages", "Traceback", "RuntimeError", "WARNING: could not determine")
    return [line for line in stderr.splitlines() if any(word in line for word in words)]


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    """The command's message and hint (the lines shardscope prints for a user's mistake)."""
    return [line for line in done.stderr.splitlines() if line.startswith(("shardscope: error:", "hint:"))]


class Holder:
    """A process that holds the chip, as a training job or a notebook does, until the block ends."""

    CODE = """
        import sys, time, jax
        jax.devices()  # opens the chip
        print("holding", jax.devices()[0].device_kind, flush=True)
        time.sleep(float(sys.argv[1]))
    """

    def __enter__(self) -> "Holder":
        self.process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(self.CODE), "600"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                                        env=environment())
        assert self.process.stdout is not None
        self.line = self.process.stdout.readline().strip()
        if not self.line.startswith("holding"):
            raise RuntimeError(f"the holder did not open the chip: {self.line!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()
        time.sleep(5)  # the chip can refuse a program started just after its holder ended


# --- the checks --------------------------------------------------------------------------------------

def jax_start_up() -> Result:
    """What JAX itself does here: its platforms after ``import jax`` (JAX_PLATFORMS unset)."""
    done = python("""
        import json, jax
        print(json.dumps({"jax": jax.__version__, "jax_platforms": jax.config.jax_platforms}))
    """)
    data = last_json(done.stdout) if done.returncode == 0 else {}
    hugepages = "hugepages" in done.stderr
    return Result("jax_start_up", done.returncode == 0,
                  f"jax {data.get('jax')}, jax_platforms after import jax: {data.get('jax_platforms')!r}, "
                  f"hugepages warning from JAX: {hugepages}", data={**data, "hugepages_warning": hugepages})


def check_linear() -> Result:
    """``check linear``: on simulated CPU devices (exit 1: the naive plan's all-reduce in its loop)."""
    done = shardscope("check", "linear", "--json")
    data = last_json(done.stdout) if done.stdout.strip() else {}
    compilers = sorted({p.get("compiler") for p in data.get("programs", [])})
    ok = done.returncode == 1 and compilers == ["XLA:CPU"] and not noise(done.stderr)
    return Result("check_linear", ok, f"exit {done.returncode}, compiled by {compilers}, noise {noise(done.stderr)}")


def target_v5e() -> Result:
    """``check gspmd_accumulate --function step --target tpu:v5e:2x4``: libtpu compiles for the slice."""
    done = shardscope("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--target", "tpu:v5e:2x4", "--json")
    slice_ = last_json(done.stdout)["programs"][0]["targets"].get("tpu:v5e:2x4", {}) if done.stdout.strip() else {}
    ok = done.returncode == 0 and slice_.get("devices") == 8 and not noise(done.stderr)
    return Result("target_v5e", ok, f"exit {done.returncode}, {slice_.get('devices')} x {slice_.get('device_kind')}, "
                  f"{error_lines(done) or noise(done.stderr)}")


def beside_a_holder() -> Result:
    """Another process holds the chip: ``--target`` and the default analysis work beside it;
    ``JAX_PLATFORMS=tpu`` and ``--on tpu`` are one message each (exit 2)."""
    with Holder() as holder:
        target = shardscope("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--target", "tpu:v5e:2x4")
        default = shardscope("check", "linear")
        named = shardscope("check", "linear", JAX_PLATFORMS="tpu")
        on = shardscope("report", "linear", "--on", "tpu", "--devices", "1")
    messages = {"JAX_PLATFORMS=tpu": error_lines(named), "--on tpu": error_lines(on)}
    ok = (target.returncode == 0 and default.returncode == 1 and named.returncode == 2 and on.returncode == 2
          and all(len(lines) == 2 and "another process holds" in lines[0] for lines in messages.values())
          and not any(noise(d.stderr) for d in (target, default, named, on)))
    return Result("beside_a_holder", ok,
                  f"holder: {holder.line}; --target exit {target.returncode}, check exit {default.returncode}, "
                  f"JAX_PLATFORMS=tpu exit {named.returncode}, --on tpu exit {on.returncode}; "
                  f"{messages['--on tpu'][:1]}", data={"messages": messages})


def report_on_tpu() -> Result:
    """``report linear --on tpu --devices 1``: timed on the chip, and the note says so."""
    started = time.perf_counter()
    done = shardscope("report", "linear", "--on", "tpu", "--devices", "1", "--json", "-r", "20")
    data = last_json(done.stdout) if done.returncode == 0 else {}
    medians = {name: round(v["run_s"]["median"] * 1e3, 4) for name, v in data.get("variants", {}).items() if v.get("run_s")}
    text = shardscope("report", "linear", "--on", "tpu", "--devices", "1", "-r", "3")
    note = "Timed on one TPU chip" in flat(text.stdout)
    ok = done.returncode == 0 and data.get("backend") == "tpu" and data.get("devices") == 1 and note
    return Result("report_on_tpu", ok, f"backend {data.get('backend')}, devices {data.get('devices')}, "
                  f"median ms {medians}, note beside the timings: {note}; {error_lines(done)}",
                  time.perf_counter() - started, {"median_ms": medians})


def too_few_chips() -> Result:
    """``report linear --on tpu --devices 64``, more chips than one host has: one message (exit 2)
    that names the count JAX opened (a VM can show fewer chips than its PCI bus lists)."""
    done = shardscope("report", "linear", "--on", "tpu", "--devices", "64")
    lines = error_lines(done)
    fits = re.search(r"--devices (\d+) or fewer", lines[1]) if len(lines) == 2 else None
    ok = done.returncode == 2 and fits is not None and 0 < int(fits.group(1)) < 64
    return Result("too_few_chips", ok, f"exit {done.returncode}: {lines}")


def sweep_on_tpu() -> Result:
    """``sweep linear --on tpu --devices 1``: every chunk size timed on the chip."""
    done = shardscope("sweep", "linear", "--on", "tpu", "--devices", "1", "--chunk-sizes", "16,32", "-r", "5")
    note = "Timed on one TPU chip" in flat(done.stdout)
    return Result("sweep_on_tpu", done.returncode == 0 and note,
                  f"exit {done.returncode}, note: {note}; {error_lines(done) or flat(done.stdout)[-160:]}")


def what_if_on_tpu() -> Result:
    """``check gspmd_accumulate --what-if --on tpu --devices 1``: the rewrite timed on the chip."""
    done = shardscope("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--what-if", "--on", "tpu",
                      "--devices", "1")
    measured = [line.strip() for line in done.stdout.splitlines() if "measured here" in line]
    text = flat(done.stdout)
    on_chip = "x TPU" in text[text.find("measured here"):] if measured else False
    return Result("what_if_on_tpu", done.returncode in (0, 1) and (on_chip or not measured),
                  f"exit {done.returncode}; {flat(' '.join(measured))[:200] or 'no rewrite timed'}; {error_lines(done)}")


LIBRARY = """
    # a notebook on the TPU VM: JAX starts as JAX starts it (on the chip), 8 CPU devices beside it
    import json, jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    jax.config.update("jax_num_cpu_devices", 8)

    def step(w, x):
        return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)

    import shardscope, shardscope.testing as st
    out = {"backend": jax.default_backend()}
    w = jnp.ones((16, 4))
    chip = Mesh(np.array(jax.devices()), ("d",))
    x_chip = jax.device_put(jnp.ones((64, 16)), NamedSharding(chip, P("d")))
    out["inspect_on_chip"] = st.collective_counts(jax.jit(step), w, x_chip)
    try:
        st.collective_counts_on("tpu:v5e:2x4", jax.jit(step), w, x_chip)
        out["chip_program_on_v5e"] = "compiled"
    except shardscope.ShardscopeError as exc:
        out["chip_program_on_v5e"] = str(exc)
    cpus = Mesh(np.array(jax.devices("cpu")[:8]), ("d",))
    x_cpu = jax.device_put(jnp.ones((64, 16)), NamedSharding(cpus, P("d")))
    w_cpu = jax.device_put(w, NamedSharding(cpus, P()))
    for target in ("tpu:v5e:2x4", "gpu:h100:8"):
        try:
            out[target] = st.collective_counts_on(target, jax.jit(step), w_cpu, x_cpu)
        except shardscope.ShardscopeError as exc:
            out[target] = str(exc)
    print(json.dumps(out))
"""


def library_on_the_chip() -> Result:
    """The library in a process whose JAX runs on the chip: inspect() of a program on the chip,
    a program on the chip against tpu:v5e:2x4 (one message: trace it over 8 CPU devices), and
    inspect_on over 8 CPU devices beside the chip (one all-reduce of W's gradient per call)."""
    done = python(LIBRARY)
    if done.returncode != 0:
        return Result("library_on_the_chip", False, f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
    out = last_json(done.stdout)
    one = {"all-reduce": 1}
    # A TPU VM seldom has JAX's CUDA plugin (the gpu extra): then gpu:h100:8 is one message saying so.
    no_plugin = isinstance(out["gpu:h100:8"], str) and "CUDA plugin" in out["gpu:h100:8"] and "not installed" in out["gpu:h100:8"]
    targets_ok = all(isinstance(out[t], dict) and {k: n for k, n in out[t].items() if n} == one
                     for t in ("tpu:v5e:2x4",) + (() if no_plugin else ("gpu:h100:8",)))
    message = str(out["chip_program_on_v5e"])
    ok = out["backend"] == "tpu" and isinstance(out["inspect_on_chip"], dict) and targets_ok and \
        "jax_num_cpu_devices" in message
    return Result("library_on_the_chip", ok, json.dumps(out)[:400], data=out)


EXPLORER = """
    import asyncio, json, sys, time
    from shardscope.app import make_app
    from shardscope.app.widgets.status import StatusLine
    from shardscope.cli import open_options

    async def main(argv):
        settings, options = open_options(argv)
        app = make_app(settings, **options)
        async with app.run_test(size=(160, 48)) as pilot:
            deadline = time.monotonic() + 400
            from shardscope.app.widgets.error_panel import ErrorPanel
            while app.analysis is None and not app.query_one(ErrorPanel).message and time.monotonic() < deadline:
                await pilot.pause(0.1)
            await pilot.pause(0.5)
            analysis = app.analysis
            out = {"error": str(app.query_one(ErrorPanel).message or ""),
                   "status": str(app.query_one(StatusLine).render())}
            if analysis is not None:
                out.update(backend=analysis.backend, timed_on=None if analysis.timed_on is None else analysis.timed_on.text(),
                           plans=sorted(analysis.plans))
            return out

    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
"""


def explorer(*argv: str) -> Result:
    """The explorer's first run, driven by Textual's Pilot, with ``argv``."""
    done = python(EXPLORER, *argv)
    name = "explorer" + ("_" + "_".join(a.strip("-") for a in argv if a.startswith("--")) if argv else "")
    if done.returncode != 0:
        return Result(name, False, f"exit {done.returncode}: {done.stderr.strip()[-400:]}")
    out = last_json(done.stdout)
    wanted = "tpu" if "tpu" in argv else "cpu"
    ok = not out["error"] and out.get("backend") == wanted and (wanted == "cpu" or "TPU" in out["status"])
    return Result(name, ok, f"backend {out.get('backend')}, timed on {out.get('timed_on')}, status: "
                  f"{flat(out['status'])[:160]}; error: {out['error'][:200]}", data=out)


CHECKS: dict[str, Callable[[], Result]] = {
    "jax_start_up": jax_start_up,
    "check_linear": check_linear,
    "target_v5e": target_v5e,
    "beside_a_holder": beside_a_holder,
    "report_on_tpu": report_on_tpu,
    "too_few_chips": too_few_chips,
    "sweep_on_tpu": sweep_on_tpu,
    "what_if_on_tpu": what_if_on_tpu,
    "library_on_the_chip": library_on_the_chip,
    "explorer": lambda: explorer("linear"),
    "explorer_on_tpu": lambda: explorer("linear", "--on", "tpu", "--devices", "1"),
}
"""Every check, by name, in the order they run."""


def run_check(name: str) -> Result:
    """Run one check; an exception is a failed check with its words, never the end of the run."""
    started = time.perf_counter()
    try:
        result = CHECKS[name]()
    except Exception as exc:  # a check that broke: say so and go on with the others
        result = Result(name, False, f"{type(exc).__name__}: {exc}")
    result.seconds = result.seconds or time.perf_counter() - started
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks (all, or ``--only``), print a line each and a summary; 0 when all passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), help="run these checks only")
    parser.add_argument("--out", type=Path, help="write every result as JSON here")
    args = parser.parse_args(argv)
    chips = tpu_chips()
    if chips == 0:
        print("on_chip: this machine has no TPU chip (JAX's PCI check found none): nothing to run.", file=sys.stderr)
        return 2
    print(f"on_chip: JAX's PCI check lists {chips} TPU chip(s); shardscope from {ROOT}", flush=True)
    results = []
    for name in args.only or CHECKS:
        result = run_check(name)
        results.append(result)
        print(f"[{' OK ' if result.ok else 'FAIL'}] {name:<20} {result.seconds:6.1f} s  {result.detail}", flush=True)
    passed = sum(r.ok for r in results)
    print(f"on_chip: {passed} of {len(results)} passed"
          + ("" if passed == len(results) else f"; failed: {', '.join(r.name for r in results if not r.ok)}"))
    if args.out:
        args.out.write_text(json.dumps({"chips": chips, "results": [asdict(r) for r in results]}, indent=1))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
