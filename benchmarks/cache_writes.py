"""Benchmark 7c: what one write to the compilation cache costs as the cache fills, with JAX's own
size bound on (``jax_compilation_cache_max_size``) and off (JAX's default, shardscope's setting),
and what shardscope's own bound (:func:`shardscope.distributed.compile_cache.trim`, once per
command) costs at the same sizes.

Each size is a fresh directory holding that many entries as JAX lays them out with its bound on
(``KEY-cache`` and ``KEY-atime``), 4 KiB each (the scan's cost is per entry, not per byte). A
write is ``LRUCache.put`` of one more 4 KiB entry, JAX's own class, the median of the rounds, each
in a directory of the same size.

Run alone: ``python -m benchmarks.cache_writes [--quick | --smoke]``. Not part of ``make bench``.
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

from jax._src.lru_cache import LRUCache  # JAX's own cache class: the write it does

from benchmarks.common import grid, parse_args, write_result
from benchmarks.harness import Benchmark, Column, Prose, Table
from shardscope.distributed.compile_cache import MAX_BYTES, trim

ENTRY_BYTES = 4096
FULL_SIZES, QUICK_SIZES = (100, 1_000, 4_000, 10_000), (100, 1_000)
FULL_ROUNDS, QUICK_ROUNDS = 5, 3


def filled(directory: Path, entries: int) -> Path:
    """``directory`` with ``entries`` entries laid out as JAX's bounded cache writes them."""
    directory.mkdir(parents=True, exist_ok=True)
    value = bytes(ENTRY_BYTES)
    for i in range(entries):
        (directory / f"jit_entry_{i}-cache").write_bytes(value)
        (directory / f"jit_entry_{i}-atime").write_bytes(time.time_ns().to_bytes(8, "little"))
    return directory


def timed_ms(action) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def main(argv: list[str] | None = None) -> None:
    """Measure each size and write ``cache_writes.json``."""
    args = parse_args(__doc__.splitlines()[0], argv)
    sizes = grid(args, FULL_SIZES, QUICK_SIZES, (10,))
    rounds = grid(args, FULL_ROUNDS, QUICK_ROUNDS, 1)
    rows = []
    # JAX's bound locks the directory with the filelock package, which JAX does not require:
    # without it JAX refuses the bound, and only the unbounded write is measured
    bounds = (MAX_BYTES, -1) if importlib.util.find_spec("filelock") else (-1,)
    with tempfile.TemporaryDirectory() as scratch:
        for entries in sizes:
            directory = filled(Path(scratch) / str(entries), entries)
            times: dict[int, list[float]] = {max_size: [] for max_size in bounds}
            trims = []
            for r in range(rounds):  # each write adds an entry: removed again, the directory keeps its size
                for max_size in bounds:
                    key = f"jit_new_{r}_{max_size}"
                    cache = LRUCache(str(directory), max_size=max_size)
                    times[max_size].append(timed_ms(lambda: cache.put(key, bytes(ENTRY_BYTES))))
                    for suffix in ("-cache", "-atime"):
                        (directory / f"{key}{suffix}").unlink(missing_ok=True)
                trims.append(timed_ms(lambda: trim(directory)))
            rows.append({
                "entries": entries,
                "bounded_put_ms": statistics.median(times[MAX_BYTES]) if MAX_BYTES in times else None,
                "unbounded_put_ms": statistics.median(times[-1]),
                "trim_ms": statistics.median(trims),
            })
            print(f"{entries:>6} entries: a write {rows[-1]['bounded_put_ms']} ms with JAX's bound, "
                  f"{rows[-1]['unbounded_put_ms']:.2f} ms without; a trim {rows[-1]['trim_ms']:.1f} ms", flush=True)
    write_result("cache_writes", args, {"rounds": rounds, "entry_bytes": ENTRY_BYTES, "rows": rows})


def _described(writes: dict) -> list[str]:
    load = writes["load_average"]
    return [
        "`python -m benchmarks.cache_writes` (run alone). A write is JAX's `LRUCache.put` of one "
        f"{writes['entry_bytes'] // 1024} KiB entry into a directory holding that many entries, with JAX's size bound "
        "on (`jax_compilation_cache_max_size`: it reads every entry's size and access time under a lock) and off "
        "(JAX's default, and shardscope's setting); shardscope bounds the cache with one pass over it when a "
        f"command starts, at most once an hour (the trim column). Medians of {writes['rounds']} rounds; 1-minute "
        f"load average {load['start']:.1f} -> {load['end']:.1f}.",
    ]


BENCHMARK = Benchmark(
    name="cache_writes",
    heading="One write to the compilation cache, as it fills",
    level=3,
    blocks=(
        Prose(_described),
        Table(
            columns=(
                Column("entries", lambda r: r["entries"], digits=None),
                Column("a write, JAX's bound on", lambda r: "- (no filelock: JAX refuses the bound)"
                       if r["bounded_put_ms"] is None else r["bounded_put_ms"], unit="ms", digits=1, better="lower"),
                Column("a write, bound off", lambda r: r["unbounded_put_ms"], unit="ms", better="lower"),
                Column("one trim", lambda r: r["trim_ms"], unit="ms", digits=1, better="lower"),
            ),
            rows=lambda writes: writes["rows"],
        ),
    ),
)


if __name__ == "__main__":
    main()
