"""Report rendering: JSON validates against docs/diff-report.schema.json; text grouping; Markdown table."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from hoststate.diff import compare
from hoststate.report import render_diff
from hoststate.snapshot import load
from tests.conftest import FIXTURES, REPO

SCHEMA = json.loads((REPO / "docs" / "diff-report.schema.json").read_text())
SEED_B, SEED_E = (str(FIXTURES / "snapshots" / n) for n in ("seed-baseline.toml", "seed-experiment.toml"))


@pytest.fixture(scope="module")
def seed():
    return load(SEED_B), load(SEED_E)


def _unreadable_case():
    base, cur = load(SEED_B), load(SEED_B)
    cur["collectors"]["vllm"] = {"status": "timeout", "reason": "slow"}
    del cur["vllm"]
    return base, cur


@pytest.mark.parametrize("include_ignored", [False, True])
def test_json_report_validates_against_the_shipped_schema(seed, include_ignored):
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    for a, b in (seed, seed[::-1], (seed[0], seed[0]), _unreadable_case()):
        report = json.loads(render_diff(compare(a, b, include_ignored=include_ignored), "json", baseline="a",
                                        current="b"))
        jsonschema.validate(report, SCHEMA)
    assert any(f["old"] == "2026-06-02T09:00:00+00:00" for f in json.loads(render_diff(
        compare(*seed, include_ignored=True), "json", baseline="a", current="b"))["findings"])


def test_schema_rejects_a_wrong_report(seed):
    report = json.loads(render_diff(compare(*seed), "json", baseline="a", current="b"))
    bad = copy.deepcopy(report)
    bad["findings"][0]["change"] = "modified"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_text_grouped_by_severity_invalidating_first(seed):
    text = render_diff(compare(*seed), "text", baseline="a", current="b")
    assert text.index("INVALIDATING") < text.index("WARNING") < text.index("INFO")
    assert 'dsa.devices.dsa0.wqs."wq0.0".state: "disabled" -> "enabled"  (' in text
    assert "\x1b[" not in text
    assert "\x1b[1;31mINVALIDATING" in render_diff(compare(*seed), "text", baseline="a", current="b", color=True)


def test_markdown_is_a_review_table(seed):
    md = render_diff(compare(*seed), "markdown", baseline="a|b", current="c")
    lines = md.splitlines()
    assert lines[0].startswith("### hoststate diff: :x: invalidating")
    header = next(i for i, line in enumerate(lines) if line.startswith("| severity"))
    rows = lines[header + 2:]
    assert rows and all(r.startswith("| **") and r.count(" | ") >= 5 for r in rows)
    assert "a\\|b" in md  # pipes escaped so the table keeps its columns
    clean = render_diff(compare(seed[0], seed[0]), "markdown", baseline="a", current="a")
    assert ":white_check_mark: clean" in clean and "No findings." in clean


def test_unknown_format_is_an_error(seed):
    with pytest.raises(ValueError):
        render_diff(compare(*seed), "yaml", baseline="a", current="b")
