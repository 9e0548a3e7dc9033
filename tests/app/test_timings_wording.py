"""The Timings tab says what the gradient error is compared with, in the words the report uses."""

from __future__ import annotations

from rich.console import Console

from shardscope.app.views.timings import timings_renderable
from shardscope.measure.timing import GRADIENT_CHECK


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
    from shardscope.render.report import verdict

    analysis = analysis_of("linear.py", devices=2, chunk_size=16)
    sentence = analysis.speedup_text()
    assert sentence in verdict(analysis)
    assert sentence in _plain(timings_renderable(analysis, False))
    assert sentence not in _plain(timings_renderable(analysis, True))  # measured numbers hidden


def test_the_timings_tab_notes_the_programs_compared_on_equal_arguments(tmp_path):
    """a takes other arguments; b and c take the same ones and c is twice b: c against b is noted."""
    from pathlib import Path

    from shardscope.pipeline.run import analyze
    from shardscope.config.settings import Settings

    path = Path(tmp_path) / "three.py"
    path.write_text(
        "import jax, jax.numpy as jnp\nimport shardscope\n\n"
        "x = jax.ShapeDtypeStruct((8, 4), jnp.float32)\n\n"
        "@shardscope.program(args=(jax.ShapeDtypeStruct((16, 4), jnp.float32),))\n"
        "def a(x):\n    return x[:8].sum()\n\n"
        "@shardscope.program(args=(x,))\ndef b(x):\n    return x.sum()\n\n"
        "@shardscope.program(args=(x,))\ndef c(x):\n    return 2.0 * x.sum()\n"
    )
    analysis = analyze(Settings(path=path, repeats=1))
    text = _plain(timings_renderable(analysis, False))
    assert "outputs on the same example arguments: c DIFFERS from b" in text
    assert "no two programs take the same example arguments" not in text


def test_hidden_measurements_show_each_gradient_error_as_the_power_of_ten_above_it(analysis_of):
    """The last digits of a gradient error differ from machine to machine (7.25e-05 here, 6.87e-05
    there): a screenshot shows a bound that holds on both, the power of ten above the error."""
    import math

    analysis = analysis_of("rnn.py", devices=2, chunk_size=16)
    shown, hidden = _plain(timings_renderable(analysis, False)), _plain(timings_renderable(analysis, True))
    for plan in analysis.plans.values():
        error = plan.max_abs_err
        assert 0 < error < 1 and f"{error:.2e}" in shown and f"{error:.2e}" not in hidden
        exponent = math.ceil(math.log10(error)) if math.log10(error) % 1 else int(math.log10(error)) + 1
        assert error < 10.0**exponent <= 10 * error
        assert f"< 1e{exponent:+03d}" in hidden


def test_a_compile_the_cache_served_says_cache(analysis_of):
    """The same demo analysed twice in one process: the second analysis' executables come from a
    cache (JAX's memory, or the run's persistent cache), and its compile row says so per program;
    hidden measurements hide it (a screenshot must not depend on earlier runs)."""
    from pathlib import Path

    from shardscope.config.settings import Settings
    from shardscope.pipeline.run import analyze

    path = Path(__file__).resolve().parent.parent.parent / "demos" / "linear.py"
    for _ in range(2):  # from one line: the modules' source locations (their call stacks) are the same
        again = analyze(Settings(path=path, chunk_size=4, repeats=1))
    assert all(plan.compile_from_cache for plan in again.plans.values()) and again.reference.compile_from_cache
    console = Console(record=True, width=240)
    console.print(timings_renderable(again, False))
    row = next(line for line in console.export_text().splitlines() if line.lstrip("│ ").startswith("compile "))
    assert row.count("(cache)") == len(again.plans) + 1  # every plan and the reference
    assert "(cache): a cache served the executable, not the compiler" in _plain(timings_renderable(again, False))
    assert "(cache)" not in _plain(timings_renderable(again, True))
