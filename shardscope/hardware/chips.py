"""The chips a target is made of: memory, peak compute per dtype, memory bandwidth, overheads.

Each number says where it comes from (the vendor's published figure, or a measurement), as
:mod:`shardscope.costmodel.interconnects` does for links. Two numbers per TPU generation are
the compiler's own: the HBM that XLA:TPU lets a program use (``usable_memory_bytes``), read from
the message libtpu refuses a program with ("the total memory required for HLO temporaries
(116.47G) exceeds available HBM (15.75G)": G is GiB there), checked for every generation with
libtpu compile-only (jax 0.10.2). A step fits when it needs at most that.

The figures of each chip are in its machine's record, which builds it here: a TPU's in its
generation's (:mod:`shardscope.hardware.tpu_generations`, :func:`tpu_chip`), a GPU's published
peaks in its node's (:mod:`shardscope.hardware.gpu_nodes`) and its memory in its description file
(``gpu_descriptions/h100.txtpb``: its ``device_memory_size`` and ``memory_bandwidth``, a user's
own file too: :func:`gpu_chip`); :mod:`shardscope.hardware.catalogue` looks a chip up. The overheads of a call and of a loop iteration were
measured on a real v5e chip; on the other chips they are assumed alike (unchecked). The CPU's peaks are measured by ``shardscope
calibrate`` (:func:`shardscope.pipeline.calibrate.measure_cpu_chip`).

This module is a value the engine's layer may name (``tests/test_architecture.py``): the
targets layer builds a chip for each target, and the step estimate
(:mod:`shardscope.engine.hlo.roofline`) rests on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shardscope.hardware.checked import MeasuredKind, checked_words, measured_kinds

GIB = 2**30

GATHER_ROW, GATHER_PIECE, GATHER_INDEX = "gather-row", "gather-piece", "gather-index"
"""A gather from a table in main memory: each row (one index's slice), each 128-element piece
of a row, each index component past the first
(:func:`shardscope.engine.hlo.flops.gather_accesses`)."""
ON_CHIP_GATHER_ROW, ON_CHIP_GATHER_PIECE = "on-chip-gather-row", "on-chip-gather-piece"
"""The same from a table the compiler keeps in on-chip memory (``S(1)``) or computes in the fusion."""
WINDOW = "window"
"""The taps of a reduce-window sliding along a tiled dimension (a cumsum over a vector:
:func:`shardscope.engine.hlo.flops.in_tile_window_taps`), one per output element and window element."""
MEMORY_UNITS = frozenset({GATHER_ROW, GATHER_PIECE, GATHER_INDEX})
"""Units whose time adds to an instruction's memory time (row by row accesses of main memory,
beside the bytes it streams), not to its compute."""
ACCESS_UNITS = MEMORY_UNITS | {ON_CHIP_GATHER_ROW, ON_CHIP_GATHER_PIECE}
"""Units that count accesses, not floating-point operations (left out of an instruction's flops)."""

_MEASURED_V5E = ("measured on a real TPU v5e chip here (jax 0.10.2, medians): a jitted scalar add took 0.59 ms per "
                 "call; a fori_loop of 10,000 scalar sines 1.11 ms more than one of 1,000 (0.12 us per iteration), "
                 "of 1,000 128x128 matmuls 0.15 ms more than one of 100 (0.16 us per iteration)")
_ASSUMED = "assumed as measured on v5e; unchecked on this chip"
_DISPATCH = ("measured on a real TPU v5e chip here (jax 0.10.2): 20 calls of a jitted scalar add dispatched back to "
             "back, then waited on once, took ~0.13 ms each (DESIGN.md); the chip runs a call while the host "
             "launches the next")
_LAUNCH_GAP = ("measured on a real TPU v5e chip here (tests/fixtures/tpu_corpus): matmuls of 0.4-4 ms dispatched "
               "back to back took their roofline plus 0.01-0.08 ms each")
_LIBTPU = "the HBM libtpu's compiler lets a program use (its out-of-memory message, jax 0.10.2 compile-only)"


@dataclass(frozen=True)
class Chip:
    """One device of a target: what a step needs to fit and how fast it can go.

    ``peak_flops`` maps an HLO element type (``bf16``, ``f32``) to floating-point operations
    per second of the matrix units; a dtype not listed runs at ``peak_flops["default"]``.
    ``memory_bytes`` is the chip's memory as published, ``usable_memory_bytes`` what its
    compiler lets a program use (None: the published figure). ``call_overhead_s`` is paid once
    per call of the program, ``iteration_overhead_s`` once per iteration of a while loop.
    ``sources`` says where each number comes from.
    """

    name: str
    memory_bytes: int | None
    memory_bandwidth_Bps: float | None
    peak_flops: dict[str, float] = field(default_factory=dict)
    usable_memory_bytes: int | None = None
    call_overhead_s: float = 0.0
    iteration_overhead_s: float = 0.0
    sources: dict[str, str] = field(default_factory=dict)
    checked: str = ""
    """Where the estimate was checked against measured time (empty: unchecked on this chip)."""
    f32_matmul: dict[str, tuple[str, int]] = field(default_factory=dict)
    """How an f32 matmul runs at each precision (``default``, ``high``, ``highest``): the peak
    it runs at (a key of ``peak_flops``) and how many passes it takes (a TPU's bf16 passes, a
    GPU's TF32); empty: at the ``f32`` peak."""
    bandwidth_efficiency: float = 1.0
    """The share of ``memory_bandwidth_Bps`` a memory-bound instruction reaches (measured on
    v5e: elementwise passes, norms, reductions, optimizer updates reach ~0.85 of it)."""
    unit_rates: dict[str, float] = field(default_factory=dict)
    """Operations per second of the units other than the matrix units: ``vector`` (elementwise
    work, random bits, reductions), ``scatter`` (one per update element), a gather's accesses
    (:data:`ACCESS_UNITS`: rows, pieces of rows); a unit not listed runs at the dtype's peak, a
    gather's accesses not listed take no time."""
    dispatch_s: float = 0.0
    """A call's cost when calls are dispatched back to back (a training loop): the host's time
    to launch one, during which the chip runs the previous call (0: as waited on)."""
    outside_band: tuple[MeasuredKind, ...] = ()
    """The kinds of instruction this chip's corpus measured outside the estimate's band, with the
    ratios measured (empty: no corpus, nothing said)."""
    kernel_s: float = 0.0
    """The chip's fixed cost of each kernel it launches (a fusion, a copy, a reduce), beside the
    kernel's work: what makes many small kernels slower than their bytes."""
    argument_s: float = 0.0
    """A call waited on: the host's cost of each array the call takes, beside ``call_overhead_s``."""
    result_s: float = 0.0
    """A call waited on: the host's cost of each array the call returns (made, then waited on)."""
    dispatch_argument_s: float = 0.0
    """Calls back to back: the host's dispatch cost of each array a call takes, beside ``dispatch_s``."""
    dispatch_result_s: float = 0.0
    """Calls back to back: the host's dispatch cost of each array a call returns."""
    launch_gap_s: float = 0.0
    """Calls back to back: how long the chip idles between two of them, beside their work (a TPU's
    ~30 us, measured on v5e; 0: none beyond ``dispatch_s``, the floor of a call back to back)."""

    @property
    def capacity_bytes(self) -> int | None:
        """The bytes a program may use per device: the compiler's usable figure, else the published one."""
        return self.usable_memory_bytes if self.usable_memory_bytes is not None else self.memory_bytes

    def flops_per_s(self, dtype: str) -> float | None:
        """Peak operations per second for ``dtype`` (None when the chip's peaks are unknown)."""
        return self.peak_flops.get(dtype, self.peak_flops.get("default"))

    def rate(self, dtype: str, unit: str, precision: str = "default") -> float | None:
        """Operations per second for work of ``dtype`` on ``unit`` (``matrix``, ``vector``,
        ``scatter``; a gather's accesses only where ``unit_rates`` has them: None elsewhere)."""
        if unit == "matrix":
            return self.matmul_flops_per_s(dtype, precision)
        if unit in ACCESS_UNITS:
            return self.unit_rates.get(unit)
        return self.unit_rates.get(unit) or self.flops_per_s(dtype)

    def matmul_flops_per_s(self, dtype: str, precision: str = "default") -> float | None:
        """The rate a matmul of ``dtype`` operands runs at: int8 and fp8 at their own peaks where
        the chip has them; f32 at ``precision``'s peak divided by its passes (``f32_matmul``)."""
        if dtype == "f32" and precision in self.f32_matmul:
            key, passes = self.f32_matmul[precision]
            peak = self.flops_per_s(key)
            return peak / passes if peak else None
        return self.flops_per_s(_PEAK_KEYS.get(dtype, "fp8" if dtype.startswith("f8") else dtype))

    def to_json(self) -> dict[str, object]:
        """The chip's numbers and their sources, for ``--json``."""
        return {
            "name": self.name, "memory_bytes": self.memory_bytes, "usable_memory_bytes": self.usable_memory_bytes,
            "memory_bandwidth_Bps": self.memory_bandwidth_Bps, "peak_flops": dict(self.peak_flops),
            "call_overhead_s": self.call_overhead_s, "iteration_overhead_s": self.iteration_overhead_s,
            "sources": dict(self.sources), "checked": self.checked, "f32_matmul": dict(self.f32_matmul),
            "unit_rates": dict(self.unit_rates), "bandwidth_efficiency": self.bandwidth_efficiency,
            "dispatch_s": self.dispatch_s, "launch_gap_s": self.launch_gap_s,
        }


_PEAK_KEYS = {"s8": "int8", "u8": "int8", "s4": "int8", "u4": "int8"}
"""Matmul operand types that run at a peak of another name (fp8 types, ``f8e4m3fn`` and the rest: ``fp8``)."""

_TPU_F32 = {"default": ("bf16", 1), "high": ("bf16", 3), "highest": ("bf16", 6)}
_TPU_PRECISION = ("jax.lax.Precision: on TPU an f32 matmul takes 1 bf16 pass at DEFAULT, 3 at HIGH, 6 at HIGHEST; "
                  "measured on v5e (tests/fixtures/tpu_corpus): 4096^3 f32 0.75, 2.21, 4.48 ms back to back, "
                  "against 0.70 ms for one bf16 pass")
_GPU_F32 = {"default": ("tf32", 1), "high": ("tf32", 1), "highest": ("f32", 1)}
_GPU_PRECISION = ("jax.lax.Precision: on A100/H100-class GPUs an f32 matmul runs on TF32 tensor cores at DEFAULT "
                  "and HIGH, in float32 at HIGHEST")


_V5E_BANDWIDTH_EFFICIENCY = 0.85
_V5E_BANDWIDTH = ("measured on a real TPU v5e chip here (tests/fixtures/tpu_corpus, back to back): an elementwise "
                  "GELU over 2x256 MiB, an RMS norm, a column sum and a transpose reached 690-720 GB/s, 0.84-0.88 "
                  "of the published 819 GB/s")
_V5E_VECTOR = 5.7e12
_V5E_SCATTER = 2.8e10
_V5E_RATES = ("measured on a real TPU v5e chip here (tests/fixtures/tpu_corpus, back to back): random bits "
              "(threefry: 4.1e9-11.3e9 elementwise operations in 0.72-2.17 ms) at ~5.7e12 vector operations/s; "
              "a scatter-add of 33.6M f32 update elements in rows of 256 and 1024 at 1.7e10-2.2e10 updates/s (the faster taken: a sort beside it is not modelled)")
_V5E_GATHER_S = {GATHER_ROW: 8.4e-9, GATHER_PIECE: 1.12e-9, GATHER_INDEX: 3.0e-9,
                 ON_CHIP_GATHER_ROW: 2.85e-9, ON_CHIP_GATHER_PIECE: 0.12e-9}
"""Seconds per access of a gather on v5e (:data:`V5E_GATHERS` says from what)."""
V5E_GATHERS = (
    "measured on a real TPU v5e chip here (each gather fusion's own time under jax.profiler, "
    "tests/fixtures/tpu_corpus/v5e_run4): from a table in HBM a gather takes 8.4 ns a row, 1.12 ns a 128-element "
    "piece of a row (bf16 and f32 alike) and 3.0 ns an index component past the first, its writes at the "
    "bandwidth, fitted by least squares on 14 gathers (262,144 rows of 128 bf16 took 2.79 ms, 8,192 rows of 8,192 "
    "bf16 0.86 ms, 32,768 f32 rows of 1,024 0.75 ms, 262,144 take_along_axis elements 3.30 ms): those within "
    "0.94-1.09x, 8 held-out gathers within 0.96-1.09x; from a table kept on the chip (S(1)) 2.85 ns a row and "
    "0.12 ns a piece, or its bytes' time when longer (262,144 rows of 256 bf16 took 0.81 ms, 65,536 rows of "
    "1,024 0.25 ms; a held-out f32 one within 1.05x)")
_V5E_WINDOW = 0.667e12
V5E_WINDOW = (
    "measured on a real TPU v5e chip here (each reduce-window's own time under jax.profiler, "
    "tests/fixtures/tpu_corpus/v5e_run5): a cumsum over a vector, which XLA:TPU writes as a reduce-window of 128 "
    "taps sliding along a tiled dimension, ran its taps (output elements x 128) at 0.64-0.73e12 a second: 16M f32 "
    "3.11 ms, 16M bf16 3.34 ms, 1M f32 0.18 ms (0.667e12 by least squares), a held-out 4M f32 752 us (0.93x the "
    "rate's time); windows sliding over outer dimensions, whole tiles at a time, ran at 1.1-5.4e12 and are left "
    "counted as other reductions")
"""Where the window unit's rate comes from."""
V5E_KERNELS = (
    "measured on a real TPU v5e chip here (tests/fixtures/tpu_corpus/v5e_run5, jax.profiler's module time against "
    "the rooflines of its instructions): clipping by global norm over 30-480 tensors and calls of 30-480 small "
    "arrays took 0.27 us more per kernel outside loops (least squares over 9 programs, 8 to 1,538 kernels); "
    "kernels of near-zero work took 0.33 us each (median of 1,543); a loop's kernels are in its per-iteration "
    "overhead")
V5E_BUFFERS = (
    "measured on a real TPU v5e chip here (tests/fixtures/tpu_corpus/v5e_run5, jax 0.10.2): a call of 480 small "
    "arguments and one result took 0.55 ms more waited on than its chip time and 0.52 ms more back to back than a "
    "one-array call, one of a single argument and 480 results 2.81 ms and 2.05 ms: 1.14 us and 5.86 us per "
    "argument and per result waited on, 1.09 us and 4.28 us back to back (the host makes, hands over and waits on "
    "each array)")
_SCALED_RATES = ("assumed: v5e's measured vector, scatter and gather rates scaled by this chip's bf16 peak and "
                 "memory bandwidth; unchecked on this chip")


def tpu_chip(name: str, *, memory_gib: float, usable_gib: float, bandwidth: float, bf16: float, int8: float | None,
             source: str, measured_on: Chip | None) -> Chip:
    """A TPU generation's chip (its record: :mod:`shardscope.hardware.tpu_generations`): the MXU runs
    bf16 (f32 in 1, 3 or 6 bf16 passes by precision; fp8 operands at the bf16 rate, int8 at its
    published peak where it has one). ``measured_on`` is the chip whose overheads and unit rates
    were measured, scaled here by this chip's bf16 peak and memory bandwidth (None: this chip was
    measured, its own figures the scale)."""
    measured = measured_on is None
    scale_bf16, scale_bandwidth = (bf16, bandwidth) if measured_on is None else \
        (measured_on.peak_flops["bf16"], measured_on.memory_bandwidth_Bps or bandwidth)
    overheads = _MEASURED_V5E if measured else _ASSUMED
    checked = checked_words(name) if measured else ""
    outside_band = measured_kinds(name) if measured else ()
    peaks = {"bf16": bf16, "default": bf16} | ({"int8": int8} if int8 else {})
    return Chip(
        name, int(memory_gib * GIB), bandwidth, peaks, int(usable_gib * GIB),
        call_overhead_s=5.9e-4, iteration_overhead_s=1.6e-7, kernel_s=2.7e-7, argument_s=1.14e-6,
        result_s=5.86e-6, dispatch_argument_s=1.09e-6, dispatch_result_s=4.28e-6, launch_gap_s=3e-5,
        sources={"memory_bytes": source, "memory_bandwidth_Bps": source, "peak_flops": source,
                 "usable_memory_bytes": _LIBTPU, "overheads": overheads, "f32_matmul": _TPU_PRECISION,
                 "dispatch_s": _DISPATCH if measured else _ASSUMED,
                 "launch_gap_s": _LAUNCH_GAP if measured else _ASSUMED,
                 "unit_rates": f"{_V5E_RATES}; {V5E_GATHERS}; {V5E_WINDOW}" if measured else _SCALED_RATES,
                 "kernel_s": V5E_KERNELS if measured else _ASSUMED,
                 "buffers": V5E_BUFFERS if measured else _ASSUMED,
                 "bandwidth_efficiency": _V5E_BANDWIDTH if measured else _ASSUMED}, checked=checked,
        f32_matmul=dict(_TPU_F32), dispatch_s=1.3e-4, bandwidth_efficiency=_V5E_BANDWIDTH_EFFICIENCY,
        outside_band=outside_band,
        unit_rates={"vector": _V5E_VECTOR * bf16 / scale_bf16, WINDOW: _V5E_WINDOW * bf16 / scale_bf16,
                    "scatter": _V5E_SCATTER * bandwidth / scale_bandwidth,
                    **{unit: bandwidth / scale_bandwidth / seconds for unit, seconds in _V5E_GATHER_S.items()}})


GPU_OVERHEADS = ("assumed: 20 us per call and 10 us per loop iteration (kernel launches), and calls back to "
                 "back at least 20 us each with no gap between them; unchecked on any GPU")


_PROTO_FIELD = re.compile(r"^\s*(device_memory_size|memory_bandwidth)\s*:\s*([0-9.eE+]+)\s*$", re.M)


def gpu_chip(name: str, description: str, peaks: dict[str, float] | None = None, source: str = "") -> Chip:
    """A GPU from its description (a ``GpuTargetConfigProto`` in text form: its memory size and
    bandwidth) and its published dense ``peaks`` with their ``source`` (a GPU shardscope describes
    has them in its record, :mod:`shardscope.hardware.gpu_nodes`; None: only the memory-bound part
    of a step can be estimated). An f32 matmul at JAX's default precision runs at the TF32 peak
    (``Chip.f32_matmul``)."""
    fields = {key: float(value) for key, value in _PROTO_FIELD.findall(description)}
    memory = fields.get("device_memory_size")
    peaks = peaks or {}
    described = f"the description's device_memory_size and memory_bandwidth ({name})"
    return Chip(name, int(memory) if memory else None, fields.get("memory_bandwidth"), dict(peaks),
                call_overhead_s=2e-5, iteration_overhead_s=1e-5,
                sources={"memory_bytes": described, "memory_bandwidth_Bps": described,
                         "peak_flops": source or "unknown: a description of a GPU shardscope has no peaks for",
                         "overheads": GPU_OVERHEADS, "f32_matmul": _GPU_PRECISION if "tf32" in peaks else ""},
                f32_matmul=dict(_GPU_F32) if "tf32" in peaks else {}, dispatch_s=2e-5)
