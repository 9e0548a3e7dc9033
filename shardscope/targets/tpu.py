"""A TPU slice as a target (``tpu:v5e:16x16``): libtpu describes its chips, nothing runs on them.

libtpu (``pip install 'shardscope[tpu]'``) describes any TPU topology as compile-only devices
(``jax.experimental.topologies.get_topology_desc``): XLA's TPU compiler runs for them, nothing
executes on them, so a target has a compiled module and its memory and cost analyses, never
timings. Lowering and compiling are :mod:`shardscope.targets.compile`' (every target's alike).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import ClassVar, Iterator

from shardscope.engine.compile_log import capturing_stderr
from shardscope.hardware.machines import Machine
from shardscope.errors import SettingsError, TargetError, quote_error
from shardscope.targets.base import Target, TargetDevices
from shardscope.targets.compilers import private_libtpu, private_library_path
from shardscope.targets.platforms import held_elsewhere, held_elsewhere_words, jax_platforms
from shardscope.hardware.tpu_generations import chip_config, generation_of
from shardscope.config.settings import check_target_size

TPU_EXTRA = "pip install 'shardscope[tpu]'"
"""What installs libtpu next to the user's own jax (the ``tpu`` extra)."""

TOPOLOGY_EXAMPLES = ("v5e:2x2", "v5e:16x16", "v5p:2x2x2", "v4:2x2x2", "v6e:4x4")
"""Topology names libtpu accepts, for hints: a TPU generation, then chips per dimension."""

_TOPOLOGY_NAME = re.compile(r"^[A-Za-z0-9_ ]+[=_:](?P<chips>[0-9x]+)(_twisted|_untwisted)?$")
"""The form libtpu parses a topology name with (its own message quotes this pattern)."""

_OUR_LOGGING = {"TPU_MIN_LOG_LEVEL": "1", "TPU_STDERR_LOG_LEVEL": "1"}
"""libtpu's warnings to descriptor 2, with :data:`LOG_TO_STDERR` into no file (see :data:`_COMPILE_ONLY_ENV`)."""

_COMPILE_ONLY_ENV = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-4",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    **_OUR_LOGGING,
}
"""What libtpu's start-up reads about the TPU host it runs on, for a machine that is none.

Without the first two it prints two warnings (and an error line with a source trace) straight
to file descriptor 2, which no log level silences; the compiled modules are the same with and
without them, whatever accelerator type is named (checked on v4, v5e, v5p, v6e). Without the
third, libtpu takes /tmp/libtpu_lockfile, which guards a host's chips: a second process (a
test worker, another shardscope) then fails to start it with "Internal error when accessing
libtpu multi-process lockfile". The last two, with ``--logtostderr`` among ``LIBTPU_INIT_ARGS``
(:data:`LOG_TO_STDERR`), send libtpu's warnings to descriptor 2 and into no file: its partitioner's
lines ("Involuntary full rematerialization") are the target's own, read from there as the CPU's
are (:mod:`shardscope.engine.compile_log`), and the rest of what it logs while it compiles is kept
off the terminal (:meth:`TpuTarget.quiet_log`). Without them each process leaves an INFO log file,
and a WARNING one when it compiles, in /tmp/tpu_logs (about what a TPU host would have); no
``TPU_LOG_DIR`` value stops them (one that is no folder, such as ``disabled``, puts them in /tmp
itself: libtpu 0.0.42 and 0.0.50); at level 3 (FATAL) libtpu wrote no file but said nothing of its
partitioner either. A logging variable the user set (:data:`USER_LOGGING`) is kept, with
libtpu's own defaults for the others, and its lines then reach the terminal (:func:`_start_variables`).

Wherever libtpu logs as shardscope set it, the INFO and WARNING lines of its start are kept off
the terminal (:func:`_quiet_start`; its ERROR and FATAL lines pass).

On a TPU host the first two are not set: the host's own variables describe the real machine
there. Where JAX's TPU backend can no longer start in this process (shardscope's default: it sets
``jax_platforms`` to ``cpu`` as it starts JAX, its programs run on simulated CPU devices), its
libtpu is shardscope's compiler alone: the lock is left to the chips' holder
(:data:`_BESIDE_THE_CHIPS`) and it logs as off a TPU host, so that a slice's plan reads its
partitioner's lines (on a v5e VM, left to the host's settings, they went to /tmp/tpu_logs and
``check`` passed a program the slice rematerializes); beside the chips libtpu warns as it starts
about the host (huge pages, the CPU cores it cannot read, the mesh it overrides). Where this
process runs on the TPU, or JAX's platforms are still open (a library caller that loads a target
before JAX starts), libtpu is or may become JAX's, driving the chips: its logging is left to the
host (at WARNING on descriptor 2 it prints lines of its own while it runs programs and frees the
chips, seen on a v5e VM), and a slice's plan cannot read its partitioner's lines."""

_BESIDE_THE_CHIPS = {"ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
"""What a TPU host's libtpu needs to describe a slice beside a process that holds the chips (a
training job, a notebook), when this process does not run on them: the description is
compile-only and opens no chip (checked on a v5e VM beside a holder: v5e:2x4 and v5p:2x2x2)."""

LOG_TO_STDERR = "--logtostderr"
"""libtpu's flag (in ``LIBTPU_INIT_ARGS``) that writes its log to descriptor 2 only, in no file."""

USER_LOGGING = ("TPU_LOG_DIR", "TPU_MIN_LOG_LEVEL", "TPU_STDERR_LOG_LEVEL", "TPU_VMODULE", "TPU_MAX_VLOG_LEVEL")
"""libtpu's logging variables: any the user set means the user asked for libtpu's logs their way."""

_ADDED_NOW: set[str] = set()
"""The variables the start in progress set (:func:`_compile_only_start`): another thread's
:func:`_start_variables` does not read them as the user's."""

_logging_ours: bool | None = None
"""Whether this process's libtpu logs as shardscope set it (:func:`_start_variables`), from its
first start on (None: not started here yet)."""

LARGEST_EXAMPLE = "tpu:v5e:16x16"
"""A slice of 256 chips, for hints about the size limit."""

_PLUGIN_START = threading.Lock()


@dataclass(frozen=True)
class TpuTarget(Target):
    """A slice to compile for: ``tpu:v5e:16x16`` is topology ``v5e:16x16``."""

    name: str
    platform: ClassVar[str] = "tpu"
    device_noun: ClassVar[str] = "chips"
    lowering_platform: ClassVar[str] = "tpu"
    compiler: ClassVar[str] = "XLA:TPU"
    extra: ClassVar[str] = TPU_EXTRA
    module_forms: ClassVar[str] = (
        "plain collectives, -start/-done pairs, async-start wrappers, and async collective fusions "
        "(one collective printed as a start, an overlap and a done fusion sharing a channel_id)")

    @property
    def topology(self) -> str:
        """The topology name libtpu reads: ``v5e:16x16``."""
        return self.name

    def quiet_log(self) -> bool:
        """True when libtpu logs its warnings to descriptor 2 because shardscope asked it to (its
        partitioner's lines are read there): the rest of what it logs while it compiles is kept
        off the terminal. False where the user set libtpu's logging (:data:`USER_LOGGING`)."""
        return bool(_logging_ours)

    def load(self) -> TargetDevices:
        """The slice's chips, from libtpu (started once per process, quietly).

        Raises :class:`TargetError` when libtpu is missing or does not fit the installed jax,
        and when libtpu does not know the topology (its own reason quoted).
        """
        return _load_topology(self.name)

    def require_installed(self) -> None:
        """:class:`TargetError` unless a libtpu is installed (no JAX needed: ``find_spec`` imports nothing)."""
        _require_libtpu()

    def machine(self, device_kind: str) -> Machine:
        """The slice's generation's record (:mod:`shardscope.hardware.tpu_generations`: ``TPU v5
        lite`` is a v5e); a generation shardscope has no figures for has no chip and no ICI model."""
        generation = generation_of(device_kind, self.name)
        if generation is not None:
            return generation.machine()
        return Machine(self.name.partition(":")[0], None, None, "the slice", pads_to_tiles=True)


def parse_tpu(text: str, topology: str) -> TpuTarget:
    """``v5e:16x16`` (from ``text``, ``tpu:v5e:16x16``) -> ``TpuTarget("v5e:16x16")``; the form
    only (no libtpu needed): whether libtpu knows the topology is :meth:`TpuTarget.load`'s to say."""
    topology = topology.strip()
    match = _TOPOLOGY_NAME.match(topology)
    if not match:
        raise SettingsError(
            f"{topology!r} is not a TPU topology name: expected a generation and the chips per dimension.",
            f"for example {tpu_examples()}")
    target = TpuTarget(topology)
    check_target_size(str(target), math.prod(int(n) for n in match["chips"].split("x") if n), "chips", LARGEST_EXAMPLE)
    return target


def tpu_examples() -> str:
    """``tpu:v5e:2x2, tpu:v5e:16x16, ...``: for hints."""
    return ", ".join(f"tpu:{name}" for name in TOPOLOGY_EXAMPLES)


@functools.lru_cache(maxsize=None)
def _load_topology(topology: str) -> TargetDevices:
    target = TpuTarget(topology)
    _require_libtpu()
    with _compile_only_start():
        devices = _topology_devices(target, {})
        config = chip_config(devices[0].device_kind)
        if config is not None:
            devices = _topology_devices(target, {"chip_config_name": config})
    return TargetDevices(target, tuple(devices))


def _topology_devices(target: TpuTarget, options: dict[str, str]) -> list:
    """libtpu's compile-only devices for ``target``'s topology, with its errors in words."""
    from jax.experimental import topologies

    try:
        try:
            return list(topologies.get_topology_desc(platform="tpu", topology_name=target.topology, **options).devices)
        except Exception as exc:  # a slice smaller than a host (v5e:1x1, one chip): its own host bounds
            bounds = one_host_bounds(target.topology)
            if not within_default_host(str(exc), bounds):
                raise
            return list(topologies.get_topology_desc(platform="tpu", topology_name=target.topology,
                                                     chips_per_host_bounds=bounds, **options).devices)
    except Exception as exc:  # JaxRuntimeError INVALID_ARGUMENT for names libtpu does not know
        examples = tpu_examples()
        if "INVALID_ARGUMENT" in str(exc):
            raise TargetError(f"libtpu does not know the topology {target.topology!r}: {quote_error(exc)}",
                              f"for example {examples}") from None
        if held_elsewhere(str(exc)):
            raise chips_held_elsewhere(target, exc) from None
        import jax

        raise TargetError(
            f"libtpu failed to describe {target}: {quote_error(exc)}",
            f"libtpu must be the version jax {jax.__version__} asks for: {TPU_EXTRA} "
            f"(or pip install 'jax[tpu]=={jax.__version__}')") from exc


_HOST_BOUNDS = "chips_per_host_bounds"
"""What libtpu names when a topology does not fill its default host (``v5e:1x1`` "is not
divisible by the given (or default) chips_per_host_bounds 2x2x1")."""


def one_host_bounds(topology: str) -> list[int]:
    """The host bounds of a slice that is one host of its chips alone (``v5e:1x1``: ``[1, 1, 1]``;
    ``v5e:1x2``: ``[1, 2, 1]``): libtpu's default bounds are a whole host of 4 chips or more, and
    a one-chip VM (what many rent) is smaller. libtpu takes them as a list of three integers."""
    dims = [int(d) for d in topology.rpartition(":")[2].split("x")]
    return (dims + [1, 1, 1])[:3]


def within_default_host(message: str, bounds: list[int]) -> bool:
    """True when libtpu refused a topology for its default host bounds (``chips_per_host_bounds
    "2x2x1"``) and the topology fits inside one such host: a slice smaller than a host, not a
    shape no slice has (``v5e:3x3``)."""
    found = re.search(rf'{_HOST_BOUNDS} "(\d+)x(\d+)x(\d+)"', message)
    return found is not None and all(b <= int(d) for b, d in zip(bounds, found.groups()))


def chips_held_elsewhere(target: TpuTarget, exc: BaseException) -> TargetError:
    """The one message for libtpu's lock error: another process holds this machine's TPU chips.

    libtpu's own advice ("Run sudo rm /tmp/libtpu_lockfile") is left out: the lock is the other
    process's, and removing it lets two processes drive the same chips."""
    return TargetError(
        f"Another process holds this machine's TPU chips (a training job, a notebook), and libtpu would not "
        f"start beside it to describe {target} ({held_elsewhere_words(str(exc))}).",
        "shardscope describes a slice beside such a process (ALLOW_MULTIPLE_LIBTPU_LOAD=1) unless this process runs "
        "on the TPU itself (--on tpu, JAX_PLATFORMS naming tpu) or ALLOW_MULTIPLE_LIBTPU_LOAD is set to something "
        "else: leave those out, or end the other process first")


def _require_libtpu() -> None:
    """:class:`TargetError` (exit 2) unless a libtpu is installed (the package or ``TPU_LIBRARY_PATH``)."""
    path = os.environ.get("TPU_LIBRARY_PATH")
    try:
        installed = importlib.util.find_spec("libtpu") is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as none
        installed = False
    if installed or (path and os.path.isfile(path)) or private_libtpu() is not None:
        return
    raise TargetError("Compiling for a TPU target needs libtpu, which is not installed.",
                      f"python -m shardscope.targets.compilers tpu (the libtpu that fits your jax, in shardscope's own "
                      f"folder: plain JAX never loads it), or {TPU_EXTRA} (into site-packages)")


@contextlib.contextmanager
def _compile_only_start() -> Iterator[None]:
    """libtpu started as a compiler only: quiet, and beside other processes that started it.

    The variables are set only while libtpu starts and only where they are unset. On a TPU host
    the host's own describe the real slice: the lock is left to the chips' holder unless this
    process runs on the TPU itself (then the lock guards its own chips), and the logging is made
    shardscope's only once JAX's TPU backend can no longer start here (:data:`_COMPILE_ONLY_ENV`).
    Errors still surface: they are exceptions, not the lines these variables silence.
    """
    global _logging_ours
    # descriptor 2's capture before the start's lock, as load_target takes them (native_stderr's turn, then this)
    with _quiet_start(_logs_ours(_start_variables())), _PLUGIN_START, private_library_path():
        wanted = _start_variables()  # again under the lock: another start's variables are gone by now
        added = {k: v for k, v in wanted.items() if k not in os.environ}
        ours = _logs_ours(wanted)
        before = os.environ.get("LIBTPU_INIT_ARGS")
        if ours:
            os.environ["LIBTPU_INIT_ARGS"] = f"{before} {LOG_TO_STDERR}" if before else LOG_TO_STDERR
        os.environ.update(added)
        _ADDED_NOW.update(added)
        try:
            yield
            if _logging_ours is None:  # libtpu reads its logging variables once, at its first start
                _logging_ours = ours
        finally:
            _ADDED_NOW.clear()
            for name in added:
                os.environ.pop(name, None)
            if ours:
                _restore("LIBTPU_INIT_ARGS", before)


def _logs_ours(wanted: dict[str, str]) -> bool:
    """Whether libtpu started with ``wanted`` logs as shardscope sets it (:data:`_OUR_LOGGING`)."""
    return _OUR_LOGGING.keys() <= wanted.keys()


@contextlib.contextmanager
def _quiet_start(ours: bool) -> Iterator[None]:
    """libtpu's INFO and WARNING lines while it starts kept off the terminal, where its logging is
    shardscope's (``ours``, on any machine): beside TPU chips it warns about the host then, and none
    of it concerns a plan. Its ERROR and FATAL lines pass (a FATAL one comes with no exception)."""
    if not ours:
        yield
        return
    with capturing_stderr(quiet=True, quieted="IW", doing="starting libtpu"):
        yield


def _restore(name: str, value: str | None) -> None:
    """``name`` in the environment as it was (``value``; None: unset)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _start_variables() -> dict[str, str]:
    """What libtpu's start needs here: all of :data:`_COMPILE_ONLY_ENV` on a machine without TPU
    chips; on a TPU host nothing where this process drives the chips, else the lock left to another
    holder, and shardscope's logging once JAX's TPU backend can no longer start here. A logging
    variable the user set keeps libtpu's logging theirs."""
    users = any(name in os.environ and name not in _ADDED_NOW for name in USER_LOGGING)  # the user asked for libtpu's logs their way
    if not _tpu_chips_attached():
        return {k: v for k, v in _COMPILE_ONLY_ENV.items() if not (users and k in USER_LOGGING)}
    if _runs_on_tpu():
        return {}
    return _BESIDE_THE_CHIPS if users or not _tpu_backend_ruled_out() else {**_BESIDE_THE_CHIPS, **_OUR_LOGGING}


def _runs_on_tpu() -> bool:
    """True when this process runs (or will run) its programs on the TPU: the user chose it
    (``--on tpu``, ``JAX_PLATFORMS``), or JAX's TPU backend has started here."""
    from jax._src import xla_bridge

    platforms = {p.strip().lower() for p in jax_platforms().split(",")}
    return "tpu" in platforms or "tpu" in getattr(xla_bridge, "_backends", {})


def _tpu_backend_ruled_out() -> bool:
    """True when JAX's TPU backend can no longer start in this process: JAX's backends started
    without it, or its platforms are set without it (shardscope sets ``cpu`` as it starts JAX)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():  # all of them: _backends fills while they start
        return "tpu" not in getattr(xla_bridge, "_backends", {})
    platforms = {p.strip().lower() for p in (jax.config.jax_platforms or "").split(",") if p.strip()}
    return bool(platforms) and "tpu" not in platforms


def _tpu_chips_attached() -> bool:
    """True when this machine has TPU chips, by the PCI check JAX itself makes at import."""
    try:
        from jax._src import hardware_utils
    except ImportError:  # a jax without it: assume a TPU host, whose own variables describe the slice
        return True
    return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0
