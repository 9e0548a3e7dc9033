"""The documentation site: it builds with warnings as errors, its command reference is the parser's,
and every command and option the docs name is one shardscope has.

``mkdocs build --strict`` (mkdocs.yml: the Material theme, mkdocstrings, the hook that renders the
parser) fails on a broken link or anchor, a page missing from the nav or a nav entry with no page,
and a docstring mkdocstrings cannot render. The command-output samples are compared with fresh
runs in tests/test_doc_samples.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from _support import ROOT
from shardscope.cli import COMMANDS, command_line

DOCS = ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "hooks" not in path.relative_to(DOCS).parts)
DOCUMENTS = [ROOT / "README.md", *PAGES]

OTHER_TOOLS_OPTIONS = {"--quiet", "--upgrade", "--strict", "--index-url", "--no-cache-dir", "--xla_dump_to", "--junitxml",
                       "--xla_dump_hlo_module_re", "--xla_backend_optimization_level",
                       "--logtostderr"}  # pip, mkdocs, pytest, XLA_FLAGS and LIBTPU_INIT_ARGS
"""Long options of the other tools the docs show (pip's, mkdocs', pytest's), not shardscope's."""


def _hook(name: str) -> ModuleType:
    """One of docs/hooks/ (mkdocs loads them by path, as here)."""
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _requires_the_docs_extra() -> None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "griffe"):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[docs]' (make test does)")


@pytest.mark.slow  # a process that builds the whole site (about 3 s)
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    _requires_the_docs_extra()
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, on every build
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in COMMANDS:
        assert f"shardscope {command}" in cli, command
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("inspect_on", "Inspection", "collective_counts", "assert_no_collectives_in_loops",
                 "assert_no_rematerialization", "what_if"):
        assert name in api, name
    assert ":func:" not in api and ":class:" not in api  # the Sphinx roles became code
    assert (site / "screenshots" / "rnn-plans.svg").is_file()  # the explorer's pictures come along
    assert not (site / "hooks").exists() and not (site / "screenshots" / "samples.py").exists()


def test_the_command_reference_has_every_command_and_option_of_the_parser():
    rendered = _hook("cli_reference").render()
    sections = dict(re.findall(r"^## `(shardscope[^`]*)`\n(.*?)(?=^## |\Z)", rendered, re.MULTILINE | re.DOTALL))
    line = command_line()
    assert list(sections) == ["shardscope", *(parser.prog for parser in line.commands)]
    for parser in (line.parser, *line.commands):
        section = sections["shardscope" if parser is line.parser else parser.prog]
        for action in parser.options:
            for name in action.option_strings:
                shown = f"`{name}`" in section
                assert shown == (action.help is not argparse.SUPPRESS), (parser.prog, name)
    assert not re.search(r"--worker\b(?!s)", rendered)  # the spawner's own option, hidden from --help too (layouts' --workers is shown)
    report = sections["shardscope report"]
    assert "| `--target` | `TARGET` (repeatable) |" in report and "| `-r`, `--repeats` | `REPEATS` |  | Timed rounds per plan after warm-up (default: at least 20" in report


def test_the_reference_is_the_same_whatever_the_terminal(monkeypatch):
    render = _hook("cli_reference").render
    monkeypatch.setenv("COLUMNS", "40")
    narrow = render()
    monkeypatch.setenv("COLUMNS", "300")
    assert render() == narrow


def test_sphinx_roles_become_code_in_the_api_reference():
    pytest.importorskip("griffe", reason="griffe is not installed: pip install -e '.[docs]' (make test does)")
    roles = _hook("griffe_roles").markdown_of_roles
    assert roles("see :func:`inspect` and :class:`~shardscope.engine.joined.inspection.Inspection`") == \
        "see `inspect` and `Inspection`"
    assert roles(":mod:`shardscope.testing`, :meth:`Inspection.what_if`") == "`shardscope.testing`, `Inspection.what_if`"


def _code(text: str) -> list[str]:
    """The lines of every fenced block and every inline code span of a Markdown text."""
    lines, prose, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            lines.append(line)
        else:
            prose.append(line)
    spans = re.findall(r"`([^`]+)`", " ".join(prose))
    return lines + spans


_COMMAND_LINE = re.compile(r"(?:^|[\s$(])shardscope ([^#|;&'\"]*)")


def _mentions(text: str) -> list[tuple[str, list[str]]]:
    """Each ``shardscope WORDS`` in the code of a text: the command (``open`` for a file) and its
    options (what starts with ``-``, without ``=VALUE``)."""
    found = []
    for code in _code(text):
        for match in _COMMAND_LINE.finditer(code):
            words = [word.strip("[]").rstrip(").,;:").split("=")[0] for word in match[1].split()]  # a sentence's end
            if not words:
                continue
            command = words[0] if words[0] in COMMANDS else "open"
            if words[0].startswith("-"):
                command = "shardscope"
            found.append((command, [word for word in words if word.startswith("-") and word not in ("-", "--")]))
    return found


def _options_of(command: str) -> set[str]:
    line = command_line()
    parser = line.parser if command == "shardscope" else next(p for p in line.commands if p.prog.split()[-1] == command)
    return {name for action in parser.options for name in action.option_strings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(path.relative_to(ROOT)) for path in DOCUMENTS])
def test_every_command_the_docs_show_takes_the_options_shown_with_it(document):
    wrong = [f"shardscope {command} {option}" for command, options in _mentions(document.read_text())
             for option in options if option not in _options_of(command)]
    assert wrong == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(path.relative_to(ROOT)) for path in DOCUMENTS])
def test_every_long_option_the_docs_name_is_an_option_of_shardscope(document):
    every_option = set().union(*(_options_of(command) for command in ("shardscope", *COMMANDS)))
    named = {option for code in _code(document.read_text()) for option in re.findall(r"(?<![\w-])--[a-zA-Z][\w-]*", code)}
    assert named - every_option - OTHER_TOOLS_OPTIONS == set()


def test_the_checks_of_the_mentions_catch_a_wrong_option():
    mentions = _mentions("run `shardscope check FILE --target tpu:v5e:2x2 [--chunk-size 4]` and `shardscope demos/x.py -r 2`")
    assert mentions == [("check", ["--target", "--chunk-size"]), ("open", ["-r"])]
    assert "--chunk-size" not in _options_of("check") and "-r" in _options_of("open")
    shown = [command for document in DOCUMENTS for command, _ in _mentions(document.read_text())]
    assert len(shown) > 50 and set(COMMANDS) <= {*shown}  # the docs show every command, and the search finds them


def test_the_readme_links_to_files_that_exist():
    """README.md is read on GitHub and on PyPI, outside the site: mkdocs does not check its links."""
    readme = (ROOT / "README.md").read_text()
    links = [target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", readme)
             if not target.startswith(("http://", "https://", "#"))]
    assert "docs/guides/check.md" in links and "screenshots/rnn-hlo.svg" in links
    assert [link for link in links if not (ROOT / link).exists()] == []
