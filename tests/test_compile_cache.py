"""The commands' persistent compilation cache: where it lives, how it is turned off, that a
second ``check`` of an unchanged file reads what the first compiled, that the lines shown are
the current file's once its lines moved, that a library call leaves JAX's configuration alone,
and how the cache is kept under its bound (least recently used entries first, once per command).

The line numbers expected are found in the program's own text here, never in shardscope's output.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from _support import DEMOS, PYTHON, ROOT

from shardscope.distributed.compile_cache import (
    JAX_DIR_ENV, MAX_BYTES, NO_CACHE_ENV, TRIMMED_TO, Trimmed, cache_directory, trim, trim_now_and_then,
)

PROGRAM = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    import shardscope

    mesh = Mesh(np.array(jax.devices()[:2]), ("s",))
    W = jax.ShapeDtypeStruct((8,), jnp.float32)
    xs = jax.ShapeDtypeStruct((4, 16, 8), jnp.float32)


    def moved_lines_step(W, xs):
        def body(acc, x):
            y = jnp.sum(jnp.tanh(x @ W))
            return acc + lax.psum(y, "s"), None  # THE PSUM

        out, _ = lax.scan(body, jnp.zeros(()), xs)
        return out


    step = shardscope.program(args=(W, xs))(jax.jit(jax.shard_map(
        moved_lines_step, mesh=mesh, in_specs=(P(), P(None, "s")), out_specs=P())))
''')
"""A program whose one all-reduce sits in a loop, at the line marked ``THE PSUM``."""


def marked_line(path: Path, mark: str = "# THE PSUM") -> int:
    """The 1-based line of ``path`` holding ``mark``."""
    (line,) = [i for i, text in enumerate(path.read_text().splitlines(), 1) if mark in text]
    return line


def entries(directory: Path, module: str = "") -> set[str]:
    """The executables in a JAX cache directory (each entry also has an access-time file), of the
    jitted function ``module`` only when given (other tests write to the run's cache meanwhile)."""
    return {p.name for p in directory.glob(f"{module}*-cache")} if directory.is_dir() else set()


def test_the_cache_lives_in_the_users_cache_directory_unless_told_otherwise(tmp_path):
    home = Path.home()
    assert cache_directory({}) == home / ".cache" / "shardscope" / "jax"
    assert cache_directory({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "shardscope" / "jax"
    assert cache_directory({"XDG_CACHE_HOME": "relative/dir"}) == home / ".cache" / "shardscope" / "jax"  # the XDG spec
    assert cache_directory({"XDG_CACHE_HOME": str(tmp_path), JAX_DIR_ENV: str(tmp_path / "mine")}) == tmp_path / "mine"
    for off in ("1", "true", "YES"):
        assert cache_directory({NO_CACHE_ENV: off, JAX_DIR_ENV: str(tmp_path)}) is None
    assert cache_directory({NO_CACHE_ENV: "0"}) == home / ".cache" / "shardscope" / "jax"


def test_the_run_uses_the_cache_as_a_command_sets_it():
    import jax

    assert jax.config.jax_compilation_cache_dir == os.environ[JAX_DIR_ENV]
    # unbounded in JAX, whose bound reads every entry on each write: trim() keeps the bound
    assert jax.config.jax_compilation_cache_max_size == -1
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    assert jax.config.jax_compilation_cache_include_metadata_in_key


def test_a_second_check_reads_the_cache_and_moved_lines_are_the_current_files(tmp_path, shardscope_cli):
    import jax

    cache = Path(jax.config.jax_compilation_cache_dir)
    path = tmp_path / "moved.py"
    path.write_text(PROGRAM)

    def sources() -> tuple[list[str], list[str]]:
        """The file and line shown for each compiled collective and each of the jaxpr's."""
        result = shardscope_cli("check", path, "--json")
        assert result.returncode == 1, result.stderr  # the psum in the loop is flagged
        found = json.loads(result.stdout)
        return ([c["source"].split(" ")[0] for c in found["compiled_collectives"]],
                [c["source"].split(" ")[0] for c in found["collectives"]])

    ours = "jit_moved_lines_step-"
    before = entries(cache, ours)
    first = sources()
    written = entries(cache, ours) - before
    assert written  # the first check compiled the program and kept it
    assert sources() == first and entries(cache, ours) - before == written  # the second read it back: nothing new
    line = marked_line(path)
    assert first == ([f"moved.py:{line}"], [f"moved.py:{line}"])

    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:9]) + "\n" * 5 + "".join(lines[9:]))  # five blank lines after the imports
    assert marked_line(path) == line + 5
    assert sources() == ([f"moved.py:{line + 5}"], [f"moved.py:{line + 5}"])


def _fresh_check(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``shardscope check linear.py`` in a fresh process with the environment's cache settings replaced by ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k not in (NO_CACHE_ENV, "XDG_CACHE_HOME")}
    return subprocess.run([PYTHON, "-m", "shardscope", "check", str(DEMOS / "linear.py"), "--json", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=300, env={**base, **env})


def sparse_entry(directory: Path, key: str, size: int, used: float) -> Path:
    """A cache entry of ``size`` bytes on paper (a sparse file: no disk taken), last used at ``used``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}-cache"
    with path.open("wb") as f:
        f.truncate(size)
    os.utime(path, (used, used))
    return path


@pytest.mark.slow  # fresh processes: the cache a command starts with, not this run's
def test_a_command_keeps_its_cache_under_xdg_cache_home_and_no_cache_keeps_none(tmp_path):
    cache = tmp_path / "kept" / "shardscope" / "jax"
    week_ago = time.time() - 7 * 86400
    old = sparse_entry(cache, "jit_old", MAX_BYTES + 1, week_ago)  # over the bound
    (cache / "jit_gone-atime").write_bytes(b"\0" * 8)  # the access time an earlier version left of a removed entry
    kept = _fresh_check({"XDG_CACHE_HOME": str(tmp_path / "kept")})
    assert kept.returncode == 1 and kept.stderr == "", kept.stderr
    written = entries(cache)
    assert written and old.name not in written  # the oldest entry made room at the command's start
    assert not old.exists() and not (cache / "jit_gone-atime").exists()
    # JAX's own bound is off: a write is the entry alone (with it, each write also took a lock and
    # wrote an access-time file, having read every entry's size and access time)
    assert {p.name for p in cache.iterdir()} == written | {".trimmed"}
    flag = _fresh_check({"XDG_CACHE_HOME": str(tmp_path / "flag")}, "--no-cache")
    variable = _fresh_check({"XDG_CACHE_HOME": str(tmp_path / "variable"), NO_CACHE_ENV: "1"})
    assert flag.returncode == variable.returncode == 1, flag.stderr + variable.stderr
    assert not (tmp_path / "flag").exists() and not (tmp_path / "variable").exists()
    assert json.loads(flag.stdout) == json.loads(variable.stdout) == json.loads(kept.stdout)


def test_inspect_leaves_the_callers_jax_configuration_alone(tmp_path):
    script = textwrap.dedent('''
        import jax, jax.numpy as jnp, json
        import shardscope
        names = ("jax_compilation_cache_dir", "jax_enable_compilation_cache", "jax_compilation_cache_max_size",
                 "jax_persistent_cache_min_compile_time_secs", "jax_compilation_cache_include_metadata_in_key")
        before = {n: getattr(jax.config, n) for n in names}
        shardscope.inspect(jax.jit(lambda x: jnp.sin(x) * 2), jnp.ones(4))
        print(json.dumps([before, {n: getattr(jax.config, n) for n in names}]))
    ''')
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    result = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    before, after = json.loads(result.stdout)
    assert after == before and before["jax_compilation_cache_dir"] is None


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.machine() == "x86_64"),
                    reason="libtpu ships for Linux x86-64 only: the tpu extra cannot be installed here")
def test_a_target_checked_twice_gives_no_cache_warning(shardscope_cli):
    # a TPU slice's compile-only client writes entries it cannot read back: JAX warns on reading them
    args = ("check", DEMOS / "gspmd_accumulate.py", "--target", "tpu:v5e:2x4", "--json")  # this process has 8 devices
    with warnings.catch_warnings(record=True) as caught:
        results = [shardscope_cli(*args) for _ in range(2)]
    assert [r.returncode for r in results] == [0, 0] and [r.stderr for r in results] == ["", ""], results[0].stderr
    assert [str(w.message) for w in caught if "compilation cache" in str(w.message)] == []


def test_a_trim_removes_the_least_recently_used_entries_until_a_quarter_is_free(tmp_path):
    now = time.time()
    mib = 1 << 20
    ages = {"a": 50, "b": 40, "c": 30, "d": 20, "e": 10}  # hours since each was last used
    for key, hours in ages.items():
        sparse_entry(tmp_path, key, 30 * mib, now - hours * 3600)
    (tmp_path / "c-atime").write_bytes(b"\0" * 8)  # an entry's access time, as JAX's own bound writes it
    # read back since the write: a later access time than modification time counts (d is used last)
    os.utime(tmp_path / "d-cache", (now, now - 60 * 3600))
    (tmp_path / "unrelated.txt").write_text("kept")

    # 150 MiB against a 100 MiB bound: remove a (oldest), b, c, then e leaves 60 MiB <= 75 MiB
    assert trim(tmp_path, 100 * mib) == Trimmed(entries=5, bytes=150 * mib, removed=3, removed_bytes=90 * mib)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d-cache", "e-cache", "unrelated.txt"]
    assert 60 * mib <= 100 * mib * TRIMMED_TO
    # under the bound: nothing removed
    assert trim(tmp_path, 100 * mib) == Trimmed(entries=2, bytes=60 * mib, removed=0, removed_bytes=0)
    assert trim(tmp_path / "missing", 1) == Trimmed(0, 0, 0, 0)


def test_a_command_trims_at_most_once_an_hour(tmp_path):
    sparse_entry(tmp_path, "big", 2 * MAX_BYTES, time.time() - 86400)
    assert trim_now_and_then(tmp_path) == Trimmed(entries=1, bytes=2 * MAX_BYTES, removed=1, removed_bytes=2 * MAX_BYTES)
    sparse_entry(tmp_path, "big", 2 * MAX_BYTES, time.time() - 86400)
    assert trim_now_and_then(tmp_path) is None and (tmp_path / "big-cache").exists()  # trimmed a moment ago
    os.utime(tmp_path / ".trimmed", (time.time() - 3601,) * 2)
    assert trim_now_and_then(tmp_path).removed == 1 and not (tmp_path / "big-cache").exists()


def _cuda_plugin_lines_left_out(stderr: str) -> str:
    noise = ("absl::InitializeLog()", "cudart_stub.cc")
    return "".join(line for line in stderr.splitlines(keepends=True) if not any(n in line for n in noise))


@pytest.mark.slow  # fresh processes: the cache a command starts with, not this run's
def test_a_remote_cache_folder_is_never_made_a_local_folder(tmp_path):
    """JAX reads ``gs://`` folders through etils.epath and gcsfs; without gcsfs the command says the
    cache is not used and runs without it, writing nothing where it runs (``Path('gs://bucket/cache')``
    is the local folder ``gs:/bucket/cache``). The profile extra brings gcsfs into the test
    environment: the processes here import a ``gcsfs`` that is not there (a package that raises
    ImportError, first on their path), as an environment without it does."""
    import importlib.util

    assert importlib.util.find_spec("tensorflow") is None
    run = tmp_path / "run"
    run.mkdir()
    absent = tmp_path / "no_gcsfs" / "gcsfs"
    absent.mkdir(parents=True)
    (absent / "__init__.py").write_text("raise ImportError(\"No module named 'gcsfs'\")\n")
    path = os.pathsep.join(filter(None, (str(absent.parent), os.environ.get("PYTHONPATH", ""))))
    remote = _fresh_check({JAX_DIR_ENV: "gs://bucket/cache", "PYTHONPATH": path}, cwd=run)
    local = _fresh_check({NO_CACHE_ENV: "1", "PYTHONPATH": path}, cwd=run)
    assert list(run.iterdir()) == []
    assert remote.returncode == local.returncode == 1
    assert json.loads(remote.stdout) == json.loads(local.stdout)
    (said,) = _cuda_plugin_lines_left_out(remote.stderr).splitlines()
    assert "gs://bucket/cache" in said and "not used" in said and "gcsfs" in said
    assert cache_directory({JAX_DIR_ENV: "gs://bucket/cache"}) == "gs://bucket/cache"
    assert cache_directory({JAX_DIR_ENV: "file:///tmp/c"}) == Path("/tmp/c")


@pytest.mark.slow  # fresh processes: the cache a command starts with, not this run's
def test_an_entry_that_cannot_be_read_is_written_anew(tmp_path):
    """JAX never overwrites an entry that exists: a damaged one was read around on every run."""
    from jax._src.compilation_cache import decompress_executable

    cache = tmp_path / "cache"
    first = _fresh_check({JAX_DIR_ENV: str(cache)})
    written = entries(cache)
    assert first.returncode == 1 and written, first.stderr
    for name in written:
        (cache / name).write_bytes(b"a write cut short")
    second = _fresh_check({JAX_DIR_ENV: str(cache)})
    assert second.returncode == 1 and json.loads(second.stdout) == json.loads(first.stdout)
    assert _cuda_plugin_lines_left_out(second.stderr) == ""
    assert entries(cache) == written
    for name in written:  # each one JAX's again: its bytes decompress
        assert decompress_executable((cache / name).read_bytes())


def test_a_compile_served_by_the_cache_is_marked_so():
    """JAX records a cache hit, and a compile it hands on (``jax.monitoring``), in the compiling
    thread: the first compile of a module new to the cache is a compile; the same module again,
    from its own lowering (JAX's memory keeps executables per lowering) is a read of the persistent
    cache, and from the same lowering a hit in JAX's memory. The module is made new by a constant
    of its own."""
    import uuid

    import jax
    import jax.numpy as jnp

    from shardscope.engine.compilation import compile_traced, served_from_cache

    assert jax.config.jax_enable_compilation_cache and jax.config.jax_persistent_cache_min_compile_time_secs == 0
    constant = uuid.uuid4().int % 1_000_003 / 7.0  # a module text no earlier run compiled

    def function():
        def f(x):
            return jnp.sin(x) * constant
        return f

    def compiled(f):
        return compile_traced(jax.jit(f).trace(jnp.ones(3)))

    functions = [function(), function()]
    # from one line: the module's source locations (its whole call stack) are the same
    first, read = [compiled(f) for f in functions]  # the second f is lowered afresh, read back from disk
    kept = compiled(functions[0])  # JAX keeps the lowering of the same function in memory
    assert not served_from_cache(first) and served_from_cache(kept) and served_from_cache(read)


def test_the_report_marks_compiles_the_cache_served(shardscope_cli):
    """A second report of the same demo reads every program back from the cache: each compile
    time says ``(cache)``, and the JSON says so per plan; a compile never is (the first report
    of the run may be a read too: other tests compiled the linear demo before)."""
    shardscope_cli("report", DEMOS / "linear.py", "-r", "1", "--chunk-size", "8", "--json")
    data = json.loads(shardscope_cli("report", DEMOS / "linear.py", "-r", "1", "--chunk-size", "8", "--json").stdout)
    assert all(plan["compile_from_cache"] for plan in data["variants"].values())
    assert data["reference"]["compile_from_cache"]
    text = shardscope_cli("report", DEMOS / "linear.py", "-r", "1", "--chunk-size", "8").stdout
    compile_row = next(line for line in text.splitlines() if line.startswith("│ compile "))
    assert compile_row.count("(cache)") == 3
    assert "(cache): a cache served the executable, not the compiler" in " ".join(text.split())
