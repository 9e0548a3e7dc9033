"""A path that is no Python file is named for what it is, by every command, without blocking.

``/dev/zero`` and a FIFO are not "No such file": they are a character device and a FIFO
(and a FIFO is never opened: that would block until a writer comes). A file with a NUL byte or
bytes that are not UTF-8 is "not Python source text", not a syntax error at "line None".
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from _support import PYTHON, run_cli

from shardscope.sources.loading import load_demo_file
from shardscope.errors import DemoFileError

COMMANDS = ("report", "diff", "sweep", "check")


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "model.py"
    os.mkfifo(path)
    return path


def assert_refused(args, message: str, result: subprocess.CompletedProcess | None = None) -> None:
    """``shardscope ARGS`` (in a process of its own unless ``result`` is given) is refused with ``message``."""
    if result is None:
        result = run_cli(*args, timeout=60)  # a blocked read of the FIFO would end here, failing
    assert result.returncode == 2, result.stderr
    assert f"shardscope: error: {message}" in result.stderr, result.stderr
    assert "No such file" not in result.stderr and "Traceback" not in result.stderr
    assert "hint: " in result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_a_character_device_is_named_by_every_command(command):
    assert_refused((command, "/dev/zero"), "/dev/zero is a character device, not a Python file.")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_is_named_and_never_read(command, fifo):
    assert_refused((command, fifo), f"{fifo} is a FIFO (a named pipe), not a Python file.")


def test_a_socket_and_a_dangling_link_are_named(tmp_path):
    sock_path = tmp_path / "model.py"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(DemoFileError, match="is a socket, not a Python file"):
            load_demo_file(sock_path)
    link = tmp_path / "link.py"
    link.symlink_to(tmp_path / "gone.py")
    with pytest.raises(DemoFileError, match=r"link.py is a symbolic link to .*gone.py, which does not exist"):
        load_demo_file(link)
    with pytest.raises(DemoFileError, match="No such file"):
        load_demo_file(tmp_path / "nowhere.py")


def test_a_binary_file_is_not_python_text(tmp_path, shardscope_cli):
    path = tmp_path / "weights.py"
    path.write_bytes(b"x = 1\n" + bytes(range(256)))
    for command in ("check", "report"):  # a regular file reads to its end: the test's process is safe
        assert_refused((command, path), f"{path} is not Python source text: it holds a NUL byte (at byte 6)",
                       shardscope_cli(command, path))


def test_bytes_that_are_not_utf8_are_named_with_their_offset(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes('name = "\u00e9t\u00e9"\n'.encode("latin-1"))  # 0xe9 at offset 8
    with pytest.raises(DemoFileError, match=r"latin.py is not Python source text: byte 0xe9 at byte 8 is not UTF-8") \
            as info:
        load_demo_file(path)
    assert "coding" in info.value.hint
    declared = tmp_path / "declared.py"
    declared.write_bytes(b"# -*- coding: latin-1 -*-\n" + path.read_bytes())
    with pytest.raises(DemoFileError, match="has no demo function"):  # declared: it is Python text
        load_demo_file(declared)


def test_a_binary_module_the_demo_imports_is_named_with_the_import_line(tmp_path):
    (tmp_path / "binary_helper_i17.py").write_bytes(b"y = 1\n\0")
    path = tmp_path / "uses.py"
    path.write_text("x = 1\nimport binary_helper_i17\n")
    with pytest.raises(DemoFileError, match="is not Python source text") as info:
        load_demo_file(path)
    assert "line None" not in info.value.message
    assert "uses.py line 2: import binary_helper_i17" in info.value.hint or "binary_helper_i17.py" in info.value.message


def test_the_reload_check_never_reads_a_fifo(fifo):
    """The app's check for an edited file, on a file replaced by a FIFO (in a child process: a
    read of the FIFO would block it, and the timeout would fail the test instead of hanging it)."""
    code = ("from pathlib import Path\nfrom shardscope.sources.loading import file_fingerprint\n"
            f"file_fingerprint(Path({str(fifo)!r}))")
    result = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert "DemoFileError" in result.stderr and "is a FIFO (a named pipe)" in result.stderr, result.stderr


def test_every_message_that_refuses_a_special_file_names_it_in_the_same_words(tmp_path):
    """One table of a file's kind in words (:data:`shardscope.errors.FILE_KINDS`): a FIFO given as a
    source file, an export's path, an XLA dump and a profile's file is "a FIFO (a named pipe)" in
    each message, and none is opened (a read would block until a writer comes)."""
    from shardscope.engine.hlo.dump_files import read_text
    from shardscope.errors import ShardscopeError
    from shardscope.measure.profile_files import profile_files
    from shardscope.render.exports import write_atomic
    from shardscope.sources.source_files import not_a_file_error

    run = tmp_path / "plugins" / "profile" / "2026_12_06_10_00_00"
    run.mkdir(parents=True)
    fifo = run / "host.xplane.pb"
    os.mkfifo(fifo)
    messages = [not_a_file_error(fifo).message]
    for refuse in (lambda: write_atomic(fifo, "text", overwrite=True), lambda: read_text(fifo),
                   lambda: profile_files(fifo)):
        with pytest.raises(ShardscopeError) as error:
            refuse()
        messages.append(error.value.message)
    assert all(f"{fifo} is a FIFO (a named pipe), not " in message for message in messages), messages
