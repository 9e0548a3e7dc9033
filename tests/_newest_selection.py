"""Which tests the newest JAX's run may leave out: measured by coverage, listed in
``tests/newest_leave_out.txt``.

The newest JAX's run (``make test-newest``) must cover every line of the shardscope code that can see
JAX that the whole suite covers there. That code is the package but for ``shardscope/app/`` and
``shardscope/render/`` (:data:`PRESENTATION`): those import no JAX and compute nothing (the architecture
test: presentation reads values), so what they do with the same values cannot depend on JAX's
version, and the reference run covers them whole; what can depend on it is the code below them,
which makes the values. ``make newest-selection`` measures it: the newest run's tests on
``.venv-newest`` under coverage.py (``.ci/coverage-newest.ini``: lines, each test's own context, the
Python processes a test starts measured too), then the cheapest set of tests (each weighed by its
measured CPU seconds) whose union covers all the run covered, and writes the rest, the tests it may
leave out, to the list. Lines, not branches: on the newest venv's Python (3.13) coverage.py's fast
core (sys.monitoring) measures no branches, and the C tracer that does is slower (1.6x the app
tests' wall time against 1.2x, ``.ci/coverage-newest.ini``) and what it found moved from run to run
(the first measurement's check missed branches). A test the measurement did not see (added since) is not
listed, so it runs on both JAX versions until the next measurement.

Never listed, whatever they cover:

- a test whose outcome on the newest JAX is anything but a pass (a skip, an xfail, a failure: the
  outcome itself may depend on JAX's version);
- a test that started a process the measurement could not follow (a process that wrote no coverage
  data: another interpreter, a program that is not Python, one killed before it saved);
- a test whose coverage could not be saved (its worker's data file stayed locked), and the next test
  of its worker, whose context the unsaved lines would have gone to.

A listed test that is not collected (renamed or removed since) is harmless: ``skip`` leaves out only
the collected tests it names, ``check`` checks only those; the renamed test is not listed, so it runs
on both until the next measurement.

``pytest --newest-selection=MODE``:

- ``measure`` (with ``--newest-records DIR``): each test runs in its own coverage context (the
  process's ``coverage`` was started by ``COVERAGE_PROCESS_START``, ``.ci/coverage-newest.ini``);
  the processes it starts inherit ``SHARDSCOPE_COVERAGE_TEST``, their static context. Each test's
  outcome, CPU seconds and process starts go to DIR, one file per process.
- ``skip`` (``make test-newest``): the listed tests are left out.
- ``check`` (``make test``, the reference JAX): a listed test that is skipped or xfails fails,
  naming the list: left out of the newest's run, it would run on neither JAX.

``python tests/_newest_selection.py DIR`` reads the records and the coverage data and prints the list.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import TextIO

import pytest

import _jax_free  # the list format and the process-starting events are tests/jax_free.txt's

LIST = Path(__file__).resolve().parent / "newest_leave_out.txt"
ROOT = LIST.parent.parent
MODES = ("measure", "skip", "check")
CONTEXT_ENV = "SHARDSCOPE_COVERAGE_TEST"
_NO_PYTHON = frozenset({"ldconfig", "uname"})
"""Programs the standard library starts for itself, in whichever test first asks in its worker
(``ctypes.util.find_library``'s ``ldconfig -p`` as libtpu loads, ``platform.processor``'s ``uname
-p``): they run no Python, so there is nothing of them to follow."""


def listed(path: Path | None = None) -> frozenset[str]:
    """The node ids in the list (comments and blank lines left out), read as tests/jax_free.txt is."""
    return _jax_free.listed(LIST if path is None else path)


def add_options(parser: pytest.Parser) -> None:
    parser.addoption("--newest-selection", choices=MODES, help=(
        "the tests listed in tests/newest_leave_out.txt, whose coverage on the newest JAX other tests "
        "give: skip them (the newest JAX's run), check that each passes (the reference run), or measure "
        "every test's coverage (tests/_newest_selection.py)"))
    parser.addoption("--newest-records", type=Path, help="where --newest-selection=measure writes its records")
    parser.addoption("--newest-list", type=Path, help="the list (default tests/newest_leave_out.txt)")


def configure(config: pytest.Config) -> None:
    mode = config.getoption("--newest-selection")
    path = config.getoption("--newest-list")
    if mode == "skip":
        config.pluginmanager.register(LeaveOut(listed(path)), "newest-selection")
    elif mode == "check":
        config.pluginmanager.register(RunsSomewhere(listed(path)), "newest-selection")
    elif mode == "measure":
        records = config.getoption("--newest-records")
        if records is None:
            raise pytest.UsageError("--newest-selection=measure needs --newest-records DIR")
        config.pluginmanager.register(Measure(records), "newest-selection")


class LeaveOut:
    def __init__(self, listed: frozenset[str]) -> None:
        self.listed = listed

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        left_out = [item for item in items if item.nodeid in self.listed]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item.nodeid not in self.listed]


class RunsSomewhere:
    """A listed test skipped or xfailing on the reference JAX fails: the newest's run leaves it out."""

    def __init__(self, listed: frozenset[str]) -> None:
        self.listed = listed

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        result = yield
        report: pytest.TestReport = result.get_result()
        if item.nodeid in self.listed and (report.skipped or hasattr(report, "wasxfail")):
            why = "xfails" if hasattr(report, "wasxfail") else "is skipped"
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} {why} here, and tests/newest_leave_out.txt leaves it out of the newest JAX's "
                "run: it would run on neither. Measure again (`make newest-selection`), which keeps a test "
                "that does not pass on both.")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class ProcessStarts:
    """The processes this process started that may run Python, each counted once (an audit hook).

    ``subprocess.Popen`` audits a start and then, where it starts the program with ``os.posix_spawn``
    (Python 3.13 does for most), the spawn too, in the same thread: counted twice, a test whose one
    process saved its coverage was said to have started one that did not. :data:`_NO_PYTHON`'s
    programs are not counted."""

    def __init__(self) -> None:
        self.starts = 0
        self._spawning = threading.local()

    def audit(self, event: str, args: tuple) -> None:
        if not _jax_free.starts_a_process(event, args):  # not the compile-abort sentinel: it runs no JAX
            return
        program = ""
        if event == "subprocess.Popen":
            executable, argv = args[0], args[1]
            program = _program(executable or (argv if isinstance(argv, (str, bytes, os.PathLike)) else list(argv)[0]))
            self._spawning.program = program
        elif event == "os.posix_spawn":
            program = _program(args[0])
            if getattr(self._spawning, "program", None) == program:  # the Popen's own spawn
                self._spawning.program = None
                return
        if program not in _NO_PYTHON:
            self.starts += 1


def _program(path: str | bytes | os.PathLike) -> str:
    """A program by its file name (``/sbin/ldconfig`` -> ``ldconfig``)."""
    return os.path.basename(os.fsdecode(path))


class Measure:
    """Each test in its own coverage context; its outcome, CPU seconds and process starts recorded."""

    def __init__(self, records: Path) -> None:
        import coverage

        self.coverage = coverage.Coverage.current()
        if self.coverage is None:
            raise pytest.UsageError("--newest-selection=measure: coverage is not measuring this process "
                                    "(run it as `make newest-selection` does, with COVERAGE_PROCESS_START)")
        self.records = records
        self.processes = ProcessStarts()
        self.unsaved = ""
        self.out: TextIO | None = None
        sys.addaudithook(self.processes.audit)

    @property
    def starts(self) -> int:
        return self.processes.starts

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self._record({"collected": len(items)})  # the run's tests: a run cut short measured fewer

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        starts, cpu, outcomes = self.starts, _cpu_seconds(), []
        item.stash[_OUTCOMES] = outcomes
        os.environ[CONTEXT_ENV] = item.nodeid
        # what ran since the last switch is saved under the last context: where that failed, it is
        # saved under the next one instead, so the next test is unmeasured too
        unsaved = self._switch(item.nodeid) or self.unsaved
        yield
        self.unsaved = self._switch("")
        unsaved = unsaved or self.unsaved
        os.environ.pop(CONTEXT_ENV, None)
        outcome = "passed" if all(o == "passed" for o in outcomes) else ",".join(o for o in outcomes if o != "passed")
        record = {"test": item.nodeid, "outcome": outcome, "cpu_s": round(_cpu_seconds() - cpu, 3),
                  "process_starts": self.starts - starts, "pid": os.getpid()}
        if unsaved:
            record["coverage_error"] = unsaved
        self._record(record)

    def _switch(self, context: str) -> str:
        """The coverage context switched to ``context`` (what ran since the last switch saved under the
        last one), and every line's event turned on again: coverage's sys.monitoring core turns a
        line's event off once it has seen it, and this context must see the lines that earlier ones
        ran too. Returns "" or why the last context's lines could not be saved.

        Saving writes the process's SQLite data file; the measurement's first run (at load 13-26)
        died there once, "database is locked" (SQLITE_BUSY, after SQLite's 5 s wait) in a worker's
        own file during an app test. It is tried again a few times, then the test is recorded as
        unmeasured (kept, whatever it covers) rather than ending the whole run."""
        import coverage.exceptions

        why = ""
        for attempt in range(4):
            try:
                self.coverage.switch_context(context)
                why = ""
                break
            except coverage.exceptions.DataError as error:
                why = str(error)
                time.sleep(2 ** attempt)
        if hasattr(sys, "monitoring"):
            sys.monitoring.restart_events()
        return why

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        result = yield
        report: pytest.TestReport = result.get_result()
        outcomes = item.stash.get(_OUTCOMES, [])
        if hasattr(report, "wasxfail"):
            outcomes.append("xpassed" if report.passed else "xfailed")
        else:
            outcomes.append(report.outcome)

    def _record(self, record: dict) -> None:
        if self.out is None:
            self.records.mkdir(parents=True, exist_ok=True)
            self.out = (self.records / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.jsonl").open("a")
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()


_OUTCOMES = pytest.StashKey[list]()


# -- the measurement read back, and the cover computed


def _records(folder: Path) -> tuple[dict[str, dict], int]:
    """Each measured test's record (the last, should a test have run twice), and how many tests the
    run collected (0 if no record says)."""
    tests: dict[str, dict] = {}
    collected = 0
    for path in sorted((folder / "records").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "collected" in record:
                collected = max(collected, record["collected"])
            else:
                tests[record["test"]] = record
    return tests, collected


PRESENTATION = ("shardscope/app/", "shardscope/render/")
"""What the criterion leaves aside: the explorer and the renderers import no JAX and compute nothing
(tests/test_architecture.py: they read the values the layers below them computed), so what they do
with the same values cannot depend on JAX's version; the reference run covers them whole."""


def sees_jax(file: str) -> bool:
    """Whether a file (relative to the repository) is shardscope code whose coverage on the newest JAX
    the newest run must keep: all of the package but :data:`PRESENTATION`."""
    return file.startswith("shardscope/") and not file.startswith(PRESENTATION)


Line = tuple[str, int]
"""A line of a file the data measured: (file relative to the repository, line number)."""
Arc = tuple[str, int, int]
"""A branch the data measured: (file, from line, to line); negative lines mark entry and exit."""
Covered = Line | Arc
"""What a test covered: lines, or arcs where the run measured branches."""


def _covered_by_context(path: Path) -> dict[str, set[Covered]]:
    """What one coverage data file holds of the code that sees JAX, by context: its lines (file,
    line), or its arcs (file, from line, to line) where it measured branches. Read with SQL
    (coverage.py's documented SQLite schema: tables ``meta``, ``file``, ``context``, ``line_bits``,
    ``arc``) once the run is over: the file is opened as immutable, taking no lock (a lock held while
    a worker writes made it fail with "database is locked")."""
    import sqlite3

    from coverage.numbits import numbits_to_nums

    connection = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        arcs = dict(connection.execute("select key, value from meta")).get("has_arcs") == "1"
        files = {id_: os.path.relpath(file, ROOT) for id_, file in connection.execute("select id, path from file")}
        contexts = dict(connection.execute("select id, context from context"))
        covered: dict[str, set[Covered]] = {}
        if arcs:
            for context, file, start, end in connection.execute("select context_id, file_id, fromno, tono from arc"):
                if sees_jax(files[file]):
                    covered.setdefault(contexts[context], set()).add((files[file], start, end))
        else:
            for context, file, numbits in connection.execute("select context_id, file_id, numbits from line_bits"):
                if sees_jax(files[file]):
                    covered.setdefault(contexts[context], set()).update((files[file], n) for n in numbits_to_nums(numbits))
        return covered
    finally:
        connection.close()


def _lines(covered: set[Covered]) -> set[Line]:
    """The lines of a set of lines or arcs (an arc's ends, the negative entry and exit marks left out)."""
    return {(entry[0], line) for entry in covered for line in entry[1:] if line > 0}


def _data_files(folder: Path) -> list[Path]:
    return sorted(folder.glob(".coverage.*"))


_PID = re.compile(r"\.pid(\d+)\.")


class Measurement:
    """One ``--newest-selection=measure`` run read back: each test's record and what it covered of the
    code that sees JAX (lines, or arcs where branches were measured), what every test covers
    (``baseline``: what no test's context holds, the collection's and the workers' start-up), and the
    tests' child processes that saved coverage data."""

    def __init__(self, folder: Path) -> None:
        self.tests, self.collected = _records(folder)
        workers = {record["pid"] for record in self.tests.values()}
        self.covers: dict[str, set[Covered]] = {}
        self.children: dict[str, int] = {}
        self.baseline: set[Covered] = set()
        for path in _data_files(folder):
            match = _PID.search(path.name)
            is_worker = match is not None and int(match.group(1)) in workers
            for context, covered in _covered_by_context(path).items():
                if not context:
                    self.baseline |= covered
                    continue
                self.covers.setdefault(context, set()).update(covered)
                if not is_worker:
                    self.children[context] = self.children.get(context, 0) + 1

    def covered(self) -> set[Covered]:
        """What the run covered: its tests' (those recorded: a test cut short is not measured) and the
        baseline; a run without records (``newest-selection-verify``'s) is all baseline."""
        return set().union(self.baseline, *(covered for test, covered in self.covers.items() if test in self.tests))

    def kept_whatever_they_cover(self, reference: dict[str, str]) -> dict[str, str]:
        """The tests that are never listed, with why."""
        kept = {}
        for test, record in self.tests.items():
            if record["outcome"] != "passed":
                kept[test] = f"{record['outcome']} on the newest JAX"
            elif record.get("coverage_error"):
                kept[test] = f"its coverage was not saved: {record['coverage_error']}"
            elif record["process_starts"] > self.children.get(test, 0):
                kept[test] = (f"started {record['process_starts']} processes, {self.children.get(test, 0)} "
                              "saved coverage data")
            elif test in reference and reference[test] != "passed":
                kept[test] = f"{reference[test]} on the reference JAX"
        return kept


def cheapest_cover(sets: dict[str, set[int]], weights: dict[str, float], demand: dict[int, int] | None = None,
                   seconds: float = 120) -> set[str]:
    """The cheapest tests (by ``weights``) whose ``sets`` together hold each element any of them holds
    ``demand[element]`` times (once where not given; at most as often as tests hold it).

    The elements the same tests hold, with the same demand, are one row; a test is chosen greedily
    (the least weight per row it still helps), the chosen ones each dropped again where the others
    meet its rows' demands, and the result improved by an exact integer programme (scipy's HiGHS)
    where it finishes in ``seconds``."""
    holders: dict[int, list[str]] = {}
    for test, elements in sets.items():
        for element in elements:
            holders.setdefault(element, []).append(test)
    classes = {(frozenset(tests), min(len(tests), (demand or {}).get(element, 1))) for element, tests in holders.items()}
    rows = sorted((tests, need) for tests, need in classes if need > 0)
    chosen = _greedy(rows, weights)
    exact = _exact(rows, weights, seconds)
    if exact is not None and sum(weights[t] for t in exact) < sum(weights[t] for t in chosen):
        chosen = exact
    return chosen


def _greedy(rows: list[tuple[frozenset[str], int]], weights: dict[str, float]) -> set[str]:
    by_test: dict[str, list[int]] = {}
    for row, (tests, _) in enumerate(rows):
        for test in tests:
            by_test.setdefault(test, []).append(row)
    missing = {row: need for row, (_, need) in enumerate(rows)}
    chosen: set[str] = set()
    while any(missing.values()):
        helps = {t: sum(1 for row in by_test[t] if missing[row]) for t in by_test if t not in chosen}
        test = min((t for t, n in helps.items() if n), key=lambda t: (weights[t] / helps[t], t))
        chosen.add(test)
        for row in by_test[test]:
            missing[row] = max(0, missing[row] - 1)
    for test in sorted(chosen, key=lambda t: (-weights[t], t)):  # the dearest first: drop what the rest cover
        if all(len(rows[row][0] & chosen) > rows[row][1] for row in by_test[test]):
            chosen.discard(test)
    return chosen


def _exact(rows: list[tuple[frozenset[str], int]], weights: dict[str, float], seconds: float) -> set[str] | None:
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix
    except ImportError:
        return None
    tests = sorted(set().union(*(row for row, _ in rows)))
    index = {test: i for i, test in enumerate(tests)}
    cells = [(r, index[t]) for r, (row, _) in enumerate(rows) for t in row]
    matrix = coo_matrix(([1.0] * len(cells), ([r for r, _ in cells], [c for _, c in cells])), shape=(len(rows), len(tests)))
    cost = np.array([weights[t] for t in tests])
    needs = np.array([need for _, need in rows], dtype=float)
    result = milp(cost, constraints=LinearConstraint(matrix, lb=needs, ub=np.inf), integrality=np.ones(len(tests)),
                  bounds=Bounds(0, 1), options={"time_limit": seconds})
    if result.x is None:
        return None
    return {test for test, x in zip(tests, result.x) if x > 0.5}


def reference_outcomes(junit: Path | None) -> dict[str, str]:
    """Each test's outcome in a JUnit file of the reference run (``make test --junitxml``), by node id."""
    if junit is None:
        return {}
    import xml.etree.ElementTree as ElementTree

    outcomes = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "")
        parts = module.split(".")
        for cut in range(len(parts), 0, -1):  # tests.app.test_x.TestClass: the file is the longest path there is
            path = ROOT / Path(*parts[:cut]).with_suffix(".py")
            if path.exists():
                nodeid = "::".join([str(path.relative_to(ROOT)), *parts[cut:], name])
                break
        else:
            continue
        tags = {child.tag for child in case}
        outcomes[nodeid] = ("failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed")
    return outcomes


HEADER = (
    "The tests the newest JAX's run (`make test-newest`) may leave out: what each covers of the shardscope "
    "code that can see JAX (its lines, app/ and render/ left aside: they import no JAX; on the newest JAX, "
    "the Python processes it starts included) the tests that stay cover too, and it passed there{reference}. Measured, not chosen: `make newest-selection` runs the newest "
    "run's tests under coverage, one context per test, and rewrites this file with the cheapest cover "
    "(tests/_newest_selection.py says what is kept whatever it covers). A test not listed runs on both JAX "
    "versions (a new one until the next measurement); `make test` fails a listed test that does not pass."
)


TIMES = 1
"""How many of the tests that stay must cover a line that that many tests covered (``--times``).
What a test covers can change from run to run (a process's timing, a cache an earlier test warmed);
twice gave a fifth of once's savings where measured (branches of the whole package, the first
measurement), so the list is made with once and corrected by measurement instead: ``--missed-by``
keeps the tests that covered a line the selected run (``make newest-selection-verify``) missed."""


def selection(folder: Path, junit: Path | None, times: int = TIMES,
              missed_by: Path | None = None) -> tuple[list[str], dict[str, str], dict[str, float]]:
    """The tests that may be left out, those kept whatever they cover (with why), and the numbers."""
    measured = Measurement(folder)
    kept = measured.kept_whatever_they_cover(reference_outcomes(junit))
    if missed_by is not None:
        missed = measured.covered() - Measurement(missed_by).covered()
        for test, covered in measured.covers.items():
            if test in measured.tests and test not in kept and covered & missed:
                kept[test] = f"covered {len(covered & missed)} lines the selected run ({missed_by}) missed"
    covered_by_kept: dict[Covered, int] = {}
    for test in kept:
        for entry in measured.covers.get(test, ()):
            covered_by_kept[entry] = covered_by_kept.get(entry, 0) + 1
    elements: dict[Covered, int] = {}
    demand: dict[int, int] = {}
    sets: dict[str, set[int]] = {}
    for test in measured.tests:
        if test in kept:
            continue
        sets[test] = set()
        for entry in measured.covers.get(test, set()):
            if entry in measured.baseline or covered_by_kept.get(entry, 0) >= times:
                continue
            element = elements.setdefault(entry, len(elements))
            demand[element] = times - covered_by_kept.get(entry, 0)
            sets[test].add(element)
    weights = {test: max(0.01, measured.tests[test]["cpu_s"]) for test in sets}
    chosen = cheapest_cover({t: s for t, s in sets.items() if s}, weights, demand)
    left_out = sorted(set(sets) - chosen)
    seconds = sum(record["cpu_s"] for record in measured.tests.values())
    covered = measured.covered()
    numbers = {"tests": len(measured.tests), "collected": measured.collected, "kept": len(kept), "chosen": len(chosen),
               "left_out": len(left_out), "cpu_s": seconds,
               "cpu_s_left_out": sum(measured.tests[t]["cpu_s"] for t in left_out), "lines": len(_lines(covered)),
               "files": len({entry[0] for entry in covered})}
    return left_out, kept, numbers


def compare(whole: Path, selected: Path) -> int:
    """Prints the lines (and arcs, where measured) of the code that sees JAX two runs covered; 1 when
    the second misses any the first covered."""
    runs = []
    for folder in (whole, selected):
        covered = Measurement(folder).covered()
        arcs = {entry for entry in covered if len(entry) == 3}
        runs.append((_lines(covered), arcs))
        print(f"{folder}: {len(runs[-1][0])} lines{f', {len(arcs)} arcs' if arcs else ''} of the shardscope code that "
              "sees JAX (all but app/ and render/)")
    missing_lines, missing_arcs = runs[0][0] - runs[1][0], runs[0][1] - runs[1][1]
    print(f"covered by the first run, not the second: {len(missing_lines)} lines, {len(missing_arcs)} arcs")
    for file, line in sorted(missing_lines)[:50]:
        print(f"  {file}:{line}")
    for file, start, end in sorted(missing_arcs)[:50]:
        print(f"  {file} {start} -> {end}")
    return 1 if missing_arcs or missing_lines else 0


def _wrapped(text: str) -> list[str]:
    """``text`` in lines of at most 98 characters, a command in backticks never broken (`make
    newest-selection` stays whole, as tests/test_newest_selection.py reads it), nor a word at its hyphen."""
    kept = re.sub(r"`[^`]*`", lambda command: command.group(0).replace(" ", "\0"), text)
    return [line.replace("\0", " ") for line in textwrap.wrap(kept, 98, break_on_hyphens=False)]


def main(argv: list[str]) -> int:
    import argparse
    import datetime

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the --newest-records folder's parent: records/ and coverage data")
    parser.add_argument("--reference-junit", type=Path, help="the reference run's JUnit file: its non-passes are kept")
    parser.add_argument("--reference-jax", default="?", help="the reference venv's JAX version, for the header")
    parser.add_argument("--compare", type=Path, help="a second measurement (the selected run): compare what both cover")
    parser.add_argument("--collected", type=int, default=0,
                        help="how many tests the measured run collected, where its records do not say")
    parser.add_argument("--times", type=int, default=TIMES, help="how often the tests that stay cover each line")
    parser.add_argument("--missed-by", type=Path, help="a verification run's data: the tests that covered a line it "
                        "missed are kept")
    parser.add_argument("--why", action="store_true", help="print the tests kept whatever they cover, with why, to stderr")
    options = parser.parse_args(argv)
    if options.compare:
        return compare(options.folder, options.compare)
    import jax

    left_out, kept, numbers = selection(options.folder, options.reference_junit, options.times, options.missed_by)
    if options.why:
        for test, why in sorted(kept.items()):
            print(f"{test}: {why}", file=sys.stderr)
    collected = numbers["collected"] or options.collected
    of = f" of the run's {collected}" if collected else ""
    summary = (f"{numbers['tests']}{of} tests measured ({numbers['cpu_s']:.0f} CPU s under coverage): {numbers['kept']} kept "
               f"whatever they cover, {numbers['chosen']} chosen to cover the {numbers['lines']} lines in {numbers['files']} files"
               f"{f' (each {options.times} times where as many tests covered it)' if options.times > 1 else ''}, "
               f"{numbers['left_out']} left out ({numbers['cpu_s_left_out']:.0f} CPU s).")
    if collected > numbers["tests"]:
        summary += (f" The run was stopped before its end: the {collected - numbers['tests']} tests it did not "
                    "measure are not listed (they run on both).")
    reference = ", nor was it skipped on the reference JAX" if options.reference_junit else ""
    comment = [*_wrapped(HEADER.format(reference=reference)),
               f"Measured {datetime.date.today().isoformat()} on jax {jax.__version__} (the reference run: jax "
               f"{options.reference_jax}).", *_wrapped(summary)]
    sys.stdout.write("".join(f"# {line}\n" for line in comment) + "".join(f"{test}\n" for test in left_out))
    return 0


if __name__ == "__main__":  # python tests/_newest_selection.py FOLDER > tests/newest_leave_out.txt
    sys.exit(main(sys.argv[1:]))
