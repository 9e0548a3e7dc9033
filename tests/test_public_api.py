"""The public face: ``shardscope.demo``, ``program``, ``inspect``, ``ShardscopeError``,
``shardscope.testing``'s assertions and the ``shardscope`` command, whatever moves behind them.

``import shardscope`` staying light (no JAX, Textual or networkx) is tests/test_layering.py's
``test_import_shardscope_is_cheap``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect as pyinspect
import pkgutil
import tomllib

import shardscope
import shardscope.testing
from _support import ROOT

PUBLIC = ["ShardscopeError", "demo", "estimate_module", "inspect", "inspect_on", "layouts", "program"]
TESTING = ["assert_collectives", "assert_fits_on", "assert_no_collectives_in_loops", "assert_no_deferrable_collectives_in_loops_on",
           "assert_no_rematerialization", "collective_counts", "collective_counts_on", "jaxpr_collective_counts"]


def every_module() -> list[str]:
    """Every module of the package except the shipped demo files and ``__main__`` (which runs the CLI)."""
    return [
        m.name for m in pkgutil.walk_packages(shardscope.__path__, "shardscope.")
        if m.name.split(".")[1] not in ("__main__", "demo_files")
    ]


def test_the_package_exports_its_public_names():
    assert sorted(shardscope.__all__) == PUBLIC
    assert callable(shardscope.demo) and callable(shardscope.program) and callable(shardscope.inspect)
    assert issubclass(shardscope.ShardscopeError, Exception)
    assert list(pyinspect.signature(shardscope.inspect).parameters) == ["fn", "args", "kwargs"]
    assert shardscope.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_no_module_is_named_like_a_public_function():
    clashing = [name for name in every_module() if name.rsplit(".", 1)[1] in ("demo", "program", "inspect")]
    assert not clashing, f"importing these would replace shardscope's functions of their name: {clashing}"


def test_importing_every_module_leaves_the_public_names_alone():
    before = {name: getattr(shardscope, name) for name in PUBLIC}
    for name in every_module():
        importlib.import_module(name)
    assert {name: getattr(shardscope, name) for name in PUBLIC} == before
    assert all(callable(before[name]) for name in ("demo", "inspect", "layouts", "program"))


def test_testing_exports_its_assertions_and_counts():
    assert sorted(shardscope.testing.__all__) == TESTING
    for name in TESTING:
        function = getattr(shardscope.testing, name)
        assert callable(function) and function.__module__ == "shardscope.testing"
        first = ["target", "fn"] if name.endswith("_on") else ["fn"]  # the _on forms name the target first
        assert list(pyinspect.signature(function).parameters)[:len(first)] == first


def test_the_console_entry_point_resolves_to_the_cli():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"shardscope": "shardscope.cli:main"}
    module_name, attribute = scripts["shardscope"].split(":")
    main = getattr(importlib.import_module(module_name), attribute)
    assert callable(main)
    (installed,) = importlib.metadata.entry_points(group="console_scripts", name="shardscope")
    assert installed.load() is main
