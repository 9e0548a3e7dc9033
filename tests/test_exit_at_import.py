"""A file that ends the process while shardscope imports it (``os._exit``), and errors that stop
``check --format github`` before any program is checked: one message, exit 2, and an annotation
a pull request shows (issue 45, items 13 and 14).

A command on a file that calls ``os._exit`` runs in a fresh process: ``os._exit`` ends the process
it runs in, so a test in this one would end the test run if shardscope stopped catching it. The
three formats of one exit status share that process (``tests/helpers/commands_in_one_process.py``:
the first starts JAX as ``python -m shardscope`` would, the other two import the file again after
it). The files that cannot be imported end nothing: their commands run in this process. The
expected lines are found in the files' own text here.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Callable

import pytest
from _support import PYTHON, ROOT

_ENDS_ITSELF = textwrap.dedent("""
    import os

    import jax
    import jax.numpy as jnp

    import shardscope


    @shardscope.program(args=(jax.ShapeDtypeStruct((8,), jnp.float32),))
    @jax.jit
    def step(x):
        return x * 2

    os._exit({code})  # THE EXIT
""")

_FORMATS = {"text": (), "json": ("--json",), "github": ("--format", "github")}


def _line_of(source: str, marker: str) -> int:
    (line,) = [n for n, text in enumerate(source.splitlines(), 1) if marker in text]
    return line


def _checked_in_one_process(code: int, directory: Path) -> dict[str, subprocess.CompletedProcess]:
    """``check ends.py`` in each format, on a file that calls ``os._exit(code)`` at import, one
    after another in one fresh process started in ``directory``."""
    (directory / "ends.py").write_text(_ENDS_ITSELF.format(code=code))
    helper = ROOT / "tests" / "helpers" / "commands_in_one_process.py"
    argvs = [["check", "ends.py", *flags] for flags in _FORMATS.values()]
    done = subprocess.run([PYTHON, str(helper), json.dumps(argvs)], capture_output=True, text=True, cwd=directory,
                          timeout=300)
    assert done.returncode == 0 and done.stdout, f"the process ended (status {done.returncode}):\n{done.stderr[-3000:]}"
    return {fmt: subprocess.CompletedProcess(argv, r["returncode"], r["stdout"], r["stderr"])
            for fmt, argv, r in zip(_FORMATS, argvs, json.loads(done.stdout))}


@pytest.fixture(scope="module")
def ends_itself_checked(tmp_path_factory) -> Callable[[int], dict[str, subprocess.CompletedProcess]]:
    """``ends_itself_checked(code)``: :func:`_checked_in_one_process`, once per exit status a worker sees."""
    done: dict[int, dict[str, subprocess.CompletedProcess]] = {}

    def get(code: int) -> dict[str, subprocess.CompletedProcess]:
        if code not in done:
            done[code] = _checked_in_one_process(code, tmp_path_factory.mktemp(f"ends{code}"))
        return done[code]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 1])
@pytest.mark.parametrize("fmt", list(_FORMATS))
def test_os_exit_at_import_is_one_message_and_exit_2(ends_itself_checked, code, fmt):
    source = _ENDS_ITSELF.format(code=code)
    line = _line_of(source, "# THE EXIT")
    result = ends_itself_checked(code)[fmt]
    assert result.returncode == 2, (result.stdout, result.stderr)
    errors = [text for text in result.stderr.splitlines() if text.startswith("shardscope: error:")]
    assert errors == [f"shardscope: error: The demo called os._exit({code}) while importing, line {line}."]
    assert "Traceback" not in result.stderr
    if fmt == "github":
        (annotation,) = result.stdout.splitlines()
        assert annotation.startswith(f"::error file=ends.py,line={line},title=shardscope%3A ends.py was not checked::")
        assert f"os._exit({code})" in annotation
    elif fmt == "json":  # the one JSON object on stdout: the error's, as stderr says it
        error = json.loads(result.stdout)
        assert (error["exit_code"], f"shardscope: error: {error['error']}") == (2, errors[0])
        assert f"hint: {error['hint']}" in result.stderr.splitlines()
    else:
        assert result.stdout == ""


_SYNTAX_ERROR = "import jax\n\n\ndef step(x:\n    return x\n"
_IMPORT_ERROR = "import jax\n\nimport shardscope_no_such_module  # THE IMPORT\n"


@pytest.mark.parametrize("source, line, said", [
    (_SYNTAX_ERROR, 4, "Syntax error in"),
    (_IMPORT_ERROR, _line_of(_IMPORT_ERROR, "# THE IMPORT"), "ModuleNotFoundError: No module named 'shardscope_no_such_module'"),
], ids=["syntax-error", "import-error"])
def test_a_file_that_does_not_import_is_annotated_at_its_line(tmp_path, source, line, said, shardscope_cli):
    (tmp_path / "broken.py").write_text(source)
    result = shardscope_cli("check", "broken.py", "--format", "github", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (annotation,) = result.stdout.splitlines()
    head, _, message = annotation.partition("::error ")[2].partition("::")
    assert head == f"file=broken.py,line={line},title=shardscope%3A broken.py was not checked"
    assert said in message and "%0Ahint: " in message  # the message and its hint, newline escaped


def test_a_missing_file_is_annotated_on_its_name(tmp_path, shardscope_cli):
    result = shardscope_cli("check", "gone.py", "--format", "github", cwd=tmp_path)
    assert result.returncode == 2
    (annotation,) = result.stdout.splitlines()
    assert annotation.startswith("::error file=gone.py,title=shardscope%3A gone.py was not checked::No such file")


def test_os_exit_is_the_real_one_again_after_the_import(tmp_path):
    from shardscope.errors import DemoFileError
    from shardscope.sources.loading import import_file

    real = os._exit
    path = tmp_path / "ends.py"
    path.write_text("import os\nos._exit(5)\n")
    with pytest.raises(DemoFileError, match=r"os\._exit\(5\) while importing, line 2"):
        import_file(path)
    assert os._exit is real
    path.write_text("import os\nEXIT = os._exit\n")
    module, _ = import_file(path)
    assert os._exit is real  # a later call ends the process, as the file meant


@pytest.mark.slow
def test_os_exit_in_a_thread_the_file_started_still_ends_the_process(tmp_path):
    """Only the importing thread's call is caught: a thread of the file's own (a watchdog) ends the
    process as ``os._exit`` always does, with its status."""
    path = tmp_path / "watchdog.py"
    path.write_text("import os, threading\nt = threading.Thread(target=os._exit, args=(7,))\nt.start()\nt.join()\n")
    script = f"from shardscope.sources.loading import import_file\nfrom pathlib import Path\nimport_file(Path({str(path)!r}))\n"
    result = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 7, result.stderr


_EXPLORER = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from app_support import SIZE, make_app, settle
    from shardscope.app.widgets.error_panel import ErrorPanel

    async def scenario():
        app = make_app({path!r})
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            panel = app.query_one(ErrorPanel)
            print("SHOWN" if panel.shown and app.is_running else "HIDDEN")
            print(panel.message)

    asyncio.run(scenario())
""")


@pytest.mark.slow
def test_the_explorer_shows_os_exit_at_import_in_its_error_panel(tmp_path):
    """The explorer imports the file in its worker: the call is an error panel, and the app (and
    the terminal it drives) stays up, instead of a process ended in the alternate screen."""
    source = _ENDS_ITSELF.format(code=0)
    path = tmp_path / "ends.py"
    path.write_text(source)
    script = _EXPLORER.format(tests=str(ROOT / "tests" / "app"), path=str(path))
    result = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    shown, message = result.stdout.splitlines()[-2:]
    assert shown == "SHOWN"
    assert message == f"The demo called os._exit(0) while importing, line {_line_of(source, '# THE EXIT')}."
