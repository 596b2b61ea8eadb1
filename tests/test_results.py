"""hoststate results: every cell of a sweep carries a verified record (bound to its result's content and its
sidecar) or the sweep is refused; cells are grouped by host state against the baseline they were guarded against;
with --metric, what moved between the host states and which host change moved it. Sweeps are generated from the
seed's snapshots (tests.sweeps): one host change at a time, alone and together, with metrics that move and not."""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import pytest

from hoststate.errors import InputError
from hoststate.render.results import render_text
from hoststate.results import check_results
from hoststate.run.record import MAX_DEPTH, content_digest, file_digest, json_depth, load_objects, text_digest
from hoststate.snapshot import to_toml
from tests.conftest import FIXTURES, PACKAGE, PYTHONPATH, REPO, require
from tests.sweeps import CHANGES, NO_GPU, SEED, host, write_cell

EXPERIMENT = "results/20261203_120000/SERVE--default-BENCH--rate-inf"
O1 = "results/20261203_120000/SERVE--O1-BENCH--rate-inf"


def hs(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hoststate", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})


def validate(instance: object) -> None:
    schema = json.loads((REPO / "docs" / "schemas" / "results.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(instance)


@pytest.fixture
def sweep(tmp_path: pathlib.Path) -> pathlib.Path:
    """The seed's sweep: three runs on the host as baselined, then a resumed run after the DSA and graph change."""
    base = host()
    write_cell(tmp_path, f"{EXPERIMENT}/run=0.json", base, {"output_throughput": 1001.0})
    write_cell(tmp_path, f"{EXPERIMENT}/run=1.json", base, {"output_throughput": 1005.0})
    write_cell(tmp_path, f"{O1}/run=0.json", base, {"output_throughput": 1010.0})
    write_cell(tmp_path, f"{EXPERIMENT}/run=2.json", SEED["experiment"], {"output_throughput": 1355.0})
    return tmp_path / "results"


# -- the sweep as a whole -----------------------------------------------------------------------------------------


def test_the_seed_sweep_is_refused(sweep: pathlib.Path) -> None:
    proc = hs("results", str(sweep), cwd=sweep.parent)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "hoststate results: 4 cell(s), 2 host state(s): refused: results from hosts that do not match"
    assert lines[1].startswith("  A reference (baseline <baseline>): sha256:4acbaa1bfd34, 3 cell(s)")
    assert "  MISMATCH    20261203_120000/SERVE--default-BENCH--rate-inf/run=2.json  (host state B)" in lines
    # every subsystem that separates the host states is named under the group, not only the first
    assert "      dsa0, dsa1: 8 WQs disabled -> enabled (+24 derived settings)" in lines
    assert any(line.startswith("      vLLM cudagraph PIECEWISE -> FULL_AND_PIECEWISE") for line in lines)


def test_json_validates_and_names_every_finding(sweep: pathlib.Path) -> None:
    proc = hs("results", str(sweep), "--format", "json", "--metric", "output_throughput", cwd=sweep.parent)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    validate(report)
    assert report["verdict"] == "refused"
    assert report["reference"]["digest"] == SEED["baseline"]["hoststate"]["digest"]
    assert report["reference"]["from"] == "baseline"
    other = report["groups"][1]
    assert other["cells"] == ["20261203_120000/SERVE--default-BENCH--rate-inf/run=2.json"]
    paths = {f["path"] for f in other["findings"]}
    assert any(p.startswith("dsa.devices.dsa0.wqs.") and p.endswith(".state") for p in paths)
    assert "vllm.cudagraph.declared" in paths
    assert [s["subsystem"] for s in other["summary"]] == ["dsa", "vllm"]


def test_markdown_names_the_groups_and_the_shift(sweep: pathlib.Path) -> None:
    proc = hs("results", str(sweep), "--format", "markdown", "--metric", "output_throughput", cwd=sweep.parent)
    assert proc.returncode == 1
    assert proc.stdout.startswith("### hoststate results: :x: refused: results from hosts that do not match\n")
    # read within SERVE--default (1001, 1005 -> 1355); the SERVE--O1 cell ran other server arguments
    assert "output\\_throughput 1003 -> 1355 (+35.1 %)" in proc.stdout
    assert "cannot be separated by this sweep" in proc.stdout


def test_resuming_on_a_changed_host_is_refused(sweep: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Before `vllm bench sweep serve --resume`: the host about to run the rest against the cells already there."""
    current = tmp_path / "now.toml"
    current.write_text(to_toml(SEED["experiment"]))
    report = check_results([str(sweep)], current=SEED["experiment"], current_name=str(current))
    assert report.reference.source == "current"
    assert sorted(c.path.rsplit("results/", 1)[1] for g in report.mismatched for c in g.cells) == [
        "20261203_120000/SERVE--O1-BENCH--rate-inf/run=0.json",
        "20261203_120000/SERVE--default-BENCH--rate-inf/run=0.json",
        "20261203_120000/SERVE--default-BENCH--rate-inf/run=1.json",
    ]
    proc = hs("results", str(sweep), "--current", str(current), cwd=tmp_path)
    assert proc.returncode == 1 and f"reference (--current {current})" in proc.stdout


def test_one_host_state_is_comparable(tmp_path: pathlib.Path) -> None:
    write_cell(tmp_path, "sweep/a/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(tmp_path, "sweep/a/run=1.json", host(), {"output_throughput": 990.0}, verdict="degraded",
               reasons=({"verdict": "degraded", "text": "vLLM preempted requests: 4"},), indent=None)
    proc = hs("results", "sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[0] == "hoststate results: 2 cell(s), 1 host state(s): comparable"
    assert "  DEGRADED    a/run=1.json\n      vLLM preempted requests: 4\n" in proc.stdout


def test_an_invalid_run_is_refused(tmp_path: pathlib.Path) -> None:
    write_cell(tmp_path, "sweep/run=0.json", host(), {})
    write_cell(tmp_path, "sweep/run=1.json", host(), {}, verdict="invalid",
               reasons=({"verdict": "invalid", "text": "a GPU reported an XID error during the run: 1"},))
    report = check_results([str(tmp_path / "sweep")])
    assert report.refused and not report.mismatched and not report.refused_cells
    assert report.reasons == ["runs judged invalid"]


def test_unwatched_cells_are_kept_apart(tmp_path: pathlib.Path) -> None:
    """A run judged unwatched, and one stamped clean by a watch that sampled no GPU ("0 samples of 0 GPU(s)")."""
    write_cell(tmp_path, "sweep/run=0.json", host(), {})
    write_cell(tmp_path, "sweep/run=1.json", host(), {}, verdict="unwatched", watched=NO_GPU)
    write_cell(tmp_path, "sweep/run=2.json", host(), {}, watched=NO_GPU)
    report = check_results([str(tmp_path / "sweep")])
    assert NO_GPU["gpus"] == [] and NO_GPU["gpu_status"].startswith("absent")
    assert [(g.watched, len(g.cells)) for g in report.groups] == [(True, 1), (False, 2)]
    assert report.reasons == ["cells not watched"]
    assert "      not watched: the GPU sampler did not run" in render_text(report)


def test_no_result_is_bad_input(tmp_path: pathlib.Path) -> None:
    proc = hs("results", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("hoststate: no result file found")


# -- the reference is the baseline, never the majority ------------------------------------------------------------


def test_accepted_cells_never_outvote_the_comparable_one(tmp_path: pathlib.Path) -> None:
    """Two cells that guard ran non-comparable (their DSA change accepted) and one comparable cell: the reference
    is the baseline they were all guarded against, so the two are the mismatch."""
    write_cell(tmp_path, "sweep/run=0.json", host(), {})
    write_cell(tmp_path, "sweep/run=1.json", host("dsa"), {})
    write_cell(tmp_path, "sweep/run=2.json", host("dsa"), {})
    report = check_results([str(tmp_path / "sweep")])
    assert report.reference.digest == host()["hoststate"]["digest"]
    assert [os.path.basename(c.path) for g in report.mismatched for c in g.cells] == ["run=1.json", "run=2.json"]


def test_no_cell_on_the_baseline_names_the_accepted_drift(tmp_path: pathlib.Path) -> None:
    write_cell(tmp_path, "sweep/run=0.json", host("dsa"), {})
    report = check_results([str(tmp_path / "sweep")])
    assert report.refused and report.groups[0].compared == "accepted"
    text = render_text(report)
    assert f"reference (baseline <baseline>): {host()['hoststate']['digest'][:19]}, no cell ran on it" in text
    assert "dsa0, dsa1: 8 WQs disabled -> enabled" in text


def test_cells_guarded_against_two_baselines_have_no_reference(tmp_path: pathlib.Path) -> None:
    """A 1-vs-1 split is never broken silently: no reference, refused, until --current names one."""
    write_cell(tmp_path, "sweep/run=0.json", host(), {}, baseline=host())
    write_cell(tmp_path, "sweep/run=1.json", host("dsa"), {}, baseline=host("dsa"))
    report = check_results([str(tmp_path / "sweep")])
    assert report.reference.source == "ambiguous" and report.reference.digest == ""
    assert report.reasons[0] == "cells guarded against 2 baselines"
    assert "no reference: the cells were guarded against different baselines" in render_text(report)
    chosen = check_results([str(tmp_path / "sweep")], current=host("dsa"))
    assert [os.path.basename(c.path) for g in chosen.mismatched for c in g.cells] == ["run=0.json"]


# -- every cell verified, or the sweep refused --------------------------------------------------------------------


def _sweep_with(tmp_path: pathlib.Path) -> pathlib.Path:
    write_cell(tmp_path, "sweep/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(tmp_path, "sweep/run=1.json", host(), {"output_throughput": 1001.0})
    return tmp_path / "sweep"


def _edit_json(path: pathlib.Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=4))


def _swap_snapshot(side: dict) -> None:
    """The sidecar's snapshot replaced by another host's, its sha256 rewritten to match in both copies."""
    text = to_toml(host("dsa"))
    side["snapshot"], side["snapshot_sha256"] = text, text_digest(text)


CORRUPTIONS = {
    "a list (summary.json)": ("run=1.json", lambda p: p.write_text("[]"), "not a JSON object (list)"),
    "not JSON": ("run=1.json", lambda p: p.write_text("{\"completed\": "), "not JSON (Expecting value"),
    "nested 5000 deep": ("run=1.json", lambda p: p.write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}"),
                         f"JSON nested deeper than {MAX_DEPTH} levels"),
    "a trace": ("run=1.json", lambda p: shutil.copy(FIXTURES / "watch" / "h200-idle.json", p),
                "a hoststate file (hoststate-watch-trace/1), not a result"),
    "a sidecar named as a result": ("run=1.json", lambda p: shutil.copy(p.with_name("run=0.hoststate.json"), p),
                                    "a hoststate file (hoststate-run/1), not a result"),
    "no record": ("run=1.json", lambda p: p.write_text('{"completed": 3}'), "no hoststate record"),
    "result edited": ("run=1.json", lambda p: _edit_json(p, lambda d: d.update(output_throughput=1400.0)),
                      "result changed after its record was attached"),
    "record moved from another cell": (
        "run=1.json",
        lambda p: _edit_json(p, lambda d: d.update(hoststate=json.loads(p.with_name("run=0.json").read_text())
                                                   ["hoststate"])),
        "result changed after its record was attached"),
    "verdict edited": ("run=1.json", lambda p: _edit_json(p, lambda d: d["hoststate"].update(verdict="invalid")),
                       "record differs from its sidecar's copy (verdict)"),
    "unbound record": ("run=1.json", lambda p: _edit_json(p, lambda d: d["hoststate"].pop("result_sha256")),
                       "record not bound to its content (no result_sha256; attached by an older hoststate)"),
    "sidecar missing": ("run=1.hoststate.json", os.unlink, "its sidecar run=1.hoststate.json is missing"),
    "sidecar snapshot edited": (
        "run=1.hoststate.json",
        lambda p: _edit_json(p, lambda d: d.update(snapshot=d["snapshot"].replace("6.8.0-60", "6.8.0-61"))),
        "sidecar snapshot changed after the run"),
    "sidecar snapshot swapped, its digests rewritten": (
        "run=1.hoststate.json", lambda p: _edit_json(p, _swap_snapshot),
        "record differs from its sidecar's copy (snapshot_sha256)"),
    "sidecar alone": ("run=1.json", os.unlink, "a sidecar without its result run=1.json"),
    "attach failed": ("run=1.hoststate.json",
                      lambda p: (_edit_json(p, lambda d: d.update(attach_error="run=1.json: holds no JSON object")),
                                 p.with_name("run=1.json").write_text('{"completed": 3}')),
                      "no hoststate record; its sidecar says: run=1.json: holds no JSON object"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_cell_without_a_verified_record_refuses_the_sweep(tmp_path: pathlib.Path, case: str) -> None:
    sweep = _sweep_with(tmp_path)
    name, corrupt, problem = CORRUPTIONS[case]
    corrupt(sweep / name)
    proc = hs("results", str(sweep), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout
    report = json.loads(proc.stdout)
    validate(report)
    [refused] = report["refused"]
    assert refused["cell"] in ("run=1.json", "run=1.hoststate.json")
    assert refused["problem"].startswith(problem), refused["problem"]
    text = hs("results", str(sweep), cwd=tmp_path).stdout
    assert f"  UNVERIFIED  {refused['cell']}\n      {problem}" in text


def test_a_snapshot_whose_host_digest_is_not_the_records_is_refused(tmp_path: pathlib.Path) -> None:
    """Sidecar and both records rewritten consistently to another host's snapshot: the recomputed host digest
    still contradicts the record's."""
    sweep = _sweep_with(tmp_path)
    side = sweep / "run=1.hoststate.json"
    text = to_toml(host("dsa"))
    for path in (side, sweep / "run=1.json"):
        _edit_json(path, lambda d: (d if "snapshot" in d else d["hoststate"]).update(snapshot_sha256=text_digest(text)))
    _edit_json(side, lambda d: d.update(snapshot=text))
    [refused] = check_results([str(sweep)]).refused_cells
    theirs, ours = host("dsa")["hoststate"]["digest"][:19], host()["hoststate"]["digest"][:19]
    assert refused["problem"] == f"sidecar snapshot's host digest {theirs} is not the record's {ours} (edited)"


def test_a_hostile_file_name_cannot_forge_the_report(tmp_path: pathlib.Path) -> None:
    sweep = _sweep_with(tmp_path)
    (sweep / "run=2\x1b[2J\nhoststate results: comparable.json").write_text('{"completed": 3}')
    text = render_text(check_results([str(sweep)]), str(sweep))
    assert "\x1b" not in text and "\nhoststate results: comparable" not in text
    assert "  UNVERIFIED  run=2\\e[2J\\nhoststate results: comparable.json\n" in text


def test_ignore_leaves_a_file_out_and_says_so(tmp_path: pathlib.Path) -> None:
    sweep = _sweep_with(tmp_path)
    (sweep / "summary.json").write_text("[]")
    assert hs("results", str(sweep), cwd=tmp_path).returncode == 1
    proc = hs("results", str(sweep), "--ignore", "summary.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert "  ignored (--ignore): summary.json\n" in proc.stdout
    proc = hs("results", str(sweep), "--ignore", "summary.json", "--ignore", "run=1.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout  # the sidecar of an ignored result goes with it
    assert "  ignored (--ignore): run=1.hoststate.json, run=1.json, summary.json\n" in proc.stdout


def test_a_cell_unreadable_to_the_caller_refuses(tmp_path: pathlib.Path) -> None:
    """Another local user (nobody) checks a sweep holding a result only root can read: refused, named."""
    require(os.geteuid() == 0, "only root can run the check as another user (CI runs as root)")
    top = pathlib.Path(tempfile.mkdtemp(prefix="hs-results-"))
    try:
        top.chmod(0o755)
        sweep = _sweep_with(top)
        for p in sweep.parent.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        (sweep / "run=1.json").chmod(0o600)
        # the package under test (installed or the checkout's), where nobody can read it
        shutil.copytree(PACKAGE, top / "pkg" / "hoststate", ignore=shutil.ignore_patterns("__pycache__"))
        for p in (top / "pkg").rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        (top / "pkg").chmod(0o755)
        proc = subprocess.run(["/usr/bin/python3", "-c", "import sys\nfrom hoststate.results import check_results\n"
                               "r = check_results([sys.argv[1]])\nprint(r.refused_cells)\nsys.exit(r.exit_code)",
                               str(sweep)], capture_output=True, text=True, timeout=120, user=65534, group=65534,
                              extra_groups=[], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(top / "pkg")})
        require("No module named" not in proc.stderr, f"hoststate's dependencies for /usr/bin/python3: {proc.stderr}")
        assert proc.returncode == 1, proc.stderr
        assert "run=1.json', 'problem': 'cannot read result: Permission denied'" in proc.stdout
    finally:
        shutil.rmtree(top)


# -- bounded parsing, digests ---------------------------------------------------------------------------------------


def test_json_depth_counts_brackets_outside_strings_only() -> None:
    assert json_depth('{"a": [1, {"b": "[[[[{{"}]}') == 3
    assert json_depth('"\\"[["') == 0
    assert json_depth("[" * 10_000, limit=100) == 101  # stops at the limit
    with pytest.raises(InputError, match="nested deeper than 100 levels"):
        load_objects("[" * 100_000 + "]" * 100_000, "deep.json")
    assert load_objects('{"a": 1}\n{"a": 2}\n', "append.json") == [{"a": 1}, {"a": 2}]


def test_content_digest_is_the_content_not_its_layout(tmp_path: pathlib.Path) -> None:
    a = {"completed": 100, "output_throughput": 1355.25, "nan": float("nan"), "text": "h\u00e9"}
    same = json.loads(json.dumps(dict(reversed(list(a.items()))), indent=4))
    assert content_digest(a) == content_digest(same) == content_digest({**a, "hoststate": {"verdict": "clean"}})
    assert content_digest(a) != content_digest({**a, "output_throughput": 1355.26})
    (tmp_path / "f").write_bytes(b"x")
    assert file_digest(str(tmp_path / "f")) == text_digest("x")


# -- what moved: generated sweeps -----------------------------------------------------------------------------------


def _explained(tmp_path: pathlib.Path, cells: dict[tuple[str, ...], list[dict]], metrics=("output_throughput",)):
    for changes, values in cells.items():
        for i, v in enumerate(values):
            write_cell(tmp_path, f"sweep/{'+'.join(changes) or 'base'}/run={i}.json", host(*changes), v)
    report = check_results([str(tmp_path / "sweep")], metrics=list(metrics))
    return report, render_text(report, str(tmp_path / "sweep"))


def _tput(*values: float, ttft: float = 50.0) -> list[dict]:
    return [{"output_throughput": v, "mean_ttft_ms": ttft + i} for i, v in enumerate(values)]


def test_each_change_alone_and_together_gets_its_own_effect(tmp_path: pathlib.Path) -> None:
    """DSA alone, the graph mode alone, and both: the graph mode moved the throughput, DSA did not; TTFT moved
    with neither."""
    report, text = _explained(tmp_path, {(): _tput(1000, 1004, 1008), ("dsa",): _tput(1001, 1006, 1009),
                                         ("vllm",): _tput(1350, 1355, 1360), ("dsa", "vllm"): _tput(1352, 1356)},
                              metrics=("output_throughput", "mean_ttft_ms"))
    exp = report.explanation
    validate(report.to_dict())
    by_subsystem = {c["subsystem"]: c["id"] for c in exp["changes"]}
    assert set(by_subsystem) == {"dsa", "vllm"}
    units = {tuple(u["changes"]): u for u in exp["units"]}
    assert not any(u["together"] for u in exp["units"])
    dsa, vllm = units[(by_subsystem["dsa"],)], units[(by_subsystem["vllm"],)]
    assert {(e["from"], e["to"]) for e in dsa["effects"]} == {("A", "B"), ("C", "D")}  # A base, B dsa, C vllm
    assert all(e["metrics"]["output_throughput"]["moved"] is False for e in dsa["effects"])
    assert all(e["metrics"]["output_throughput"]["moved"] is True for e in vllm["effects"])
    assert all(e["metrics"]["mean_ttft_ms"]["moved"] is False for u in exp["units"] for e in u["effects"])
    assert "      output_throughput 1004 -> 1355 (+35.0 %)  (A -> C)" in text
    assert "      output_throughput 1004 -> 1006 (+0.2 %, within the cells' spread)  (A -> B)" in text
    assert "cannot separate" not in text


def test_changes_that_always_came_together_are_said_inseparable(tmp_path: pathlib.Path) -> None:
    """The kernel and torch changed together in every cell that has either; DSA changed alone."""
    report, text = _explained(tmp_path, {(): _tput(1000, 1002), ("system", "packages"): _tput(1200, 1210),
                                         ("dsa",): _tput(1001, 1003)})
    exp = report.explanation
    [together] = [u for u in exp["units"] if u["together"]]
    subsystems = {c["id"]: c["subsystem"] for c in exp["changes"]}
    assert {subsystems[c] for c in together["changes"]} == {"system", "packages"}
    assert together["would_separate"] == ("a cell as in C with the system change and without the packages one (or the "
                                         "reverse) would separate them")
    assert [e["metrics"]["output_throughput"]["shift_pct"] for e in together["effects"]] == [20.4]
    assert "  these 2 changes always came together (group C): this sweep cannot separate them" in text
    assert "    system: kernel.release \"6.8.0-60-generic\" -> \"6.11.0-29-generic\"" in text
    assert "vllm" not in {c["subsystem"] for c in exp["changes"]}  # never named: it did not differ


def test_a_change_in_every_cell_is_not_measured_without_the_reference(tmp_path: pathlib.Path) -> None:
    """No cell ran on the baseline: DSA changed in every cell (named, against the baseline, but not measured),
    the graph mode between two of the sweep's host states (measured)."""
    report, text = _explained(tmp_path, {("dsa",): _tput(1000, 1004), ("dsa", "vllm"): _tput(1350, 1354)})
    exp = report.explanation
    assert exp["reference_group"] is None
    assert all(g["metrics"]["output_throughput"]["shift_pct"] is None for g in exp["groups"])
    units = {exp["changes"][int(u["changes"][0][1:]) - 1]["subsystem"]: u for u in exp["units"]}
    assert units["dsa"]["in_every_group"] and not units["dsa"]["effects"]
    assert units["dsa"]["would_separate"] == ("every cell of the sweep has it: only a cell on the reference host "
                                              "state would measure it")
    assert [(e["from"], e["to"], e["metrics"]["output_throughput"]["shift_pct"]) for e in units["vllm"]["effects"]] \
        == [("B", "A", 34.9)]  # A: dsa+vllm (first by name), B: dsa
    assert "output_throughput 1002 -> 1352 (+34.9 %)  (B -> A)" in text


@pytest.mark.parametrize("changes", [c for n in (1, 2, 3) for c in itertools.combinations(sorted(CHANGES), n)])
def test_only_changes_that_differ_are_named(tmp_path: pathlib.Path, changes: tuple[str, ...]) -> None:
    """Every combination of up to three host changes against the baseline: the explanation names exactly the
    subsystems changed, every one of them, and the metric's shift."""
    report, text = _explained(tmp_path, {(): _tput(1000), changes: _tput(1100)})
    named = {c["subsystem"] for c in report.explanation["changes"]}
    assert named == set(changes)
    assert "  B" in text and "output_throughput 1000 -> 1100 (+10.0 %)" in text
    [unit] = report.explanation["units"]
    assert unit["together"] == (len(changes) > 1)


def test_a_subsystem_unreadable_alike_in_both_groups_is_never_named(tmp_path: pathlib.Path) -> None:
    """DSA denied in every cell (the diff rates an unreadable table invalidating, failing closed): it did not differ
    between the groups, so only the vLLM change is named."""
    for name, changes, tput in (("base", ("dsa-denied",), 1000.0), ("vllm", ("dsa-denied", "vllm"), 1300.0)):
        write_cell(tmp_path, f"sweep/{name}/run=0.json", host(*changes), {"output_throughput": tput},
                   baseline=host("dsa-denied"))
    report = check_results([str(tmp_path / "sweep")], metrics=["output_throughput"])
    assert [c["subsystem"] for c in report.explanation["changes"]] == ["vllm"]
    assert "DSA" not in render_text(report) and "dsa" not in render_text(report)


def test_a_misspelt_metric_is_bad_input(sweep: pathlib.Path) -> None:
    proc = hs("results", str(sweep), "--metric", "output_thruput", cwd=sweep.parent)
    assert proc.returncode == 2
    assert "--metric output_thruput: no verified cell has a number under that key" in proc.stderr


# -- what moved: a sweep's own parameters and its warmup are never a host change's effect -------------------------


def _vllm_cell(root: pathlib.Path, rel: str, changes: tuple[str, ...], tput: float, *, rate: float = 1.0,
               prompts: int = 100, run_number: int | None = None) -> None:
    """A cell as vLLM's bench serve writes it (its settings keys: vllm/benchmarks/serve.py ``result_json``), with
    the ``run_number`` that vllm bench sweep serve's ``_update_run_data`` adds."""
    values: dict = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": prompts, "request_rate": rate,
                    "burstiness": 1.0, "max_concurrency": None, "output_throughput": tput}
    if run_number is not None:
        values["run_number"] = run_number
    write_cell(root, rel, host(*changes), values)


def test_a_sweep_parameter_is_never_read_as_a_host_changes_effect(tmp_path: pathlib.Path) -> None:
    """vllm bench sweep serve ran request rate 1 on the baseline host, then rate 8 after DSA was enabled: the
    throughput moved with the rate, and no cell measured DSA at the same rate, so no effect is claimed."""
    exp = tmp_path / "sweep" / "20261203_120000"
    for i, tput in enumerate((100.0, 101.0, 102.0)):
        _vllm_cell(exp, f"BENCH--request_rate=1/run={i}.json", (), tput, rate=1.0, run_number=i)
    for i, tput in enumerate((800.0, 805.0, 810.0)):
        _vllm_cell(exp, f"BENCH--request_rate=8/run={i}.json", ("dsa",), tput, rate=8.0, run_number=i)
    report = check_results([str(tmp_path / "sweep")], metrics=["output_throughput"])
    validate(report.to_dict())
    exp_ = report.explanation
    [unit] = exp_["units"]
    assert [e["metrics"]["output_throughput"]["shift_pct"] for e in unit["effects"]] == [None]
    assert [e["metrics"]["output_throughput"]["moved"] for e in unit["effects"]] == [None]
    dsa_group = next(g for g in exp_["groups"] if not g["reference"])
    assert dsa_group["metrics"]["output_throughput"]["shift_pct"] is None
    text = render_text(report, str(tmp_path / "sweep"))
    assert "+697" not in text and "no cell of the same benchmark settings ran on both host states" in text


def test_a_host_change_is_measured_setting_by_setting(tmp_path: pathlib.Path) -> None:
    """Both request rates ran before and after DSA was enabled, but more of the rate-8 cells after: DSA moved
    neither rate, which a median over both rates (+78 %) would hide."""
    for name, changes, cells in (("before", (), [(1.0, 100.0), (1.0, 101.0), (8.0, 800.0), (8.0, 805.0)]),
                                 ("after", ("dsa",), [(1.0, 101.0), (8.0, 801.0), (8.0, 803.0), (8.0, 806.0)])):
        for i, (rate, tput) in enumerate(cells):
            _vllm_cell(tmp_path, f"sweep/{name}/r{rate:g}-{i}.json", changes, tput, rate=rate)
    report = check_results([str(tmp_path / "sweep")], metrics=["output_throughput"])
    validate(report.to_dict())
    [unit] = report.explanation["units"]
    [effect] = unit["effects"]
    shift = effect["metrics"]["output_throughput"]
    assert abs(shift["shift_pct"]) < 1 and shift["moved"] is False
    text = render_text(report, str(tmp_path / "sweep"))
    assert "+78" not in text and "2 benchmark settings" in text


def test_a_sweeps_warmup_is_not_a_measurement(tmp_path: pathlib.Path) -> None:
    """vLLM 0.33's sweep writes its warmup (``--warmup-num-prompts``) as ``warmup.json`` with run_number -1 and
    leaves it out of summary.json and summary.csv: its numbers must not widen a group's spread, which here would
    hide the +30 % the graph mode moved."""
    for name, changes, warm, runs in (("before", (), 200.0, (1000.0, 1010.0, 990.0)),
                                      ("after", ("vllm",), 210.0, (1300.0, 1310.0, 1290.0))):
        comb = f"sweep/{name}/SERVE--max_num_seqs=64"
        _vllm_cell(tmp_path, f"{comb}/warmup.json", changes, warm, prompts=10, run_number=-1)
        for i, tput in enumerate(runs):
            _vllm_cell(tmp_path, f"{comb}/run={i}.json", changes, tput, run_number=i)
    report = check_results([str(tmp_path / "sweep")], metrics=["output_throughput"])
    validate(report.to_dict())
    groups = report.explanation["groups"]
    assert [g["metrics"]["output_throughput"]["n"] for g in groups] == [3, 3]
    assert [g["metrics"]["output_throughput"]["min"] for g in groups] == [990.0, 1290.0]
    [unit] = report.explanation["units"]
    assert [e["metrics"]["output_throughput"]["moved"] for e in unit["effects"]] == [True]
    assert len(report.groups[0].cells) == 4  # still a cell of the host state: checked, only not measured


def _sla_sweep(root: pathlib.Path) -> pathlib.Path:
    """A ``vllm bench sweep serve_sla`` experiment as 0.12.0 writes it (serve_sla.py): each value tried in its
    folder (``request_rate=N/run=K.json`` and that iteration's summary.json), and the search's runs, every
    iteration's, listed in ``SLA--<sla>.json`` beside them."""
    base = root / "20261203_120000" / "SERVE--max_num_seqs=64"
    runs = []
    for rate, tputs in ((1, (100.0, 101.0)), (16, (900.0, 905.0))):
        items = []
        for k, tput in enumerate(tputs):
            path = write_cell(base, f"request_rate={rate}/run={k}.json", host(),
                              {"request_rate": float(rate), "output_throughput": tput, "run_number": k,
                               "max_num_seqs": 64})
            items.append(json.loads(path.read_text()))
        (base / f"request_rate={rate}" / "summary.json").write_text(json.dumps(items, indent=4))
        runs += items
    (base / "SLA--p99_ttft_ms<=200.json").write_text(json.dumps(runs, indent=4))
    return root / "20261203_120000"


def test_an_sla_sweeps_own_list_of_its_runs_is_checked_not_refused(tmp_path: pathlib.Path) -> None:
    """Every run of the SLA search verified: the SLA--*.json list is exactly those runs, a checked summary."""
    experiment = _sla_sweep(tmp_path)
    report = check_results([str(experiment)])
    assert report.reasons == [] and report.refused_cells == []
    assert [os.path.basename(p) for p in report.summaries] == ["SLA--p99_ttft_ms<=200.json", "summary.json",
                                                               "summary.json"]


def test_an_sla_list_with_a_number_no_cell_holds_is_refused(tmp_path: pathlib.Path) -> None:
    experiment = _sla_sweep(tmp_path)
    listed = next(experiment.glob("*/SLA--*.json"))
    runs = json.loads(listed.read_text())
    runs[1]["output_throughput"] = 2000.0
    listed.write_text(json.dumps(runs, indent=4))
    report = check_results([str(experiment)])
    assert [(os.path.basename(r["cell"]), r["problem"]) for r in report.refused_cells] == \
        [("SLA--p99_ttft_ms<=200.json", "lists a run that is no verified cell beside it (its entry 2)")]


def test_a_failed_run_is_named_as_one(tmp_path: pathlib.Path) -> None:
    """vLLM 0.33's sweep with --continue-on-error records a failed run as run=N.failure.json (sweep/serve.py
    run_comb, these keys): no numbers to compare, and it was run under guard: the refusal says so and how to go
    on, not that the cell lacks a record."""
    comb = tmp_path / "sweep" / "SERVE--max_num_seqs=64"
    write_cell(comb.parent, "SERVE--max_num_seqs=64/run=0.json", host(), {"output_throughput": 1000.0})
    (comb / "run=1.failure.json").write_text(json.dumps(
        {"run_number": 1, "error_type": "CalledProcessError",
         "error": "Command '['hoststate', 'guard']' returned non-zero exit status 3.",
         "serve_overrides": {"max_num_seqs": 64}, "bench_overrides": {}}, indent=2) + "\n")
    report = check_results([str(tmp_path / "sweep")])
    [refusal] = report.refused_cells
    assert refusal["problem"].startswith("a run that failed, not a result: vllm bench sweep recorded "
                                         "CalledProcessError: Command '['hoststate', 'guard']' returned non-zero")
    assert refusal["problem"].endswith("it has no numbers: run it again, or --ignore it")


def _kv(tokens: int) -> dict:
    """The seed's host with the server's profiled KV cache (vllm.observed): it moves by a few blocks between
    restarts of the same server, which default_policy.toml takes within a 2 % tolerance."""
    snap = host()
    snap["vllm"]["observed"] = {"kv_cache_tokens": tokens, "kv_cache_blocks": tokens // 16}
    from hoststate.digest import digest

    snap["hoststate"]["digest"] = digest(snap)
    return snap


def test_a_difference_within_the_policys_tolerance_is_not_another_host(tmp_path: pathlib.Path) -> None:
    """The server restarted between the cells and profiled a KV cache 0.5 % larger: the digests differ (they hash
    the raw value) but the policy finds no invalidating difference, as guard found none: comparable, the group
    called the same host, and the explanation claims no change. 5 % larger is another host state."""
    before = _kv(1_000_000)
    for name, snap in (("before", before), ("after", _kv(1_005_000))):
        write_cell(tmp_path, f"sweep/{name}/run=0.json", snap, {"output_throughput": 1000.0}, baseline=before)
    report = check_results([str(tmp_path / "sweep")], metrics=["output_throughput"])
    assert len(report.groups) == 2 and report.reasons == [] and report.exit_code == 0
    assert report.explanation["changes"] == [] and report.explanation["units"] == []
    text = render_text(report, str(tmp_path / "sweep"))
    assert "B same host" in text and "no invalidating difference" in text and "MISMATCH" not in text
    write_cell(tmp_path, "sweep/later/run=0.json", _kv(1_050_000), {"output_throughput": 900.0}, baseline=before)
    report = check_results([str(tmp_path / "sweep")])
    assert report.reasons == ["results from hosts that do not match"]
    assert [os.path.basename(os.path.dirname(c.path)) for g in report.mismatched for c in g.cells] == ["later"]
