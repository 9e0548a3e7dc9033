"""The bytes one HLO instruction moves to and from the device's main memory, at its boundary.

What it reads (its operands) and writes (its result): a fusion's internals stay in registers and
caches. An operand a fusion reads only through slices counts the slices (a scan reads one step
of its stacked inputs per iteration; a collective matmul loop's step pads its activations and
slices one chunk of them, reading the chunk and none of the padding), a ``dynamic-update-slice`` writes its update in place,
not the whole buffer, XLA:TPU's async collective fusion (a layer's matmul fused with the next
collective's step) moves none of the collective's own buffers (:data:`COLLECTIVE_BUFFERS`), and an array the compiler placed in another memory space than the
device's main memory (a layout with ``S(1)``: a TPU's on-chip VMEM, where XLA:TPU keeps a small
loop's carry) moves none, nor does XLA:TPU's cross-program prefetch of an argument
(:data:`CROSS_PROGRAM_PREFETCH`). Sizes are logical (a TPU's tile padding is left out).
"""

from __future__ import annotations

import re
from math import prod

from shardscope.collective_kinds import NAMES as COLLECTIVE_NAMES
from shardscope.engine.hlo.flops import NO_TRAFFIC_CALLS, OTHER_MEMORY, is_library_matmul
from shardscope.engine.hlo.text import Computation, HloModule, Instruction, Shape

_SLICES = frozenset({"slice", "dynamic-slice", "gather"})
CROSS_PROGRAM_PREFETCH = (
    "XLA:TPU's cross-program prefetch (a copy-start with cross_program_prefetch_index: one argument copied "
    "into on-chip memory) moves no bytes within a call: on a real v5e, with the same argument every call, "
    "embedding_lookup's 65.5 MB prefetch took 14 us of copy-done and none of its 94 us at the bandwidth, and "
    "matmuls with a 33.6-67.1 MB prefetch ran at their compute time (tests/fixtures/tpu_corpus, run 4's profile); "
    "left out, it raised the back-to-back ratio of compute-bound matmuls by up to 0.06 (to 1.03-1.10x), as their "
    "fusion itself took 1.03x its time at the bf16 peak in the profile")
"""Why a cross-program prefetch counts no bytes (measured; an argument that changes between calls was not)."""
COLLECTIVE_BUFFERS = (
    "XLA:TPU's async collective fusion runs one step of a collective beside a fusion's compute: the collective's "
    "operand, its result and the buffers it carries from step to step (fusion parameters passed straight to the "
    "root, aliased to the result) are the ICI's DMA transfers, timed by the interconnect's model, not reads and "
    "writes of the compute. Counted as the fusion's traffic, Llama-shaped 128B over fsdp=16 x tensor=16 on v5e "
    "read 0.54 GB and wrote 1.07 GB per run of a 0.24-Tflop matmul step (bf16[16,2048,512] all-gathered over "
    "tensor into bf16[16,2048,8192], carried twice): 4.8 TB of its 10.4 TB per step")
"""Why a collective's buffers in an async collective fusion count no bytes."""
_ASYNC_COLLECTIVE = re.compile(r'"?AsyncCollective')
"""XLA:TPU's custom calls that start and finish an async collective fusion's collective
(``AsyncCollectiveStart``, ``AsyncCollectiveDone``): parts of the collective."""
_WINDOW_SIZE = re.compile(r"size=([0-9x]+)")
READ_TWICE = (
    "measured on a real TPU v5e chip here (jax.profiler, tests/fixtures/tpu_corpus run 4): a fusion holding "
    "a reduction broadcast back along its axis (a reduce-window spanning it: softmax, x - max(x)) took 1.49-1.57x "
    "its one-pass memory time, as reading its input twice and writing once would (softmax over f32 and bf16 "
    "rows of 512, x - max(x), attention's softmax over rows of 2048)")
"""Why such a fusion reads its operands twice."""


def boundary_bytes(module: HloModule, inst: Instruction) -> float:
    """Bytes one run of ``inst`` reads and writes: operands and result at its boundary."""
    if inst.opcode in ("slice", "dynamic-slice"):
        return 2.0 * memory_bytes(inst.shape)  # reads what it keeps
    if inst.opcode == "dynamic-update-slice":
        return 2.0 * _nbytes(module, inst.operands[1]) if len(inst.operands) > 1 else 0.0
    if inst.opcode == "custom-call" and (inst.attribute("custom_call_target") or "").strip('"') in NO_TRAFFIC_CALLS:
        return 0.0
    if inst.opcode == "copy-start" and inst.attribute("cross_program_prefetch_index") is not None:
        return 0.0  # prefetched between calls (CROSS_PROGRAM_PREFETCH)
    if inst.opcode == "slice-start" and inst.shape.is_tuple and len(inst.shape.elements) > 1:  # ((source), slice, context)
        return float(inst.shape.elements[1].nbytes + memory_bytes(inst.shape.elements[1]))  # reads its slice
    if inst.opcode == "copy-start" and inst.shape.is_tuple and inst.shape.elements:  # (destination, source, context)
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape.elements[0]))
    if is_library_matmul(inst) and inst.shape.is_tuple and inst.shape.elements:  # (result, workspace)
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape.elements[0]))
    if inst.opcode != "fusion":
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape))
    computation = _fused_computation(module, inst)
    if computation is None:
        return float(sum(_nbytes(module, name) for name in inst.operands) + memory_bytes(inst.shape))
    in_place = _updated_in_place(module, computation) | _collective_buffers(computation)
    slices = any(part.opcode in _SLICES or part.opcode == "fusion" for part in computation.instructions)
    parameters = computation.parameters  # by number: a fusion's operand i is its parameter i
    read = 0.0
    for position, name in enumerate(inst.operands):
        parameter = parameters[position] if position < len(parameters) else None
        if parameter is None or parameter.parameter_number != position:
            read += _nbytes(module, name)
        else:
            read += _read_bytes(module, computation, parameter, in_place, slices)
    passes = 2 if _reduces_and_broadcasts(module, computation, 0) else 1
    return passes * read + _written_bytes(module, computation, in_place)


def _reduces_and_broadcasts(module: HloModule, computation: Computation, depth: int) -> bool:
    """True when the fusion (nested fusions too) holds a ``reduce-window`` whose window spans a
    whole dimension: XLA:TPU's reduction broadcast back along its axis (a softmax's max and sum).
    Such a fusion reads its operands twice, once to reduce and once to use the result
    (measured on v5e: :data:`READ_TWICE`)."""
    if depth > 8:
        return False
    for part in computation.instructions:
        if part.opcode == "reduce-window" and _spans_a_dimension(module, part):
            return True
        inner = _fused_computation(module, part) if part.opcode == "fusion" else None
        if inner is not None and _reduces_and_broadcasts(module, inner, depth + 1):
            return True
    return False


def _spans_a_dimension(module: HloModule, inst: Instruction) -> bool:
    """A window at least twice a dimension less one (``size=1023`` over 512, padded 511 each
    side): every output sees the whole dimension."""
    operand = module.instruction(inst.operands[0]) if inst.operands else None
    sizes = _WINDOW_SIZE.search(inst.attribute("window") or "")
    if operand is None or operand.shape.array is None or sizes is None:
        return False
    return any(dim > 1 and int(size) >= 2 * dim - 1
               for size, dim in zip(sizes.group(1).split("x"), operand.shape.array.dims))


def _read_bytes(module: HloModule, computation: Computation, parameter: Instruction, in_place: set[str],
                slices: bool) -> float:
    """What a fusion reads of one operand: nothing of a buffer it updates in place, the slices
    of one it only slices, else all of it."""
    if parameter.name in in_place or OTHER_MEMORY.search(parameter.shape.text):
        return 0.0
    if not slices:
        return float(memory_bytes(parameter.shape))
    sliced = _sliced_bytes(module, computation, parameter, 0)
    return float(memory_bytes(parameter.shape)) if sliced is None else sliced


def _sliced_bytes(module: HloModule, computation: Computation, parameter: Instruction, depth: int) -> float | None:
    """The bytes read of ``parameter`` when every use only slices it (through nested fusions
    too: a scan's fused body slices its layer's weights in an inner fusion; and through the
    views of :data:`_VIEWS`: a collective matmul loop's step pads its activations and slices
    one chunk of them), else None: each element a slice keeps is read once, padding none."""
    array = parameter.shape.array
    if array is None:
        return None
    elements = _sliced_elements(module, computation, parameter, None, depth)
    if elements is None:
        return None
    return float(elements) * array.nbytes / max(array.elements, 1)  # a gather may read a row twice


_VIEWS = frozenset({"bitcast", "reshape", "transpose", "copy", "convert", "pad"})
"""The instructions between a fusion parameter and its slices that read each element they keep
once: a slice of their result reads no more of the parameter than it keeps (a ``pad``'s padding
none of it). XLA's GPU cost model reads a fused parameter so (``GpuHloCostAnalysis``: a
``dynamic-slice`` uses its operand's share, propagated from the root through every non-elementwise
instruction); its generic ``HloCostAnalysis`` stops at the first user that is not a slice and
charges the whole parameter."""


def _sliced_elements(module: HloModule, computation: Computation, value: Instruction,
                     data: tuple[int, ...] | None, depth: int) -> int | None:
    """The elements of ``value`` its uses read when each only slices it (or takes a view of it
    that is then sliced), else None. ``data`` bounds, dimension by dimension, the part of
    ``value`` that holds data rather than a ``pad``'s padding (None: all of it)."""
    users = computation.users.get(value.name, ())
    if not users or depth > 8:
        return None
    total = 0
    for user, position in users:
        kept = user.shape.array
        if user.opcode in _SLICES and position == 0 and kept is not None:
            total += _data_elements(kept.dims, data if user.opcode != "gather" else None)
            continue
        part: int | None
        if user.opcode in _VIEWS and position == 0 and kept is not None:
            part = _sliced_elements(module, computation, user, _view_data(user, value, data), depth + 1)
        else:
            inner = _fused_computation(module, user) if user.opcode == "fusion" else None
            inner_parameters = inner.parameters if inner is not None else []
            if inner is None or position >= len(inner_parameters):
                return None
            part = _sliced_elements(module, inner, inner_parameters[position], data, depth + 1)
        if part is None:
            return None
        total += part
    return total


def _view_data(view: Instruction, value: Instruction, data: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The data bound of ``view``'s result (:func:`_sliced_elements`): a ``pad`` keeps its
    operand's dimensions as data; an elementwise ``convert`` or ``copy`` keeps the bound; a
    view that reorders dimensions drops it (its slices then count every element they keep)."""
    if view.opcode == "pad" and value.shape.array is not None:
        dims = value.shape.array.dims
        return dims if data is None else tuple(min(a, b) for a, b in zip(dims, data))
    return data if view.opcode in ("convert", "copy") else None


def _data_elements(kept: tuple[int, ...], data: tuple[int, ...] | None) -> int:
    """The elements of a slice of ``kept`` dimensions that hold data: at most ``data`` along each
    dimension (a slice through a ``pad`` keeps its padding too)."""
    if data is None or len(data) != len(kept):
        return prod(kept)
    return prod(min(a, b) for a, b in zip(kept, data))


def _written_bytes(module: HloModule, computation: Computation, carried: set[str] | frozenset[str] = frozenset()) -> float:
    """What a fusion writes: its result, an in-place update's update only, none of a collective's
    buffers (``carried``: :func:`_collective_buffers`)."""
    root = computation.root
    if root is None:
        return 0.0
    parts = [module.instruction(name) for name in root.operands] if root.opcode == "tuple" else [root]
    total = 0.0
    for part in parts:
        if part is None or part.name in carried:
            continue
        if part.opcode == "dynamic-update-slice" and len(part.operands) > 1:
            update = module.instruction(part.operands[1])
            total += memory_bytes(update.shape) if update is not None else 0
        else:
            total += memory_bytes(part.shape)
    return total


def _collective_buffers(computation: Computation) -> set[str]:
    """In a fusion that holds a collective (XLA:TPU's async collective fusion), the collective's
    own buffers (:data:`COLLECTIVE_BUFFERS`): its results (and those of the custom calls that
    start and finish it), and the parameters read only by those or passed straight to the root.
    Empty in any other fusion."""
    collectives = {i.name for i in computation.instructions if i.opcode.removesuffix("-start") in COLLECTIVE_NAMES
                   or (i.opcode == "custom-call" and _ASYNC_COLLECTIVE.match(i.attribute("custom_call_target") or ""))}
    root = computation.root
    if not collectives or root is None:
        return set()
    found = set(collectives)
    for parameter in computation.parameters:
        users = computation.users.get(parameter.name, ())
        if all(user.name in collectives or (user is root and root.opcode == "tuple") for user, _ in users):
            found.add(parameter.name)
    return found


def _updated_in_place(module: HloModule, computation: Computation) -> set[str]:
    """The fusion parameters its root updates in place (operand 0 of a root dynamic-update-slice)."""
    root = computation.root
    if root is None:
        return set()
    parts = root.operands if root.opcode == "tuple" else (root.name,)
    found = set()
    for name in parts:
        part = module.instruction(name)
        if part is not None and part.opcode == "dynamic-update-slice" and part.operands:
            buffer = module.instruction(part.operands[0])
            if buffer is not None and buffer.opcode == "parameter":
                found.add(buffer.name)
    return found


def _fused_computation(module: HloModule, inst: Instruction) -> Computation | None:
    name = next((callee for role, callee in inst.called_computations if role == "calls"), None)
    return module.computations.get(name or "")


def _nbytes(module: HloModule, name: str) -> int:
    inst = module.instruction(name)
    return memory_bytes(inst.shape) if inst is not None else 0


def memory_bytes(shape: Shape) -> int:
    """The bytes of ``shape`` that live in the device's main memory (leaves laid out in another
    memory space, ``S(1)``, count none)."""
    if shape.array is not None:
        return 0 if OTHER_MEMORY.search(shape.text) else shape.array.nbytes
    return sum(memory_bytes(element) for element in shape.elements)

