"""``--newest-selection`` (tests/_newest_selection.py): the list of tests the newest JAX's run leaves
out names only tests that exist and says how it was measured; the cover it is made with is the
cheapest (against every subset tried by hand); the reference run fails a listed test it skips."""

from __future__ import annotations

import itertools
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _jax_free import listed as jax_free
from _newest_selection import COLLECTED, LIST, _greedy, cheapest_cover, listed

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def test_the_list_names_only_tests_that_exist(request: pytest.FixtureRequest) -> None:
    """Each listed id is a test pytest collects: from this run's collection where it holds the file,
    else from pytest's collection of the files this run did not collect."""
    names = listed()  # empty until a whole measurement passes its check (the header says so)
    collected = set(request.config.stash.get(COLLECTED, []))
    files_here = {nodeid.split("::")[0] for nodeid in collected}
    elsewhere = sorted({name.split("::")[0] for name in names} - files_here)
    missing_files = [file for file in elsewhere if not (ROOT / file).exists()]
    if elsewhere:
        result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                                 "-p", "no:cacheprovider", *(file for file in elsewhere if file not in missing_files)],
                                cwd=ROOT, capture_output=True, text=True, timeout=600)
        collected |= {line for line in result.stdout.splitlines() if "::" in line}
    stale = sorted(name for name in names if name not in collected)
    assert not stale, (f"tests/newest_leave_out.txt names {len(stale)} tests that no longer exist (renamed or "
                       f"removed), e.g. {stale[:5]}: measure again with `make newest-selection`")


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
    (tmp_path / "list.txt").write_text("# header\n" + "".join(f"test_suite.py::{name}\n" for name in
                                                            ("test_passes", "test_skipped", "test_xfails")))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-rA",
                          "--newest-selection=check", "test_suite.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    failed = set(re.findall(r"^FAILED (\S+)", run.stdout, re.M))
    assert failed == {"test_suite.py::test_skipped", "test_suite.py::test_xfails"}, run.stdout
    assert "make newest-selection" in run.stdout
    skipped = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                              "--newest-selection=skip", "test_suite.py"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert re.search(r"1 skipped, 3 deselected", skipped.stdout), skipped.stdout
