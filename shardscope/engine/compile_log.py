"""The log lines XLA's partitioner prints while a module compiles, kept from the terminal (and
XLA:GPU's scheduler's error when a module's arguments exceed its memory limit: a finding, not a
raw line).

XLA's C++ logging writes to file descriptor 2 (``spmd_partitioner.cc``'s "Involuntary full
rematerialization"): Python's ``sys.stderr`` never sees it, so :func:`capturing_stderr` points
descriptor 2 at a pipe for the compile (:mod:`shardscope.native_stderr`, whose redirects take
turns: descriptor 2 is the process's) and keeps the partitioner's lines; every other byte goes on
to the real descriptor 2 as it comes (the user's own output, and the explorer's screen, which
Textual draws on stderr while a worker thread compiles). Should XLA abort the process meanwhile,
the sentinel of :mod:`shardscope.engine.compile_abort` writes what its FATAL line left in the pipe.
"""

from __future__ import annotations

import array
import fcntl
import os
import re
import select
import termios
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from shardscope.engine.compile_abort import Watched, watched
from shardscope.native_stderr import stderr_into

_LOG_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+(?P<thread>\d+) (?P<file>[\w.+-]+):\d+\] (?P<message>.*)$")
"""A C++ log line (glog's prefix: level and date, time, thread, source file and line). A file's
name may hold a hyphen: libtpu's ``page-size.cc`` warns as it starts on a host without huge pages."""
_PARTITIONER_FILES = ("spmd_partitioner", "sharding_propagation", "shardy", "sdy_")
_LIMIT_FILES = ("gpu_hlo_schedule",)
"""XLA:GPU's scheduler, which logs an error when a module's arguments and outputs exceed its
memory limit ("The byte size of input/output arguments (...) exceeds the base limit (...)")."""

LIMIT_MARK = "[compiler limit] "
"""What a kept limit line's message starts with among the captured messages (told apart from
the partitioner's by :func:`limit_messages` and :func:`partitioner_only`)."""


_ABOUT_THE_COMPILER = ("Module contains sdy shardings or meshes in frontend_attributes",)
"""Lines of the partitioner's files that say something of the compiler, not of the program: the
libtpu that jaxlib 0.10.2 installs writes the first for every module JAX lowers with Shardy, and
turns its own newer sharding form off (\"Disabling HloShardingV3 here\"), which changes nothing
the user wrote."""


def _kept(line: "re.Match[str]") -> str | None:
    """The message a log line (:data:`_LOG_LINE`'s match) keeps from the terminal: the
    partitioner's (``W1204 ... spmd_partitioner.cc:656] [SPMD] ...``), or one of the compiler's
    limit errors (marked with :data:`LIMIT_MARK`); None for any other line."""
    source, message = line.group("file"), line.group("message")
    if source.startswith(_PARTITIONER_FILES):
        return None if message.startswith(_ABOUT_THE_COMPILER) else message
    if source.startswith(_LIMIT_FILES):
        return LIMIT_MARK + message
    return None


def partitioner_only(messages: tuple[str, ...]) -> tuple[str, ...]:
    """The partitioner's among kept ``messages``."""
    return tuple(m for m in messages if not m.startswith(LIMIT_MARK))


def limit_messages(messages: tuple[str, ...]) -> tuple[str, ...]:
    """The compiler's limit errors among kept ``messages``, without their mark."""
    return tuple(m.removeprefix(LIMIT_MARK) for m in messages if m.startswith(LIMIT_MARK))


QUIETED = "IWE"
"""The levels of the log lines a quiet capture drops by default. A FATAL line is never dropped nor
kept, by any capture, even the partitioner's (the process aborts after it, with no exception to say
why): it goes on to the terminal."""


@contextmanager
def capturing_stderr(quiet: bool = False, quieted: str = QUIETED, doing: str = "") -> Iterator[list[str]]:
    """Descriptor 2 into a pipe for the body; yields the list that receives the messages of the
    partitioner's lines printed meanwhile (complete when the body ends). Everything else goes
    on to the real descriptor 2 as it arrives: the explorer draws its screen there (Textual
    writes to ``sys.__stderr__``) while a worker thread compiles, so only a C++ log line is
    held, until its end, to be told apart. ``quiet``: the body's other C++ log lines are
    dropped (a compiler asked to log only so that its partitioner's lines are read), those whose
    level ``quieted`` names (``IW``: errors pass too). ``doing``: what the body does when it is not
    a compile, as the sentinel's line says it should XLA abort the process meanwhile (``starting libtpu``).

    In a thread that takes part in compiles run at once (:func:`compiling_beside`), the pipe is
    theirs: the list receives the lines its own side wrote while the body ran."""
    shared, host = _SIDES.shared, _SIDES.host
    if shared is not None and host is not None:
        with shared.window(host, quiet, quieted) as own:
            yield own
        return
    captured: list[str] = []
    with _piped(lambda thread, message: captured.append(message), lambda thread, level: quiet and level in quieted,
                doing):
        yield captured


def _never(thread: int, level: str) -> bool:
    return False


@contextmanager
def _piped(keep: "Callable[[int, str], None]", drop: "Callable[[int, str], bool]" = _never,
           doing: str = "") -> "Iterator[_Forwarder]":
    """Descriptor 2 into a pipe for the body, its bytes passed on to the real descriptor 2 by a
    :class:`_Forwarder` thread that hands each kept line to ``keep`` (with the thread that wrote it)
    and drops each other C++ log line whose thread and level (``I``, ``W``, ``E``) ``drop`` names.
    The sentinel holds the pipe meanwhile (:func:`~shardscope.engine.compile_abort.watched`), for
    what XLA writes there before it aborts the process while the body is ``doing`` (default: compiling)."""
    read_end, write_end = os.pipe()
    forwarders: list[threading.Thread] = []

    def forwarded() -> None:
        """Descriptor 2 has let go of the pipe's last write end: the forwarder reads to its end."""
        for forwarder in forwarders:
            forwarder.join()

    try:
        with watched(read_end, doing) as sentinel, stderr_into(write_end, then=forwarded) as real:
            os.close(write_end)
            forwarder = _Forwarder(read_end, real, keep, drop, sentinel)
            forwarders.append(threading.Thread(target=forwarder.run, daemon=True, name="shardscope-stderr"))
            forwarders[0].start()
            yield forwarder
    finally:
        os.close(read_end)


_LOG_START = re.compile(rb"[IWEF]\d{0,4}")


class _Forwarder:
    """Copies the pipe to ``out`` as it arrives, except each kept line (to ``keep``, with the id of
    the thread that wrote it, as the line says) and each other log line whose thread and level
    ``drop`` names (never a FATAL one).

    A C++ log line (``W1204 05:00:43.162335   4242 ...``) is held from its first byte to its
    newline, then kept, dropped or passed on whole; any other byte passes at once. :meth:`drained` waits
    until every byte written to the pipe before it was called has been read and handled. A FATAL
    line is told to the ``sentinel`` before it is passed on, and once it is: the process aborts
    after it, maybe before this thread writes it."""

    def __init__(self, read_end: int, out: int, keep: "Callable[[int, str], None]",
                 drop: "Callable[[int, str], bool]" = _never, sentinel: Watched | None = None) -> None:
        self._read_end, self._out, self._keep, self._drop = read_end, out, keep, drop
        self._sentinel = sentinel
        self._out_broken = False
        self._busy = False
        self._turn = threading.Condition()

    def run(self) -> None:
        held = b""
        at_line_start = True
        readable = select.poll()
        readable.register(self._read_end, select.POLLIN)
        while True:
            readable.poll()  # bytes to read (or the pipe's end): busy from before the read on
            with self._turn:
                self._busy = True
            try:
                chunk = os.read(self._read_end, 65536)
                if not chunk:
                    break
                held, at_line_start = self._handle(held + chunk, at_line_start)
            finally:
                with self._turn:
                    self._busy = False
                    self._turn.notify_all()
        if held:
            self._emit(held)

    def _emit(self, data: bytes) -> None:
        """``data`` on to the real descriptor 2, unless writing there failed before: a terminal
        gone or a pipe's reader closed (``2>&1 | head -1``) must not stop the lines being read,
        nor a compile waiting for them (:meth:`drained`)."""
        if self._out_broken:
            return
        try:
            _write_all(self._out, data)
        except OSError:
            self._out_broken = True

    def _handle(self, data: bytes, at_line_start: bool) -> tuple[bytes, bool]:
        passing = bytearray()
        fatal: list[bytes] = []
        held = b""
        for line in data.splitlines(keepends=True):
            complete = line.endswith(b"\n")
            if at_line_start and _LOG_START.fullmatch(line.rstrip(b"\n")[:5]) is not None:
                if not complete:
                    held = line
                    if line.startswith(b"F") and self._sentinel is not None:  # written in parts: its start so far
                        self._sentinel.passing_fatal(line)
                    break
                logged = _LOG_LINE.match(line.decode("utf-8", "replace").rstrip("\n"))
                kept = None if logged is None else _kept(logged)
                if logged is not None and logged.string[0] == "F":  # never kept: the process aborts after it
                    passing += line
                    fatal.append(line)
                elif logged is not None and kept is not None:
                    self._keep(int(logged.group("thread")), kept)
                elif logged is None or not self._dropped(logged):
                    passing += line
            else:
                passing += line
            at_line_start = complete
        if fatal and self._sentinel is not None:
            for line in fatal:
                self._sentinel.passing_fatal(line)
        if passing:
            self._emit(bytes(passing))
        if fatal and self._sentinel is not None:
            self._sentinel.passed_fatal()
        return held, at_line_start

    def _dropped(self, logged: "re.Match[str]") -> bool:
        level = logged.string[0]
        return level != "F" and self._drop(int(logged.group("thread")), level)

    def drained(self) -> None:
        """Return once the pipe holds nothing unread and no chunk is being handled: every line
        written before the call has reached ``keep`` (a log line is written whole, newline
        included)."""
        with self._turn:
            while self._busy or _unread(self._read_end):
                self._turn.wait(0.01)


def _unread(fd: int) -> int:
    """How many bytes the pipe ``fd`` holds unread."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count, True)
    return count[0]


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class SharedCapture:
    """Descriptor 2 into one pipe while the host's compiles (the CPU's) run beside a target's,
    each side's log lines told apart by the thread that wrote them (glog's prefix names it).

    The host's side is ``host_threads`` (the threads JAX's CPU backend started: jaxlib 0.10.2's
    CPU client compiles on one of them) and the threads that compile for it (jaxlib 0.12 compiles
    on the caller's thread); every other thread is the target's (its compiler's own threads, which
    libtpu starts while it compiles, and the thread that asked). Each side's compiles run one at a
    time, so a compile's lines are its side's lines written between its start and its end."""

    def __init__(self, host_threads: frozenset[int]) -> None:
        self._forwarder: _Forwarder | None = None  # the redirect :meth:`piped` opens
        self._host = set(host_threads)
        self._quiet_target: list[str] = []  # the levels of the target's quiet windows open: its other lines at them are dropped
        self.lines: list[tuple[int, str]] = []
        """Every kept line in the order it came, with the thread that wrote it."""

    @classmethod
    @contextmanager
    def piped(cls, host_threads: frozenset[int]) -> Iterator["SharedCapture"]:
        """A capture of ``host_threads``' side and the others' for the body, with descriptor 2
        redirected through one pipe meanwhile (:func:`compiling_beside`)."""
        shared = cls(host_threads)
        with _piped(shared.keep, shared.dropped) as forwarder:
            shared._forwarder = forwarder
            yield shared

    def dropped(self, thread: int, level: str) -> bool:
        """Whether an unkept log line of ``thread`` at ``level`` is dropped: the target's, while a
        quiet window of it that drops that level is open."""
        return thread not in self._host and any(level in levels for levels in self._quiet_target)

    def keep(self, thread: int, message: str) -> None:
        self.lines.append((thread, message))

    @contextmanager
    def joined(self, host: bool) -> Iterator[None]:
        """The calling thread's compiles take part on the host's side (``host``) or the target's."""
        if host:
            self._host.add(threading.get_native_id())
        _SIDES.shared, _SIDES.host = self, host
        try:
            yield
        finally:
            _SIDES.shared = _SIDES.host = None

    @contextmanager
    def window(self, host: bool, quiet: bool = False, quieted: str = QUIETED) -> Iterator[list[str]]:
        """The messages of ``host``'s side (else the target's) written while the body runs,
        in the list yielded once the body ends (``quiet``: the target's other log lines at the
        levels ``quieted`` names dropped meanwhile)."""
        assert self._forwarder is not None
        self._forwarder.drained()
        start = len(self.lines)
        captured: list[str] = []
        levels = quieted if quiet and not host else ""
        self._quiet_target.append(levels)
        try:
            yield captured
        finally:
            self._forwarder.drained()
            self._quiet_target.remove(levels)
            captured.extend(message for thread, message in self.lines[start:] if (thread in self._host) == host)


class _Sides(threading.local):
    shared: SharedCapture | None = None
    host: bool | None = None


_SIDES = _Sides()


@contextmanager
def compiling_beside(host_threads: frozenset[int]) -> Iterator[SharedCapture]:
    """One redirect of descriptor 2 for the body, whose threads compile at once after they
    :meth:`~SharedCapture.joined` a side: each compile's :func:`capturing_stderr` receives its own
    side's lines (see :class:`SharedCapture`). Unkept bytes pass on to the terminal as they come."""
    with SharedCapture.piped(host_threads) as shared:
        yield shared


def threads_now() -> frozenset[int] | None:
    """The ids of this process's threads (``/proc/self/task``); None where the system does not list them."""
    try:
        return frozenset(int(name) for name in os.listdir("/proc/self/task"))
    except (OSError, ValueError):
        return None


_host_threads: frozenset[int] | None = None


def note_host_threads(before: frozenset[int]) -> None:
    """Remember the threads started since ``before`` (:func:`threads_now`) as those of JAX's CPU
    backend, which its caller has just started (:func:`host_threads`)."""
    global _host_threads
    now = threads_now()
    _host_threads = None if now is None else now - before


def host_threads() -> frozenset[int] | None:
    """The threads JAX's CPU backend started (:func:`note_host_threads`); None when shardscope did
    not see it start (or the system does not list threads): then no compiles run at once."""
    return _host_threads
