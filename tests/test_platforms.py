"""Where the programs run: a TPU VM's own JAX start-up is no choice of the user's, a platform the
user named that is not here is one message, ``--on`` picks the platform, and libtpu's lock
held by another process is said in words.

``JAX_FORCE_TPU_INIT=1`` with libtpu installed runs the start-up JAX runs on a Cloud TPU VM
(``cloud_tpu_init()`` writes ``jax_platforms = 'tpu,cpu'``); before this, every command failed
under it with JAX's RuntimeError. Each case runs in a fresh process: a platform is chosen once
per process, before JAX starts.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from shardscope.targets.compilers import private_libtpu
from shardscope.targets.platforms import PlatformChoice, platform_missing
from test_targets import needs_libtpu, without_cuda_plugin_lines

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"


def _env(**changes: str | None) -> dict[str, str]:
    """This environment without the platform settings a developer's shell may hold, with ``changes``.
    Under JAX's Cloud TPU start-up (``JAX_FORCE_TPU_INIT``) JAX starts libtpu itself, with libtpu's
    own logging: its log files go to a folder of this run's (:func:`_jax_tpu_logs`), not /tmp/tpu_logs."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "JAX_FORCE_TPU_INIT", "ALLOW_MULTIPLE_LIBTPU_LOAD")}
    env.update({k: v for k, v in changes.items() if v is not None})
    if env.get("JAX_FORCE_TPU_INIT") and "TPU_LOG_DIR" not in changes:
        env["TPU_LOG_DIR"] = _jax_tpu_logs()
    return env


@functools.cache
def _jax_tpu_logs() -> str:
    """A folder for the log files libtpu writes when JAX starts it, removed as the worker ends."""
    folder = tempfile.TemporaryDirectory(prefix="shardscope-test-tpu-logs-")
    atexit.register(folder.cleanup)
    return folder.name


def _shardscope(*args: object, timeout: float = 300, **env: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env=_env(**env))


def _one_message(done: subprocess.CompletedProcess) -> str:
    """The command's error, checked to be one message and a hint (exit 2, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "AssertionError" not in done.stderr, done.stderr
    lines = without_cuda_plugin_lines(done.stderr).strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("shardscope: error: ") and lines[1].startswith("hint: "), lines
    return "\n".join(lines)


# --- a Cloud TPU VM's start-up (JAX_FORCE_TPU_INIT) -----------------------------------------------

@needs_libtpu
def test_check_runs_on_simulated_cpu_devices_after_jaxs_cloud_tpu_start_up():
    """``check linear --json`` under JAX_FORCE_TPU_INIT: the naive plan's all-reduce sits in the chunk
    loop (exit 1, as on any CPU host), traced over the 8 CPU devices the command starts; before,
    JAX opened the (absent) TPU and the command died with a RuntimeError."""
    done = _shardscope("check", "linear", "--json", JAX_FORCE_TPU_INIT="1")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert without_cuda_plugin_lines(done.stderr) == ""
    data = json.loads(done.stdout)
    naive = next(p for p in data["programs"] if p["function"] == "linear[naive]")
    assert naive["flagged"]


@needs_libtpu
def test_report_and_a_tpu_target_under_jaxs_cloud_tpu_start_up():
    """``report linear --devices 8 --json``: JAX's CPU backend with 8 devices (the TPU VM's
    'tpu,cpu' would have given one chip, or here none); ``check ... --target tpu:v5e:2x4`` compiles
    for the slice's 8 chips."""
    report = _shardscope("report", "linear", "--devices", "8", "--json", "-r", "1", JAX_FORCE_TPU_INIT="1")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert (data["backend"], data["devices"]) == ("cpu", 8)
    target = _shardscope("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--target", "tpu:v5e:2x4",
                         "--json", JAX_FORCE_TPU_INIT="1")
    assert target.returncode == 0, target.stderr
    on_slice = json.loads(target.stdout)["programs"][0]["targets"]["tpu:v5e:2x4"]
    assert (on_slice["devices"], on_slice["device_kind"]) == (8, "TPU v5 lite")


@needs_libtpu
def test_diff_and_sweep_under_jaxs_cloud_tpu_start_up():
    """The other headless commands: the diff prints, the sweep times on simulated CPU devices."""
    diff = _shardscope("diff", "linear", "-o", "-", JAX_FORCE_TPU_INIT="1")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.strip()
    sweep = _shardscope("sweep", "linear", "--chunk-sizes", "16", "-r", "1", JAX_FORCE_TPU_INIT="1")
    assert sweep.returncode == 0, sweep.stderr
    assert "Timed on 2 simulated CPU devices" in " ".join(sweep.stdout.split())


@needs_libtpu
def test_the_explorer_under_jaxs_cloud_tpu_start_up():
    """The explorer's first run, driven by a Pilot in a fresh process, on 8 CPU devices."""
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "app_first_run.py"), "linear"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=_env(JAX_FORCE_TPU_INIT="1"))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["error"] == "" and out["devices_started"] == 8 and out["mesh"] == "s=2"
    assert out["plans"]["naive"]["runs"] == 2  # the all-reduce in the loop of 2 chunks


# --- a platform the user named that is not here ---------------------------------------------------

@pytest.mark.parametrize(("setting", "words"), [("tpu", "TPU chips"), ("cuda", "NVIDIA GPUs"), ("gpu", "GPUs"),
                                               ("cpu,tpu", "TPU chips")])  # JAX starts every platform named
def test_a_platform_named_in_jax_platforms_that_this_machine_lacks_is_one_message(setting, words):
    """JAX_PLATFORMS=tpu was JAX's RuntimeError, =cuda a bare AssertionError: now one message that
    names the variable and the way back to simulated CPU devices."""
    message = _one_message(_shardscope("check", "linear", JAX_PLATFORMS=setting))
    assert f"JAX_PLATFORMS={setting} asks JAX for {words}" in message
    assert "unset JAX_PLATFORMS, or set JAX_PLATFORMS=cpu" in message


@pytest.mark.parametrize("platform", ["tpu", "gpu"])
def test_on_a_platform_this_machine_lacks_is_one_message(platform):
    """``report --on tpu`` / ``--on gpu`` on a CPU host: the option named, and the way out."""
    message = _one_message(_shardscope("report", "linear", "--on", platform))
    assert f"--on {platform} asks JAX for" in message and f"leave out --on {platform}" in message


def test_on_cpu_times_on_simulated_cpu_devices_and_says_what_a_cpu_collective_is(shardscope_cli):
    """``--on cpu`` is the default spelled out: the report's timings come with what they measured."""
    done = shardscope_cli("report", DEMOS / "linear.py", "--on", "cpu", "-r", "1")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "Timed on 2 simulated CPU devices in one process: a CPU collective is a memory copy between them" in text


def test_on_takes_cpu_tpu_or_gpu_and_not_with_processes(shardscope_cli):
    """argparse refuses another platform; --on tpu with --processes is refused in words."""
    bad = shardscope_cli("report", DEMOS / "linear.py", "--on", "metal")
    assert bad.returncode == 2 and "invalid choice: 'metal'" in bad.stderr
    both = shardscope_cli("report", DEMOS / "linear.py", "--on", "tpu", "--processes", "2")
    assert both.returncode == 2
    assert "--on tpu runs on this machine's chips in one process: it does not go with --processes" in both.stderr


def test_on_a_platform_other_than_the_one_jax_started_on_is_refused(shardscope_cli):
    """In a process whose JAX already runs on the CPU (this one), --on tpu cannot switch it."""
    done = shardscope_cli("check", DEMOS / "linear.py", "--on", "tpu")
    assert done.returncode == 2
    assert "--on tpu asks for TPU chips, but JAX already started on cpu in this process" in done.stderr


# --- another process holds the TPU ------------------------------------------------------------------

LOCK_HELD_BACKEND = ("Unable to initialize backend 'tpu': ABORTED: Internal error when accessing libtpu multi-process "
                     "lockfile. Run \"$ sudo rm /tmp/libtpu_lockfile\". (set JAX_PLATFORMS='' to automatically choose "
                     "an available backend)")
"""JAX's RuntimeError on a TPU v5e VM (JAX 0.10.2, libtpu 0.0.42.1) starting the TPU backend while
another process held the chip, as it printed it."""


def test_the_tpu_backend_held_by_another_process_is_said_so():
    """The message says who holds the chips and how to analyse beside them; never libtpu's advice
    to remove the lock file (which would let two processes drive one chip)."""
    error = platform_missing(PlatformChoice("tpu,cpu", "JAX_PLATFORMS=tpu,cpu"), LOCK_HELD_BACKEND)
    assert "another process holds them" in error.message
    assert "ABORTED: Internal error when accessing libtpu multi-process lockfile" in error.message
    assert "rm /tmp/libtpu_lockfile" not in str(error)
    assert error.hint is not None and "unset JAX_PLATFORMS" in error.hint


_HOLDER = textwrap.dedent("""
    import os, sys, time
    os.environ.update(JAX_PLATFORMS="cpu", TPU_ACCELERATOR_TYPE="v5litepod-4", TPU_WORKER_HOSTNAMES="localhost",
                      TPU_MIN_LOG_LEVEL="3")  # no log files
    from jax.experimental import topologies
    topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2")  # takes libtpu's lock
    print("holding", flush=True)
    time.sleep(float(sys.argv[1]))
""")

_DESCRIBER = textwrap.dedent("""
    from shardscope.errors import TargetError
    from shardscope.targets import registry
    try:
        registry.load_target(registry.parse_target("tpu:v5e:2x2"))
        print("described")
    except TargetError as exc:
        print(str(exc))
""")


def _plain_jaxs_libtpu() -> str | None:
    """What a plain JAX process needs to find the libtpu in shardscope's own folder (where ``make``
    installs it, on no import path): JAX's own ``TPU_LIBRARY_PATH``. None when the folder has none
    (a libtpu package on the path, the tpu extra, is found by JAX itself)."""
    path = private_libtpu()
    return None if path is None else str(path)


def _holding_libtpus_lock(tries: int = 4) -> subprocess.Popen:
    """A process that holds libtpu's lock for two minutes. Another process of the machine may hold it
    for a moment (a CI run failed once when the holder could not take it): the holder is started
    again a few seconds later, and the last one's stderr says why it could not."""
    for attempt in range(tries):
        with tempfile.TemporaryFile("w+") as errors:
            holder = subprocess.Popen([sys.executable, "-c", _HOLDER, "120"], stdout=subprocess.PIPE, stderr=errors,
                                      text=True, cwd=ROOT, env=_env(TPU_LIBRARY_PATH=_plain_jaxs_libtpu()))
            assert holder.stdout is not None
            if holder.stdout.readline().strip() == "holding":
                return holder
            holder.wait()
            errors.seek(0)
            why = errors.read()
        time.sleep(5)
    raise AssertionError(f"no process could take libtpu's lock in {tries} tries; the last one's stderr:\n{why}")


@needs_libtpu
def test_libtpus_lock_held_by_another_process_is_one_message_not_a_version_hint():
    """A process holds libtpu's lock (as a training job does on a TPU VM); describing a slice
    with the lock asked for (ALLOW_MULTIPLE_LIBTPU_LOAD=0, as when this process runs on the TPU)
    fails with libtpu's real lock error: one message that another process holds the chips,
    where it was "libtpu must be the version jax asks for". With shardscope's own setting it
    describes the slice beside the holder."""
    holder = _holding_libtpus_lock()
    try:
        locked = subprocess.run([sys.executable, "-c", _DESCRIBER], capture_output=True, text=True, cwd=ROOT,
                                timeout=300, env=_env(ALLOW_MULTIPLE_LIBTPU_LOAD="0"))
        beside = subprocess.run([sys.executable, "-c", _DESCRIBER], capture_output=True, text=True, cwd=ROOT,
                                timeout=300, env=_env())
    finally:
        holder.kill()
        holder.wait()
    assert "Another process holds this machine's TPU chips" in locked.stdout, locked.stdout + locked.stderr
    assert "multi-process lockfile" in locked.stdout
    assert "libtpu must be the version" not in locked.stdout and "rm /tmp/libtpu_lockfile" not in locked.stdout
    assert beside.stdout.strip() == "described", beside.stdout + beside.stderr


# --- JAX's start-up noise --------------------------------------------------------------------------

def _hugepages_warning() -> str:
    """The text JAX's cloud_tpu_init() warns with on a v5e host without hugepages, read from its source."""
    from jax._src import cloud_tpu_init

    source = inspect.getsource(cloud_tpu_init.cloud_tpu_init)
    parts = re.findall(r"'((?:[^'\\]|\\.)*)'", source[source.index("Transparent hugepages") - 1:].split("\n  )")[0])
    return "".join(parts).replace('\\"', '"')


_WARNED = textwrap.dedent("""
    import sys, warnings
    from shardscope.targets.platforms import quiet_start_up_warnings
    quiet_start_up_warnings()
    warnings.warn_explicit(sys.argv[1], UserWarning, "cloud_tpu_init.py", 88, module="jax._src.cloud_tpu_init")
    warnings.warn_explicit("TPU_LIBRARY_PATH is set to a non-existent path", UserWarning, "cloud_tpu_init.py", 52,
                           module="jax._src.cloud_tpu_init")
""")


def test_jaxs_hugepages_warning_is_left_off_and_other_warnings_are_not():
    """The command's filter drops JAX's own hugepages text (as JAX's source words it) and lets
    another of JAX's start-up warnings through."""
    text = _hugepages_warning()
    assert text.startswith("Transparent hugepages are not enabled.") and "sudo sh -c" in text
    done = subprocess.run([sys.executable, "-W", "default", "-c", _WARNED, text], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env=_env())
    assert done.returncode == 0, done.stderr
    assert "hugepages" not in done.stderr
    assert "TPU_LIBRARY_PATH is set to a non-existent path" in done.stderr


# --- the library in a process whose JAX started first -----------------------------------------------

_STARTED_FIRST = textwrap.dedent("""
    # a script or a notebook: JAX starts as JAX starts it (no JAX_PLATFORMS), its mesh built at import
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    jax.config.update("jax_num_cpu_devices", 8)
    mesh = Mesh(np.array(jax.devices()[:8]), ("d",))
    x = jax.device_put(jnp.ones((64, 16)), NamedSharding(mesh, P("d")))
    w = jnp.ones((16, 4))

    @jax.jit
    def step(w, x):
        return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)

    import shardscope, shardscope.testing as st
    out = {"backend": jax.default_backend(), "cpu": st.collective_counts(step, w, x)}
    for target in sys.argv[1:]:
        try:
            out[target] = st.collective_counts_on(target, step, w, x)
        except shardscope.ShardscopeError as exc:
            out[target] = str(exc)
    out["inspect_on"] = [str(plan.target) for plan in shardscope.inspect_on(list(sys.argv[1:]), step, w, x).targets]
    print(json.dumps(out))
""")


@needs_libtpu
def test_the_library_compiles_for_targets_where_jax_started_first():
    """A script that started JAX with its platforms unset (on this machine JAX's CUDA plugin then
    failed its CUDA check and registered nothing: "topology not implemented for cuda", blamed on
    shardscope's h100.txtpb) gets every target's plan: the gradient of W, its batch split over
    8 devices, is one all-reduce per call (one psum over d), on the CPU, 8 H100s and a v5e:2x4."""
    targets = ["gpu:h100:8", "tpu:v5e:2x4"]
    done = subprocess.run([sys.executable, "-c", _STARTED_FIRST, *targets], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env=_env())
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["backend"] == "cpu"
    for where in ("cpu", *targets):
        assert isinstance(out[where], dict), out[where]
        assert {kind: n for kind, n in out[where].items() if n} == {"all-reduce": 1}, (where, out[where])
    assert out["inspect_on"] == targets


# --- which devices the times came from ---------------------------------------------------------------

def test_the_explorer_names_the_chips_it_timed_on_and_leaves_simulated_devices_to_the_timings_tab():
    """The status line after a run on chips ends in ``on 4 x TPU v5 lite``; on simulated CPU
    devices (the default) it is unchanged, and the Timings tab's note says what a CPU collective is."""
    from rich.text import Text

    from shardscope.app.widgets.status import with_chips
    from shardscope.measure.timed_on import TimedOn

    chips = TimedOn("tpu", "TPU v5 lite", 4)
    assert with_chips(Text("linear.py::linear  mesh s=4"), chips).plain == "linear.py::linear  mesh s=4  on 4 x TPU v5 lite"
    cpu = TimedOn("cpu", "cpu", 2)
    assert with_chips(Text("linear.py::linear  mesh s=2"), cpu).plain == "linear.py::linear  mesh s=2"
    assert "a CPU collective is a memory copy between them" in cpu.meaning()
    assert "with one device no collective crosses the chips' interconnect" in TimedOn("tpu", "TPU v5 lite", 1).meaning()


def test_a_what_ifs_timing_says_it_ran_on_simulated_cpu_devices(shardscope_cli):
    """``check --what-if``: the verified rewrite's timing is followed by the devices it ran on, the
    8 this process started (the demo's mesh), and what a CPU collective is."""
    done = shardscope_cli("check", DEMOS / "gspmd_accumulate.py", "--function", "step", "--what-if", "-r", "2")
    assert done.returncode in (0, 1), done.stderr
    text = " ".join(done.stdout.split())
    measured = text[text.index("measured here:"):]
    assert "on 8 simulated CPU devices (a CPU collective is a memory copy between them)" in measured
