# Each target sets up .venv first if it is missing: `make demo` and `make test` work alone.

# Bytecode: every Python process make starts (the explorer, the tests and the commands they start,
# the benchmarks) writes the bytecode of what it imports to .bytecode/ (git ignores it) and reads it
# back from there, PYTHONDONTWRITEBYTECODE or not: where that is set (this project's CI machine sets
# it) each of a test run's ~400 processes would otherwise compile jax, textual and shardscope from
# source again, and nothing is written beside any source, the user's files included. So a venv's
# packages are installed without their bytecode (uv's --compile-bytecode compiled all 8,800 modules
# of the reference venv, 21 CPU-s and 11 s a venv, where a run imports about a quarter of them).
export PYTHONPYCACHEPREFIX := $(CURDIR)/.bytecode
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := $(VENV)/.packages

.PHONY: demo test typecheck test-newest newest-selection newest-selection-verify newest-selection-correct jax-free jax-products bench bench-quick screenshots samples readme docs docs-serve clean

# The targets' compilers (libtpu, JAX's CUDA plugin: compiling for --target tpu:... and gpu:...
# without a TPU or a GPU) where they ship, Linux x86-64, in shardscope's own folder of the venv
# (python -m shardscope.targets.compilers, shardscope/targets/compilers.py): on no import path, so
# plain JAX in the venv never loads them and prints nothing about a TPU or CUDA it lacks. The
# command skips what the folder already holds. Elsewhere the target tests skip and say why.
COMPILERS := $(shell test "$$(uname -sm)" = "Linux x86_64" && echo tpu gpu)

# What pyproject.toml asks for (with the extras named) goes in first, then shardscope itself, one venv
# at a time: an editable install writes shardscope.egg-info in this folder, and `make -j3` (.ci/run)
# sets both venvs up at once.
REQUIREMENTS = $(1)/bin/python .ci/requirements $(2) > $(1)/requirements.txt
# The requirements go in with uv (from the registry, into the venv, by pip) where it can be had: on
# this machine it resolved and installed the reference venv's ~150 packages into a fresh venv in 19 s
# and 7.5 CPU-s, where pip took 249 s and 54 CPU-s (load ~16; pip fetches one file at a time, uv
# several at once), with the same versions; the newest venv's the same (jax 0.12.0.1, libtpu 0.0.50.1)
# in 25 s. Where uv cannot be installed, or fails, pip installs them as before: `make test` still
# needs only Python and pip. INSTALL = $(call INSTALL,VENV,PIP ARGUMENTS).
UV = $(1)/bin/python -m pip install --quiet uv || echo "uv could not be installed: pip installs the requirements"
INSTALL = { $(1)/bin/python -m uv --version >/dev/null 2>&1 && $(1)/bin/python -m uv pip install --quiet \
  --python $(1)/bin/python $(2); } || $(1)/bin/python -m pip install --quiet --no-compile $(2)
# shardscope itself is built with the venv's own setuptools (the test extra's), not in a fresh build
# environment pip would fill first: 1.8 s wall and 1.2 CPU-s a venv where that took 4.6 s and 2.9 (load ~6).
EDITABLE = $(1)/bin/python .ci/one-at-a-time .editable-install.lock $(1)/bin/python -m pip install --quiet --no-deps \
  --no-build-isolation -e .
# The targets' compilers go in with uv too where the venv has it (.ci/compilers: 3.9 s where pip took 9.9).
COMPILERS_INSTALL = $(if $(COMPILERS),$(1)/bin/python .ci/compilers $(COMPILERS))

# The venv's packages and shardscope, then the targets' compilers: mypy needs only the first, so
# `make -j3 typecheck .venv/.installed ...` (.ci/run) type-checks while the compilers go in.
$(PACKAGES): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(call UV,$(VENV))
	$(call REQUIREMENTS,$(VENV),test docs profile)
	$(call INSTALL,$(VENV),-r $(VENV)/requirements.txt)
	$(call EDITABLE,$(VENV))
	@touch $(PACKAGES)

$(STAMP): $(PACKAGES)
	$(call COMPILERS_INSTALL,$(VENV))
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shardscope demos/linear.py

# One worker more than the cores (three on two): a test often waits (a command's process, a Pilot's
# pause, a multi-process run), and the extra worker fills those waits. At most six: a worker grows to
# about 2 GB.
WORKERS ?= $(shell n=$$(nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2); echo $$((n < 5 ? n + 1 : 6)))
# --dist worksteal: a worker that runs out of tests takes some of another's queue, so one long
# file last in line does not leave a core idle at the end of the run.
# The package's bytecode, written to .bytecode/ ahead of the run: the workers start at once, and
# each would otherwise compile the package itself before any finds another's.
# The benchmarks, the screenshots' and samples' code and the tests' helpers too (their folders'
# top level; not tests/fixtures): the benchmarks' smoke run starts ~40 processes that import them.
# pytest's own rewritten test modules are written by the run's first process (tests/conftest.py).
BYTECODE = $(1) -m compileall -q shardscope benchmarks screenshots tests/helpers && $(1) -m compileall -q -l tests

# --jax-free=check: the tests tests/jax_free.txt lists (measured to use no JAX, so the newest JAX's run
# leaves them out) run first in each worker, each one watched: one that uses JAX fails, naming the list.
# --newest-selection=check: a test tests/newest_leave_out.txt lists (the newest's run leaves it out too)
# that is skipped or xfails here fails, naming the list: it would run on neither JAX.
test: typecheck $(STAMP)
	$(call BYTECODE,$(BIN)/python)
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal tests --jax-free=check --newest-selection=check

# mypy over the package ([tool.mypy] in pyproject.toml: the modules not yet typed are listed there).
typecheck: $(PACKAGES)
	$(BIN)/python -m mypy

# The suite again on the newest Python found (pyenv or python3.N on PATH) with the newest JAX pip
# gives it (jax 0.12.x on Python 3.13), in a second venv, but for the tests whose result cannot depend
# on JAX's version (tests/jax_free.txt: they never trace, lower, compile, ask JAX for a device or
# start a process, measured by `make jax-free`; `make test` checks that each still does not) and the
# tests whose coverage on the newest JAX of the shardscope code that can see JAX the others give
# (tests/newest_leave_out.txt: every line of the package but app/ and render/, which import no JAX and
# compute nothing, that the run covered there, the processes its tests start included, is covered by
# the tests that stay; measured by `make newest-selection`, which keeps every test that does not pass
# there or starts a process it could not follow; `make test` fails a listed test skipped there). A
# test added since the last measurement is in neither list: it runs on both. The SVG snapshots and
# the docs' samples are left out: they pin the reference environment's output (jax 0.12 names the reduced
# plan's casts differently, and its XLA counts other bytes). So are the site's build and the
# benchmarks' smoke run (80 s of processes): what they check (the docs, the benchmarks a user
# reruns from BENCHMARKS.md, measured on the reference environment) does not change with JAX's
# version, and the reference run has them.
NEWEST_VENV := .venv-newest
NEWEST_STAMP := $(NEWEST_VENV)/.installed

# The newest jax whose libtpu is published: a jax can reach the registry before its libtpu (jax
# 0.12.1 asked for libtpu 0.0.53, not there yet), so jax is resolved with its tpu extra, whose
# site-packages libtpu goes again once the quiet route put the same one in shardscope's folder
# (its floor keeps pip's backtracking among today's releases: older ones name libtpu by URL).
$(NEWEST_STAMP): pyproject.toml
	@python=$$(.ci/newest-python); test -n "$$python" || { echo "no Python newer than 3.11 found"; exit 1; }; \
	  test -x $(NEWEST_VENV)/bin/python || $$python -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(call UV,$(NEWEST_VENV))
	$(call REQUIREMENTS,$(NEWEST_VENV),test profile)
	$(call INSTALL,$(NEWEST_VENV),--upgrade -r $(NEWEST_VENV)/requirements.txt jax $(if $(COMPILERS),'jax[tpu]>=0.12'))
	$(call EDITABLE,$(NEWEST_VENV))
	$(call COMPILERS_INSTALL,$(NEWEST_VENV))
	$(if $(COMPILERS),$(NEWEST_VENV)/bin/python -m pip uninstall --quiet --yes libtpu)
	@touch $(NEWEST_STAMP)

NEWEST_RUN := tests --jax-free=skip --ignore=tests/app/test_snapshots.py --ignore=tests/test_doc_samples.py \
  --ignore=tests/test_docs.py --ignore=tests/test_benchmark_smoke.py

test-newest: $(NEWEST_STAMP)
	@$(NEWEST_VENV)/bin/python -c 'import sys, jax; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}")'
	$(call BYTECODE,$(NEWEST_VENV)/bin/python)
	$(NEWEST_VENV)/bin/python -m pytest -n $(WORKERS) --dist worksteal $(NEWEST_RUN) --newest-selection=skip

# The measuring venv: coverage.py (pyproject's measure extra) over the newest venv's packages (its
# site-packages added as a site folder, its .pth files read), so the test venvs never hold it. The
# measured processes are this venv's Python: a test's commands (sys.executable) are measured too.
# The targets' compilers are found at <sys.prefix>/shardscope-compilers: linked to the newest's.
MEASURE_VENV := .venv-measure
MEASURE_STAMP := $(MEASURE_VENV)/.installed
PURELIB = $$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

$(MEASURE_STAMP): pyproject.toml $(NEWEST_STAMP)
	rm -rf $(MEASURE_VENV)
	$(NEWEST_VENV)/bin/python -m venv --without-pip $(MEASURE_VENV)
	test ! -e $(NEWEST_VENV)/shardscope-compilers || ln -s $(CURDIR)/$(NEWEST_VENV)/shardscope-compilers $(MEASURE_VENV)/
	echo "import site; site.addsitedir('$(call PURELIB,$(CURDIR)/$(NEWEST_VENV))')" > $(call PURELIB,$(MEASURE_VENV))/_newest_site.pth
	$(NEWEST_VENV)/bin/python .ci/requirements --extras-only measure > $(MEASURE_VENV)/requirements.txt
	$(NEWEST_VENV)/bin/python -m pip install --quiet --target $(call PURELIB,$(MEASURE_VENV)) -r $(MEASURE_VENV)/requirements.txt
	@touch $(MEASURE_STAMP)

# tests/newest_leave_out.txt measured again (tests/_newest_selection.py): the newest run's tests on the
# newest JAX under coverage.py (.ci/coverage-newest.ini: the lines of shardscope but app/ and render/,
# with coverage's sys.monitoring core, which on Python 3.13 measures lines, not branches; one context
# per test, the Python processes a test starts in its context), then the cheapest tests by CPU seconds
# that cover all the run covered; the rest are listed. REFERENCE_JUNIT=FILE (a `make test` run's
# --junitxml): its tests that did not pass are kept too. Run it when tests or JAX changed (a new test
# runs on both until then). The measurement stays in .newest-coverage/ for newest-selection-verify.
SELECTION_DATA = SHARDSCOPE_COVERAGE_DATA=$(CURDIR)/$(1) COVERAGE_PROCESS_START=$(CURDIR)/.ci/coverage-newest.ini

newest-selection: $(MEASURE_STAMP) $(STAMP)
	rm -rf .newest-coverage
	-$(call SELECTION_DATA,.newest-coverage) $(MEASURE_VENV)/bin/python -m pytest -n $(WORKERS) --dist worksteal -q \
	  -p no:cacheprovider $(NEWEST_RUN) --newest-selection=measure --newest-records .newest-coverage/records
	$(MEASURE_VENV)/bin/python tests/_newest_selection.py .newest-coverage --why $(if $(REFERENCE_JUNIT),--reference-junit $(REFERENCE_JUNIT)) \
	  --reference-jax "$$($(BIN)/python -c 'import jax; print(jax.__version__)')" > .newest-coverage/list
	mv .newest-coverage/list tests/newest_leave_out.txt

# The run `make test-newest` makes (the list left out) under coverage, against the measurement: the
# lines of the code that can see JAX each covered, and those the whole run covered that the selected
# missed. Which lines a test covers can change from run to run (a process's timing, a cache an earlier test
# warmed): where it missed some, `make newest-selection-correct` keeps the tests that had covered them.
newest-selection-verify: $(MEASURE_STAMP)
	rm -rf .newest-coverage-selected
	-$(call SELECTION_DATA,.newest-coverage-selected) $(MEASURE_VENV)/bin/python -m pytest -n $(WORKERS) --dist worksteal -q \
	  -p no:cacheprovider $(NEWEST_RUN) --newest-selection=skip
	$(MEASURE_VENV)/bin/python tests/_newest_selection.py .newest-coverage --compare .newest-coverage-selected

newest-selection-correct: $(MEASURE_STAMP)
	$(MEASURE_VENV)/bin/python tests/_newest_selection.py .newest-coverage --why --missed-by .newest-coverage-selected \
	  $(if $(REFERENCE_JUNIT),--reference-junit $(REFERENCE_JUNIT)) --reference-jax "$$($(BIN)/python -c 'import jax; print(jax.__version__)')" \
	  > .newest-coverage/list
	mv .newest-coverage/list tests/newest_leave_out.txt

# tests/jax_free.txt measured again: the whole suite on .venv with JAX's and the repository's caches
# emptied before each test and what it does with JAX recorded (tests/_jax_free.py); the tests that
# passed without touching it are listed. Run it when tests were added, to leave the new JAX-free
# ones out of the newest run too (until then they run there).
jax-free: $(STAMP)
	rm -rf .jax-free-records
	-$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal -q -p no:cacheprovider tests --jax-free=record --jax-free-records .jax-free-records
	$(BIN)/python tests/_jax_free.py .jax-free-records > tests/jax_free.txt
	rm -rf .jax-free-records

# Whether a test that uses JAX could be left out of the newest's run too: the demos' plans traced
# and lowered on both venvs (.ci/jax-products), and the plans whose products differ counted. On jax
# 0.10.2 against 0.12.0.1, 17 of the 19 plans both trace have another jaxpr and StableHLO (the
# scan's parameters alone changed), so whether a test uses JAX does not say whether it can be left
# out: tests/jax_free.txt's tests use none, and of those that do, the newest's run keeps a set that
# covers all the whole run covers there of the shardscope code that can see JAX (tests/newest_leave_out.txt, measured by
# `make newest-selection`).
jax-products: $(STAMP) $(NEWEST_STAMP)
	SHARDSCOPE_DEEP_DEPTH=6 $(BIN)/python .ci/jax-products > $(VENV)/jax-products.txt
	SHARDSCOPE_DEEP_DEPTH=6 $(NEWEST_VENV)/bin/python .ci/jax-products > $(NEWEST_VENV)/jax-products.txt
	@paste -d' ' $(VENV)/jax-products.txt $(NEWEST_VENV)/jax-products.txt | awk '$$3 != "refused" && $$7 != "refused" \
	  { n++; j += $$3 != $$7; s += $$4 != $$8 } END { printf "%d plans traced on both: the jaxpr differs for %d, the StableHLO for %d\n", n, j, s }'

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks.run --quick

screenshots: $(STAMP)
	$(BIN)/python -m screenshots.make

# The command-output samples of README.md and docs/, rewritten from real runs (screenshots/samples.py).
samples: $(STAMP)
	$(BIN)/python -m screenshots.samples

readme: samples  # its old name

# The documentation site (mkdocs.yml) into site/, warnings as errors; docs-serve rebuilds as you edit.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve

clean:
	rm -rf $(VENV) $(NEWEST_VENV) $(MEASURE_VENV) .newest-coverage .newest-coverage-selected build site *.egg-info .pytest_cache
