"""Quitting whatever the worker does (issue 8): Pilot tests, and a real process in tmux."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.css.query import NoMatches
from textual.widgets import Input

from app_support import DEMOS, ROOT, SIZE, eventually, make_app, run, settle
from shardscope.app.base import runner

STUCK_AT_IMPORT = '''
import os
import time

import shardscope

open({entered!r}, "w").close()  # the import has begun: the test waits on this, not on a clock
end = time.monotonic() + 600  # a killed test run must not leave this behind for good
while not os.path.exists({flag!r}) and time.monotonic() < end:  # "loops forever" at import, until the
    time.sleep(0.01)  # test lets it go
'''


def stuck_demo(tmp_path: Path) -> tuple[Path, Path]:
    """A demo whose import loops until ``flag`` exists; it makes :func:`entered` first."""
    flag = tmp_path / "let-go"
    demo = tmp_path / "stuck.py"
    demo.write_text(STUCK_AT_IMPORT.format(flag=str(flag), entered=str(entered(demo))))
    return demo, flag


def entered(demo: Path) -> Path:
    """The file the stuck demo makes once its import has begun (the worker is inside it)."""
    return demo.with_name("entered")


def _select_lost_its_overlay() -> None:
    """What a ``Select`` mounting while the quit tears the screen down raises."""
    raise NoMatches("No nodes match '#overlay' on Select()")


def test_a_widget_that_finds_nothing_while_the_app_runs_is_a_crash():
    """Any time but the quit, an error in a widget is a bug, and shown as one
    (test_a_widget_that_finds_nothing_while_the_app_quits_is_not_a_crash[False], before)."""
    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            app.call_next(_select_lost_its_overlay)
            await pilot.pause()

    with pytest.raises(NoMatches):
        run(scenario())


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
def test_quit_while_the_worker_is_stuck_does_not_wait_for_it(tmp_path, key):
    demo, flag = stuck_demo(tmp_path)
    latency = {}

    async def scenario():
        app = make_app(demo)
        try:
            async with app.run_test(size=SIZE) as pilot:
                await eventually(pilot, runner.busy, "the run started", seconds=120)
                await eventually(pilot, entered(demo).exists, "the demo's endless import began", seconds=120)
                start = time.monotonic()
                await pilot.press(key)
            latency["s"] = time.monotonic() - start  # the app has shut down
            assert app.return_code == 0
            assert runner.busy()  # the worker is still stuck: run_app leaves with os._exit here
        finally:
            flag.touch()  # let the thread end, so this test process can

    run(scenario())
    assert latency["s"] < 5, latency  # a bound against waiting for the worker (measured ~0.1 s)


def test_ctrl_c_quits_even_from_an_input(tmp_path):
    demo, flag = stuck_demo(tmp_path)

    async def scenario():
        app = make_app(demo)
        try:
            async with app.run_test(size=SIZE) as pilot:
                app.query_one("#axis", Input).focus()
                await pilot.pause()
                await pilot.press("ctrl+c")
                await pilot.pause()
                assert app.return_code == 0, "ctrl+c asked the app to exit"
        finally:
            flag.touch()

    run(scenario())


# -- a real process in a real terminal (tmux) ------------------------------------------------------

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _pane(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-t", session, "-p"], capture_output=True, text=True).stdout


def _child_pid(pid_file: Path, seconds: float = 60) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise AssertionError("the app never started")


@pytest.mark.slow  # the app in a fresh process, in tmux
@needs_tmux
@pytest.mark.parametrize("how", ["q", "SIGTERM"])
def test_a_real_app_stuck_at_import_quits_at_once_in_tmux(tmp_path, how):
    demo, flag = stuck_demo(tmp_path)
    session = f"shardscope-quit-{os.getpid()}-{how}"
    pid_file = tmp_path / "pid"
    launcher = (
        f"import os, sys; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        f"sys.argv = ['shardscope', {str(demo)!r}]; from shardscope.cli import main; "
        "sys.exit(main())"
    )
    command = f"{sys.executable} -c \"{launcher}\"; echo EXITED-$?; sleep 60"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", str(ROOT), command], check=True)
    try:
        pid = _child_pid(pid_file)
        deadline = time.monotonic() + 120
        while "loading" not in _pane(session) or not entered(demo).exists():  # first paint; the worker is in the import
            assert time.monotonic() < deadline, _pane(session)
            time.sleep(0.1)
        start = time.monotonic()
        if how == "q":
            subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        else:
            os.kill(pid, signal.SIGTERM)
        while _alive(pid):
            assert time.monotonic() - start < 10, "the app did not exit"
            time.sleep(0.02)
        latency = time.monotonic() - start
        pane = _pane(session)
        while "EXITED-" not in pane:  # the shell prints the status once the app has gone
            assert time.monotonic() - start < 60, pane
            time.sleep(0.02)
            pane = _pane(session)
        expected = 0 if how == "q" else 143
        assert f"EXITED-{expected}" in pane, pane
        alternate = subprocess.run(["tmux", "display", "-p", "-t", session, "#{alternate_on}"],
                                   capture_output=True, text=True).stdout.strip()
        assert alternate == "0"  # the terminal is back to the shell's screen
        assert "Traceback" not in pane and "terminate called" not in pane
        print(f"quit latency ({how}): {latency:.3f} s")
    finally:
        flag.touch()
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by the tmux shell) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_an_error_and_a_run_that_land_as_the_app_quits_are_dropped_not_a_crash():
    """What lands while the app quits, on one app with its first run off (two tests, each on
    its own such app, before: test_a_widget_that_finds_nothing_while_the_app_quits_is_not_a_crash[True]
    and test_a_run_that_ends_as_the_app_shuts_down_is_dropped_not_a_crash).

    - A widget that finds nothing while the quit tears the screen down (a ``Select`` that lost
      its overlay) is logged, not a crash: the app exits 0.
    - CI once caught it: the Pilot left ``run_test`` as the load-only run finished, and the
      worker's SUCCESS landed while the screen was being pruned (``NoMatches: ErrorPanel``, exit
      1). Every run message, and the worker's own state change, that lands once the app stopped
      running is dropped: here they are handed to the app after its screen is gone."""
    from textual.worker import Worker, WorkerState

    from shardscope.app.base.messages import DemoLoaded, RunFailed, RunProgress

    async def scenario():
        app = make_app(DEMOS / "linear.py", autorun=False)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            demo_file, run_id = app.demo_file, app.run_id
            app.exit(0)
            app.call_next(_select_lost_its_overlay)
            await pilot.pause()
        assert app.return_code == 0, "an error in a widget the quit tears down is logged, not a crash"
        assert not app.is_running and not app.screen_stack  # the screen and its widgets are gone
        worker = Worker(app, lambda: None, name="_run_worker", group="analysis")
        for state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            app.on_worker_state_changed(Worker.StateChanged(worker, state))
        app.on_demo_loaded(DemoLoaded(run_id, demo_file, {"linear": 64}))
        app.running = True
        app.on_run_progress(RunProgress(run_id, "tracing", 0.5))
        app.on_run_failed(RunFailed(run_id, "late", None))
        return app

    app = run(scenario())
    assert app.running, "the late failure was dropped, not shown on a screen that is gone"


# -- a terminal that goes away (its window closed) --------------------------------------------------


class _Terminal:
    """A pseudo-terminal of 80x24 this test owns, its app's output read in a thread into ``drawn``
    (a terminal nobody reads would block the app's writes)."""

    def __init__(self) -> None:
        import fcntl
        import pty
        import struct
        import termios
        import threading

        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.drawn = bytearray()
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        import select

        while not self._closing.is_set():
            if not select.select([self.master], [], [], 0.05)[0]:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the app ended
                return
            if not chunk:
                return
            self.drawn.extend(chunk)

    def close(self) -> None:
        """Close the terminal's other end, as a killed tmux window does: the reader stops first, as
        a descriptor closed while a thread is blocked reading it stays open until the read returns."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._reader.join()
        os.close(self.master)


def _start_in_a_pty(argv: list[str]) -> tuple[subprocess.Popen, _Terminal]:
    """``argv`` in a new session on a :class:`_Terminal` (not its controlling terminal)."""
    terminal = _Terminal()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
    process = subprocess.Popen(argv, stdin=terminal.slave, stdout=terminal.slave, stderr=terminal.slave, cwd=ROOT,
                               env=env, start_new_session=True, close_fds=True)
    os.close(terminal.slave)
    terminal._reader.start()
    return process, terminal


@pytest.mark.slow  # the app in a fresh process
@pytest.mark.parametrize("signum", [None, signal.SIGHUP], ids=["hang-up alone", "SIGHUP"])
def test_a_real_app_whose_terminal_is_gone_ends(tmp_path, signum):
    """The terminal closed (a tmux window killed) while the worker is busy: every write to the
    terminal fails, and the app still ends, with the shell's status for a hang-up. It once stayed
    alive in Python's exit, joining the worker, because what it printed on leaving failed first
    (EIO). The pseudo-terminal here is not the app's controlling terminal, so its closing sends no
    SIGHUP (as a test harness's or a supervisor's would not): the app used to stay, its input
    thread reading end-of-file in a loop at ~70% of a core, until something killed it."""
    demo, flag = stuck_demo(tmp_path)
    launcher = f"import sys; sys.argv = ['shardscope', {str(demo)!r}]; from shardscope.cli import main; sys.exit(main())"
    process, terminal = _start_in_a_pty([sys.executable, "-c", launcher])
    try:
        deadline = time.monotonic() + 120
        while b"loading" not in terminal.drawn or not entered(demo).exists():  # first paint; the worker is in the import
            assert process.poll() is None and time.monotonic() < deadline, bytes(terminal.drawn[-2000:])
            time.sleep(0.1)
        terminal.close()  # the terminal is gone
        if signum is not None:
            process.send_signal(signum)
        status = process.wait(timeout=30)  # hung: TimeoutExpired (it used to stay until SIGKILL)
        assert status == 128 + signal.SIGHUP  # as a shell reports a process ended by a hang-up
    finally:
        flag.touch()
        if process.poll() is None:
            process.kill()
            process.wait()


BUSY_UI_THREAD = '''
import asyncio
import os
import sys
from pathlib import Path

from shardscope.app.factory import make_app
from shardscope.app.leaving import run_until_quit
from shardscope.config.settings import Settings

flag = Path({flag!r})


def busy():
    """What a large tab laid out on the UI thread did for seconds: here, until the signal, or until
    the test is gone (a killed test run left this process spinning a core)."""
    flag.touch()
    while os.getppid() == {parent}:
        pass


app = make_app(Settings(Path({demo!r})), autorun=False)
app.call_later(app.set_timer, 0.5, busy)
sys.exit(asyncio.run(run_until_quit(app)))
'''


@pytest.mark.slow  # the app in a fresh process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_app_while_its_ui_thread_is_busy(tmp_path, signum):
    """The UI thread busy in Python (a large Compiled tab was laid out there for tens of seconds):
    a signal handled on the event loop waited for it, its deadline too; Python's own handler runs
    between two bytecodes, and the deadline ends the process."""
    flag = tmp_path / "busy"
    launcher = BUSY_UI_THREAD.format(flag=str(flag), demo=str(DEMOS / "linear.py"), parent=os.getpid())
    process, terminal = _start_in_a_pty([sys.executable, "-c", launcher])
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert process.poll() is None and time.monotonic() < deadline, bytes(terminal.drawn[-2000:])
            time.sleep(0.1)
        process.send_signal(signum)
        status = process.wait(timeout=30)  # the loop never gets a turn again: before, it never ended
        assert status == 128 + signum
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        terminal.close()
