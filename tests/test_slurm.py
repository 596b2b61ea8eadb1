"""Slurm integration (hoststate/slurm.py) on a real single-node Slurm: Debian's munged, slurmctld and slurmd started
in a temporary directory (tests/slurmnode.py) with hoststate's Prolog, TaskProlog and Epilog, and stopped after.

The node is a captured host tree read through --root (the published sweep's host after its DSA work queues were
enabled) and, for the health case, the replay of an 8-GPU host that lost a GPU. A job on a node matching the
fleet's baseline runs; one whose baseline (the fleet's, or its own named in --comment) no longer matches is refused
with the reason in its output and its AdminComment, the node left in service; a lost GPU drains the node with a
readable reason. Under CI=true a missing or failing Slurm fails these tests instead of skipping them.
"""

from __future__ import annotations

import io as stdio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hoststate import slurm
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, require
from tests.slurmnode import SlurmNode, available

ONLY = ["system", "dsa"]
#: The collectors the test leaves out are unreadable on both sides: the site accepts them, as guard --accept does.
ACCEPT = ["vllm.**", "gpu.**", "env.**", "packages.**", "accel_config.**"]


def _snap(root: Path, out: Path, only: list[str] = ONLY) -> Path:
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", str(root), "--only", ",".join(only),
                    "-o", str(out)], check=True, timeout=60, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    return out


def _config(path: Path, **values: object) -> None:
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmNode, Path]]:
    require(available(), "Slurm (slurmctld, slurmd, munge) and root: apt-get install slurmd slurmctld munge")
    base = tmp_path_factory.mktemp("slurm")
    conf = base / "hoststate-slurm.toml"
    scripts = {}
    for role in ("prolog", "task-prolog", "epilog"):
        script = base / f"{role}.sh"
        script.write_text(f"#!/bin/sh\nPYTHONPATH={PYTHONPATH} exec {sys.executable} -m hoststate.slurm {role} "
                          f"--config {conf}\n")
        script.chmod(0o755)
        scripts[role] = str(script)
    node = SlurmNode(base / "cluster", prolog=scripts["prolog"], task_prolog=scripts["task-prolog"],
                     epilog=scripts["epilog"])
    try:
        node.start()
        yield node, conf
    finally:
        node.stop()


def _submit(node: SlurmNode, out: Path, *extra: str) -> tuple[str, dict[str, str]]:
    done = node.run("sbatch", "--parsable", "-o", str(out), *extra, "--wrap",
                    'echo "ran with HOSTSTATE_VERDICT=$HOSTSTATE_VERDICT"')
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    return job, node.wait_job(job)


def test_a_job_on_a_matching_node_runs_and_the_epilog_records_no_change(cluster, tmp_path: Path) -> None:
    node, conf = cluster
    stamps = tmp_path / "stamps"
    tree = HOSTS / "seed-experiment"
    _config(conf, baseline=str(_snap(tree, tmp_path / "fleet.toml")), root=str(tree), only=ONLY, accept=ACCEPT,
            stamp_dir=str(stamps), kmsg="")
    job, fields = _submit(node, tmp_path / "out.txt")
    assert fields["JobState"] == "COMPLETED", (fields, node.logs())
    assert "ran with HOSTSTATE_VERDICT=match" in (tmp_path / "out.txt").read_text()
    assert fields.get("AdminComment", "").startswith("hoststate: match"), fields
    stamp = json.loads((stamps / f"{job}.json").read_text())
    assert stamp["verdict"] == "match" and stamp["baselines"] == {"fleet": str(tmp_path / "fleet.toml")}
    changes = node.wait_for(lambda: (stamps / f"{job}.changes.txt").exists(), 30)
    assert changes, node.logs()
    text = (stamps / f"{job}.changes.txt").read_text()
    assert f"job {job} on {node.node}" in text and "verdict: clean (0 invalidating, 0 warning" in text, text
    assert node.node_state() == "IDLE"


def test_a_drifted_node_refuses_the_job_with_its_reason_and_stays_in_service(cluster, tmp_path: Path) -> None:
    node, conf = cluster
    baseline = _snap(HOSTS / "seed-baseline", tmp_path / "fleet.toml")
    _config(conf, baseline=str(baseline), root=str(HOSTS / "seed-experiment"), only=ONLY, accept=ACCEPT,
            stamp_dir=str(tmp_path / "stamps"), kmsg="")
    job, fields = _submit(node, tmp_path / "out.txt")
    assert fields["JobState"] == "FAILED", (fields, node.logs())
    out = (tmp_path / "out.txt").read_text()
    assert f"hoststate: job {job} refused on node {node.node} (refused):" in out, out
    assert "fleet baseline fleet.toml: dsa0, dsa2: 8 WQs disabled -> enabled" in out, out
    assert "ran with" not in out  # the job's command never ran
    assert fields["AdminComment"].startswith("hoststate: refused: fleet baseline fleet.toml: dsa0, dsa2"), fields
    assert node.node_state() == "IDLE"  # drift is the job's problem, not the node's


def test_the_jobs_own_baseline_is_checked_too(cluster, tmp_path: Path) -> None:
    node, conf = cluster
    tree = HOSTS / "seed-experiment"
    _config(conf, baseline=str(_snap(tree, tmp_path / "fleet.toml")), root=str(tree), only=ONLY, accept=ACCEPT,
            stamp_dir=str(tmp_path / "stamps"), kmsg="")
    mine = _snap(HOSTS / "seed-baseline", tmp_path / "mine.toml")
    job, fields = _submit(node, tmp_path / "out.txt", f"--comment=hoststate-baseline={mine}")
    assert fields["JobState"] == "FAILED", fields
    out = (tmp_path / "out.txt").read_text()
    assert "job baseline mine.toml: dsa0, dsa2: 8 WQs disabled -> enabled" in out, out
    assert "fleet baseline" not in out  # the fleet's baseline still matches


def test_a_lost_gpu_drains_the_node_with_a_readable_reason(cluster, tmp_path: Path) -> None:
    node, conf = cluster
    tree = HOSTS / "seed-experiment"
    replay = FIXTURES / "nvml" / "hgx-h100-8-gpu-lost.json"
    _config(conf, root=str(tree), only=[*ONLY, "gpu"], accept=ACCEPT[1:], stamp_dir=str(tmp_path / "stamps"), kmsg="",
            nvml_replay=str(replay))
    job, fields = _submit(node, tmp_path / "out.txt")
    try:
        assert fields["JobState"] == "PENDING", fields  # requeued and held by Slurm after the failed prolog
        assert "DRAIN" in node.node_state(), node.node_state()
        assert node.node_reason().startswith("hoststate: health: GPU lost: devices/5 ["), node.node_reason()
        assert not (tmp_path / "out.txt").exists()
    finally:
        node.run("scancel", job)
        node.run("scontrol", "update", f"NodeName={node.node}", "State=RESUME")
    assert node.wait_for(lambda: node.node_state() == "IDLE", 30), node.node_state()


# -- the pieces, without Slurm --------------------------------------------------------------------------------------


def test_health_faults_name_the_gpu_and_the_xid() -> None:
    lost = {"devices.5.**": "error: GpuIsLost [devices/5]", "fabric.GPU5.**": "error: GpuIsLost [devices/5]"}
    snap = {"collectors": {"gpu": {"status": "partial", "unreadable": lost}},
            "gpu": {"devices": {"GPU-a": {"index": 2, "pci_bus_id": "00000000:18:00.0", "health": {
                "remapped_rows_pending": True, "ecc_errors_uncorrected_volatile": 3}}}}}
    kmsg = ("4,1234,5678,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
            "4,1235,5679,-;NVRM: Xid (PCI:0000:18:00): 13, pid=77, Graphics Exception\n")
    assert slurm.health_faults(snap, kmsg) == [
        "GPU lost: devices/5",
        "GPU 2 (00000000:18:00.0): row remap pending a GPU reset",
        "GPU 2 (00000000:18:00.0): 3 uncorrectable ECC errors",
        "XID 79 on PCI 0000:18:00",  # 13 is an application's own fault
    ]
    assert slurm.health_faults({"collectors": {"gpu": {"status": "ok"}}}) == []


def test_task_prolog_speaks_slurms_protocol(tmp_path: Path) -> None:
    config = slurm.Config(stamp_dir=str(tmp_path))
    (tmp_path / "7.json").write_text(json.dumps({"verdict": "refused", "node": "n1",
                                                 "reasons": ["fleet baseline a.toml: GPU clocks\nchanged"]}))
    out = stdio.StringIO()
    assert slurm.task_prolog(config, {"SLURM_JOB_ID": "7"}, out) == 1
    assert out.getvalue().splitlines() == [
        "export HOSTSTATE_VERDICT=refused", f"export HOSTSTATE_STAMP={tmp_path}/7.json",
        "print hoststate: job 7 refused on node n1 (refused):",
        "print hoststate:   fleet baseline a.toml: GPU clocks changed"]
    with pytest.raises(ValueError):
        slurm.job_id({"SLURM_JOB_ID": "../7"})


def test_an_unknown_config_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('baseline = "x"\nbasline = "y"\n')
    with pytest.raises(ValueError, match="basline"):
        slurm.load_config(str(path))


def test_a_prolog_that_fails_itself_refuses_the_job_not_the_node(tmp_path: Path, monkeypatch, capsys) -> None:
    conf = tmp_path / "c.toml"
    _config(conf, stamp_dir=str(tmp_path / "stamps"), kmsg="", scontrol="/nonexistent/scontrol")

    def broken(config: slurm.Config, out: str) -> str | None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(slurm, "snap", broken)
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    assert slurm.main(["prolog", "--config", str(conf)]) == 0  # the node is not drained
    stamp = json.loads((tmp_path / "stamps" / "12.json").read_text())
    assert stamp["verdict"] == "error" and stamp["reasons"] == ["RuntimeError: disk full"]
    out = stdio.StringIO()
    assert slurm.task_prolog(slurm.load_config(str(conf)), {"SLURM_JOB_ID": "12"}, out) == 1
    assert "print hoststate:   RuntimeError: disk full" in out.getvalue()
    (tmp_path / "stamps").chmod(0o777)  # a stamp directory anyone may write is refused: then the prolog fails
    assert slurm.main(["prolog", "--config", str(conf)]) == 1
    assert "no stamp either" in capsys.readouterr().err
