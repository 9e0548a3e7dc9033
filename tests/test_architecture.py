"""The package's import graph: no circles, and imports go down the layers docs/architecture.md draws.

The graph is read from the source, not from a running interpreter: each module's imports of
shardscope's own modules, found by AST. Every import counts, wherever it is written: one inside a
function runs when the function does, and one under ``if TYPE_CHECKING:`` still ties the two
modules together, so an import moved into a function or under ``TYPE_CHECKING`` hides a circle
without removing it. A layer may not name one above it even in a function, and no module
imports another's private names.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "shardscope"


def module_name(path: Path, package: Path) -> str:
    """``shardscope/app/views/diff.py`` -> ``shardscope.app.views.diff`` (a package is its ``__init__``)."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``TYPE_CHECKING`` (bare or as ``typing.TYPE_CHECKING``)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_time_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported: into ``if``/``try``/``with``/class
    bodies, never into a function, nor into the body of ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(statement, ast.If) and is_type_checking(statement.test):
            yield from import_time_statements(statement.orelse)
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from import_time_statements(getattr(statement, field, []))
        for handler in getattr(statement, "handlers", []):
            yield from import_time_statements(handler.body)


def every_statement(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of the module: imports in functions and under ``TYPE_CHECKING`` too."""
    for statement in body:
        yield from ast.walk(statement)


def imported_modules(statement: ast.stmt, modules: dict[str, Path]) -> Iterator[str]:
    """The package's modules one import statement names: ``from a.b import c`` is ``a.b.c`` when
    that is a module, else ``a.b``."""
    if isinstance(statement, ast.Import):
        yield from (alias.name for alias in statement.names if alias.name in modules)
    elif isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0:
        for alias in statement.names:
            submodule = f"{statement.module}.{alias.name}"
            if submodule in modules:
                yield submodule
            elif statement.module in modules:
                yield statement.module


def import_graph(package: Path = PACKAGE, statements=import_time_statements) -> nx.DiGraph:
    """An edge ``a -> b`` for each module ``a`` that imports module ``b`` of the package
    (at import time; with ``statements=every_statement``, anywhere)."""
    modules = package_modules(package)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for statement in statements(tree.body):
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                graph.add_edges_from((name, imported) for imported in imported_modules(statement, modules))
    return graph


def circles(graph: nx.DiGraph) -> list[str]:
    """One circle through each strongly connected component of more than one module, as
    ``a -> b -> a`` from its first module by name."""
    found = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            names = [edge[0] for edge in nx.find_cycle(graph.subgraph(component))]
            start = names.index(min(names))
            names = names[start:] + names[:start]
            found.append(" -> ".join(names + names[:1]))
    return sorted(found)


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``pkg`` under ``root`` with the given modules (path inside the package -> source)."""
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root / "pkg"


def test_a_circle_is_found_and_only_imports_that_run_at_import_count(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": "",
        "a.py": "import pkg.b\n",
        "b.py": "from pkg.sub import c\n",
        "sub/__init__.py": "",
        "sub/c.py": "try:\n    from pkg import a\nexcept ImportError:\n    pass\n",
        "typed.py": """\
            from typing import TYPE_CHECKING
            import pkg.untyped
            if TYPE_CHECKING:
                from pkg import untyped
            else:
                from pkg import other
            """,
        "untyped.py": """\
            import typing
            if typing.TYPE_CHECKING:
                import pkg.typed
            def later():
                from pkg.typed import name
            class Holder:
                from pkg.sub import c
            """,
        "other.py": "",
    })
    graph = import_graph(package)
    assert set(graph.edges) == {
        ("pkg.a", "pkg.b"), ("pkg.b", "pkg.sub.c"), ("pkg.sub.c", "pkg.a"),
        ("pkg.typed", "pkg.untyped"), ("pkg.typed", "pkg.other"), ("pkg.untyped", "pkg.sub.c"),
    }
    assert circles(graph) == ["pkg.a -> pkg.b -> pkg.sub.c -> pkg.a"]


def test_the_graph_sees_the_packages_imports():
    graph = import_graph()
    assert graph.has_edge("shardscope", "shardscope.sources.demos")
    assert graph.has_edge("shardscope.cli", "shardscope.cli.report")  # from shardscope.cli import report
    assert graph.has_edge("shardscope.app.views.prepare", "shardscope.app.views.diff_lines")
    assert not graph.has_edge("shardscope", "shardscope.engine.joined.inspection")  # in a function


def test_there_are_no_import_circles():
    found = circles(import_graph(statements=every_statement))
    assert not found, "import circles (imports in functions and under TYPE_CHECKING count):\n" + "\n".join(found)


def private_imports(package: Path = PACKAGE) -> list[str]:
    """``module imports other._name`` for each import of a private name of another module."""
    found = []
    for name, path in package_modules(package).items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package.name:
                found += [f"{name} imports {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_a_private_name_is_found_wherever_it_is_imported(tmp_path):
    package = write_package(tmp_path, {"__init__.py": "", "a.py": "_hidden = 1\n__version__ = '1'\n",
                                       "b.py": "def f():\n    from pkg.a import _hidden, __version__\n"})
    assert private_imports(package) == ["pkg.b imports pkg.a._hidden"]


def test_no_module_imports_another_modules_private_names():
    found = private_imports()
    assert not found, "private names imported across modules:\n" + "\n".join(found)


LAYERS = (
    ("commands", ("cli", "__main__", "__init__", "testing", "demo_files")),  # the command, the public face, the shipped demos
    ("presentation", ("app", "render")),  # the explorer and the renderings: they read values and compute nothing
    ("pipeline", ("pipeline", "targets")),  # programs traced, compiled for the CPU and each target, run, timed: the runners
    ("engine", ("engine", "costmodel", "whatif")),  # one program read both ways, judged and costed; the pure cost models; the what-if
    ("sources", ("sources", "plans", "failures")),  # where programs come from: the user's file, a demo's plans, what user code raised
    ("values and hardware", ("errors", "activities", "collective_kinds", "verdict_kinds", "native_stderr",  # the tables, a run's
                             "config", "distributed", "hardware", "measure")),  # settings, the process, the machine and its clocks
)
"""Top first: a module may import its own layer and the layers below it (docs/architecture.md,
"What may import what"). Each entry is a folder of ``shardscope/`` or a module at its root
(``__init__``: the package itself), in exactly one layer, and every module is in its folder's."""


def part_of(module: str) -> str:
    """The folder of ``shardscope/`` that ``module`` is in (``shardscope.engine.hlo.text`` ->
    ``engine``), or its own name for a module at the root (``shardscope`` itself is ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_parts(package: Path = PACKAGE) -> set[str]:
    """The package's folders (those directly under it that hold modules) and the modules at its root."""
    return {path.name for path in package.iterdir() if path.is_dir() and any(path.rglob("*.py"))} | {
        path.stem for path in package.glob("*.py")}


def layer_of(module: str) -> int:
    """The rank of ``module``'s layer in :data:`LAYERS` (0: the top): its folder's."""
    ranks = [rank for rank, (_, parts) in enumerate(LAYERS) if part_of(module) in parts]
    assert ranks, f"{part_of(module)} is in no layer: add it to LAYERS and to docs/architecture.md"
    return ranks[0]


def test_every_folder_is_in_exactly_one_layer():
    listed = [part for _, parts in LAYERS for part in parts]
    assert sorted(listed) == sorted(set(listed)), "a folder listed in two layers"
    assert set(listed) == package_parts(), "LAYERS lists exactly the package's folders and root modules"


def test_imports_go_down_the_layers():
    graph = import_graph(statements=every_statement)
    upward = sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, b in graph.edges if layer_of(b) < layer_of(a)
    )
    # none is allowed: an ``Inspection`` prints itself and offers its what-if through the functions
    # the layers above register (``engine.extensions.EXTENSIONS``)
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def folder_of(module: str, packages: set[str]) -> str:
    """The folder ``module`` is in, at any depth, inside the package: ``shardscope.engine.hlo.text``
    is in ``engine.hlo``, the package ``shardscope.engine`` (its ``__init__``) in ``engine``; a
    module at the package's root is its own, as in :func:`part_of`. ``packages``: the modules that
    are packages."""
    folder = module if module in packages else module.rpartition(".")[0]
    return folder.partition(".")[2] or part_of(module)


def folders_importing_each_other(graph: nx.DiGraph) -> list[str]:
    """``a <-> b: one import each way`` for each two folders (or root modules) of the package
    that import each other, at any depth (:func:`folder_of`): a folder's own modules and one of
    its subfolders too, as ``engine`` and ``engine.hlo``."""
    packages = {name.rpartition(".")[0] for name in graph.nodes}
    between: dict[tuple[str, str], str] = {}
    for a, b in sorted(graph.edges):
        folder_a, folder_b = folder_of(a, packages), folder_of(b, packages)
        if folder_a != folder_b:
            between.setdefault((folder_a, folder_b), f"{a} imports {b}")
    return sorted(f"{a} <-> {b}: {between[a, b]}; {between[b, a]}"
                  for a, b in between if a < b and (b, a) in between)


def test_two_folders_importing_each_other_are_found_wherever_the_import_is(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": "", "root.py": "",
        "low/__init__.py": "", "low/a.py": "def later():\n    from pkg.high import b\n",
        "low/c.py": "import pkg.root\n",
        "high/__init__.py": "", "high/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import c\n",
        "high/d.py": "from pkg import root\n",
    })
    graph = import_graph(package, statements=every_statement)
    assert not circles(graph)  # no module circle: the folders' is one only a folder's view sees
    assert folders_importing_each_other(graph) == ["high <-> low: pkg.high.b imports pkg.low.c; pkg.low.a imports pkg.high.b"]


def test_a_folder_and_its_subfolder_importing_each_other_are_found(tmp_path):
    package = write_package(tmp_path, {
        "__init__.py": "", "root.py": "import pkg.top.sub\n",
        "top/__init__.py": "import pkg.top.floor\n", "top/floor.py": "", "top/roof.py": "import pkg.top.sub.b\n",
        "top/sub/__init__.py": "", "top/sub/b.py": "import pkg.top.floor\n",
        "other/__init__.py": "", "other/d.py": "import pkg.top.sub.b\n",
    })
    graph = import_graph(package, statements=every_statement)
    assert not circles(graph)  # the root of top/ is both floor (floor) and roof (roof) of top/sub/
    assert folders_importing_each_other(graph) == [
        "top <-> top.sub: pkg.top.roof imports pkg.top.sub.b; pkg.top.sub.b imports pkg.top.floor"]


def test_no_two_folders_import_each_other():
    found = folders_importing_each_other(import_graph(statements=every_statement))
    assert not found, ("folders that import each other (a folder is one layer; a folder's own modules are its subfolders' "
                       "floor or their roof, never both):\n" + "\n".join(found))


BELOW_THE_PROCESS = ("shardscope.sources", "shardscope.measure", "shardscope.failures", "shardscope.hardware", "shardscope.costmodel",
                     "shardscope.engine", "shardscope.whatif", "shardscope.plans", "shardscope.config")
"""The layers that read programs and their plans: they know nothing of how the process runs
(``distributed/``: signals, joined processes, the compilation cache), as a library's user's
script does not. What a thread is doing, for an interrupt's message, is ``shardscope.activities``."""


def test_the_analysis_layers_never_import_the_process_machinery():
    graph = import_graph(statements=every_statement)
    found = sorted(f"{a} imports {b}" for a, b in graph.edges
                   if a.startswith(BELOW_THE_PROCESS) and b.startswith(("shardscope.distributed", "shardscope.cli")))
    assert not found, "\n".join(found)


def test_every_layer_of_the_document_is_the_tests():
    document = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    for name, _ in LAYERS:
        assert f"**{name}**" in document, name


ANY_ANNOTATION = re.compile(r"(?::|->) Any\b")
"""``: Any`` and ``-> Any``, as ``grep -rnoE "(: |-> )Any\b" shardscope | wc -l`` counts them."""

ANY_CEILING = 97
"""The most ``Any`` annotations the package may hold: a ratchet, lowered as they are replaced
(271 when counted first, 179 before the last round of real types)."""


def any_annotations(package: Path = PACKAGE) -> list[str]:
    """``path:line`` once for each ``: Any`` or ``-> Any`` in the package's modules."""
    return [f"{path.relative_to(package.parent)}:{number}"
            for path in sorted(package.rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1)
            for _ in ANY_ANNOTATION.findall(line)]


def commented_lines(source: str) -> set[int]:
    """The lines of ``source`` that end in a comment (a ``#`` inside a string is no comment)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {token.start[0] for token in tokens if token.type == tokenize.COMMENT}


def uncommented_anys(package: Path = PACKAGE) -> list[str]:
    """``path:line: text`` of each line with an ``Any`` annotation and no comment saying why."""
    found = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        commented = commented_lines(source)
        found += [f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
                  for number, line in enumerate(source.splitlines(), 1)
                  if ANY_ANNOTATION.search(line) and number not in commented]
    return found


def test_an_any_is_counted_and_one_without_its_reason_is_found(tmp_path):
    package = write_package(tmp_path, {"__init__.py": "", "a.py": """\
        from typing import Any
        def f(tree: Any, *args: Any) -> Any:  # a user's pytree
            return "x: Any  # not a comment, a string"
        def g(value: Any) -> int:
            return 0
        def h(value: "Anything") -> None: ...
        """})
    assert any_annotations(package) == ["pkg/a.py:2"] * 3 + ["pkg/a.py:3", "pkg/a.py:4"]
    assert uncommented_anys(package) == ['pkg/a.py:3: return "x: Any  # not a comment, a string"',
                                         "pkg/a.py:4: def g(value: Any) -> int:"]


def test_any_annotations_stay_under_the_ceiling():
    found = any_annotations()
    assert len(found) <= ANY_CEILING, (
        f"{len(found)} `: Any` / `-> Any` annotations, more than the {ANY_CEILING} allowed: give the new ones "
        "a real type (jax.Array, a Protocol, object for a value only passed on)")


def test_every_any_annotation_says_why_on_its_line():
    found = uncommented_anys()
    assert not found, "Any annotations without a comment saying why (`# a user's pytree: any leaves`):\n" + "\n".join(found)
