"""GPUs as a target (``gpu:h100:8``, ``gpu:h100:2x8``): XLA's GPU compiler, without a GPU.

JAX's CUDA plugin (``pip install 'shardscope[gpu]'``: ``jax-cuda12-plugin`` and
``jax-cuda12-pjrt`` of the installed jax's version, no CUDA libraries) describes GPUs as
compile-only devices from a description of one GPU (a ``GpuTargetConfigProto`` in text form:
SM count, shared memory, registers, memory size and bandwidth, L2, clock, compute capability)
and a topology ``<slices>x<hosts>x<devices per host>``. XLA's GPU pipeline runs for them
(the all-reduce code motion out of loops, the combiner, the collective pipeliner); nothing
runs on them, so the plan has a module and its memory analysis, never timings.

The plugin describes devices only while JAX's platforms are the CPU's (else its start-up looks
for CUDA libraries and the topology call says "topology not implemented for cuda"): shardscope
sets ``jax_platforms`` in JAX's own configuration for the call when nothing set it, never the
user's environment.

shardscope ships descriptions of four GPUs (``shardscope/gpu_descriptions/``, each file says
which published figures it is based on); a user's own file is ``gpu:path/to/gpu.txtpb:8``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator

from shardscope.hardware.gpu_nodes import DESCRIPTIONS, described_chip, gpu_machine, gpu_names, gpu_node
from shardscope.hardware.machines import Machine
from shardscope.errors import SettingsError, TargetError, quote_error
from shardscope.targets.base import Target, TargetDevices
from shardscope.targets.compilers import import_private_cuda_plugin, installed_version
from shardscope.targets.host import plugin_lines_dropped
from shardscope.config.settings import check_target_size

GPU_EXTRA = "pip install 'shardscope[gpu]'"
"""What installs JAX's CUDA plugin of the user's jax version (the ``gpu`` extra)."""

_PLUGIN_PACKAGES = ("jax-cuda12-plugin", "jax-cuda12-pjrt")
_COUNT = re.compile(r"^(?:(\d+)x)?(\d+)$")
_FILE_SUFFIXES = (".txtpb", ".pbtxt", ".textproto", ".txt", ".pb.txt")


def gpu_examples() -> str:
    """``gpu:a100:8, gpu:b200:8, ...``: for hints."""
    return ", ".join(f"gpu:{name}:8" for name in gpu_names())


@dataclass(frozen=True)
class GpuTarget(Target):
    """``gpu:h100:2x8``: ``hosts`` hosts of ``per_host`` GPUs each, described by ``gpu`` (one of
    :func:`gpu_names`, or the path of a user's description file)."""

    gpu: str
    hosts: int
    per_host: int
    platform: ClassVar[str] = "gpu"
    device_noun: ClassVar[str] = "GPUs"
    lowering_platform: ClassVar[str] = "cuda"
    compiler: ClassVar[str] = "XLA:GPU"
    extra: ClassVar[str] = GPU_EXTRA
    module_forms: ClassVar[str] = (
        "-start/-done pairs (all-reduce-start on jax 0.10.2; a sync all-reduce with \"is_sync\":true in its "
        "backend config on 0.12), all-gather-start, reduce-scatter-start, all-to-all-start, "
        "collective-permute-start; a combined all-reduce as wrapped_concatenate -> one flat all-reduce -> "
        "wrapped_slice per value")

    @property
    def topology(self) -> str:
        """``h100:8`` or ``h100:2x8``."""
        count = str(self.per_host) if self.hosts == 1 else f"{self.hosts}x{self.per_host}"
        return f"{self.gpu}:{count}"

    @property
    def is_file(self) -> bool:
        """True when the description is a user's file rather than one shardscope ships."""
        return self.gpu not in gpu_names()

    def description_path(self) -> Path:
        """The file that describes the GPU."""
        return Path(self.gpu) if self.is_file else DESCRIPTIONS / f"{self.gpu}.txtpb"

    def load(self) -> TargetDevices:
        """The GPUs, as compile-only devices of JAX's CUDA plugin.

        Raises :class:`TargetError` when the plugin is missing or is not the jax's version, and
        when JAX does not take the description (its own reason quoted).
        """
        return _load_gpus(self)

    def require_installed(self) -> None:
        """:class:`TargetError` unless JAX's CUDA plugin of the installed jax's version is there
        (read from the packages' metadata: no JAX needed)."""
        require_plugin()

    def compiling(self) -> contextlib.AbstractContextManager[None]:
        """JAX's platforms set to the CPU's for the compile, when nothing set them."""
        return cpu_platforms()

    def machine(self, device_kind: str) -> Machine:
        """The GPU as its description tells (memory size, bandwidth) with its published peaks and
        what a JAX process may use of its memory, in its node (:mod:`shardscope.hardware.gpu_nodes`:
        NVLink and a network port per GPU; none for a GPU described by the user's own file)."""
        chip = described_chip(self.description_path().stem if self.is_file else self.gpu, _description(self))
        return gpu_machine(chip, None if self.is_file else gpu_node(self.gpu))


def parse_gpu(text: str, rest: str) -> GpuTarget:
    """``h100:8`` / ``h100:2x8`` / ``path/to/gpu.txtpb:8`` (from ``text``, ``gpu:...``) as a
    :class:`GpuTarget`; :class:`SettingsError` for another form or a GPU shardscope does not
    describe (the names listed). Whether a user's file is a description is :meth:`GpuTarget.load`'s to say."""
    name, sep, count = rest.strip().rpartition(":")
    name = name.strip()
    match = _COUNT.match(count.strip())
    if not sep or not name or match is None:
        raise SettingsError(f"{text!r} is not a GPU target: expected gpu:NAME:DEVICES or gpu:NAME:HOSTSxDEVICES.",
                            f"for example gpu:h100:8, gpu:h100:2x8 (two hosts of 8), or a description file: "
                            f"gpu:path/to/gpu.txtpb:8; shardscope describes {', '.join(gpu_names())}")
    hosts, per_host = int(match.group(1) or 1), int(match.group(2))
    if hosts < 1 or per_host < 1:
        raise SettingsError(f"{text!r} has no GPUs.", "give at least one host of one GPU, e.g. gpu:h100:8")
    check_target_size(repr(text), hosts * per_host, "GPUs", "gpu:h100:8x8")
    if name.lower() in gpu_names():
        return GpuTarget(name.lower(), hosts, per_host)
    if "/" in name or name.endswith(_FILE_SUFFIXES):
        return GpuTarget(name, hosts, per_host)
    raise SettingsError(f"shardscope has no description of the GPU {name!r}: it describes {', '.join(gpu_names())}.",
                        f"use one of {gpu_examples()}, or describe yours in a file (a GpuTargetConfigProto in "
                        f"text form, like {DESCRIPTIONS.name}/h100.txtpb) and give gpu:path/to/file.txtpb:8")


@contextlib.contextmanager
def cpu_platforms() -> Iterator[None]:
    """JAX's ``jax_platforms`` set to ``cpu`` while the block runs, when nothing set it.

    The CUDA plugin describes devices and compiles for them only then; shardscope's own runs set
    it before JAX starts (:mod:`shardscope.targets.host`), a notebook's ``inspect()`` may not.
    """
    import jax

    unset = not jax.config.jax_platforms  # type: ignore[attr-defined]  # jax.config's options are dynamic attributes
    if unset:
        jax.config.update("jax_platforms", "cpu")
    try:
        yield
    finally:
        if unset:
            jax.config.update("jax_platforms", None)


@functools.lru_cache(maxsize=None)
def _load_gpus(target: GpuTarget) -> TargetDevices:
    from jax.experimental import topologies

    require_plugin()
    config = _description(target)
    with cpu_platforms():
        register_plugin_for_describing()
        try:
            topology = topologies.get_topology_desc(platform="cuda", target_config=config,
                                                    topology=f"1x{target.hosts}x{target.per_host}")
        except NotImplementedError as exc:  # the plugin is not registered in this process
            raise TargetError(
                f"JAX's CUDA plugin is not registered in this process, so it cannot describe {target}: "
                f"{quote_error(exc, lines=1)}",
                "set JAX_PLATFORMS=cpu before JAX starts (in the environment, or os.environ['JAX_PLATFORMS'] = 'cpu' "
                "before import jax): then the plugin registers without looking for CUDA") from exc
        except Exception as exc:  # XlaRuntimeError / JaxRuntimeError: a text JAX cannot parse, or the plugin's start
            raise TargetError(
                f"JAX did not take {target.description_path()} as a GPU description: {quote_error(exc)}",
                f"the file must be a GpuTargetConfigProto in text form, like shardscope's own "
                f"{DESCRIPTIONS.name}/h100.txtpb") from exc
    return TargetDevices(target, tuple(topology.devices))


def register_plugin_for_describing() -> None:
    """Register JAX's CUDA plugin for compile-only devices where JAX's start left it out.

    A process whose JAX started with ``jax_platforms`` unset (a script that builds its mesh at
    import, a notebook) ran the plugin's CUDA check, which fails on a machine without CUDA: JAX
    logged the failure and registered no ``cuda`` plugin, so no GPU can be described ("topology
    not implemented for cuda"). The plugin's own ``initialize()`` is run again with that check
    skipped (``JAX_SKIP_CUDA_CONSTRAINTS_CHECK``, the plugin's switch for it), as it runs when
    ``JAX_PLATFORMS=cpu``: it adds a compile-only ``cuda`` plugin and leaves the started backends
    as they are."""
    from jax._src import xla_bridge

    xla_bridge._discover_and_register_pjrt_plugins()  # at a command's start, under cpu_platforms: CUDA is not checked
    if "cuda" in getattr(xla_bridge, "_topology_factories", {"cuda": None}):
        return
    plugins = [module for name, module in list(sys.modules.items())
               if name.startswith("jax_plugins.") and name.count(".") == 1 and "cuda" in name
               and callable(getattr(module, "initialize", None))]
    if not plugins:  # not on JAX's path: the one in shardscope's own folder, loaded for this call
        with plugin_lines_dropped(loading=True):
            private = import_private_cuda_plugin()
        plugins = [private] if private is not None else []
    if not plugins:
        return
    switch = "JAX_SKIP_CUDA_CONSTRAINTS_CHECK"
    added = switch not in os.environ
    if added:
        os.environ[switch] = "1"
    try:
        with contextlib.suppress(Exception), plugin_lines_dropped(loading=True):  # a plugin that still fails: the topology call says why
            plugins[0].initialize()
    finally:
        if added:
            os.environ.pop(switch, None)


def _description(target: GpuTarget) -> str:
    """The text of ``target``'s description file (:class:`TargetError` when it cannot be read)."""
    path = target.description_path()
    try:
        return path.read_text()
    except OSError as exc:
        raise TargetError(f"Cannot read the GPU description {str(path)!r}: {exc.strerror or exc}.",
                          f"give an existing file (gpu:path/to/file.txtpb:8) or one of {gpu_examples()}") from None


def require_plugin() -> None:
    """:class:`TargetError` (exit 2) unless JAX's CUDA plugin of the installed jax's version is there
    (the packages' metadata: JAX is not imported)."""
    jax = sys.modules.get("jax")  # once JAX is up, its own word; before, its package's metadata
    jax_version = jax.__version__ if jax is not None else importlib.metadata.version("jax")
    versions = {}
    for package in _PLUGIN_PACKAGES:
        try:
            versions[package] = installed_version(package)  # shardscope's own folder first: plain JAX does not see it
        except importlib.metadata.PackageNotFoundError:
            raise TargetError(f"Compiling for a GPU target needs JAX's CUDA plugin ({package}), which is not installed.",
                              "python -m shardscope.targets.compilers gpu (the plugin of your jax's version, about "
                              f"290 MB, in shardscope's own folder: plain JAX never loads it), or {GPU_EXTRA} "
                              "(into site-packages)") from None
    wrong = {package: version for package, version in versions.items() if version != jax_version}
    if wrong:
        said = ", ".join(f"{package} {version}" for package, version in wrong.items())
        raise TargetError(f"JAX's CUDA plugin is not your jax's version: {said}, jax {jax_version}.",
                          f"pip install 'jax-cuda12-plugin=={jax_version}' 'jax-cuda12-pjrt=={jax_version}' "
                          f"(or {GPU_EXTRA})")
