"""One name per quantity, everywhere: what the app shows, what the code says, what the docs say.

The team's words: "runs per call" (short ``runs/call``; the badge ``x16/call``) for how often a
collective runs in one call, and "collective equations" for how many a jaxpr holds. The names
below are the ones they replaced; none may come back, on screen or in the sources.
"""

from __future__ import annotations

import ast
import html
import re

from app_support import DEMOS, ROOT, drain, make_app, press, run, settle

RETIRED = re.compile(
    r"collective\(s\)/call|collectives?/call|executed/call|run\(s\)/call|"
    r"collectives executed|executions? per call|executions/call|speedup \d",
    re.IGNORECASE,
)
"""The names "runs per call" replaced, and the bare "speedup 0.98x" wording of the headline."""


def _visible_text(svg: str) -> str:
    """The characters an SVG screenshot shows, one row of the terminal per line."""
    rows: dict[str, list[str]] = {}
    for match in re.finditer(r'<text[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', svg, re.S):
        rows.setdefault(match.group(1), []).append(html.unescape(re.sub(r"<[^>]+>", "", match.group(2))))
    return "\n".join("".join(parts).replace("\xa0", " ") for _, parts in sorted(rows.items(), key=lambda kv: float(kv[0])))


def test_every_tab_of_the_app_uses_the_team_words_and_none_of_the_retired_ones():
    seen: dict[str, str] = {}

    async def scenario():
        app = make_app(DEMOS / "rnn.py")
        async with app.run_test(size=(160, 50)) as pilot:
            await settle(pilot)
            for key, tab in zip("123456", ("plans", "graph", "diff", "timings", "hlo", "sweep")):
                await press(pilot, key)
                await settle(pilot)
                seen[tab] = _visible_text(app.export_screenshot())
            await press(pilot, "question_mark")
            await drain(pilot)
            seen["help"] = _visible_text(app.export_screenshot())

    run(scenario())
    for tab, text in seen.items():
        assert not RETIRED.search(text), (tab, RETIRED.search(text).group(0))
    everything = "\n".join(seen.values())
    assert "runs/call" in seen["plans"] and re.search(r"x16/call", seen["plans"])  # rnn: 2 chunks x T=8
    assert "runs/call" in everything and "collective equation" in everything


def _strings(path) -> list[tuple[int, str]]:
    """Every string literal (docstrings and f-string parts too) in one source file, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_source_file_or_document_uses_a_retired_name():
    offenders = []
    for path in sorted((ROOT / "shardscope").rglob("*.py")):
        offenders += [f"{path.relative_to(ROOT)}:{line}: {RETIRED.search(s).group(0)}"
                      for line, s in _strings(path) if RETIRED.search(s)]
    documents = ["README.md", "BENCHMARKS.md", *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").rglob("*.md"))]
    assert "docs/guides/check.md" in documents
    for doc in documents:
        for k, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
            if RETIRED.search(line):
                offenders.append(f"{doc}:{k}: {RETIRED.search(line).group(0)}")
    assert offenders == []


def test_the_retired_names_are_caught_when_they_come_back():
    # the pattern itself must bite, or the two tests above prove nothing
    for phrase in ("3 collective(s)/call", "executed/call", "2 run(s)/call", "collectives executed: 4",
                   "executions per call", "speedup 0.98x"):
        assert RETIRED.search(phrase), phrase
    for phrase in ("naive 2 runs/call", "runs per call", "x16/call", "collective equations", "the speedup is"):
        assert not RETIRED.search(phrase), phrase
