"""What every target is: a machine to compile for (``cpu:8``, ``tpu:v5e:2x4``, ``gpu:h100:8``).

A :class:`Target` is a value (frozen, comparable, printed as the text :func:`parse_target
<shardscope.targets.registry.parse_target>` reads) that knows five things about its machine:

- its devices (:meth:`Target.load`: JAX's CPU devices, or compile-only devices that libtpu or
  JAX's CUDA plugin describe; nothing runs on those);
- how a mesh is laid over them (:meth:`Target.grid`: ``jax.make_mesh``'s layout);
- the platform JAX lowers for (:attr:`Target.lowering_platform`) and the compiler that reads
  the lowered module (:attr:`Target.compiler`);
- what it is made of (:meth:`Target.machine`: one record, its chip and its interconnect's cost
  model, which the consumers ask instead of reading the target's name);
- what its compiled module text looks like (:attr:`Target.module_forms`: the forms of its
  collectives, which :mod:`shardscope.engine.hlo.sites` reads for every target alike).

Lowering and compiling are the same for all of them: :mod:`shardscope.targets.compile` owns
both. A new backend is one more subclass here and one more prefix in ``parse_target``.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import jax
    import numpy as np

    from shardscope.hardware.chips import Chip
    from shardscope.hardware.machines import Machine


class Target(ABC):
    """A machine to compile for; subclasses are frozen dataclasses (a target is a value)."""

    platform: ClassVar[str]
    """``cpu``, ``tpu``, ``gpu``: the target's prefix, and the backend its plans name."""

    lowering_platform: ClassVar[str]
    """The platform JAX lowers for (``cuda`` for a GPU)."""

    compiler: ClassVar[str]
    """The compiler whose plan a verdict on this target judges: ``XLA:TPU``, ``XLA:GPU``."""

    device_noun: ClassVar[str] = "devices"
    """What the target's devices are called in a message: ``chips``, ``GPUs``."""

    extra: ClassVar[str] = ""
    """What installs the compiler next to the user's jax (empty: jax has it)."""

    module_forms: ClassVar[str] = ""
    """How the compiler prints a collective, in words (for a reader adding a form to the parser)."""

    @property
    @abstractmethod
    def topology(self) -> str:
        """Everything after the platform: ``v5e:2x4``, ``h100:2x8``, ``8``."""

    @abstractmethod
    def load(self) -> "TargetDevices":
        """The target's devices (:class:`~shardscope.errors.TargetError` when its compiler is
        missing or does not know the machine)."""

    def grid(self, devices: tuple["jax.Device", ...], shape: tuple[int, ...]) -> "np.ndarray":
        """``devices`` laid out as a mesh of ``shape``, as ``jax.make_mesh`` lays them."""
        return device_grid(devices, shape)

    def compiling(self) -> contextlib.AbstractContextManager[None]:
        """What JAX's configuration must be while XLA compiles for the target (nothing by default)."""
        return contextlib.nullcontext()

    def quiet_log(self) -> bool:
        """True when the log lines the target's compiler writes while it compiles, other than its
        partitioner's (which shardscope reads), are kept off the terminal (none by default)."""
        return False

    def require_installed(self) -> None:
        """:class:`~shardscope.errors.TargetError` unless the target's compiler is installed; told
        without starting JAX, so that the commands refuse before they load the user's file
        (nothing to check by default: jax has the CPU's compiler)."""

    def machine(self, device_kind: str) -> "Machine | None":
        """What the target is made of (one record: its chip and its interconnect's cost model), from
        its devices' ``device_kind``; None where shardscope knows no figures (the CPU's are measured
        by ``shardscope calibrate``)."""
        return None

    def chip(self, device_kind: str) -> "Chip | None":
        """What one of the target's devices has (memory, peaks, overheads): its machine's chip."""
        machine = self.machine(device_kind)
        return None if machine is None else machine.chip

    def text(self) -> str:
        """``tpu:v5e:16x16``: the form ``parse_target`` reads."""
        return f"{self.platform}:{self.topology}"

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class TargetDevices:
    """The devices of a target, in the target's own order."""

    target: Target
    devices: tuple["jax.Device", ...]

    @property
    def count(self) -> int:
        """How many devices (chips; cores on a v7x; GPUs over every host) the target has."""
        return len(self.devices)

    @property
    def device_kind(self) -> str:
        """``TPU v5 lite``, ``NVIDIA H100 80GB HBM3``: what JAX calls the target's devices."""
        return self.devices[0].device_kind


def device_grid(devices: tuple["jax.Device", ...], shape: tuple[int, ...]) -> "np.ndarray":
    """``devices`` as an array of ``shape`` (numpy, dtype object), in ``jax.make_mesh``'s layout.

    ``mesh_utils.create_device_mesh`` orders a TPU slice's chips so that mesh neighbours are ICI
    neighbours (and a GPU cluster's hosts so that the last axes stay in one host); for a shape
    it has no layout for, the target's own order is kept.
    """
    import numpy as np
    from jax.experimental import mesh_utils

    try:
        return mesh_utils.create_device_mesh(shape, devices=list(devices))
    except (AssertionError, ValueError, NotImplementedError):
        return np.array(devices, dtype=object).reshape(shape)
