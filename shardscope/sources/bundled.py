"""The demos shipped inside the package (``shardscope/demo_files``), opened by name.

``shardscope report linear`` and ``shardscope check train_step`` work wherever shardscope is
installed, without a clone of the repository. A path that exists is always the user's file; a
bare name that is no file is looked up here. Reading the list imports no demo (and no JAX): each
demo's description is its module docstring's first line, read from the source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from shardscope.errors import DemoFileError

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo_files"
"""Where the shipped demo files are (the repository's ``demos/`` points here)."""

SEED_DEMO = "linear"
"""The demo ``shardscope`` opens when no file is given: the seed case, ``x @ W``."""


@dataclass(frozen=True)
class BundledDemo:
    """One shipped demo file: its name (the file's stem), path, one-line description and kind.

    ``kind`` is ``demo`` (``@shardscope.demo`` functions: every command), ``program``
    (``@shardscope.program`` functions: ``check`` and the explorer) or ``layouts``
    (``@shardscope.layouts`` functions: ``shardscope layouts``).
    """

    name: str
    path: Path
    description: str
    kind: str


def bundled_demos() -> list[BundledDemo]:
    """Every shipped demo, by name."""
    return [_describe(path) for path in sorted(DEMO_DIR.glob("*.py")) if not path.name.startswith("_")]


def bundled_names() -> list[str]:
    """The names ``shardscope demos`` lists."""
    return [demo.name for demo in bundled_demos()]


def find_file(path: Path) -> Path:
    """``path`` if it exists; else the shipped demo a bare name (``linear``, ``linear.py``) names.

    Raises :class:`DemoFileError`, listing the shipped demos, when neither is there.
    """
    if path.exists() or path.is_symlink():
        return path  # the user's (a directory or a special file is judged by require_file)
    if path.parent == Path(".") and path.name:
        shipped = DEMO_DIR / (path.name if path.suffix == ".py" else f"{path.name}.py")
        if shipped.is_file() and not shipped.name.startswith("_"):
            return shipped
    raise DemoFileError(
        f"No such file: {path}",
        "give the path to a Python file with functions marked @shardscope.demo(...) or "
        f"@shardscope.program(...), or the name of a shipped demo: {', '.join(bundled_names())} "
        "(shardscope demos lists them)",
    )


def listing() -> str:
    """What ``shardscope demos`` prints: each demo's name and description, and where they are."""
    demos = bundled_demos()
    width = max(len(demo.name) for demo in demos)
    lines = [f"shipped demos (in {DEMO_DIR}):"]
    for demo in demos:
        kind = {"demo": "", "program": "  [programs: check, explorer]", "layouts": "  [layouts: shardscope layouts]"}[demo.kind]
        lines.append(f"  {demo.name:<{width}}  {demo.description}{kind}")
    lines.append(f"open one by name: shardscope {SEED_DEMO}, shardscope report rnn, shardscope check train_step")
    return "\n".join(lines)


def _describe(path: Path) -> BundledDemo:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstring = ast.get_docstring(tree) or ""
    description = " ".join(docstring.split("\n\n")[0].split()).replace("``", "`")
    kind = "program" if _marks(tree, "program") else "layouts" if _marks(tree, "layouts") else "demo"
    return BundledDemo(path.stem, path, description, kind)


def _marks(tree: ast.Module, mark: str) -> bool:
    """True when a function of the module is decorated with ``shardscope.<mark>``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == mark:
                    return True
    return False
