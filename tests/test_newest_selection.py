"""``--newest-selection`` (tests/_newest_selection.py): the list of tests the newest JAX's run leaves
out says how it was measured; the code it leaves aside (app/, render/) imports no JAX; the cover it
is made with is the cheapest (against every subset tried by hand); the reference run fails a listed
test it skips, and a listed test no longer collected changes nothing."""

from __future__ import annotations

import ast
import configparser
import itertools
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _jax_free import listed as jax_free
from _newest_selection import LIST, PRESENTATION, ProcessStarts, _greedy, cheapest_cover, listed, sees_jax

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


JAX_MODULES = ("jax", "jaxlib")


def _names_jax(node: ast.AST) -> bool:
    """An import of JAX: ``import jax...``, ``from jax... import``, or a dynamic import naming it."""
    def is_jax(name: str | None) -> bool:
        return bool(name) and name.split(".")[0] in JAX_MODULES
    if isinstance(node, ast.Import):
        return any(is_jax(alias.name) for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and is_jax(node.module)
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        return called in ("import_module", "__import__") and isinstance(node.args[0].value, str) and is_jax(node.args[0].value)
    return False


def jax_imports(folder: Path) -> list[str]:
    """Each place under ``folder`` that imports JAX, as ``file:line``, found by AST: in functions and
    under ``TYPE_CHECKING`` too."""
    return [f"{path.relative_to(folder.parent)}:{line}" for path in sorted(folder.rglob("*.py"))
            for line in sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path))) if _names_jax(node))]


def test_the_code_the_criterion_leaves_aside_imports_no_jax() -> None:
    """The newest run must keep the coverage of the code that can see JAX only: all of shardscope but
    app/ and render/, which import no JAX (and compute nothing: tests/test_architecture.py), so what
    they do with the same values cannot depend on JAX's version. An import of JAX there would make
    that untrue: the measurement would have to cover them too."""
    for folder in PRESENTATION:
        assert (ROOT / folder).is_dir(), folder
        assert not jax_imports(ROOT / folder), (
            f"{folder} imports JAX ({jax_imports(ROOT / folder)}): its coverage on the newest JAX can now depend on "
            "JAX's version, so tests/_newest_selection.py's PRESENTATION and .ci/coverage-newest.ini's omit must "
            "drop it, and the list be measured again (`make newest-selection`)")


def test_the_jax_import_finder_finds_each_way_of_importing_it(tmp_path: Path) -> None:
    """So that the test above can fail: each form found, lookalikes not."""
    (tmp_path / "a.py").write_text("import jax\nimport jax.numpy as jnp\nfrom jaxlib import xla_client\n"
                                   "def f():\n    from jax.sharding import Mesh\n    return importlib.import_module('jax')\n"
                                   "x = __import__('jax.numpy')\n")
    (tmp_path / "b.py").write_text("import jaxtyping\nfrom . import jax\nimport shardscope.jax_free\nname = 'jax'\n")
    assert [place.rsplit(":", 1)[1] for place in jax_imports(tmp_path)] == ["1", "2", "3", "5", "6", "7"]


def test_the_measurement_leaves_aside_exactly_that_code() -> None:
    """The coverage settings omit app/ and render/ and nothing else, and the list is computed over the
    rest of the package (tests/_newest_selection.py's sees_jax)."""
    settings = configparser.ConfigParser()
    settings.read(ROOT / ".ci" / "coverage-newest.ini")
    omitted = {line.strip() for line in settings["run"]["omit"].splitlines() if line.strip()}
    assert omitted == {f"*/{folder}*" for folder in PRESENTATION}
    assert settings["run"]["source"] == "shardscope"
    assert [sees_jax(f) for f in ("shardscope/pipeline/check.py", "shardscope/cli/check.py", "shardscope/app/app.py",
                                  "shardscope/render/check.py", "shardscope/__init__.py", "tests/conftest.py",
                                  "shardscope/applied.py", "shardscope/renderers.py")] == [
        True, True, False, False, True, False, True, True]


def test_the_list_says_when_and_on_which_jax_it_was_measured_and_how_to_measure_again() -> None:
    header = "\n".join(line for line in LIST.read_text().splitlines() if line.startswith("#"))
    assert "`make newest-selection`" in header
    measured = re.search(r"Measured \d{4}-\d{2}-\d{2} on jax \d+\.\d+\S* \(the reference run: jax \d+\.\d+\S*\)", header)
    # a list without a whole, checked measurement behind it leaves nothing out and says why
    assert measured or ("Not yet measured" in header and not listed())
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^newest-selection:", makefile, re.M)
    assert re.search(r"^test-newest:.*\n(\t.*\n)*\t.*--newest-selection=skip", makefile, re.M)


def test_no_test_is_in_both_lists() -> None:
    """tests/jax_free.txt's tests are never measured (the newest run leaves them out already)."""
    assert not listed() & jax_free()


def _cost(tests, weights) -> float:
    return sum(weights[t] for t in tests)


@pytest.mark.parametrize("seed", range(12))
def test_the_cover_meets_every_demand_at_the_least_weight_any_subset_has(seed: int) -> None:
    """Against every subset of nine tests, counted here: each element held as often as asked (at
    most as often as tests hold it), at the least weight."""
    generator = random.Random(seed)
    tests = [f"t{i}" for i in range(9)]
    sets = {t: {e for e in range(14) if generator.random() < 0.3} for t in tests}
    sets = {t: s for t, s in sets.items() if s}
    weights = {t: generator.choice([0.5, 1, 2, 3, 7]) for t in sets}
    demand = {e: generator.choice([1, 2]) for e in range(14)} if seed % 2 else None
    held = {e: sum(e in s for s in sets.values()) for e in range(14)}
    need = {e: min(held[e], (demand or {}).get(e, 1)) for e in range(14)}

    def meets(subset) -> bool:
        return all(sum(e in sets[t] for t in subset) >= need[e] for e in range(14))

    cheapest = min(_cost(subset, weights) for n in range(len(sets) + 1) for subset in itertools.combinations(sets, n)
                   if meets(subset))
    chosen = cheapest_cover(sets, weights, demand)
    assert meets(chosen)
    assert _cost(chosen, weights) == pytest.approx(cheapest)


def test_the_greedy_cover_keeps_no_test_the_others_cover() -> None:
    """a (weight 1) covers rows 0 and 1, then b (weight 1.5) rows 2 and 3, then c (weight 1) the
    last, row 4, with rows 0 and 1 again: a is then redundant and dropped."""
    rows = [(frozenset("ac"), 1), (frozenset("ac"), 1), (frozenset("b"), 1), (frozenset("b"), 1), (frozenset("c"), 1)]
    assert _greedy(rows, {"a": 1, "b": 1.5, "c": 1.0}) == {"b", "c"}


def test_an_element_two_tests_hold_twice_keeps_both() -> None:
    rows = [(frozenset("ab"), 2), (frozenset("b"), 1)]
    assert _greedy(rows, {"a": 5, "b": 1}) == {"a", "b"}
    assert cheapest_cover({"a": {0}, "b": {0, 1}}, {"a": 5, "b": 1}, {0: 2, 1: 2}) == {"a", "b"}
    assert cheapest_cover({"a": {0}, "b": {0, 1}}, {"a": 5, "b": 1}) == {"b"}



def test_each_process_a_test_starts_counts_once_and_the_standard_librarys_own_programs_not_at_all() -> None:
    """``subprocess.Popen`` audits a start, then, where it spawns the program (Python 3.13's way),
    ``os.posix_spawn`` of the same program: one process, whose saved coverage then accounts for it.
    ``ldconfig`` (``ctypes.util.find_library``) runs no Python: nothing of it to follow."""
    starts = ProcessStarts()
    python = sys.executable
    starts.audit("subprocess.Popen", (None, [python, "-c", "pass"], None, None))
    starts.audit("os.posix_spawn", (python, [python, "-c", "pass"], {}))
    assert starts.starts == 1
    starts.audit("subprocess.Popen", ("/usr/bin/script", ["script", "-qec", "python"], None, None))  # forked, no spawn
    starts.audit("os.posix_spawn", (python, [python], {}))  # another process: a spawn of its own
    starts.audit("os.fork", ())
    assert starts.starts == 4
    starts.audit("subprocess.Popen", (None, ["/sbin/ldconfig", "-p"], None, None))
    starts.audit("os.posix_spawn", ("/sbin/ldconfig", ["/sbin/ldconfig", "-p"], {}))
    starts.audit("os.posix_spawn", ("/sbin/ldconfig", ["/sbin/ldconfig", "-p"], {}))
    starts.audit("builtins.open", ("file", "r", 0))
    assert starts.starts == 4


SUITE = '''
import pytest


def test_passes():
    pass


def test_skipped():
    pytest.skip("not here")


@pytest.mark.xfail(reason="not here")
def test_xfails():
    assert False


def test_skipped_unlisted():
    pytest.skip("not here")
'''


def test_the_reference_run_fails_a_listed_test_it_does_not_pass(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        import _newest_selection
        _newest_selection.LIST = __import__("pathlib").Path({str(tmp_path / "list.txt")!r})

        def pytest_addoption(parser):
            _newest_selection.add_options(parser)

        def pytest_configure(config):
            _newest_selection.configure(config)
        """))
    (tmp_path / "test_suite.py").write_text(SUITE)
    # test_gone: a listed test no longer collected (renamed, removed) changes nothing in either mode
    (tmp_path / "list.txt").write_text("# header\n" + "".join(f"test_suite.py::{name}\n" for name in
                                                            ("test_passes", "test_skipped", "test_xfails", "test_gone")))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-rA",
                          "--newest-selection=check", "test_suite.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    failed = set(re.findall(r"^FAILED (\S+)", run.stdout, re.M))
    assert failed == {"test_suite.py::test_skipped", "test_suite.py::test_xfails"}, run.stdout
    assert "make newest-selection" in run.stdout
    assert re.search(r"^2 failed, 1 passed, 1 skipped in", run.stdout.splitlines()[-1].strip("= ")), run.stdout
    skipped = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                              "--newest-selection=skip", "test_suite.py"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert re.search(r"1 skipped, 3 deselected", skipped.stdout), skipped.stdout
