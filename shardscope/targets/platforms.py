"""Which platform JAX runs shardscope's programs on in this process, and who chose it.

shardscope runs (traces, compiles, times) on simulated CPU devices unless the user chose
otherwise: a command's ``--on tpu`` / ``--on gpu``, the environment's ``JAX_PLATFORMS``, or
``jax_platforms`` set in JAX's configuration before shardscope ran.

On a Cloud TPU VM ``import jax`` runs JAX's own ``cloud_tpu_init()``, which writes ``'tpu,cpu'``
into ``jax_platforms`` when nothing set it (``JAX_FORCE_TPU_INIT`` makes it do so on any machine
with libtpu installed). That is JAX's default for the machine, not the user's choice, and is not
read as one: a TPU VM runs shardscope on simulated CPU devices as any host does, and the chip
stays free for the job that holds it.

A platform the user named that JAX cannot start here (no such chip, another process holds the
TPU) is one :class:`~shardscope.errors.SettingsError` naming the setting and the way out.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass

from shardscope.errors import SettingsError

ON_PLATFORMS = ("cpu", "tpu", "gpu")
"""What ``--on`` takes: where a command's programs run and are timed."""

_ON_JAX_PLATFORMS = {"cpu": "cpu", "tpu": "tpu,cpu", "gpu": "cuda,cpu"}
"""The ``jax_platforms`` each ``--on`` value starts: the accelerator first (JAX's default
backend), the CPU's beside it, as JAX itself starts a TPU VM (``'tpu,cpu'``)."""

_CLOUD_TPU_DEFAULT = "tpu,cpu"
"""What JAX's ``cloud_tpu_init()`` writes into ``jax_platforms`` when nothing set it."""

_DEVICE_WORDS = {"cpu": "CPU devices", "tpu": "TPU chips", "gpu": "GPUs", "cuda": "NVIDIA GPUs", "rocm": "AMD GPUs"}

_START_UP_NOISE = (r"Transparent hugepages are not enabled",)
"""JAX's start-up warnings on a TPU host that say nothing about shardscope's results (regexes of
their messages' starts): ``cloud_tpu_init()`` warns about hugepages at every ``import jax`` on a
v5e and newer."""

_LOCK_WORDS = ("lockfile", "already in use")
"""How libtpu says that another process holds the TPU: "Internal error when accessing libtpu
multi-process lockfile" (seen on a v5e VM), "TPU is already in use by process with pid N"."""


@dataclass(frozen=True)
class PlatformChoice:
    """The platforms the user chose for JAX (``jax_platforms``' form: ``tpu,cpu``) and how they said it."""

    platforms: str
    said: str
    """``--on tpu``, ``JAX_PLATFORMS=tpu`` or ``jax_platforms='tpu' in JAX's config``: for messages."""
    flag: bool = False
    """True when the choice is a command's ``--on``."""

    @property
    def first(self) -> str:
        """The platform JAX makes its default: the first named (``tpu`` of ``tpu,cpu``)."""
        return self.platforms.split(",")[0].strip().lower()

    @property
    def cpu_only(self) -> bool:
        """True when JAX is to start its CPU backend alone (shardscope's default)."""
        return {p.strip().lower() for p in self.platforms.split(",") if p.strip()} <= {"cpu"}

    @property
    def way_out(self) -> str:
        """How the user goes back to shardscope's default, simulated CPU devices."""
        if self.flag:
            return f"leave out {self.said} (shardscope runs on simulated CPU devices by default)"
        if self.said.startswith("JAX_PLATFORMS"):
            return "unset JAX_PLATFORMS, or set JAX_PLATFORMS=cpu (shardscope runs on simulated CPU devices by default)"
        return "leave jax_platforms unset (shardscope runs on simulated CPU devices by default)"


_on: PlatformChoice | None = None
"""The command's ``--on``, when it gave one (:func:`run_on`)."""


def run_on(platform: str | None) -> None:
    """Record a command's ``--on PLATFORM`` (None: not given) for this process, before JAX starts.

    It overrides ``JAX_PLATFORMS``: the flag is the more specific word (a cluster's environment
    sets the variable for every job)."""
    global _on
    if platform is None:
        _on = None
        return
    if platform not in ON_PLATFORMS:
        raise SettingsError(f"--on {platform}: shardscope runs on {', '.join(ON_PLATFORMS)}.",
                            "--on tpu or --on gpu times on this machine's chips; --on cpu (the default) on simulated CPU devices")
    _on = PlatformChoice(_ON_JAX_PLATFORMS[platform], f"--on {platform}", flag=True)


def platform_choice() -> PlatformChoice | None:
    """The platforms the user chose: ``--on``, else ``JAX_PLATFORMS``, else ``jax_platforms`` in
    JAX's config (unless JAX's own Cloud TPU start-up wrote it); None when nobody chose."""
    if _on is not None:
        return _on
    jax = sys.modules.get("jax")
    env = os.environ.get("JAX_PLATFORMS", "").strip()
    configured = (jax.config.jax_platforms or "").strip() if jax is not None else env
    if not configured:
        return None
    if env and configured == env:
        return PlatformChoice(env, f"JAX_PLATFORMS={env}")
    if not env and configured == _CLOUD_TPU_DEFAULT and _jax_started_cloud_tpu():
        return None  # JAX's default on a TPU VM, not the user's
    return PlatformChoice(configured, f"jax_platforms={configured!r} in JAX's config")


def jax_platforms() -> str:
    """The ``jax_platforms`` this process's JAX starts with: the user's choice, else ``cpu``."""
    choice = platform_choice()
    return choice.platforms if choice is not None else "cpu"


def runs_on_chips() -> bool:
    """True when the user chose a platform other than the CPU (``--on tpu``, ``JAX_PLATFORMS=tpu``):
    the programs run on the machine's chips, whose count no setting changes."""
    choice = platform_choice()
    return choice is not None and not choice.cpu_only


def _jax_started_cloud_tpu() -> bool:
    """True when ``import jax`` ran JAX's Cloud TPU start-up (a TPU VM, or ``JAX_FORCE_TPU_INIT``)."""
    try:
        from jax._src import cloud_tpu_init
    except ImportError:  # a jax without it writes nothing of its own
        return False
    return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def refuse_absent_platform(choice: PlatformChoice) -> None:
    """:class:`SettingsError` when ``choice`` names a TPU or an NVIDIA GPU and this machine has
    none, told by the PCI check JAX itself makes: before JAX loads libtpu or checks CUDA (whose
    failures print pages of their own). Every platform named counts, not only the first: JAX
    starts them all (``cpu,tpu`` fails on a host without a TPU as ``tpu`` does)."""
    try:
        from jax._src import hardware_utils
    except ImportError:  # a jax without it: JAX's own start says so
        return
    amd = getattr(hardware_utils, "num_available_amd_gpus", lambda stop_at=None: 0)
    for platform in dict.fromkeys(p.strip().lower() for p in choice.platforms.split(",") if p.strip()):
        if platform == "tpu" and hardware_utils.num_available_tpu_chips_and_device_id()[0] == 0:
            raise platform_missing(choice, "this machine has no TPU chip", platform)
        if platform == "cuda" and not hardware_utils.has_visible_nvidia_gpu():
            raise platform_missing(choice, "this machine has no NVIDIA GPU that JAX can see", platform)
        if platform == "gpu" and not hardware_utils.has_visible_nvidia_gpu() and not amd(stop_at=1):
            raise platform_missing(choice, "this machine has no GPU that JAX can see", platform)


def tpu_chips_attached() -> bool:
    """True when this machine has TPU chips, by the PCI check JAX itself makes (nothing started)."""
    try:
        from jax._src import hardware_utils
    except ImportError:  # a jax without it: no way to tell without starting libtpu
        return False
    return hardware_utils.num_available_tpu_chips_and_device_id()[0] > 0


def start_chosen_backend(choice: PlatformChoice) -> None:
    """Start JAX's backend for ``choice`` now; :class:`SettingsError` when its first platform
    does not start here (no such chip, another process holds the TPU), naming the setting."""
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as exc:  # AssertionError: JAX skipped every platform named (no GPU)
        raise platform_missing(choice, str(exc)) from None
    started = jax.default_backend()
    if _canonical(choice.first) != started:  # 'cuda,cpu' without a GPU: JAX skips CUDA and starts the CPU's
        raise platform_missing(choice, f"JAX started {started} only")


def refuse_other_started_backend(choice: PlatformChoice) -> None:
    """:class:`SettingsError` when JAX already started in this process on another platform than
    ``choice``'s first (``--on tpu`` where a notebook's JAX runs on the CPU): the backend cannot
    change once started."""
    import jax

    started = jax.default_backend()
    if _canonical(choice.first) != started:
        raise SettingsError(
            f"{choice.said} asks for {_DEVICE_WORDS.get(choice.first, choice.first)}, but JAX already started on "
            f"{started} in this process.",
            f"choose the platform before JAX starts (JAX_PLATFORMS, or --on in a fresh shardscope command), or {choice.way_out}")


def platform_missing(choice: PlatformChoice, reason: str, platform: str = "") -> SettingsError:
    """The one message for a platform the user named that JAX could not start (``reason``: JAX's
    words; ``platform``: the one missing, else the first named)."""
    missing = platform or choice.first
    words = _DEVICE_WORDS.get(missing, f"{missing} devices")
    if held_elsewhere(reason):
        return SettingsError(
            f"{choice.said} asks JAX for this machine's TPU chips, but another process holds them "
            f"(a training job, a notebook; libtpu: {held_elsewhere_words(reason)}).",
            f"to analyse beside it, {choice.way_out}; --target tpu:... compiles beside it too; "
            "or end that process first")
    return SettingsError(
        f"{choice.said} asks JAX for {words}, and JAX could not start them here: {_jax_reason(reason)}.",
        f"{choice.way_out}; --target tpu:v5e:2x4 or gpu:h100:8 compiles for chips this machine lacks")


def held_elsewhere(error_text: str) -> bool:
    """True when libtpu's error says that another process holds this machine's TPU chips."""
    return any(word in error_text for word in _LOCK_WORDS)


def held_elsewhere_words(error_text: str) -> str:
    """libtpu's lock error in its own words, without its advice to remove the lock file (which
    would let two processes drive the same chips): ``ABORTED: Internal error when accessing
    libtpu multi-process lockfile``."""
    first = _jax_reason(error_text)
    return first.split(' Run "', 1)[0].split(". Run ", 1)[0].rstrip(". ")


def _jax_reason(text: str) -> str:
    """JAX's reason without its wrapper and its advice (``Unable to initialize backend 'tpu': ...
    (set JAX_PLATFORMS='' to ...)``): the part that says what is missing."""
    first = text.strip().splitlines()[0] if text.strip() else "JAX started none of the platforms named"
    if first.startswith("Unable to initialize backend"):
        first = first.split(": ", 1)[-1]
    return first.split(" (set JAX_PLATFORMS", 1)[0].split(" (you may need", 1)[0].rstrip(". ")


def _canonical(platform: str) -> str:
    """The name ``jax.default_backend()`` gives a platform's backend (``cuda`` -> ``gpu``)."""
    return "gpu" if platform in ("cuda", "rocm", "gpu") else platform


def quiet_start_up_warnings() -> None:
    """Leave JAX's start-up warnings on a TPU host (:data:`_START_UP_NOISE`) off the terminal.

    For the ``shardscope`` command, which owns its process (a library call never filters its
    caller's warnings); other warnings, and every error, still reach the user."""
    for message in _START_UP_NOISE:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
