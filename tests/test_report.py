"""Report rendering: JSON validates against docs/diff-report.schema.json; text grouping; Markdown table."""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest

from hoststate.diff import DiffResult, Finding, compare
from hoststate.policy import RANK
from hoststate.render.diff import render_diff
from hoststate.render.findings import finding_line, finding_lines
from hoststate.render.summary import headline, summarize
from hoststate.render.text import WIDTH, clip
from hoststate.snapshot import load
from tests.conftest import FIXTURES, REPO

SCHEMA = json.loads((REPO / "docs" / "diff-report.schema.json").read_text())
SEED_B, SEED_E = (str(FIXTURES / "snapshots" / n) for n in ("seed-baseline.toml", "seed-experiment.toml"))
H200 = str(FIXTURES / "real" / "h200-snapshot.toml")


@pytest.fixture(scope="module")
def seed():
    return load(SEED_B), load(SEED_E)


#: The README's seed scenario: the same server command, with -O1 on the baseline side only.
SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384"


def snap_tree(tree: str, cmd: str) -> dict:
    """A snapshot of a fixture host tree as `hoststate snap --root TREE --vllm-cmd CMD` writes it."""
    from hoststate.capture import collect
    from hoststate.collectors import Context
    from hoststate.snapshot import loads, to_toml

    ctx = Context(root=str(FIXTURES / "hosts" / tree), vllm_cmd=cmd, vllm_version="0.12.0")
    return loads(to_toml(collect(ctx)), tree)


@pytest.fixture(scope="module")
def readme_seed():
    return snap_tree("seed-baseline", SERVE + " -O1"), snap_tree("seed-experiment", SERVE)


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
    assert text.index("INVALIDATING (") < text.index("WARNING (") < text.index("INFO (")
    assert '8 x dsa.devices.*.wqs.*.state: "disabled" -> "enabled"' in text  # one line per rule, with its count
    assert 'dsa.devices.dsa0.wqs."wq0.0".state' not in text  # every finding only with -v
    assert "\x1b[" not in text
    assert "\x1b[1;31mINVALIDATING" in render_diff(compare(*seed), "text", baseline="a", current="b", color=True)
    full = render_diff(compare(*seed), "text", baseline="a", current="b", verbose=True)
    listed = {line.split(":")[0].strip() for line in full.splitlines() if line.startswith("      dsa.devices.")}
    assert len(listed) > 40 and 'dsa.devices.dsa0.wqs."wq0.0".state' in listed


def test_every_finding_is_in_the_verbose_report(seed):
    """Oracle: the JSON finding list; each path appears in the -v text and the -v Markdown."""
    for a, b in (seed, seed[::-1], (load(H200), seed[1]), (seed[1], load(H200))):
        result = compare(a, b, include_ignored=True)
        text = render_diff(result, "text", baseline="a", current="b", verbose=True)
        md = render_diff(result, "markdown", baseline="a", current="b", verbose=True)
        for f in json.loads(render_diff(result, "json", baseline="a", current="b"))["findings"]:
            assert f["path"] in text and f"`{f['path']}`" in md, f["path"]


def test_seed_diff_opens_with_the_three_facts(readme_seed):
    seed = readme_seed
    text = render_diff(compare(*seed), "text", baseline="a", current="b")
    first = text.splitlines()[:3]
    assert first[0].startswith("INVALIDATING") and "dsa0, dsa2: 8 WQs disabled -> enabled" in first[0]
    assert first[1].startswith("INVALIDATING") and "vLLM cudagraph PIECEWISE -> FULL_AND_PIECEWISE" in first[1]
    assert first[2].startswith("WARNING") and "accel-config: live configuration not saved" in first[2]
    md = render_diff(compare(*seed), "markdown", baseline="a", current="b").splitlines()
    bullets = [line for line in md if line.startswith("- **")]
    assert "8 WQs disabled -\\> enabled" not in bullets[0] and "8 WQs disabled -> enabled" in bullets[0]
    assert "cudagraph PIECEWISE -> FULL\\_AND\\_PIECEWISE" in bullets[1]
    assert "live configuration not saved" in bullets[2]
    summary = json.loads(render_diff(compare(*seed), "json", baseline="a", current="b"))["summary"]
    assert [s["subsystem"] for s in summary[:3]] == ["dsa", "vllm", "accel-config"]
    assert sum(s["findings"] for s in summary) == len(compare(*seed).findings)


def test_headline_is_the_most_important_finding_not_the_first_path(readme_seed):
    seed = readme_seed
    refused = [f for f in compare(*seed).findings if f.severity == "invalidating"]
    assert refused[0].path == "dsa.devices.dsa0.driver"  # alphabetically first
    assert headline(refused).startswith("dsa0, dsa2: 8 WQs disabled -> enabled")
    assert headline([f for f in refused if f.path.startswith("vllm.")]).startswith(
        "vLLM cudagraph PIECEWISE -> FULL_AND_PIECEWISE")


@pytest.mark.parametrize("pair", ["seed", "seed-reversed", "h200-vs-seed", "seed-vs-h200"])
@pytest.mark.parametrize("verbose", [False, True])
def test_every_text_line_fits_120_columns(readme_seed, pair, verbose):
    seed = readme_seed
    a, b = {"seed": seed, "seed-reversed": seed[::-1], "h200-vs-seed": (load(H200), seed[1]),
            "seed-vs-h200": (seed[1], load(H200))}[pair]
    result = compare(a, b, include_ignored=verbose)
    text = render_diff(result, "text", baseline=SEED_B, current=H200, verbose=verbose)
    too_wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not too_wide, too_wide[:3]
    assert len(text.splitlines()) > 10


def _argv_finding(old_extra: list[str], new_extra: list[str]) -> Finding:
    base = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"] + [f"--opt-{i}=value-{i}" for i in range(40)]
    return Finding("vllm.argv", "changed", base + old_extra, base + new_extra, "warning", "vllm.argv", "argv")


def test_a_changed_list_shows_the_changed_items_in_text_and_markdown():
    f = _argv_finding(["-O1"], [])
    result = DiffResult([f], "warning", {"invalidating": 0, "warning": 1, "info": 0, "ignore": 0})
    text = render_diff(result, "text", baseline="a", current="b", verbose=True)
    md = render_diff(result, "markdown", baseline="a", current="b", verbose=True)
    assert '-["-O1"] +[]' in text and all(len(line) <= WIDTH for line in text.splitlines())
    assert '-["-O1"] +[]' in md and 'removed `["-O1"]`' in md
    long_items = _argv_finding([f"--removed-{i}" for i in range(30)], ["--compilation-config", '{"level": 3}'])
    lines = finding_lines(long_items)
    assert all(len(line) <= WIDTH for line in lines)
    assert sum(line.strip().startswith("- ") for line in lines) == 30  # every removed item on screen
    assert any('+ "--compilation-config"' in line for line in lines)
    assert finding_line(long_items).count('"--removed-') == 30


def test_middle_clip_keeps_both_ends():
    text = "a" * 100 + "CHANGED" + "z" * 100
    assert clip(text, 40) == "a" * 19 + "..." + "z" * 18 and len(clip(text, 40)) == 40
    assert clip("short", 40) == "short"


def test_markdown_is_a_review_table(seed):
    md = render_diff(compare(*seed), "markdown", baseline="a|b", current="c", verbose=True)
    lines = md.splitlines()
    assert lines[0].startswith("### hoststate diff: :x: invalidating")
    for head in ("| severity | rule |", "| severity | path |"):
        start = next(i for i, line in enumerate(lines) if line.startswith(head))
        rows = [line for line in lines[start + 2:] if line.startswith("|")]
        rows = rows[: next((i for i, r in enumerate(rows) if not r.startswith("| **")), len(rows))]
        assert rows and all(_cells(r) == _cells(lines[start]) for r in rows)
    assert "a\\|b" in md  # pipes escaped so the table keeps its columns
    clean = render_diff(compare(seed[0], seed[0]), "markdown", baseline="a", current="a")
    assert ":white_check_mark: clean" in clean and "No findings." in clean


def _cells(row: str) -> int:
    """Columns of a Markdown table row: unescaped pipes minus the two borders."""
    return len(re.findall(r"(?<!\\)\|", row)) - 1


# -- reports cannot be forged -------------------------------------------------------------------------------------

FORGERIES = [
    "x\nverdict: clean (0 invalidating, 0 warning, 0 info, 0 ignore)",
    "x\r\nverdict: clean",
    "\x1b[2J\x1b[Hverdict: clean",  # clear screen, cursor home
    "\x1b]0;owned\x07title",  # OSC: set the terminal title
    "\x9b31mred",  # C1 CSI
    "\x1b[8mhidden\x1b[0m",
    "a|b|c` | **fake** |",
    "\u202eevil\u2028line",  # bidi override, line separator
]


def _forged_pair(value: str):
    base, cur = load(SEED_B), load(SEED_B)
    cur["vllm"]["model"] = value
    cur["env"]["VLLM_PLUGINS"] = value
    cur["vllm"]["argv"] = [*base["vllm"]["argv"], value]
    cur["env"][value.replace("\n", "_")[:20] or "X"] = value  # a key (path) carrying the payload too
    return base, cur


@pytest.mark.parametrize("value", FORGERIES)
def test_values_cannot_forge_a_text_report(value):
    result = compare(*_forged_pair(value))
    for verbose in (False, True):
        text = render_diff(result, "text", baseline="b\nverdict: clean", current=value, verbose=verbose)
        assert not _CONTROLS.search(text.replace("\n", "")), repr(text)
        assert [line for line in text.splitlines() if line.startswith("verdict:")] == [text.splitlines()[-1]]
        assert text.splitlines()[-1].startswith("verdict: invalidating")
        assert all(len(line) <= WIDTH for line in text.splitlines())


@pytest.mark.parametrize("value", FORGERIES)
def test_values_cannot_forge_a_markdown_report(value):
    result = compare(*_forged_pair(value))
    md = render_diff(result, "markdown", baseline="b", current="c|d", verbose=True)
    assert not _CONTROLS.search(md.replace("\n", "")), repr(md)
    lines = md.splitlines()
    for head in ("| severity | rule |", "| severity | path |"):
        start = next(i for i, line in enumerate(lines) if line.startswith(head))
        rows = [line for line in lines[start + 2:] if line.startswith("| **")]
        assert rows and all(_cells(r) == _cells(lines[start]) for r in rows), rows
    assert not any(line.startswith(("verdict", "### hoststate diff: :white_check_mark:")) for line in lines)
    assert "<" not in md.replace("<details>", "").replace("</details>", "").replace("<summary>", "").replace(
        "</summary>", "").replace("\\<", "")


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def test_unknown_format_is_an_error(seed):
    with pytest.raises(ValueError):
        render_diff(compare(*seed), "yaml", baseline="a", current="b")


def test_gpu_summary_names_gpus_that_came_and_went():
    # GPUs compare by position: the board at index 0 is gone, another at index 1 (another bus id) came
    a = load(H200)
    b = copy.deepcopy(a)
    (dev,) = b["gpu"]["devices"].values()
    b["gpu"]["devices"] = {"GPU-other": {**dev, "uuid": "GPU-other", "index": 1, "pci_bus_id": "00000000:00:07.0"}}
    gone, came = "GPU0", "GPU1"
    lines = [s for s in summarize(compare(a, b).findings) if s.subsystem == "gpu"]
    assert len(lines) == 1 and lines[0].severity == "invalidating"
    assert f"1 GPU removed ({gone})" in lines[0].text and f"1 GPU added ({came})" in lines[0].text


def test_summary_accounts_for_every_finding(readme_seed):
    """Oracle: the finding list; the summary lines cover each finding exactly once, each line its most severe."""
    for a, b in (readme_seed, readme_seed[::-1], (load(H200), readme_seed[1])):
        findings = compare(a, b, include_ignored=True).findings
        lines = summarize(findings)
        assert sum(s.findings for s in lines) == len(findings)
        ranks = [RANK[s.severity] for s in lines]
        assert ranks == sorted(ranks)
        assert all(len(s.text) <= WIDTH - 14 for s in lines)
