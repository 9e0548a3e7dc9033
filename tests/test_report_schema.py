"""The README's ``report --json`` schema lists every key the command prints.

The schema is read from the README's block (every quoted name in it); the keys from a fresh
``report --json`` of the seed demo, at the top level, in ``comparison`` and in each plan.
"""

from __future__ import annotations

import json
import re

from _support import DEMOS, ROOT

_SCHEMA_START = "`--json` prints exactly one JSON object on stdout:"


def _schema_names() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index(_SCHEMA_START):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    return set(re.findall(r'"(\w+)"', block))


def test_every_key_of_report_json_is_in_the_readmes_schema(shardscope_cli):
    result = shardscope_cli("report", DEMOS / "linear.py", "--json", "-r", "1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = _schema_names()
    assert set(data) - names == set()
    assert set(data["comparison"]) - names == set()
    for plan in data["variants"].values():
        assert set(plan) - names == set()
    # what the README says of them: a demo's plans, no programs compared, the mesh at the top
    assert data["kind"] == "plans" and data["output_checks"] == []
    assert {plan["mesh"] for plan in data["variants"].values()} == {None} and data["mesh"] == {"s": 2}
