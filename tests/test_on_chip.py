"""shardscope on a real TPU chip (``benchmarks/on_chip.py``'s checks, under pytest): skipped on a
machine without one, as in CI. On a TPU VM: ``python -m pytest -p no:randomly tests/test_on_chip.py``
(one process: each check opens the chip in processes of its own, one at a time)."""

from __future__ import annotations

import pytest

from benchmarks import on_chip

needs_a_tpu_chip = pytest.mark.skipif(on_chip.tpu_chips() == 0, reason="needs a machine with TPU chips (a TPU VM)")


@needs_a_tpu_chip
@pytest.mark.parametrize("name", list(on_chip.CHECKS))
def test_on_a_tpu_chip(name):
    """Each check passes on the chip; its line says what it saw."""
    result = on_chip.run_check(name)
    assert result.ok, result.detail
