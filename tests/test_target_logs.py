"""libtpu's log files: a ``--target`` run leaves none, unless the user asked for them.

libtpu names each file after the process that wrote it (``tpu_driver....log.INFO.DATE.PID``),
so the files a run left are found by its process id in the folders libtpu writes to.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _support import DEMOS, ROOT

from shardscope.distributed.compile_cache import NO_CACHE_ENV

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")

_DEFAULT_FOLDERS = tuple(dict.fromkeys((Path("/tmp/tpu_logs"), Path(tempfile.gettempdir()) / "tpu_logs",
                                         Path("/tmp"), Path(tempfile.gettempdir()))))
"""Where libtpu writes its logs when TPU_LOG_DIR is unset (``tpu_logs``), or names no folder it can
write to (``disabled``: the temporary folder itself, as glog falls back)."""


def _check_on_a_slice(env: dict[str, str]) -> int:
    """``shardscope check linear.py --target tpu:v5e:2x2`` in a new process; its process id.

    The default folders' files from before it are set aside (:data:`_EARLIER`): an earlier
    process of the same id (ids are reused) is not this one."""
    _EARLIER.update(path for folder in _DEFAULT_FOLDERS if folder.is_dir() for path in folder.iterdir())
    process = subprocess.Popen([sys.executable, "-m", "shardscope", "check", str(DEMOS / "linear.py"),
                                "--target", "tpu:v5e:2x2"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=300)
    assert process.returncode in (0, 1), err
    assert "on tpu:v5e:2x2" in out  # it did compile for the slice
    return process.pid


_EARLIER: set[Path] = set()


def _files_of(pid: int, folders: tuple[Path, ...]) -> list[Path]:
    """The files process ``pid`` left in ``folders`` (not those there before it started)."""
    return [path for folder in folders if folder.is_dir() for path in folder.iterdir()
            if path.name.endswith(f".{pid}") and path not in _EARLIER]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TPU_LOG_DIR", "TPU_LIBRARY_PATH")}
    return env | extra


def test_a_target_run_leaves_no_libtpu_log_file():
    pid = _check_on_a_slice(_env())
    assert _files_of(pid, _DEFAULT_FOLDERS) == []


def test_a_log_level_the_user_set_is_kept():
    """TPU_MIN_LOG_LEVEL=0 (INFO) of the user's own: libtpu logs at it, where it logs by default."""
    pid = _check_on_a_slice(_env(TPU_MIN_LOG_LEVEL="0"))
    left = _files_of(pid, _DEFAULT_FOLDERS)
    for path in left:
        path.unlink()
    assert "INFO" in [path.name.split(".log.")[1].split(".")[0] for path in left]


def test_a_log_folder_the_user_set_gets_libtpus_logs(tmp_path):
    # libtpu writes its WARNING file only when it compiles (its partitioner warns): without the run's
    # compilation cache, which serves linear.py's executable once another test compiled it for the slice
    pid = _check_on_a_slice(_env(TPU_LOG_DIR=str(tmp_path), **{NO_CACHE_ENV: "1"}))
    levels = sorted(path.name.split(".log.")[1].split(".")[0] for path in _files_of(pid, (tmp_path,)))
    assert levels == ["INFO", "WARNING"]
    assert _files_of(pid, _DEFAULT_FOLDERS) == []
