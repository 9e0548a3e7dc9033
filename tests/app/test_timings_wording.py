"""The Timings tab says what the gradient error is compared with, in the words the report uses."""

from __future__ import annotations

from rich.console import Console

from shardscope.app.views.timings import timings_renderable
from shardscope.measure import GRADIENT_CHECK


def _plain(renderable) -> str:
    console = Console(record=True, width=240)
    console.print(renderable)
    return " ".join(console.export_text().split())


def test_the_timings_tab_explains_the_gradient_check(analysis_of):
    analysis = analysis_of("linear.py", devices=2, chunk_size=16)
    for hidden in (False, True):
        text = _plain(timings_renderable(analysis, hidden))
        assert "max |grad - reference|" in text
        assert GRADIENT_CHECK in text


def test_the_timings_tab_states_the_speedup_as_the_report_does(analysis_of):
    from shardscope.report import verdict

    analysis = analysis_of("linear.py", devices=2, chunk_size=16)
    sentence = analysis.speedup_text()
    assert sentence in verdict(analysis)
    assert sentence in _plain(timings_renderable(analysis, False))
    assert sentence not in _plain(timings_renderable(analysis, True))  # measured numbers hidden
