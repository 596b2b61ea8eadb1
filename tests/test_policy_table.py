"""docs/policy.md lists every default rule with its rating and reason, in the file's order."""

from __future__ import annotations

import re

from hoststate.policy import default_rules
from scripts.policy_table import BEGIN, DOC, END, render


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
    assert _rows() == [(rule.path, rule.severity) for rule in default_rules()]


def test_the_table_is_current():
    doc = DOC.read_text()
    assert render(doc) == doc, "run: python scripts/policy_table.py"
