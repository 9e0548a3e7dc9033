"""Test set-up: real JAX on 8 simulated CPU devices, fixed before any array exists."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from shardscope.pipeline.devices import ensure_devices

MAX_DEVICES = 8
ensure_devices(MAX_DEVICES)

ROOT = Path(__file__).resolve().parent.parent
DEMOS = ROOT / "demos"


@functools.lru_cache(maxsize=None)
def _analysis(demo: str, function: str | None, devices: int, chunk_size: int | None, repeats: int):
    from shardscope.pipeline.run import analyze
    from shardscope.plans.settings import Settings

    settings = Settings(path=DEMOS / demo, function=function, devices=devices, chunk_size=chunk_size, repeats=repeats)
    return analyze(settings)


@pytest.fixture(scope="session")
def analysis_of():
    """``analysis_of("linear.py", devices=2, chunk_size=16)``: an analysis, cached per session."""

    def get(demo: str, function: str | None = None, devices: int = 2, chunk_size: int | None = None, repeats: int = 3):
        return _analysis(demo, function, devices, chunk_size, repeats)

    return get
