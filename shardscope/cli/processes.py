"""Spawn P local worker processes joined by ``jax.distributed``, and never leave one behind.

Process 0 prints the report (its stdout is ours); the others print nothing. Each worker's
stderr is read by a thread: process 0's progress lines are passed on, and the last lines of
every worker say why it failed if it does. On a worker's failure,
a timeout, Ctrl+C or SIGTERM every worker is ended (SIGTERM, then SIGKILL after a grace period)
before this returns or raises: the coordinator's port closes with process 0.

The coordinator's port is picked free here and bound by process 0 a second or so later; another
process may take it in between. Process 0 then exits with
:data:`~shardscope.distributed.workers.COORDINATOR_PORT_TAKEN` (or crashes, having logged
:data:`GRPC_BIND_FAILURE`), and the workers start again on a port picked anew.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Iterable, Iterator

from shardscope.distributed.workers import COORDINATOR_PORT_TAKEN, WorkerRole
from shardscope.errors import ShardscopeError
from shardscope.distributed.interrupts import register_child, unregister_child

GRACE_S = 1.0
"""How long a worker gets to end after SIGTERM before it is killed."""

PROGRESS_PREFIXES = ("sweep: ", "calibrate: ")
"""Lines of process 0's stderr that are progress, passed on to ours as they come."""

PORT_ATTEMPTS = 5
"""How many coordinator ports a run tries before it gives up (each taken before process 0 bound it)."""

GRPC_BIND_FAILURE = "Failed to add port to server"
"""gRPC's log line on stderr, naming the address, when process 0 cannot listen on the coordinator's
port (``add_port.cc``: "Failed to add port to server: No address added out of total 1 resolved
for '127.0.0.1:PORT'", on jax 0.10.2 and 0.12). Process 0 often dies of SIGSEGV right after
it, before it can say so itself (half of 16 runs on jax 0.10.2 and 0.12: XLA's
``DistributedRuntimeService`` starts its RPC thread even when the server did not start, and
tears both down as ``initialize`` fails): then this line is the sign."""


class WorkerFailed(ShardscopeError):
    """A worker ended with an error; ``exit_status`` is what the CLI should exit with."""

    def __init__(self, message: str, hint: str | None, exit_status: int) -> None:
        super().__init__(message, hint)
        self.exit_status = exit_status


class _PortTaken(Exception):
    """Process 0 could not bind the coordinator's port; ``failure`` says so if no port is left to try."""

    def __init__(self, failure: WorkerFailed) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class _Worker:
    """One spawned worker: its process, the pipe of its stderr and the last lines read from it."""

    process_id: int
    popen: subprocess.Popen[bytes]
    stderr: IO[bytes]
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    reader: threading.Thread | None = None

    def read_stderr(self) -> None:
        """Keep the last lines of the worker's stderr; pass process 0's progress on."""
        for raw in self.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.stderr_tail.append(line)
            if self.process_id == 0 and line.startswith(PROGRESS_PREFIXES):
                print(line, file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_workers(worker_args: list[str], processes: int, timeout_s: float) -> int:
    """Run ``python -m shardscope WORKER_ARGS --worker ...`` as ``processes`` joined workers.

    Returns 0 when every worker succeeds. Raises :class:`WorkerFailed` naming the first worker
    that failed (with its message), or when they do not finish within ``timeout_s`` (all the
    attempts together). When process 0 finds the coordinator's port taken, every worker is ended
    and started again on another port, up to :data:`PORT_ATTEMPTS` ports.
    ``KeyboardInterrupt`` (Ctrl+C, or SIGTERM here) ends every worker and propagates.
    """
    deadline = time.monotonic() + timeout_s
    with _sigterm_as_interrupt():
        for _ in range(PORT_ATTEMPTS - 1):
            with contextlib.suppress(_PortTaken):
                return _attempt(worker_args, processes, deadline, timeout_s)
        try:
            return _attempt(worker_args, processes, deadline, timeout_s)
        except _PortTaken as taken:
            raise taken.failure from None


def _attempt(worker_args: list[str], processes: int, deadline: float, timeout_s: float) -> int:
    """The workers on a coordinator port picked now, waited for; every one ended before this returns."""
    coordinator = f"127.0.0.1:{free_port()}"
    with _workers(worker_args, processes, coordinator) as workers:
        return _wait(workers, coordinator, deadline, timeout_s)


def with_options(argv: list[str], *options: str) -> list[str]:
    """``argv`` with ``options`` added where argparse reads them as options: at the end, or
    before the ``--`` that ends the options when there is one."""
    if "--" in argv:
        end = argv.index("--")
        return [*argv[:end], *options, *argv[end:]]
    return [*argv, *options]


@contextlib.contextmanager
def _workers(worker_args: list[str], processes: int, coordinator: str) -> Iterator[list[_Worker]]:
    workers: list[_Worker] = []
    try:
        for i in range(processes):
            role = WorkerRole(coordinator, processes, i, os.getpid())
            popen = _start(with_options(worker_args, "--worker", role.text()), i)
            assert popen.stderr is not None  # started with stderr=PIPE
            worker = _Worker(i, popen, popen.stderr)
            # Registered before anything a signal can interrupt (starting a thread waits on an
            # event, where SIGTERM's KeyboardInterrupt lands): end_all must reach every worker.
            workers.append(worker)
            register_child(worker.popen)
            reader = threading.Thread(target=worker.read_stderr, name=f"worker-{i}-stderr", daemon=True)
            reader.start()
            worker.reader = reader
        yield workers
    finally:
        end_all(workers)
        for worker in workers:
            unregister_child(worker.popen)
        for worker in workers:
            if worker.reader is not None:
                worker.reader.join(timeout=GRACE_S)
            worker.stderr.close()


def _start(argv: list[str], process_id: int) -> subprocess.Popen[bytes]:
    # Own session: a Ctrl+C in the terminal reaches only us, and we end the workers in order.
    return subprocess.Popen(
        [sys.executable, "-m", "shardscope", *argv],
        stdin=subprocess.DEVNULL,
        stdout=None if process_id == 0 else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _wait(workers: list[_Worker], coordinator: str, deadline: float, timeout_s: float) -> int:
    """0 once every worker has succeeded; raises :class:`WorkerFailed` for the first that failed
    (:class:`_PortTaken` when process 0 could not bind ``coordinator``) or at ``deadline``."""
    running = list(workers)
    while running:
        for worker in list(running):  # in process order: process 0's bind failure is seen first
            code = worker.popen.poll()
            if code is None:
                continue
            running.remove(worker)
            if code == 0:
                continue
            failure = _failure(worker, code, len(workers))  # reads the worker's last lines
            if worker.process_id == 0 and port_taken(code, worker.stderr_tail, coordinator):
                raise _PortTaken(failure)
            raise failure
        if time.monotonic() > deadline:
            raise WorkerFailed(
                f"the {len(workers)} worker processes did not finish within {timeout_s:g} s; all were ended.",
                "raise --timeout, or use fewer --repeats",
                2,
            )
        time.sleep(0.05)
    return 0


def port_taken(code: int, stderr_lines: Iterable[str], coordinator: str) -> bool:
    """Whether process 0, ended with ``code`` after writing ``stderr_lines``, could not listen on
    ``coordinator``: it said so with its exit status, or gRPC did before it crashed."""
    address = f"'{coordinator}'"  # as gRPC quotes it
    return code == COORDINATOR_PORT_TAKEN or any(GRPC_BIND_FAILURE in line and address in line
                                                 for line in stderr_lines)


def _failure(worker: _Worker, code: int, processes: int) -> WorkerFailed:
    """Say which worker failed and why, from the end of its stderr."""
    if worker.reader is not None:
        worker.reader.join(timeout=GRACE_S)  # the worker has ended: its last lines are on their way
    lines = [line.strip() for line in worker.stderr_tail if line.strip()]
    errors = [line.removeprefix("shardscope: error: ") for line in lines if line.startswith("shardscope: error:")]
    hints = [line.removeprefix("hint: ") for line in lines if line.startswith("hint: ")]
    who = f"process {worker.process_id} of {processes}"
    if errors:
        return WorkerFailed(f"{who}: {errors[-1]}", hints[-1] if hints else None, code if code > 0 else 1)
    why = f"ended by signal {-code}" if code < 0 else f"exited with status {code}"
    last = f": {lines[-1]}" if lines else ""
    return WorkerFailed(f"{who} {why}{last}", "run with --debug to see the worker's traceback", 1)


def end_all(workers: list[_Worker]) -> None:
    """SIGTERM every live worker, then SIGKILL whoever is still there after :data:`GRACE_S`."""
    live = [w for w in workers if w.popen.poll() is None]
    for worker in live:
        with contextlib.suppress(ProcessLookupError):
            worker.popen.terminate()
    deadline = time.monotonic() + GRACE_S
    for worker in live:
        try:
            worker.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                worker.popen.kill()
            worker.popen.wait()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While waiting on workers, SIGTERM unwinds like Ctrl+C so the workers are ended."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
