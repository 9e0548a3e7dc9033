"""``shardscope.inspect(...)._repr_html_()``: a fragment a notebook can put in its page.

One root element with an id of its own, every style rule scoped under it (nothing restyles the
page), a real ``<table>`` whose cells are the text rendering's, and colours that read on a light
and on a dark page (the WCAG contrast ratio is computed here).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from _support import DEMOS

import shardscope
from shardscope.sources.loading import import_file


@pytest.fixture(scope="module")
def modules():
    return import_file(DEMOS / "train_step.py")[0], import_file(DEMOS / "pipeline.py")[0]


@pytest.fixture(scope="module")
def inspections(modules):
    step, pipeline = modules
    return [
        shardscope.inspect(step.step, step.params, step.xs, step.ys),
        shardscope.inspect(step.step_fixed, step.params, step.xs, step.ys),
        shardscope.inspect(pipeline.pipeline, pipeline.weights, pipeline.inputs),
    ]


class Fragment(HTMLParser):
    """The tags of a fragment with their depth, the style text and the table cells."""

    VOID = {"br", "hr", "img", "meta", "link", "input", "col", "wbr"}

    def __init__(self, text: str) -> None:
        super().__init__()
        self.depth, self.roots, self.tags, self.style = 0, [], [], ""
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._in_style = False
        self.text_outside = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        if self.depth == 0:
            self.roots.append((tag, dict(attrs)))
        self.tags.append(tag)
        self._in_style = tag == "style"
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []
        if tag not in self.VOID:
            self.depth += 1

    def handle_endtag(self, tag):
        self.depth -= 1
        self._in_style = False
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self.depth == 0:
            self.text_outside += data
        if self._in_style:
            self.style += data
        if self._cell is not None:
            self._cell.append(data)

    def handle_decl(self, decl):
        self.tags.append("!" + decl.lower())


def selectors(css: str) -> list[str]:
    """Every selector of ``css`` (inside @media blocks too), comments removed."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    found = []
    for prelude in re.findall(r"([^{}]+)\{", css):
        prelude = prelude.strip()
        if prelude.startswith("@"):
            continue
        found += [s.strip() for s in prelude.split(",")]
    return found


def rules(css: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for prelude, body in re.findall(r"([^{}@]+)\{([^{}]*)\}", css):
        declarations = dict(
            (k.strip(), v.strip()) for k, v in (d.split(":", 1) for d in body.split(";") if ":" in d)
        )
        out.append((prelude.strip(), declarations))
    return out


def luminance(colour: str) -> float:
    """WCAG relative luminance of ``#rrggbb``."""
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_fragment_is_no_document_and_has_one_root(inspections):
    for ins in inspections:
        text = ins._repr_html_()
        for tag in ("<html", "<head", "<body", "<!doctype"):
            assert tag not in text.lower(), tag
        fragment = Fragment(text)
        assert len(fragment.roots) == 1 and fragment.text_outside.strip() == ""
        tag, attrs = fragment.roots[0]
        assert tag == "div" and attrs["id"].startswith("shardscope-")
        assert fragment.depth == 0  # every element is closed inside the root


def test_every_style_rule_is_scoped_under_the_root_and_each_render_has_its_own_id(inspections):
    ids = set()
    for ins in inspections:
        fragment = Fragment(ins._repr_html_())
        root = "#" + fragment.roots[0][1]["id"]
        ids.add(root)
        found = selectors(fragment.style)
        assert found and all(s == root or s.startswith(root + " ") for s in found), found
        assert "body" not in " ".join(found)
    assert len(ids) == len(inspections)
    first, second = (Fragment(inspections[0]._repr_html_()).roots[0][1]["id"] for _ in range(2))
    assert first != second  # two outputs of one inspection in one notebook do not share styles


def text_rows(ins) -> list[list[str]]:
    """The rows of the text rendering's table, cut at runs of 2+ spaces (the table's gaps)."""
    lines = str(ins).splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "collective"])
    rows = []
    for line in lines[header + 2:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return [re.split(r"\s{2,}", lines[header].strip())] + rows


def test_the_table_cells_are_the_text_renderings(inspections):
    for ins in inspections:
        fragment = Fragment(ins._repr_html_())
        assert "table" in fragment.tags and "pre" not in fragment.tags
        assert fragment.rows == text_rows(ins)
        assert len(fragment.rows) == 1 + len(ins.paired)
    step = Fragment(inspections[0]._repr_html_())
    # W2 is 32x1 f32 = 128 B and W1 16x32 f32 = 2,048 B, all-reduced together (XLA combines the two
    # sums into one instruction) in each of 4 micro-batches
    assert [row[1:7] for row in step.rows[1:]] == [
        ["all-reduce[batch]", "grad(params['W1']), grad(params['W2'])", "4", "4", f"{4 * (128 + 2048):,}", "program"]]


def test_the_colours_read_on_a_light_and_a_dark_page(inspections):
    for ins in inspections:
        for selector, declarations in rules(Fragment(ins._repr_html_()).style):
            colour = declarations.get("color")
            if colour is None or colour == "inherit":
                continue
            background = declarations.get("background") or declarations.get("background-color")
            assert background and background.startswith("#"), (selector, declarations)
            assert contrast(colour, background) >= 4.5, (selector, colour, background)
            for page in ("#ffffff", "#1e1e1e"):  # a badge stands out from both pages
                assert contrast(background, page) >= 1.4 or contrast(colour, page) >= 4.5, (selector, page)
