"""hoststate results: a sweep's cells, each with the record guard --watch --attach merged into it, checked for
one host state. The seed's sweep is replayed from its fixture snapshots: the cells run after the DSA work queues
were enabled by hand are named, with the finding."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from hoststate.guard import evaluate
from hoststate.results import check_results
from hoststate.snapshot import load
from hoststate.watch import Sampler, attach, build_record, load_trace, sidecar_path, write_sidecar
from tests.conftest import FIXTURES, PYTHONPATH

SEED = {name: load(str(FIXTURES / "snapshots" / f"seed-{name}.toml")) for name in ("baseline", "experiment")}
EXPERIMENT = "results/20261203_120000/SERVE--default-BENCH--rate-inf"


def watched_summary() -> dict:
    sampler = Sampler(load_trace(str(FIXTURES / "watch" / "h200-dense-b.json")), interval=30.0,
                      root=str(FIXTURES / "watch")).start()
    return sampler.stop().summary()


def cell(root: pathlib.Path, rel: str, host: str, verdict: str = "clean", reasons: tuple[dict, ...] = ()) -> None:
    """A `vllm bench sweep serve` result (rewritten with indent 4 and run_number) with a record attached as
    guard --watch --attach writes it, for a run on the seed host ``host``."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    run_number = int(path.stem.split("=")[1])
    path.write_text(json.dumps({"date": "20261203-120000", "backend": "vllm", "completed": 100, "failed": 0,
                                "request_throughput": 8.0, "run_number": run_number}, indent=4))
    snap = SEED[host]
    guarded = evaluate(snap, current=snap)
    record = build_record(guarded, watched_summary(), [], verdict, list(reasons), 0, snap, ["vllm", "bench"])
    record["sidecar"] = os.path.basename(sidecar_path(str(path)))
    attach(str(path), record)
    write_sidecar(sidecar_path(str(path)), record, snap)


@pytest.fixture
def sweep(tmp_path: pathlib.Path) -> pathlib.Path:
    """The seed's sweep: three runs on the host as baselined, then a resumed run after the DSA change."""
    cell(tmp_path, f"{EXPERIMENT}/run=0.json", "baseline")
    cell(tmp_path, f"{EXPERIMENT}/run=1.json", "baseline")
    cell(tmp_path, "results/20261203_120000/SERVE--O1-BENCH--rate-inf/run=0.json", "baseline")
    cell(tmp_path, f"{EXPERIMENT}/run=2.json", "experiment")
    (tmp_path / "results/20261203_120000/summary.json").write_text("[]")
    return tmp_path / "results"


def hs(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hoststate", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})


def test_the_seed_sweep_is_refused(sweep: pathlib.Path) -> None:
    proc = hs("results", str(sweep), cwd=sweep.parent)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "hoststate results: 4 cell(s), 2 host state(s): refused: results from hosts that do not match"
    at = [i for i, line in enumerate(lines) if "MISMATCH" in line]
    assert len(at) == 1
    assert lines[at[0]] == "  MISMATCH    20261203_120000/SERVE--default-BENCH--rate-inf/run=2.json"
    assert "WQs disabled -> enabled" in lines[at[0] + 1]
    assert any(line.startswith("  skipped  20261203_120000/summary.json") for line in lines)


def test_json_names_every_finding(sweep: pathlib.Path) -> None:
    proc = hs("results", str(sweep), "--format", "json", cwd=sweep.parent)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["verdict"] == "refused"
    assert report["reference"] == {"digest": SEED["baseline"]["hoststate"]["digest"], "from": "majority"}
    [mismatch] = report["mismatched"]
    assert mismatch["cell"].endswith("SERVE--default-BENCH--rate-inf/run=2.json")
    paths = {f["path"] for f in mismatch["findings"]}
    assert any(p.startswith("dsa.devices.dsa0.wqs.") and p.endswith(".state") for p in paths)
    assert any(p.startswith("vllm.") for p in paths)  # the server's graph mode changed too


def test_resuming_on_a_changed_host_is_refused(sweep: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Before `vllm bench sweep serve --resume`: the host about to run the rest against the cells already there."""
    current = str(FIXTURES / "snapshots" / "seed-experiment.toml")
    report = check_results([str(sweep)], current=SEED["experiment"], current_name=current)
    assert sorted(m["cell"].rsplit("results/", 1)[1] for m in report.mismatched) == [
        "20261203_120000/SERVE--O1-BENCH--rate-inf/run=0.json",
        "20261203_120000/SERVE--default-BENCH--rate-inf/run=0.json",
        "20261203_120000/SERVE--default-BENCH--rate-inf/run=1.json",
    ]
    proc = hs("results", str(sweep), "--current", current, cwd=tmp_path)
    assert proc.returncode == 1 and "reference (" in proc.stdout


def test_one_host_state_is_comparable(tmp_path: pathlib.Path) -> None:
    cell(tmp_path, "sweep/a/run=0.json", "baseline")
    cell(tmp_path, "sweep/a/run=1.json", "baseline", "degraded",
         ({"verdict": "degraded", "text": "vLLM preempted requests: 4"},))
    proc = hs("results", "sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[0] == "hoststate results: 2 cell(s), 1 host state(s): comparable"
    assert "  DEGRADED    a/run=1.json\n      vLLM preempted requests: 4\n" in proc.stdout


def test_an_invalid_run_or_a_cell_without_a_record_is_refused(tmp_path: pathlib.Path) -> None:
    cell(tmp_path, "sweep/run=0.json", "baseline")
    cell(tmp_path, "sweep/run=1.json", "baseline", "invalid",
         ({"verdict": "invalid", "text": "a GPU reported an XID error during the run: 1"},))
    (tmp_path / "sweep" / "run=2.json").write_text(json.dumps({"completed": 3}))
    report = check_results([str(tmp_path / "sweep")])
    assert report.refused and not report.mismatched
    assert [os.path.basename(c) for c in report.unattached] == ["run=2.json"]
    assert report.judged[0]["verdict"] == "invalid"


def test_no_result_is_bad_input(tmp_path: pathlib.Path) -> None:
    proc = hs("results", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("hoststate: no result file found")
