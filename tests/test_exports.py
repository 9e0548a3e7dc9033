"""write_atomic / write_new: nothing a user has is lost, no temp files left behind."""

from __future__ import annotations

import pytest

from shardscope.errors import ShardscopeError
from shardscope.render.exports import write_atomic, write_new


def names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_write_atomic_creates(tmp_path):
    path = write_atomic(tmp_path / "a.diff", "hello\n")
    assert path == tmp_path / "a.diff"
    assert path.read_text() == "hello\n"
    assert names(tmp_path) == ["a.diff"]


def test_write_atomic_refuses_to_overwrite(tmp_path):
    target = tmp_path / "a.diff"
    target.write_text("precious\n")
    with pytest.raises(ShardscopeError, match="exists") as info:
        write_atomic(target, "new\n")
    assert "--force" in info.value.hint
    assert target.read_text() == "precious\n"
    assert names(tmp_path) == ["a.diff"]


def test_write_atomic_overwrite_replaces(tmp_path):
    target = tmp_path / "a.diff"
    target.write_text("old\n")
    write_atomic(target, "new\n", overwrite=True)
    assert target.read_text() == "new\n"
    assert names(tmp_path) == ["a.diff"]


def test_write_atomic_missing_directory(tmp_path):
    with pytest.raises(ShardscopeError, match="No such directory"):
        write_atomic(tmp_path / "missing" / "a.diff", "x")
    assert names(tmp_path) == []


def test_write_atomic_failure_leaves_no_temp_file(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "a.diff", 12345)  # not text: the write fails midway
    assert names(tmp_path) == []


def test_write_atomic_unicode(tmp_path):
    path = write_atomic(tmp_path / "u.txt", "0x… ✓\n")
    assert path.read_text(encoding="utf-8") == "0x… ✓\n"


def test_write_new_picks_free_names(tmp_path):
    first = write_new(tmp_path, "linear-2dev-c16", ".diff", "one")
    second = write_new(tmp_path, "linear-2dev-c16", ".diff", "two")
    third = write_new(tmp_path, "linear-2dev-c16", ".diff", "three")
    assert [p.name for p in (first, second, third)] == [
        "linear-2dev-c16.diff", "linear-2dev-c16-1.diff", "linear-2dev-c16-2.diff"]
    assert [p.read_text() for p in (first, second, third)] == ["one", "two", "three"]
    assert names(tmp_path) == sorted(p.name for p in (first, second, third))


def test_write_new_never_touches_existing(tmp_path):
    (tmp_path / "x.diff").write_text("keep")
    (tmp_path / "x-1.diff").write_text("keep too")
    path = write_new(tmp_path, "x", ".diff", "new")
    assert path.name == "x-2.diff"
    assert (tmp_path / "x.diff").read_text() == "keep" and (tmp_path / "x-1.diff").read_text() == "keep too"


def test_write_new_missing_directory(tmp_path):
    with pytest.raises(ShardscopeError):
        write_new(tmp_path / "missing", "x", ".diff", "text")


@pytest.mark.parametrize("overwrite", [False, True])
def test_write_atomic_onto_a_directory(tmp_path, overwrite):
    (tmp_path / "out").mkdir()
    with pytest.raises(ShardscopeError):
        write_atomic(tmp_path / "out", "x", overwrite=overwrite)
    assert names(tmp_path) == ["out"] and names(tmp_path / "out") == []


def test_write_atomic_os_errors_become_user_errors(tmp_path, monkeypatch):
    import os

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ShardscopeError, match="No space left on device"):
        write_atomic(tmp_path / "a.diff", "text")
    assert names(tmp_path) == []
