"""Which targets there are: ``--target`` text read as a :class:`~shardscope.targets.base.Target`
(``tpu:v5e:16x16``, ``gpu:h100:2x8``, ``cpu:8``), checked before JAX starts, and loaded as its
compile-only devices.

A new backend is one more :class:`~shardscope.targets.base.Target` subclass in a module of its
own beside :mod:`shardscope.targets.tpu` and one more prefix in :data:`_PARSERS`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from shardscope.errors import SettingsError, TargetError
from shardscope.targets.base import Target, TargetDevices
from shardscope.targets.cpu import parse_cpu
from shardscope.targets.gpu import gpu_examples, parse_gpu
from shardscope.targets.host import plugin_lines_dropped
from shardscope.targets.tpu import parse_tpu, tpu_examples

__all__ = ["TARGET_FORMS", "UnavailableTarget", "checked_targets", "installed_targets", "load_target", "parse_target"]

TARGET_FORMS = "tpu:TOPOLOGY, gpu:NAME:DEVICES or cpu:DEVICES"
"""The forms :func:`parse_target` reads, for messages."""

_PARSERS: dict[str, Callable[[str, str], Target]] = {"tpu": parse_tpu, "gpu": parse_gpu, "cpu": parse_cpu}


def parse_target(text: str) -> Target:
    """``tpu:v5e:16x16`` -> ``TpuTarget("v5e:16x16")``, ``gpu:h100:2x8`` -> ``GpuTarget("h100", 2, 8)``,
    ``cpu:8`` -> ``CpuTarget(8)``; :class:`SettingsError` for anything else.

    Checks the form only (no libtpu or CUDA plugin needed): whether the compiler knows the
    machine is :func:`load_target`'s to say.
    """
    platform, sep, rest = text.strip().partition(":")
    parser = _PARSERS.get(platform.strip().lower())
    if parser is None or not sep:
        raise SettingsError(f"{text!r} is not a target: expected {TARGET_FORMS}.",
                            f"for example {tpu_examples()}, {gpu_examples()}")
    return parser(text, rest)


class UnavailableTarget(TargetError):
    """A target asked for beside others that cannot be compiled for here (its compiler is not
    installed, or does not know the machine): the others run, and this is reported after them."""

    def __init__(self, target: Target, error: TargetError) -> None:
        super().__init__(f"{target} was not compiled for: {error.message}", error.hint, line=error.line)
        self.target = target


def checked_targets(texts: Sequence[str]) -> tuple[Target, ...]:
    """``--target`` values as targets, each once, with what can be told without JAX checked.

    The form and the machine's size come from the names, and the target's compiler (libtpu,
    JAX's CUDA plugin) must be installed: the commands call this before they import the user's
    file and start JAX, so these refusals take a second, not the 20 s that starting JAX and
    libtpu took. Whether the compiler knows the machine is :func:`load_target`'s to say.
    """
    targets, unavailable = installed_targets(texts)
    if unavailable:
        raise unavailable[0]
    return targets


def installed_targets(texts: Sequence[str]) -> tuple[tuple[Target, ...], tuple[UnavailableTarget, ...]]:
    """:func:`checked_targets` for a command that compiles for several targets: those whose
    compiler is installed, and an :class:`UnavailableTarget` for each other, to report after
    the others' results (``--target tpu:v5e:2x4 --target gpu:h100:8`` without libtpu still
    gives the GPU's). A form that does not parse refuses them all (a typo, said before anything
    runs), and so does a missing compiler when it is the only target's."""
    targets = tuple(dict.fromkeys(parse_target(text) for text in texts))
    installed, unavailable = [], []
    for target in targets:
        try:
            target.require_installed()
        except TargetError as exc:
            if len(targets) == 1:
                raise
            unavailable.append(UnavailableTarget(target, exc))
        else:
            installed.append(target)
    if unavailable and not installed:
        raise unavailable[0]
    return tuple(installed), tuple(unavailable)


def load_target(target: Target) -> TargetDevices:
    """The devices of ``target`` (:class:`TargetError` when its compiler is missing or does not know it).

    JAX may load here first (a command loads its targets before the program): the CUDA plugin's
    start-up lines are dropped as :func:`~shardscope.targets.host.request_devices` drops them."""
    with plugin_lines_dropped():
        return target.load()


def targets_with(count: int) -> tuple[str, ...]:
    """``--target`` values of machines with ``count`` devices, for a hint that must be followable:
    a v5e slice of that many chips (2x2 is the smallest libtpu accepts) and H100 hosts."""
    found = [f"tpu:v5e:{_V5E_SLICES[count]}"] if count in _V5E_SLICES else []
    if count <= 8:
        found.append(f"gpu:h100:{count}")
    elif count % 8 == 0 or count % 4 == 0:
        per_host = 8 if count % 8 == 0 else 4
        found.append(f"gpu:h100:{count // per_host}x{per_host}")
    return tuple(found)


_V5E_SLICES = {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
"""The v5e slice shapes Cloud TPU offers, by chip count."""
