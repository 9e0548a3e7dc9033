"""A target's compiler made "not installed" for a test, wherever shardscope would find it.

shardscope finds libtpu and JAX's CUDA plugin in two places (``shardscope/targets/compilers.py``):
``site-packages`` (the ``tpu`` and ``gpu`` extras) and its own folder, ``<venv>/shardscope-compilers``
(what ``make`` installs), which is on no import path. A test of a target that is not installed hides
both: the ``site-packages`` copies from the import system and from the packages' metadata, and the
folder by pointing ``SHARDSCOPE_COMPILERS`` at a folder of links to its entries but the hidden
kind's. Where a compiler is installed in neither place, there is nothing to hide and the test runs
as on a machine without it.

:func:`hide_compilers` hides them in this process (undone by ``monkeypatch``);
:func:`environment_without` gives a child process's environment that hides them at its start (a
``sitecustomize`` on ``PYTHONPATH`` that loads this file by its path and runs :func:`hide_at_start`).
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from shardscope.targets.compilers import ENV, compilers_dir

if TYPE_CHECKING:
    import pytest


@dataclass(frozen=True)
class Compiler:
    """What one kind of target's compiler installs: its modules, its distributions, and the names
    its files have at the top of a ``pip install --target`` folder."""

    modules: tuple[str, ...]
    packages: tuple[str, ...]
    entries: tuple[str, ...]


COMPILERS = {
    "tpu": Compiler(modules=("libtpu",), packages=("libtpu",), entries=("libtpu",)),
    "gpu": Compiler(modules=("jax_cuda12_plugin", "jax_plugins.xla_cuda12"),
                    packages=("jax-cuda12-plugin", "jax-cuda12-pjrt"), entries=("jax_plugins", "jax_cuda12")),
}


class _Hidden(importlib.abc.MetaPathFinder):
    """An import finder that says the hidden compilers' modules are not installed."""

    def __init__(self, modules: Iterable[str]) -> None:
        self.modules = tuple(modules)

    def find_spec(self, name, path=None, target=None):
        if hides(self.modules, name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def hides(modules: Iterable[str], name: str) -> bool:
    """Whether module ``name`` is one of ``modules`` or inside one."""
    return any(name == module or name.startswith(module + ".") for module in modules)


def _hidden(kinds: tuple[str, ...]) -> Compiler:
    """What the compilers of ``kinds`` install, together."""
    unknown = set(kinds) - set(COMPILERS)
    assert kinds and not unknown, f"hide which compilers? {sorted(COMPILERS)}, not {sorted(unknown)}"
    return Compiler(*(tuple(name for kind in kinds for name in getattr(COMPILERS[kind], part))
                      for part in ("modules", "packages", "entries")))


def _version_without(packages: Iterable[str], version: Callable[[str], str]) -> Callable[[str], str]:
    """``importlib.metadata.version`` that does not find ``packages``."""
    hidden = {package.lower().replace("_", "-") for package in packages}

    def hidden_version(name: str) -> str:
        if name.lower().replace("_", "-") in hidden:
            raise importlib.metadata.PackageNotFoundError(name)
        return version(name)

    return hidden_version


def folder_without(where: Path, *kinds: str) -> Path:
    """A folder under ``where`` of links to what shardscope's compilers' folder holds, but the
    files of ``kinds`` (empty when that folder is not there)."""
    entries = _hidden(kinds).entries
    folder = where / f"compilers-without-{'-'.join(kinds)}"
    folder.mkdir(parents=True, exist_ok=True)
    real = compilers_dir()
    for path in sorted(real.iterdir()) if real.is_dir() else ():
        if not path.name.startswith(entries) and not (folder / path.name).exists():
            (folder / path.name).symlink_to(path)
    return folder


def hide_compilers(monkeypatch: pytest.MonkeyPatch, where: Path, *kinds: str) -> None:
    """The compilers of ``kinds`` (``"tpu"``, ``"gpu"``) not installed in this process until the
    test ends: their modules (those imported already dropped from ``sys.modules``), their packages'
    metadata, shardscope's folder's copies, and a ``TPU_LIBRARY_PATH`` that names a libtpu."""
    hidden = _hidden(kinds)
    monkeypatch.setenv(ENV, str(folder_without(where, *kinds)))
    if "tpu" in kinds:
        monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Hidden(hidden.modules), *sys.meta_path])
    for name in [name for name in sys.modules if hides(hidden.modules, name)]:  # find_spec looks here first
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(importlib.metadata, "version", _version_without(hidden.packages, importlib.metadata.version))


def hide_at_start(kinds: tuple[str, ...]) -> None:
    """In a child process, before anything imports them: the modules and metadata of ``kinds``
    not found (the folder and ``TPU_LIBRARY_PATH`` are the environment's: :func:`environment_without`)."""
    hidden = _hidden(kinds)
    sys.meta_path.insert(0, _Hidden(hidden.modules))
    importlib.metadata.version = _version_without(hidden.packages, importlib.metadata.version)


_SITECUSTOMIZE = """\
import importlib.util
import sys

_spec = importlib.util.spec_from_file_location("_hidden_compilers", {path!r})
_module = sys.modules["_hidden_compilers"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
_module.hide_at_start({kinds!r})
"""


def environment_without(where: Path, *kinds: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """A child process's environment (``base``, default this one's) in which the compilers of
    ``kinds`` are not installed: shardscope's folder without them, no ``TPU_LIBRARY_PATH`` (JAX
    sets it in this process when it imports libtpu), and a ``sitecustomize`` that hides their
    modules and metadata when the child's Python starts."""
    _hidden(kinds)
    start = where / f"start-without-{'-'.join(kinds)}"
    start.mkdir(parents=True, exist_ok=True)
    (start / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(path=str(Path(__file__).resolve()), kinds=kinds))
    env = dict(os.environ if base is None else base)
    if "tpu" in kinds:
        env.pop("TPU_LIBRARY_PATH", None)
    env[ENV] = str(folder_without(where, *kinds))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(start), env.get("PYTHONPATH")]))
    return env
