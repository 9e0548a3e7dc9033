"""A layouts sweep's progress on stderr: a bar with the time left in a terminal, a line per
candidate otherwise (a CI log, a pipe).

The time left is the mean wall time of the candidates compiled so far times those left, shared
among the workers (a candidate cut before compiling, or failed, takes no time and is not counted).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, Iterator

from shardscope.engine.hlo.roofline import seconds_words

if TYPE_CHECKING:
    from shardscope.pipeline.layout_compile import CompiledCandidate


class TimeLeft:
    """The estimate of the time left from the candidates done so far."""

    def __init__(self, total: int, workers: int) -> None:
        self.total, self.workers = total, max(1, workers)
        self.done = 0
        self.compiled_s: list[float] = []

    def add(self, result: "CompiledCandidate") -> None:
        """One more candidate done (its compile time counts when it compiled)."""
        self.done += 1
        if result.status in ("compiled", "refused"):
            self.compiled_s.append(result.compile_s)

    def seconds(self) -> float | None:
        """Seconds left (None before a candidate has compiled)."""
        if not self.compiled_s:
            return None
        mean = sum(self.compiled_s) / len(self.compiled_s)
        return mean * (self.total - self.done) / min(self.workers, max(1, self.total - self.done))

    def words(self) -> str:
        """``about 25 min left`` (empty before the first compile ends)."""
        left = self.seconds()
        if left is None or self.done >= self.total:
            return ""
        return f"about {duration_words(left)} left"


def duration_words(seconds: float) -> str:
    """``1 h 5 min``, ``25 min``, ``3 min 20 s``, ``40 s``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    if seconds >= 600:
        return f"{round(seconds / 60)} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return seconds_words(seconds, 2)


def outcome_words(result: "CompiledCandidate") -> str:
    """``compiled in 3 min 2 s``, ``cut: ...``, ``failed: ...``."""
    if result.status == "compiled":
        return f"compiled in {duration_words(result.compile_s)}"
    if result.status == "refused":
        return f"refused for memory by the compiler ({duration_words(result.compile_s)})"
    return f"{result.status}: {result.reason}"


def progress(results: Iterator["CompiledCandidate"], total: int, workers: int,
             keep: Callable[["CompiledCandidate"], None]) -> Iterator["CompiledCandidate"]:
    """``results`` passed through, with progress on stderr; each one ``keep``-t before its line
    says it is done (an interrupt after the line keeps the row it names)."""
    left = TimeLeft(total, workers)
    if not sys.stderr.isatty():
        yield from _lines(results, left, keep)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("layouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[left]}"))
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("layouts", total=total, left="")
        for result in results:
            keep(result)
            left.add(result)
            bar.console.print(f"{result.candidate.label}: {outcome_words(result)}", highlight=False, markup=False)
            bar.update(task, advance=1, left=left.words())
            yield result


def _lines(results: Iterator["CompiledCandidate"], left: TimeLeft,
           keep: Callable[["CompiledCandidate"], None]) -> Iterator["CompiledCandidate"]:
    start = time.perf_counter()
    for result in results:
        keep(result)
        left.add(result)
        rest = left.words()
        print(f"layouts: {left.done}/{left.total} {result.candidate.label}: {outcome_words(result)}"
              f" ({duration_words(time.perf_counter() - start)} so far{'; ' + rest if rest else ''})",
              file=sys.stderr, flush=True)
        yield result
