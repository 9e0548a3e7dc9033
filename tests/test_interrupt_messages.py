"""A file that loops forever at import: Ctrl+C or SIGTERM says which file, and at which line.

The import holds stderr back (what the demo prints goes into shardscope's message), so the
interrupt's own message was lost with it: ``check`` ended with 130 and said nothing. Now every
command, and the explorer quit from its loading screen, names the file being imported and the
line it is at. The demo writes a marker file before it loops: the test waits for it, not for
a time.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _support import PYTHON, ROOT

LOOPING = '''
import pathlib
import time

pathlib.Path({marker!r}).write_text("importing")
while True:
    time.sleep(0.05)
'''


def looping_demo(tmp_path: Path) -> tuple[Path, Path, int]:
    """The demo, its marker, and the line of its loop's body (counted from the text)."""
    marker = tmp_path / "marker"
    path = tmp_path / "forever.py"
    path.write_text(LOOPING.format(marker=str(marker)))
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "time.sleep" in text)
    return path, marker, line


def wait_for(marker: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the demo was never imported"
        time.sleep(0.05)
    time.sleep(0.5)  # the marker is written one line before the loop: let the import reach it (a loaded CI saw line 5)


@pytest.mark.slow  # real signals to a real process
@pytest.mark.parametrize(("command", "signum", "status"), [
    ("check", signal.SIGINT, 130),
    ("check", signal.SIGTERM, 143),
    ("report", signal.SIGINT, 130),
    ("sweep", signal.SIGTERM, 143),
])
def test_an_interrupt_names_the_file_being_imported_and_its_line(tmp_path, command, signum, status):
    path, marker, line = looping_demo(tmp_path)
    process = subprocess.Popen([PYTHON, "-m", "shardscope", command, str(path)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(marker, process)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == status
    name = signal.Signals(signum).name
    assert stderr.strip().splitlines()[-1] == (
        f"shardscope: interrupted ({name}) while importing {path}, at line {line}; nothing was written")
    assert stdout == ""


@pytest.mark.slow  # the app in a real terminal
def test_quitting_the_loading_screen_names_the_file_being_imported(tmp_path):
    path, marker, line = looping_demo(tmp_path)
    controller, terminal = pty.openpty()
    process = subprocess.Popen([PYTHON, "-m", "shardscope", str(path)], cwd=ROOT, stdin=terminal, stdout=terminal,
                               stderr=subprocess.PIPE, env={**os.environ, "TERM": "xterm-256color"},
                               start_new_session=True)
    os.close(terminal)
    try:
        wait_for(marker, process)
        process.send_signal(signal.SIGTERM)
        stderr = process.stderr.read().decode(errors="replace")
        process.wait(timeout=30)
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143
    plain = re.sub(r"\x1b\[[0-9;?<>=]*[A-Za-z]", "", stderr)  # Textual restores the terminal on stderr
    assert plain.strip().splitlines()[-1].endswith(
        f"shardscope: quit while importing {path}, at line {line}; it had not finished")
