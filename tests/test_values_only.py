"""The renderings and the explorer read values only: ``render/`` and ``app/`` import nothing that
computes a cost, a verdict or the exit status.

A target plan is judged and costed once, where the pipeline makes it (``TargetPlan.rows``,
``.findings``, ``.costs``), and a file's check carries its exit status (``FileCheck.exit_status``):
text, JSON, ``--format github`` and the explorer read those values, so they cannot drift apart.
The imports are read by AST, wherever they are written (in a function too), as
``tests/test_architecture.py`` reads them: from a module that computes, ``render/`` and ``app/``
may import its value types (classes) and constants, never a function nor the module itself. The
explorer starts the runners a user asks for in its workers (:data:`RUNNERS`), as a command does.
"""

from __future__ import annotations

import ast
import importlib
import textwrap

from test_architecture import PACKAGE, package_modules, write_package

PRESENTATION = ("shardscope.render", "shardscope.app")

COMPUTES = (
    "shardscope.engine.hlo.costing",  # a target plan's costs, the --min-saving weighing
    "shardscope.engine.hlo.interconnect_times",  # a collective's run on an interconnect
    "shardscope.engine.hlo.roofline",  # the step estimate
    "shardscope.engine.hlo.target_plan",  # what a target did with each collective, its findings
    "shardscope.engine.hlo.verdicts",  # the compiled module's verdicts
    "shardscope.engine.hlo.fixes",
    "shardscope.engine.hlo.stacking",
    "shardscope.engine.hlo.linear_steps",
    "shardscope.engine.hlo.added_terms",
    "shardscope.engine.hlo.compiled",
    "shardscope.engine.jaxpr.verdicts",  # the jaxpr's verdicts
    "shardscope.engine.jaxpr.linearity",
    "shardscope.engine.dispatch.plan",  # the verdicts across a step's calls
    "shardscope.hardware.fabrics",  # the interconnects' cost models
    "shardscope.hardware.nccl",
    "shardscope.hardware.collective_models",
    "shardscope.costmodel.savings",
    "shardscope.costmodel.projection",
    "shardscope.pipeline.projections",
    "shardscope.costmodel.estimate",
    "shardscope.pipeline.sweep",
    "shardscope.pipeline.what_if",
    "shardscope.pipeline.calibrate",
    "shardscope.pipeline.check",  # the exit rule
    "shardscope.pipeline.layout_ranking",  # a layouts sweep's ranking, its collectives timed
)
"""The modules whose functions compute a cost, a verdict or the exit status."""

WORDS = frozenset({"range_words", "seconds_words"})
"""Functions of those modules that put a value in words (a time), computing nothing."""

RUNNERS = {
    ("shardscope.pipeline.projections", "project"): "the Timings tab projects the plans onto the preset the user picks",
    ("shardscope.pipeline.sweep", "run_sweep"): "the Sweep tab runs the sweep the user asks for, in a worker",
    ("shardscope.pipeline.layout_ranking", "ranked"): "the Layouts tab's worker ranks the candidates it compiles",
}
"""What the explorer runs on a user's choice, in its workers (as a command would), with why."""


def _is_value(module: str, name: str) -> bool:
    """True for a class or a constant (an UPPER_CASE name) of ``module``."""
    found = getattr(importlib.import_module(module), name, None)
    return isinstance(found, type) or name.isupper() or not callable(found)


def computing_imports(package=PACKAGE, presentation=PRESENTATION, computes=COMPUTES, runners=RUNNERS) -> list[str]:
    """``module imports name from computing module`` for each import of a function (or of the
    module itself) of a module in ``computes`` by a module of ``presentation``."""
    found = []
    for name, path in package_modules(package).items():
        if not name.startswith(presentation):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found += [f"{name} imports the module {alias.name}" for alias in node.names if alias.name in computes]
            elif isinstance(node, ast.ImportFrom) and node.module in computes:
                found += [f"{name} imports {alias.name} from {node.module}" for alias in node.names
                          if alias.name not in WORDS and (node.module, alias.name) not in runners
                          and not _is_value(node.module, alias.name)]
            elif isinstance(node, ast.ImportFrom) and node.module and any(f"{node.module}.{alias.name}" in computes
                                                                        for alias in node.names):
                found += [f"{name} imports the module {node.module}.{alias.name}" for alias in node.names
                          if f"{node.module}.{alias.name}" in computes]
    return found


def test_render_and_app_import_nothing_that_computes():
    found = computing_imports()
    assert not found, ("render/ and app/ read the judged values (TargetPlan.rows, .findings, .costs; "
                       "FileCheck.exit_status): compute them where the plan is made\n" + "\n".join(found))


def test_a_function_of_a_computing_module_is_found_wherever_it_is_imported(tmp_path, monkeypatch):
    package = write_package(tmp_path, {
        "__init__.py": "",
        "engine/__init__.py": "",
        "engine/costs.py": textwrap.dedent("""\
            LIMIT = 2
            class Cost: ...
            def cost(x): return x
            """),
        "render/__init__.py": "",
        "render/text.py": textwrap.dedent("""\
            from pkg.engine.costs import Cost, LIMIT
            def words():
                from pkg.engine.costs import cost
                return cost
            """),
        "render/other.py": "import pkg.engine.costs\nfrom pkg.engine import costs\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    found = computing_imports(package, ("pkg.render",), ("pkg.engine.costs",), {})
    assert sorted(found) == ["pkg.render.other imports the module pkg.engine.costs",
                             "pkg.render.other imports the module pkg.engine.costs",
                             "pkg.render.text imports cost from pkg.engine.costs"]


def test_each_runner_the_explorer_may_start_says_why():
    assert all(module in COMPUTES and why for (module, _), why in RUNNERS.items())
