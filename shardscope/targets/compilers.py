"""The targets' compilers kept where only shardscope looks: libtpu and JAX's CUDA plugin.

Installed into the environment's ``site-packages`` (``pip install 'jax[tpu]'``), both are found
by every JAX program of that environment: JAX imports ``libtpu`` to start its TPU backend, and
loads every module of the ``jax_plugins`` namespace package and of the ``jax_plugins`` entry
points (``jax._src.xla_bridge.discover_pjrt_plugins``). On a machine without a TPU or CUDA, the
first array of *any* program then prints some 30 lines: the CUDA plugin's "Unable to load CUDA"
traceback, libtpu's "unexpected worker hostname" errors.

So shardscope keeps them in a folder of its own, :func:`compilers_dir` (``<environment>/
shardscope-compilers``, or ``SHARDSCOPE_COMPILERS``), which is on no import path: plain JAX
never sees them. ``python -m shardscope.targets.compilers tpu gpu`` installs there the versions
the installed jax asks for (pip from the registry, or ``--find-links`` offline); ``make`` does.
shardscope loads them only when a ``--target`` asks for one: libtpu by its library's path (JAX's
own ``TPU_LIBRARY_PATH``, set while libtpu starts), the CUDA plugin by importing its module from
the folder and registering it for compile-only devices. Compilers installed in ``site-packages``
(the ``tpu`` and ``gpu`` extras) are still used where the folder has none.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, Sequence

ENV = "SHARDSCOPE_COMPILERS"
"""Where the compilers are, when not the environment's own folder."""

CUDA_PLUGIN_MODULE = "jax_plugins.xla_cuda12"
"""The CUDA plugin's module (in the ``jax_plugins`` namespace package of its folder)."""


def compilers_dir() -> Path:
    """The folder of shardscope's compilers: ``SHARDSCOPE_COMPILERS``, else ``<sys.prefix>/shardscope-compilers``."""
    return Path(os.environ.get(ENV) or Path(sys.prefix) / "shardscope-compilers")


def private_libtpu() -> Path | None:
    """libtpu's library in :func:`compilers_dir` (None when it is not installed there)."""
    path = compilers_dir() / "libtpu" / "libtpu.so"
    return path if path.is_file() else None


def private_versions() -> dict[str, str]:
    """``{package: version}`` of what :func:`compilers_dir` holds (``libtpu``, ``jax-cuda12-plugin``, ...)."""
    folder = compilers_dir()
    if not folder.is_dir():
        return {}
    return {dist.metadata["Name"].lower(): dist.version for dist in importlib.metadata.distributions(path=[str(folder)])}


def installed_version(package: str) -> str:
    """The version of ``package`` (``libtpu``, ``jax-cuda12-plugin``) that shardscope loads: its own
    folder's first, else the environment's; ``importlib.metadata.PackageNotFoundError`` when neither has it."""
    return private_versions().get(package) or importlib.metadata.version(package)


@contextlib.contextmanager
def private_library_path() -> Iterator[None]:
    """``TPU_LIBRARY_PATH`` set to the folder's libtpu while the block starts libtpu, when the user
    set none and no ``libtpu`` package is importable: JAX's own way to load a libtpu that is
    not a package on its path (``jax._src.cloud_tpu_init.get_tpu_library_path``)."""
    path = private_libtpu()
    if path is None or "TPU_LIBRARY_PATH" in os.environ:
        yield
        return
    os.environ["TPU_LIBRARY_PATH"] = str(path)
    try:
        yield
    finally:
        os.environ.pop("TPU_LIBRARY_PATH", None)


def import_private_cuda_plugin() -> ModuleType | None:
    """The CUDA plugin's module imported from :func:`compilers_dir` (None when it is not there).

    The folder joins ``sys.path`` at its end, in this process only: the plugin's module and its
    ``jax_cuda12_plugin`` package import from it; a plugin JAX found itself comes first."""
    folder = compilers_dir()
    if not (folder / "jax_plugins" / "xla_cuda12").is_dir():
        return None
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    return importlib.import_module(CUDA_PLUGIN_MODULE)


def requirements(kinds: Sequence[str]) -> list[str]:
    """The pins of each compiler the installed jax asks for: ``libtpu==0.0.42.*`` (jax's ``tpu``
    extra), ``jax-cuda12-plugin==0.10.2`` and ``jax-cuda12-pjrt==0.10.2`` (its ``cuda12-local``)."""
    version = importlib.metadata.version("jax")
    pins = []
    if "tpu" in kinds:
        pins += [r.split(";")[0].strip() for r in importlib.metadata.requires("jax") or ()
                 if r.startswith("libtpu") and 'extra == "tpu"' in r]
    if "gpu" in kinds:
        pins += [f"jax-cuda12-plugin=={version}", f"jax-cuda12-pjrt=={version}"]
    return pins


def _name(package: str) -> str:
    return package.lower().replace("_", "-")


def missing(pins: Sequence[str]) -> list[str]:
    """The ``pins`` (``name==version``, ``name==prefix.*``) that :func:`compilers_dir` does not
    hold yet: what :func:`install` still has to fetch."""
    held = {_name(name): version for name, version in private_versions().items()}

    def held_already(pin: str) -> bool:
        name, _, wanted = pin.partition("==")
        have = held.get(_name(name))
        if have is None:
            return False
        return have == wanted or (wanted.endswith(".*") and f"{have}.".startswith(wanted[:-1]))

    return [pin for pin in pins if not held_already(pin)]


def install(kinds: Sequence[str], pip_options: Sequence[str] = ()) -> int:
    """``pip install --target`` of the compilers of ``kinds`` (``tpu``, ``gpu``) into
    :func:`compilers_dir`, without their dependencies (jax is the environment's); pip's status.
    What the folder already holds at the installed jax's pins is left as it is: run again (as
    ``make`` does on every new venv stamp), it fetches nothing and prints nothing."""
    if not kinds:
        print("usage: python -m shardscope.targets.compilers tpu gpu [pip options]", file=sys.stderr)
        return 2
    pins = missing(requirements(kinds))
    if not pins:
        return 0
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade", "--target",
               str(compilers_dir()), *pip_options, *pins]
    return subprocess.call(command)


if __name__ == "__main__":  # python -m shardscope.targets.compilers tpu gpu [pip options, e.g. --find-links DIR]
    words = sys.argv[1:]
    sys.exit(install([w for w in words if w in ("tpu", "gpu")], [w for w in words if w not in ("tpu", "gpu")]))
