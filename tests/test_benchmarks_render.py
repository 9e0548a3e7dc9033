"""BENCHMARKS.md says only what the JSON results say: no figure in it is typed into the renderer.

The check: render the committed results, then render them again with every measured float
scaled. A decimal number that is the same in both renderings did not come from the results.
"""

from __future__ import annotations

import copy
import difflib
import re
import zlib

from _support import ROOT

DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?!\.\d)")  # not an address (127.0.0.1)
TARGETS = {"1.7", "1.0"}
"""Figures that are targets or the earlier claim under test, not measurements (plans_at_scale.CLAIM, the slope of linear growth)."""
UNSCALED = {"date", "machine", "versions"}


def _scaled(value, path=""):
    """Every measured float (and byte count) times a factor of its own place (its path of keys and
    list indices): a figure computed from the results changes, a ratio of two of them too, while a
    typed figure stays."""
    if path.rsplit(".", 1)[-1] in UNSCALED:
        return value
    if isinstance(value, dict):
        return {k: _scaled(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_scaled(v, f"{path}[{i}]") for i, v in enumerate(value)]
    factor = 1.37 + 0.01 * (zlib.crc32(path.encode()) % 50)
    if isinstance(value, float):
        return value * factor
    if isinstance(value, int) and not isinstance(value, bool) and path.endswith("bytes"):  # a size measured
        return round(value * factor)
    return value


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _prose(markdown: str) -> list[str]:
    """The prose lines (tables and the machine section left out)."""
    body = markdown.split("## How to rerun")[1]
    return [line for line in body.splitlines() if not line.startswith("|")]


def test_no_figure_in_the_prose_of_benchmarks_md_is_typed_into_the_renderer():
    from benchmarks import render

    results = render.load(ROOT / "benchmarks" / "results")
    assert set(results) == {"plans_at_scale", "tool_cost", "app_start", "scaling", "cross_process", "layouts",
                            "target_compile", "what_if_gain", "check_cost", "compiled_parse", "dispatch_steps",
                            "compile_cache", "cache_writes", "step_estimate", "check_at_scale", "profile_kinds", "verdict_stability",
                            "tpu_corpus_report", "layout_anchors"}
    assert set(results["step_estimate"]) == {"step_estimate", "step_estimate_v5e"}  # this CPU's, and a chip's
    before = _prose(render.render(results, {}, 240.0))
    after = _prose(render.render(_scaled(copy.deepcopy(results)), {}, 240.0))
    # pair the lines that read the same once their figures are masked (a verdict may flip)
    masked = [[DECIMAL.sub("#", line) for line in lines] for lines in (before, after)]
    pairs = [
        (before[i + k], after[j + k])
        for i, j, n in difflib.SequenceMatcher(None, *masked, autojunk=False).get_matching_blocks()
        for k in range(n)
    ]
    figures = [(DECIMAL.findall(b), DECIMAL.findall(a), b) for b, a in pairs]
    assert sum(len(ones) for ones, _, _ in figures) > 10  # the prose does quote this run's figures
    quoted = set(DECIMAL.findall(" ".join(_strings(results))))  # sentences the benchmarks stored in the JSON
    typed = [(x, line) for ones, twos, line in figures for x, y in zip(ones, twos)
             if x == y and x not in TARGETS | quoted]
    assert not typed, typed
