"""``--jax-free`` (tests/_jax_free.py): what it measures, what it lists, what it checks and skips,
each on a small suite of its own run by pytest in a fresh process; and the list itself."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _jax_free import HEADER, LIST, jax_free_tests, listed

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.slow  # a fresh pytest process per mode

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from _jax_free import pytest_addoption, pytest_configure
"""

SUITE = '''
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

DOUBLED = jax.jit(lambda x: 2 * x)


def test_text():
    assert "all-reduce".split("-") == ["all", "reduce"]


def test_traces():
    assert jax.make_jaxpr(lambda x: x + 1)(1.0).eqns


def test_runs_a_jitted_function():
    assert int(DOUBLED(2)) == 4


def test_runs_it_again():  # after the test above traced it: the emptied caches make it trace again
    assert int(DOUBLED(3)) == 6


def test_asks_for_devices():
    assert jax.devices()


def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.fixture(scope="module")
def compiled():
    return jax.jit(jnp.sin).lower(1.0).compile()


def test_sets_the_fixture_up(compiled):
    assert compiled is not None


def test_reuses_the_fixture(compiled):  # the fixture was set up for the test above
    assert compiled is not None


def test_skipped():
    pytest.skip("not run: not listed")
'''

CHECKED = '''
import jax

HALVED = 0.5


def test_uses_jax():
    assert jax.numpy.ones(2).sum() == 2


def test_text():
    assert HALVED == 1 / 2


def test_listed_but_uses_jax():
    assert jax.numpy.ones(3).sum() == 3
'''


def _suite(tmp_path: Path, body: str) -> Path:
    tmp_path.mkdir()
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(body))
    return tmp_path


def _pytest(directory: Path, *options: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(directory),
                           *map(str, options), str(directory / "test_suite.py")],
                          capture_output=True, text=True, cwd=directory, timeout=300)


def test_a_recorded_run_lists_only_the_tests_that_passed_without_jax(tmp_path):
    suite = _suite(tmp_path / "suite", SUITE)
    records = tmp_path / "records"
    done = _pytest(suite, "--jax-free=record", "--jax-free-records", records)
    assert done.returncode == 0, done.stdout + done.stderr
    assert jax_free_tests(records) == ["test_suite.py::test_text"]


def test_a_check_runs_the_listed_tests_first_and_fails_one_that_uses_jax(tmp_path):
    suite = _suite(tmp_path / "suite", CHECKED)
    names = suite / "listed.txt"
    names.write_text(HEADER + "test_suite.py::test_listed_but_uses_jax\ntest_suite.py::test_text\n")
    done = _pytest(suite, "--jax-free=check", "--jax-free-list", names, "-vv")
    assert done.returncode == 1, done.stdout + done.stderr
    order = re.findall(r"^test_suite\.py::(\w+) (PASSED|ERROR)", done.stdout, re.MULTILINE)
    assert order == [("test_text", "PASSED"), ("test_listed_but_uses_jax", "PASSED"),
                     ("test_listed_but_uses_jax", "ERROR"), ("test_uses_jax", "PASSED")], done.stdout
    assert "ERROR at teardown of test_listed_but_uses_jax" in done.stdout
    assert "3 passed, 1 error" in done.stdout, done.stdout
    assert ("test_suite.py::test_listed_but_uses_jax is listed in tests/jax_free.txt (the tests the newest JAX's "
            "run leaves out) but it used JAX here: ") in done.stdout
    assert "/jax/core/compile/jaxpr_trace_duration" in done.stdout and "make jax-free" in done.stdout


def test_a_check_passes_the_listed_tests_that_use_no_jax_and_skip_leaves_them_out(tmp_path):
    suite = _suite(tmp_path / "suite", CHECKED)
    names = suite / "listed.txt"
    names.write_text("test_suite.py::test_text\n")
    checked = _pytest(suite, "--jax-free=check", "--jax-free-list", names)
    assert checked.returncode == 0 and "3 passed" in checked.stdout, checked.stdout + checked.stderr
    skipped = _pytest(suite, "--jax-free=skip", "--jax-free-list", names)
    assert skipped.returncode == 0 and "2 passed, 1 deselected" in skipped.stdout, skipped.stdout + skipped.stderr


def test_the_list_is_sorted_and_names_each_test_once():
    lines = [line for line in LIST.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == sorted(set(lines)) and len(listed()) == len(lines)
    assert LIST.read_text().startswith(HEADER)
    assert all(line.startswith("tests/") and "::" in line for line in lines)
