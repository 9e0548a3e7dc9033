"""A layouts sweep's candidates compiled in worker processes, each handed the next one as it
finishes, with its result sent back as soon as it is made.

Every worker is a fresh interpreter (``python -m shardscope.pipeline.layout_worker``): it starts
JAX with as many CPU devices as the target has, loads the target's devices, imports the user's
file once, then compiles the candidates it is handed. Tasks and results go over a pipe each way
(``multiprocessing.connection``'s framing of pickles), never over the worker's standard streams,
which the user's file and the compilers may write to; its stderr goes to a file whose last lines
say why it ended, if it ends early. The workers inherit the command's environment, and with it
JAX's persistent compilation cache and the target compiles kept beside it
(:mod:`shardscope.targets.target_cache`). A worker that dies while it compiles (the kernel ends
it for memory) makes that candidate a failed row and is replaced while candidates remain. With
one worker the candidates compile in this process instead: nothing to start, the same results.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import IO, TYPE_CHECKING, Iterator, Sequence

from shardscope.config.layout_candidates import Candidate
from shardscope.errors import ShardscopeError
from shardscope.pipeline.layout_compile import FAILED, CompiledCandidate, compile_candidate

if TYPE_CHECKING:
    from shardscope.sources.layouts import LayoutFunction
    from shardscope.targets.base import TargetDevices

_POLL_S = 0.5
_STDERR_LINES = 5
_STOP_WAIT_S = 0.5
"""How long :meth:`CandidatePool.stop` waits for its workers to end when asked, all told."""
_STOPPING = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
"""The signals that end a worker because the command is being stopped (sent to its process group)."""


@dataclass(frozen=True)
class SweepJob:
    """What a worker needs to compile any candidate: the file, the function's name in it, the
    target's text, the candidates and whether to keep each compiled module's text."""

    path: Path
    function: str
    target: str
    candidates: tuple[Candidate, ...]
    keep_text: bool = False


def compile_here(function: "LayoutFunction", target: "TargetDevices", candidates: Sequence[Candidate],
                 keep_text: bool = False) -> Iterator[CompiledCandidate]:
    """Each candidate compiled in this process, in order."""
    for candidate in candidates:
        yield compile_candidate(function, candidate, target, keep_text)


@dataclass
class _Worker:
    """One worker process, its two pipes, its stderr file and the candidate it compiles."""

    process: subprocess.Popen
    tasks: Connection
    results: Connection
    stderr: IO[bytes]
    compiling: int | None = None
    ready: bool = False

    def said(self) -> str:
        """The last lines the worker wrote to stderr."""
        self.stderr.seek(0)
        lines = [line for line in self.stderr.read().decode("utf-8", "replace").splitlines() if line.strip()]
        return " | ".join(lines[-_STDERR_LINES:])


CORES_PER_COMPILE = 2
"""Cores each candidate's compile is left by default (:func:`default_workers`). XLA compiles one
program on several threads: Llama-2 7B's five v5e-256 candidates, compiled one after another,
kept 1.8 of 2 cores busy and 3.9 of 13. Two compiles side by side on 2 cores took 1.02x and 1.17x
the CPU of JAX's own compiles one after another, and no less time (224 s and 275 s against 245 s
and 247 s); one took 0.99x (258 s against 255 s). Six on 13 cores took 0.85x-0.93x, in 1.2 min
against 1.5 min one after another (BENCHMARKS.md, section 11)."""


def default_workers(cores: int | None = None) -> int:
    """Worker processes for a sweep by default: one per :data:`CORES_PER_COMPILE` of the cores this
    process may run on (``cores``: that count), at least one."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # no affinity mask here (macOS): the machine's count
            cores = os.cpu_count() or 1
    return max(1, cores // CORES_PER_COMPILE)


class CandidatePool:
    """``workers`` processes compiling the candidates of ``job``; :meth:`results` yields each as
    it is made, :meth:`stop` ends the workers (an interrupt keeps what was made)."""

    def __init__(self, job: SweepJob, workers: int) -> None:
        self.job = job
        self.workers = max(1, min(workers, len(job.candidates)))
        self.running: list[_Worker] = []
        self.waiting: deque[int] = deque(range(len(job.candidates)))
        self._stopping = threading.Lock()  # stop() runs in the sweep's thread and in an interrupt's handler

    def results(self) -> Iterator[CompiledCandidate]:
        """Each candidate's result, in the order they finish."""
        try:
            for _ in range(self.workers):
                self._start_worker()
            left = len(self.job.candidates)
            while left:
                ready = wait([worker.results for worker in self.running], timeout=_POLL_S)
                for worker in [w for w in self.running if w.results in ready]:
                    result = self._receive(worker)
                    if result is not None:
                        left -= 1
                        yield result
        finally:
            self.stop()

    def _receive(self, worker: _Worker) -> CompiledCandidate | None:
        """The worker's next message: a result (and the next task sent), or its end."""
        try:
            kind, payload = worker.results.recv()
        except (EOFError, OSError):
            return self._lost(worker)
        if kind == "error":  # it could not start (the file, the target): no candidate will compile
            raise ShardscopeError(*payload)
        if kind == "ready":  # its first task is waiting in its pipe already
            worker.ready = True
            return None
        self._hand_next(worker)
        return payload

    def _hand_next(self, worker: _Worker) -> None:
        worker.compiling = self.waiting.popleft() if self.waiting else None
        worker.tasks.send(worker.compiling)  # None: no more

    def _lost(self, worker: _Worker) -> CompiledCandidate | None:
        """A failed row for the candidate a dead worker was compiling, and a worker in its place."""
        if worker in self.running:  # not when stop() took them all
            self.running.remove(worker)
        code = worker.process.wait()
        index, said = worker.compiling, worker.said()
        self._close(worker)
        if -code in _STOPPING:  # stopped (the command's interrupt stops its workers): no failure of the candidate's,
            # and no end of the sweep either, whose ranking the interrupt prints with the rows done
            raise ShardscopeError(f"A layouts worker process was stopped ({signal.Signals(-code).name}) while it "
                                  "compiled a candidate: the sweep stops with it.",
                                  "run it again; --workers 1 compiles every candidate in this process")
        ended = f"signal {-code}" if code < 0 else f"status {code}"
        if code == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends
            ended += ", as the kernel ends a process that runs out of memory"
        if not worker.ready:  # it died starting: the next one would too
            raise ShardscopeError(f"A layouts worker process ended ({ended}) before it could compile anything"
                                  f"{': ' + said if said else ''}.",
                                  "run with --workers 1 to compile in this process and see the error")
        if index is None:
            return None
        if self.waiting:
            self._start_worker()
        return CompiledCandidate(self.job.candidates[index], FAILED,
                                 f"the worker process compiling it ended ({ended}){': ' + said if said else ''}")

    def _start_worker(self) -> None:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        stderr = tempfile.TemporaryFile()
        process = subprocess.Popen(
            [sys.executable, "-m", "shardscope.pipeline.layout_worker", str(task_read), str(result_write)],
            pass_fds=(task_read, result_write), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        os.close(task_read)
        os.close(result_write)
        worker = _Worker(process, Connection(task_write, readable=False), Connection(result_read, writable=False),
                         stderr)
        worker.tasks.send(self.job)
        self.running.append(worker)
        self._hand_next(worker)

    def stop(self) -> None:
        """End every worker now (their candidates in flight are dropped): asked to end, then, after
        :data:`_STOP_WAIT_S` all told, killed (a worker inside XLA's compile answers no signal
        handler: the command must end within about a second)."""
        with self._stopping:
            running, self.running = list(self.running), []
            for worker in running:
                if worker.process.poll() is None:
                    worker.process.terminate()
            deadline = time.monotonic() + _STOP_WAIT_S
            for worker in running:
                try:
                    worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    worker.process.kill()
                    worker.process.wait()
                self._close(worker)

    @staticmethod
    def _close(worker: _Worker) -> None:
        for end in (worker.tasks, worker.results):
            end.close()
        worker.stderr.close()
