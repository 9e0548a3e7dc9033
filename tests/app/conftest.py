"""The Pilot tests' process is shared by many apps, one after another."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True)
def unfreeze_after_each_app():
    """What a test's app froze out of the collector (``shardscope.app.gc_policy``: what lives when
    a result shows) is handed back to it after the test: the next test's app starts, as in its own
    process, with nothing frozen, and the garbage the earlier apps left is collected as usual."""
    yield
    gc.unfreeze()
