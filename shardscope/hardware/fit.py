"""Whether a step fits in a chip's memory: the bytes it needs per device against what the chip has.

**What a step needs per device.** ``memory_analysis()`` reports the bytes of the executable's
buffer allocations by kind (``argument_size_in_bytes``, ``output_size_in_bytes``,
``temp_size_in_bytes``, ``alias_size_in_bytes``: outputs that reuse a donated argument's
buffer) and a ``peak_memory_in_bytes``. How XLA computes that peak depends on the backend: on
the CPU and GPU PjRt clients it is ``ComputePeakMemorySizes`` over the buffer assignment (the
padded peak of the heap simulator's trace of the temporaries, the xprof memory viewer's
figure: openxla/xla ``xla/pjrt/gpu/se_gpu_pjrt_compiler`` and ``stream_executor_executable``),
which leaves out the arguments and outputs, so shardscope counts ``arguments + outputs +
temporaries - aliases`` there (every argument and output is live on the device during the call)
and takes XLA's peak when it is larger.

libtpu's ``peak_memory_in_bytes`` is the whole of it: the arguments and the one preallocated block
of temporaries its buffer assignment lays out (``--xla_dump_to``'s buffer assignment: Llama-2 70B's
step over fsdp=256 on v5e holds 3.03 GiB of arguments and an 11.05 GiB block of temporaries,
14.08 GiB; the peak says 14.07), and it is the figure libtpu refuses a program by ("the total
memory required for HLO temporaries (16.41G) exceeds available HBM (15.75G)"). Its
``temp_size_in_bytes`` is not the temporaries' peak: 16.50 GiB for that step, 5.45 GiB more than the
block, so the sum above said 19.53 GiB for a step libtpu compiles and runs in 14.07; and 0 for a
small step whose peak holds 2.6 MiB of temporaries. On a TPU shardscope takes the peak (both agree
on a step without loops: 805,306,368 = 3 x 268,435,456 for one argument, one output and one
temporary of 256 MiB; 536,870,912 with the argument donated).

**What the chip has.** A GPU's is what a JAX process may use of it: XLA's allocator takes 75% of
the memory by default, or ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of it (:mod:`shardscope.hardware.gpu_nodes`),
so a step at 79.9 of 80 GiB does not fit. When XLA:GPU's scheduler logs that the arguments and
outputs exceed its limit ("The byte size of input/output arguments (...) exceeds the base limit
(68719476736)"), :func:`compiler_limits` makes it part of the fit, not a raw line on the terminal.
A TPU's from its ``device_kind`` (:mod:`shardscope.hardware.chips`:
libtpu's compile-only devices have no ``memory_stats()``; the table holds what libtpu's
compiler lets a program use, read from its refusals), a GPU's from its description's
``device_memory_size``. When XLA:TPU refuses a step ("RESOURCE_EXHAUSTED: Ran out of memory
on HBM, the total memory required for HLO temporaries (18.64G) exceeds available HBM
(15.75G)"), :func:`refusal_fit` reads both numbers from its message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardscope.hardware.chips import GIB, Chip

_SIZE = r"([0-9.]+)\s*([KMGT]i?B?|B)?"
_REFUSALS = (
    re.compile(rf"required for [^()]*\({_SIZE}\) exceeds available \w+ \({_SIZE}\)"),
    re.compile(rf"Used {_SIZE} of {_SIZE} hbm", re.IGNORECASE),
)
"""libtpu's out-of-memory messages: the bytes needed, then the bytes available ("G" is GiB)."""

_LIMIT = re.compile(r"byte size of input/output arguments \((\d+)\) exceeds the base limit \((\d+)\)")
"""XLA:GPU's scheduler's error (gpu_hlo_schedule.cc) when a module's arguments and outputs exceed its limit."""

_SCALE = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class MemoryFit:
    """A step's bytes per device against its chip's memory.

    ``needed_bytes`` is what the step needs on each device (None: unknown); ``capacity_bytes``
    what the chip lets a program use (None: unknown chip); ``refused`` when the target's
    compiler refused the step for memory, ``message`` its words then.
    """

    chip: str
    needed_bytes: int | None
    capacity_bytes: int | None
    refused: bool = False
    message: str = ""
    allowance: str = ""
    """What the capacity is, where it is not the chip's whole memory (a GPU's JAX pool)."""
    limit: "CompilerLimit | None" = None
    """The compiler's own limit the step's arguments exceed (XLA:GPU's scheduler), if it said so."""

    @property
    def fits(self) -> bool | None:
        """True or False, None when either number is unknown."""
        if self.refused or self.limit is not None:  # the compiler itself says the arguments exceed its limit
            return False
        if self.needed_bytes is None or self.capacity_bytes is None:
            return None
        return self.needed_bytes <= self.capacity_bytes

    def line(self) -> str:
        """``17.7 GiB of 95.7 GiB per device`` (``18 KiB of 15.75 GiB`` for a small one) / ``does not
        fit: 21.3 GiB on a 15.75 GiB v5e chip``."""
        if self.capacity_bytes is None:
            needed = "?" if self.needed_bytes is None else size_words(self.needed_bytes)
            return f"{needed} per device (the {self.chip} chip's memory is unknown)"
        capacity = gib(self.capacity_bytes)
        if self.fits is False:
            refused = " (the compiler refused it)" if self.refused else ""
            needed = "?" if self.needed_bytes is None else size_words(self.needed_bytes)
            return f"does not fit: {needed} on a {capacity} GiB {self.chip} chip{refused}{self._said()}"
        if self.needed_bytes is not None and self.needed_bytes >= GIB:
            return f"{gib(self.needed_bytes)} GiB of {capacity} GiB per device{self._said()}"
        needed = "?" if self.needed_bytes is None else size_words(self.needed_bytes)
        return f"{needed} of {capacity} GiB per device{self._said()}"

    def _said(self) -> str:
        """`` (what JAX may use ...)`` and the compiler's limit, where there are any."""
        said = f" ({self.allowance})" if self.allowance else ""
        return said + (f"; {self.limit.words()}" if self.limit is not None else "")

    def to_json(self) -> dict[str, object]:
        """The fit's numbers."""
        return {"chip": self.chip, "needed_bytes": self.needed_bytes, "capacity_bytes": self.capacity_bytes,
                "fits": self.fits, "refused": self.refused, "message": self.message or None,
                "allowance": self.allowance or None,
                "compiler_limit": None if self.limit is None else self.limit.to_json(), "line": self.line()}


@dataclass(frozen=True)
class CompilerLimit:
    """A compiler's own memory limit that a step's arguments and outputs exceed (XLA:GPU's
    scheduler: ``argument_bytes`` against ``limit_bytes``)."""

    argument_bytes: int
    limit_bytes: int

    def words(self) -> str:
        """``XLA:GPU's scheduler says the arguments and outputs (70 GiB) exceed its limit (64 GiB)``."""
        return (f"XLA:GPU's scheduler says the arguments and outputs ({size_words(self.argument_bytes)}) exceed its "
                f"limit ({size_words(self.limit_bytes)}): it schedules the step as if memory were short")

    def to_json(self) -> dict[str, int]:
        """The two numbers."""
        return {"argument_bytes": self.argument_bytes, "limit_bytes": self.limit_bytes}


def compiler_limits(messages: "tuple[str, ...] | list[str]") -> CompilerLimit | None:
    """The limit XLA:GPU's scheduler said the step's arguments exceed, from its log ``messages``
    (None when it said nothing of the kind)."""
    for message in messages:
        match = _LIMIT.search(message)
        if match:
            return CompilerLimit(int(match.group(1)), int(match.group(2)))
    return None


def live_bytes(memory: dict[str, int]) -> int:
    """Per-device bytes of a ``memory_analysis()`` live at once if nothing is freed early:
    arguments + outputs + temporaries - aliases (the buffers an output shares with its donated
    argument counted once)."""
    return (sum(memory.get(key, 0) for key in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes"))
            - memory.get("alias_size_in_bytes", 0))


def needed_bytes(memory: dict[str, int], platform: str = "") -> int | None:
    """Bytes a step needs per device from ``memory_analysis()``'s numbers (see the module's
    docstring): on a TPU (``platform`` ``tpu``) libtpu's peak; elsewhere arguments + outputs +
    temporaries - aliases, or XLA's peak when larger."""
    if not memory:
        return None
    if platform == "tpu" and memory.get("peak_memory_in_bytes"):
        return memory["peak_memory_in_bytes"]
    return max(live_bytes(memory), memory.get("peak_memory_in_bytes", 0))


def memory_fit(memory: dict[str, int], chip: Chip | None, name: str = "", limit: CompilerLimit | None = None,
               allowance: str = "", platform: str = "") -> MemoryFit:
    """The fit of a compiled step whose ``memory_analysis()`` on ``platform`` (``tpu``, ``gpu``,
    ``cpu``) gave ``memory`` on ``chip`` (what it lets a program use: ``allowance`` says what that
    is where it is not the whole memory), with the compiler's own ``limit`` it exceeds, if any."""
    return MemoryFit(chip.name if chip else name, needed_bytes(memory, platform), chip.capacity_bytes if chip else None,
                     allowance=allowance, limit=limit)


def refusal_fit(message: str, chip: Chip | None, name: str = "") -> MemoryFit | None:
    """The fit a compiler's out-of-memory refusal tells (None when ``message`` is no such refusal)."""
    if "RESOURCE_EXHAUSTED" not in message and "Ran out of memory" not in message:
        return None
    for pattern in _REFUSALS:
        match = pattern.search(message)
        if match:
            needed, available = _bytes(match.group(1), match.group(2)), _bytes(match.group(3), match.group(4))
            return MemoryFit(chip.name if chip else name, needed, available, refused=True,
                             message=_first_line(message))
    return MemoryFit(chip.name if chip else name, None, chip.capacity_bytes if chip else None, refused=True,
                     message=_first_line(message))


def gib(size: int) -> str:
    """``17.7``, ``0.0012``, ``15.75``: bytes in GiB, to three significant figures or two decimals."""
    value = size / GIB
    return f"{value:.2f}".rstrip("0").rstrip(".") if value >= 10 else f"{value:.3g}"


def size_words(size: int) -> str:
    """``21.3 GiB``, ``140 KiB``, ``20 B``: bytes in the largest binary unit they reach, three figures
    (four from 1,000 to 1,023 of a unit: ``1,010 MiB``, never ``1.01e+03``)."""
    if size >= GIB:
        return f"{gib(size)} GiB"
    for scale, unit in ((2**20, "MiB"), (2**10, "KiB")):
        if size >= scale:
            value = size / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    return f"{size} B"


def _bytes(number: str, unit: str | None) -> int:
    return int(float(number) * _SCALE[(unit or "")[:1].upper()])


def _first_line(message: str) -> str:
    text = message.strip().splitlines()[0] if message.strip() else ""
    return text[:300]
