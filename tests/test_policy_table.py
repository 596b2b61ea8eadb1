"""docs/policy.md lists every default rule with its rating and reason, in the file's order."""

from __future__ import annotations

import re

from hoststate.policy import DEFAULT_POLICY, DEFAULT_VARIABLES, default_rules
from scripts.policy_table import BEGIN, DOC, END, VBEGIN, VEND, render


def _rows() -> list[tuple[str, str]]:
    doc = DOC.read_text()
    block = doc[doc.index(BEGIN):doc.index(END)]
    rows = [line for line in block.splitlines() if re.match(r"^\| \d+ \|", line)]
    out = []
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        out.append((cells[1].strip("`"), cells[2].split(" ")[0]))
    return out


def test_every_default_rule_has_a_row_with_its_rating():
    """Independent of the generator: the rows parsed from the document against the parsed policy."""
    assert _rows() == [(rule.path, rule.severity) for rule in default_rules() if rule.origin == DEFAULT_POLICY]


def test_every_variable_has_a_row_with_its_rating_and_source():
    doc = DOC.read_text()
    block = doc[doc.index(VBEGIN):doc.index(VEND)]
    rated: dict[str, str] = {}
    for line in block.splitlines()[3:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert cells[3], line  # every row names its source
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rated[name] = cells[1].split(" ")[0]
    assert rated == {r.path[4:]: r.severity for r in default_rules()
                     if r.origin == DEFAULT_VARIABLES and r.path.startswith("env.")}


def test_the_table_is_current():
    doc = DOC.read_text()
    assert render(doc) == doc, "run: python scripts/policy_table.py"
