"""Which devices the timings ran on, and what they measured there.

Times taken on simulated CPU devices and on chips answer different questions. The CPU's
devices are threads of one process: a "collective" between them is a memory copy, so the
times compare the plans' work on this host, not a network. On TPU chips or GPUs (``--on tpu``,
``--on gpu``) each run is the chips' own: the compute and, with two or more of them, the
collectives over their interconnect, as the platform's XLA compiled them. Every rendering of
timings says which it was, with this value's sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import jax

_CHIP_WORDS = {"tpu": ("TPU chip", "the chips' interconnect (ICI)", "XLA:TPU"),
               "gpu": ("GPU", "NVLink or the network between the GPUs", "XLA:GPU")}


@dataclass(frozen=True)
class TimedOn:
    """The devices a program was timed on: ``platform`` (``cpu``, ``tpu``, ``gpu``: JAX's backend),
    what JAX calls each device (``TPU v5 lite``; ``cpu``) and how many the mesh spans."""

    platform: str
    device_kind: str
    devices: int
    processes: int = 1
    """The JAX processes the devices belong to (``--processes``: each its own simulated CPU devices)."""

    @property
    def simulated(self) -> bool:
        """True for JAX's CPU devices: threads of one process, not chips."""
        return self.platform == "cpu"

    def text(self) -> str:
        """``2 simulated CPU devices`` / ``4 x TPU v5 lite``: the devices timed, in a few words."""
        if self.simulated:
            return f"{self.devices} simulated CPU device{'s' if self.devices != 1 else ''}"
        return f"{self.devices} x {self.device_kind}"

    def where(self) -> str:
        """``on 8 simulated CPU devices (a CPU collective is a memory copy between them)`` / ``on 4 x
        TPU v5 lite``: the few words that follow a timing."""
        if self.simulated and self.processes > 1:
            return (f"on {self.text()} in {self.processes} processes (a CPU collective is a memory copy within a "
                    "process and a transfer over this host's loopback between them)")
        if self.simulated:
            return f"on {self.text()} (a CPU collective is a memory copy between them)"
        return f"on {self.text()}"

    def meaning(self) -> str:
        """What the times measured there, in one or two sentences (for the note beside them)."""
        if self.simulated and self.processes > 1:
            return (f"Timed on {self.text()} in {self.processes} processes of this host: a CPU collective is a "
                    "memory copy within a process and a transfer over the loopback between them, not a network's, "
                    "so the times compare the plans' work on this host; --project and --target say what an "
                    "interconnect and a TPU's or GPU's compiler do.")
        if self.simulated:
            return (f"Timed on {self.text()} in one process: a CPU collective is a memory copy between "
                    "them, not a network transfer, so the times compare the plans' work on this host; "
                    "--project and --target say what an interconnect and a TPU's or GPU's compiler do.")
        chip, link, compiler = _CHIP_WORDS.get(self.platform, ("device", "the devices' links", f"XLA:{self.platform.upper()}"))
        if self.devices == 1:
            return (f"Timed on one {chip} ({self.device_kind}): wall-clock per call after warm-up, the program "
                    f"as {compiler} compiled it; with one device no collective crosses {link}.")
        return (f"Timed on {self.text()}: wall-clock per call after warm-up, the program as {compiler} "
                f"compiled it, its collectives over {link}.")


def timed_on(devices: "Sequence[jax.Device]") -> TimedOn:
    """The :class:`TimedOn` of a mesh over ``devices`` (JAX's own, which the programs ran on)."""
    first = devices[0]
    processes = len({getattr(device, "process_index", 0) for device in devices})
    return TimedOn(first.platform, first.device_kind, len(devices), processes)


def timed_on_compiled(compiled: "jax.stages.Compiled") -> TimedOn:
    """The :class:`TimedOn` of a compiled program: the devices its inputs are placed on (JAX's
    default devices' first when it takes no array)."""
    import jax  # the measure layer's users import it anyway; the module itself stays light

    devices: set = set()
    for sharding in jax.tree.leaves(compiled.input_shardings):
        devices |= set(getattr(sharding, "device_set", ()))
    listed = sorted(devices, key=lambda device: device.id) or jax.devices()[:1]
    return timed_on(listed)
