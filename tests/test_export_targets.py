"""Export targets that are not new or regular files (issue 8): refused, even with --force."""

from __future__ import annotations

import os
import stat

import pytest

from _support import DEMOS
from shardscope.cli import main
from shardscope.errors import ShardscopeError
from shardscope.render.exports import current_umask, write_atomic

LINEAR = DEMOS / "linear.py"


def names(directory):
    return sorted(p.name for p in directory.iterdir())


def special_targets(tmp_path):
    """A FIFO, a symbolic link to a file, a directory, and a character device."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target.txt"
    target.write_text("keep\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    folder = tmp_path / "folder"
    folder.mkdir()
    return {"fifo": (fifo, "named pipe"), "link": (link, "symbolic link"), "folder": (folder, "is a directory"),
            "device": (os.devnull, "character device")}


@pytest.mark.parametrize("kind", ["fifo", "link", "folder", "device"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_non_regular_targets_are_refused_without_a_force_hint(tmp_path, kind, overwrite):
    path, needle = special_targets(tmp_path)[kind]
    before = {p.name: os.lstat(p) for p in tmp_path.iterdir()}
    with pytest.raises(ShardscopeError) as info:
        write_atomic(path, "new\n", overwrite=overwrite)
    assert needle in info.value.message
    assert "--force" not in (info.value.hint or "")
    after = {p.name: os.lstat(p) for p in tmp_path.iterdir()}
    assert {n: (s.st_mode, s.st_ino) for n, s in after.items()} == {n: (s.st_mode, s.st_ino) for n, s in before.items()}
    assert (tmp_path / "target.txt").read_text() == "keep\n"  # the link's target untouched


def test_diff_refuses_devices_with_force_and_offers_no_force(tmp_path, capsys):
    assert main(["diff", str(LINEAR), "-o", "/dev/stdout", "--force"]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and "--force" not in err


def test_dash_writes_the_diff_to_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["diff", str(LINEAR), "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("# shardscope: linear.py::linear\n")
    assert names(tmp_path) == []  # no file called "-"


def test_empty_and_trailing_slash_outputs_say_what_is_wrong(tmp_path, capsys):
    assert main(["diff", str(LINEAR), "-o", ""]) == 2
    assert "The output path is empty" in capsys.readouterr().err
    (tmp_path / "dir").mkdir()
    for force in ([], ["--force"]):
        assert main(["diff", str(LINEAR), "-o", f"{tmp_path}/dir/", *force]) == 2
        err = capsys.readouterr().err
        assert "is a directory" in err and "--force" not in err
    assert main(["diff", str(LINEAR), "-o", f"{tmp_path}/new/"]) == 2
    assert "names a directory" in capsys.readouterr().err
    assert names(tmp_path) == ["dir"] and names(tmp_path / "dir") == []


def test_new_files_get_the_umask_and_forced_files_keep_their_mode(tmp_path):
    previous = os.umask(0o027)
    try:
        assert current_umask() == 0o027
        fresh = write_atomic(tmp_path / "fresh.diff", "x")
        assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o640  # as open(path, "w") would make it
        for mode in (0o644, 0o600, 0o664):
            kept = tmp_path / f"kept-{mode:o}.diff"
            kept.write_text("old")
            os.chmod(kept, mode)
            write_atomic(kept, "new", overwrite=True)
            assert stat.S_IMODE(os.stat(kept).st_mode) == mode and kept.read_text() == "new"
    finally:
        os.umask(previous)


def test_the_cli_export_matches_a_plain_open(tmp_path, shardscope_cli):
    """Under a umask of 0o002 (this process's, set for the test as the one above sets its own), the
    command's export gets the mode a plain open gives."""
    previous = os.umask(0o002)
    try:
        open(tmp_path / "plain", "w").close()
        result = shardscope_cli("diff", LINEAR, "-o", tmp_path / "out.diff")
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"plain": 0o664, "out.diff": 0o664}
