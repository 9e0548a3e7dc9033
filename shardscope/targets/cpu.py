"""The CPU as a target (``cpu:8``): JAX's own CPU devices, the ones shardscope runs and times on.

Every program is compiled for the CPU anyway (its plan is the one timed); as a target it is
the third implementation of :class:`~shardscope.targets.base.Target`, so the CPU's
compile can be put beside a TPU's or a GPU's through the same path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shardscope.errors import SettingsError
from shardscope.targets.host import request_devices
from shardscope.targets.base import Target, TargetDevices


@dataclass(frozen=True)
class CpuTarget(Target):
    """``cpu:8``: eight of JAX's CPU devices."""

    count: int
    platform: ClassVar[str] = "cpu"
    lowering_platform: ClassVar[str] = "cpu"
    compiler: ClassVar[str] = "XLA:CPU"
    module_forms: ClassVar[str] = "plain collectives; a combined all-reduce as one instruction with a tuple of operands"

    @property
    def topology(self) -> str:
        """The device count: ``8``."""
        return str(self.count)

    def load(self) -> TargetDevices:
        """The first :attr:`count` CPU devices (:class:`SettingsError` when JAX started fewer).

        Asks JAX for that many first: a command loads its targets before it starts JAX's backend."""
        import jax

        request_devices(self.count)
        devices = jax.devices("cpu")
        if len(devices) < self.count:
            raise SettingsError(f"{self} needs {self.count} CPU devices; JAX started {len(devices)}.",
                                f"start {self.count} CPU devices (shardscope check --devices {self.count})")
        return TargetDevices(self, tuple(devices[:self.count]))


def parse_cpu(text: str, rest: str) -> CpuTarget:
    """``8`` (from ``text``, ``cpu:8``) -> ``CpuTarget(8)``."""
    if not rest.strip().isdigit() or int(rest) < 1:
        raise SettingsError(f"{text!r} is not a CPU target: expected cpu:DEVICES.", "for example cpu:8")
    return CpuTarget(int(rest))
