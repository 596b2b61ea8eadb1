"""Slurm integration (hoststate/slurm.py) on a real single-node Slurm: Debian's munged, slurmctld and slurmd started
in a temporary directory (tests/slurmnode.py) with the shipped deploy/slurm scripts, byte for byte, running
hoststate installed the way the README installs it (a virtualenv, ``pip install .`` of this checkout's files), not
the source tree; the scripts find it through the one documented setting, HOSTSTATE_VENV in hoststate-slurm.env.

The node is a captured host tree read through --root (the published sweep's host after its DSA work queues were
enabled) and, for the health cases, the replay of an 8-GPU host that lost a GPU and a captured kernel log. A job on a
node matching the fleet's baseline runs; one whose baseline (the fleet's, or its own named in --comment) no longer
matches is refused with the reason in its output and its AdminComment, the node left in service; a lost GPU or the
driver's XID drains the node with a readable reason, a forged XID does not. Jobs of ``nobody`` name baselines root
may read and they may not. Under CI=true a missing or failing Slurm fails these tests instead of skipping them.
"""

from __future__ import annotations

import io as stdio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hoststate import slurm
from tests.conftest import FIXTURES, HOSTS, PACKAGE, PYTHONPATH, REPO, require
from tests.slurmnode import SlurmNode, available

ONLY = ["system", "dsa"]
#: The collectors the test leaves out are unreadable on both sides: the site accepts them, as guard --accept does.
ACCEPT = ["vllm.**", "gpu.**", "env.**", "packages.**", "accel_config.**"]
NOBODY = 65534
KMSG = FIXTURES / "kmsg"
H200 = FIXTURES / "nvml" / "h200.json"
SYSTEM_PYTHON = "/usr/bin/python3"


def _snap(root: Path, out: Path, only: list[str] = ONLY) -> Path:
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", str(root), "--only", ",".join(only),
                    "-o", str(out)], check=True, timeout=60, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    return out


def _config(path: Path, **values: object) -> None:
    values.setdefault("state_dir", str(path.parent / "state"))
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory every user may search: the jobs of nobody, its task prolog and its output live there."""
    path = Path(tempfile.mkdtemp(prefix="hoststate-slurm-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def venv(shared: Path) -> Path:
    """hoststate installed as the README says (``pip install .``) into a fresh virtualenv, from a copy of this
    checkout's package files (so no build output lands in the checkout)."""
    require(os.path.exists(SYSTEM_PYTHON), "a system Python to make the virtualenv with")
    src = shared / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(PACKAGE, src / "hoststate", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    made = subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(shared / "venv")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert made.returncode == 0, made.stderr
    done = subprocess.run([str(shared / "venv" / "bin" / "pip"), "install", "-q", "."], cwd=src, capture_output=True,
                          text=True, timeout=600, env=env)
    require(done.returncode == 0, f"pip install . into a virtualenv (a package index): {done.stderr[-2000:]}")
    shutil.rmtree(src)
    return shared / "venv"


@pytest.fixture(scope="module")
def cluster(shared: Path, venv: Path) -> Iterator[tuple[SlurmNode, Path]]:
    require(available(), "Slurm (slurmctld, slurmd, munge) and root: apt-get install slurmd slurmctld munge")
    etc = shared / "etc-slurm"
    etc.mkdir()
    conf = shared / "hoststate-slurm.toml"
    scripts = {}
    for role in ("prolog", "task-prolog", "epilog"):
        shipped = REPO / "deploy" / "slurm" / f"hoststate-{role}.sh"
        shutil.copy2(shipped, etc / shipped.name)
        assert (etc / shipped.name).read_bytes() == shipped.read_bytes()  # unchanged
        scripts[role] = str(etc / shipped.name)
    (etc / "hoststate-slurm.env").write_text(f"HOSTSTATE_VENV={venv}\nHOSTSTATE_SLURM_CONFIG={conf}\n")
    node = SlurmNode(shared / "cluster", prolog=scripts["prolog"], task_prolog=scripts["task-prolog"],
                     epilog=scripts["epilog"])
    try:
        node.start()
        yield node, conf
    finally:
        node.stop()


@pytest.fixture
def work(shared: Path, request: pytest.FixtureRequest) -> Path:
    """A per-test directory under the shared one, writable by the job's user."""
    path = shared / request.node.name.replace("/", "_")[:80]
    path.mkdir()
    path.chmod(0o777)
    return path


@pytest.fixture
def site_dir(shared: Path, request: pytest.FixtureRequest) -> Path:
    """A per-test directory only root may write, for what the prolog reads and writes as root (the fleet baseline, the
    stamps): one any user may write would let them swap either (hoststate.filetrust.root_only)."""
    path = shared / (request.node.name.replace("/", "_")[:80] + "-site")
    path.mkdir(mode=0o755)
    return path


def _submit(node: SlurmNode, out: Path, *extra: str) -> tuple[str, dict[str, str]]:
    done = node.run("sbatch", "--parsable", "-o", str(out), *extra, "--wrap",
                    'echo "ran with HOSTSTATE_VERDICT=$HOSTSTATE_VERDICT"')
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    return job, node.wait_job(job)


def test_a_job_on_a_matching_node_runs_and_the_epilog_records_no_change(cluster, work: Path, site_dir: Path) -> None:
    node, conf = cluster
    stamps = site_dir / "stamps"
    tree = HOSTS / "seed-experiment"
    _config(conf, baseline=str(_snap(tree, site_dir / "fleet.toml")), root=str(tree), only=ONLY, accept=ACCEPT,
            stamp_dir=str(stamps), kmsg="")
    job, fields = _submit(node, work / "out.txt")
    assert fields["JobState"] == "COMPLETED", (fields, node.logs())
    assert "ran with HOSTSTATE_VERDICT=match" in (work / "out.txt").read_text()
    assert fields.get("AdminComment", "").startswith("hoststate: match"), fields
    stamp = json.loads((stamps / f"{job}.json").read_text())
    assert stamp["verdict"] == "match" and stamp["baselines"] == {"fleet": str(site_dir / "fleet.toml")}
    changes = node.wait_for(lambda: (stamps / f"{job}.changes.txt").exists(), 30)
    assert changes, node.logs()
    text = (stamps / f"{job}.changes.txt").read_text()
    assert f"job {job} on {node.node}" in text and "verdict: clean (0 invalidating, 0 warning" in text, text
    assert node.node_state() == "IDLE"


def test_a_drifted_node_refuses_the_job_with_its_reason_and_stays_in_service(cluster, work: Path,
                                                                             site_dir: Path) -> None:
    node, conf = cluster
    baseline = _snap(HOSTS / "seed-baseline", site_dir / "fleet.toml")
    _config(conf, baseline=str(baseline), root=str(HOSTS / "seed-experiment"), only=ONLY, accept=ACCEPT,
            stamp_dir=str(site_dir / "stamps"), kmsg="")
    job, fields = _submit(node, work / "out.txt")
    assert fields["JobState"] == "FAILED", (fields, node.logs())
    out = (work / "out.txt").read_text()
    assert f"hoststate: job {job} refused on node {node.node} (refused):" in out, out
    assert "fleet baseline fleet.toml: dsa0, dsa2: 8 WQs disabled -> enabled" in out, out
    assert "ran with" not in out  # the job's command never ran
    assert fields["AdminComment"].startswith("hoststate: refused: fleet baseline fleet.toml: dsa0, dsa2"), fields
    assert node.node_state() == "IDLE"  # drift is the job's problem, not the node's


def test_the_jobs_own_baseline_is_checked_too(cluster, work: Path, site_dir: Path) -> None:
    node, conf = cluster
    tree = HOSTS / "seed-experiment"
    _config(conf, baseline=str(_snap(tree, site_dir / "fleet.toml")), root=str(tree), only=ONLY, accept=ACCEPT,
            stamp_dir=str(site_dir / "stamps"), kmsg="")
    mine = _snap(HOSTS / "seed-baseline", work / "mine.toml")
    job, fields = _submit(node, work / "out.txt", f"--comment=hoststate-baseline={mine}")
    assert fields["JobState"] == "FAILED", fields
    out = (work / "out.txt").read_text()
    assert "job baseline mine.toml: dsa0, dsa2: 8 WQs disabled -> enabled" in out, out
    assert "fleet baseline" not in out  # the fleet's baseline still matches


def test_a_lost_gpu_drains_the_node_with_a_readable_reason(cluster, work: Path, site_dir: Path) -> None:
    node, conf = cluster
    tree = HOSTS / "seed-experiment"
    replay = FIXTURES / "nvml" / "hgx-h100-8-gpu-lost.json"
    _config(conf, root=str(tree), only=[*ONLY, "gpu"], accept=ACCEPT[1:], stamp_dir=str(site_dir / "stamps"), kmsg="",
            nvml_replay=str(replay))
    job, fields = _submit(node, work / "out.txt")
    try:
        assert fields["JobState"] == "PENDING", fields  # requeued and held by Slurm after the failed prolog
        assert "DRAIN" in node.node_state(), node.node_state()
        assert node.node_reason().startswith("hoststate: health: GPU lost: devices/5 ["), node.node_reason()
        assert not (work / "out.txt").exists()
    finally:
        node.run("scancel", job)
        node.run("scontrol", "update", f"NodeName={node.node}", "State=RESUME")
    assert node.wait_for(lambda: node.node_state() == "IDLE", 30), node.node_state()


def _drained(node: SlurmNode, job: str, fields: dict[str, str]) -> str:
    """The node's drain reason after a job the prolog failed; the node is resumed and the job cancelled."""
    try:
        assert fields["JobState"] == "PENDING", fields
        assert "DRAIN" in node.node_state(), node.node_state()
        return node.node_reason()
    finally:
        node.run("scancel", job)
        node.run("scontrol", "update", f"NodeName={node.node}", "State=RESUME")
        assert node.wait_for(lambda: node.node_state() == "IDLE", 30), node.node_state()


def test_the_shipped_scripts_run_the_virtualenvs_hoststate(cluster, venv: Path, work: Path, site_dir: Path) -> None:
    """What the prolog ran is the installed copy: the system Python has no hoststate, the virtualenv has it in
    its own site-packages and a hoststate-slurm script."""
    node, conf = cluster
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert subprocess.run([SYSTEM_PYTHON, "-c", "import hoststate"], capture_output=True, cwd="/", env=env,
                          timeout=60).returncode != 0  # the shipped /usr/bin/python3 -m hoststate.slurm drained nodes
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import hoststate; print(hoststate.__file__)"],
                           capture_output=True, text=True, cwd="/", env=env, timeout=60).stdout
    assert where.startswith(str(venv)) and "site-packages" in where
    assert os.access(venv / "bin" / "hoststate-slurm", os.X_OK)
    tree = HOSTS / "seed-experiment"
    _config(conf, root=str(tree), only=ONLY, stamp_dir=str(site_dir / "stamps"), kmsg="")
    job, fields = _submit(node, work / "out.txt")
    assert fields["JobState"] == "COMPLETED", (fields, node.logs())
    assert (site_dir / "stamps" / f"{job}.json").exists()


def test_the_jobs_python_variables_never_reach_the_task_prolog(cluster, work: Path, site_dir: Path) -> None:
    """The task prolog runs as the job's user with the job's environment (checked here: slurmd passes PYTHONPATH
    and PYTHONHOME through). A PYTHONPATH holding a ``hoststate`` of the job's said ``match`` on a drifted node and
    the job ran; a PYTHONHOME (an environment module's) stopped the virtualenv's Python and failed the job on a node
    that matched. The shipped scripts run Python isolated (-I)."""
    node, conf = cluster
    evil = work / "evil" / "hoststate"
    evil.mkdir(parents=True)
    (evil / "__init__.py").write_text("")
    (evil / "slurm.py").write_text("def main():\n    print('export HOSTSTATE_VERDICT=match')\n    return 0\n\n\n"
                                   "if __name__ == '__main__':\n    main()\n")
    seen = work / "env.txt"
    baseline = _snap(HOSTS / "seed-baseline", site_dir / "fleet.toml")
    _config(conf, baseline=str(baseline), root=str(HOSTS / "seed-experiment"), only=ONLY, accept=ACCEPT,
            stamp_dir=str(site_dir / "stamps"), kmsg="")
    done = node.run("sbatch", "--parsable", "-o", str(work / "drift.txt"), "-D", str(work / "evil"),
                    f"--export=ALL,PYTHONPATH={work / 'evil'}", "--wrap", f"env > {seen}; echo ran")
    assert done.returncode == 0, done.stderr
    fields = node.wait_job(done.stdout.strip().split(";")[0])
    assert fields["JobState"] == "FAILED", (fields, (work / "drift.txt").read_text())
    assert "refused on node" in (work / "drift.txt").read_text() and not seen.exists()
    tree = HOSTS / "seed-experiment"
    _config(conf, baseline=str(_snap(tree, site_dir / "match.toml")), root=str(tree), only=ONLY, accept=ACCEPT,
            stamp_dir=str(site_dir / "stamps"), kmsg="")
    done = node.run("sbatch", "--parsable", "-o", str(work / "home.txt"),
                    "--export=ALL,PYTHONHOME=/nonexistent,PYTHONPATH=/nonexistent", "--wrap", f"env > {seen}")
    fields = node.wait_job(done.stdout.strip().split(";")[0])
    assert fields["JobState"] == "COMPLETED", (fields, (work / "home.txt").read_text())
    assert "PYTHONHOME=/nonexistent" in seen.read_text()  # the job's environment had it


def test_a_forged_xid_never_drains_and_the_drivers_drains_once(cluster, work: Path, site_dir: Path) -> None:
    node, conf = cluster
    settings = {"only": ["gpu"], "accept": ["gpu.**"], "stamp_dir": str(site_dir / "stamps"), "kmsg": "/dev/kmsg",
                "nvml_replay": str(H200), "state_dir": str(site_dir / "state")}
    _config(conf, root=str(KMSG / "forged"), **settings)
    job, fields = _submit(node, work / "forged.txt")
    assert fields["JobState"] == "COMPLETED", (fields, node.logs())  # nobody's tmpfs option and a user record
    assert node.node_state() == "IDLE"
    _config(conf, root=str(KMSG / "xid79"), **settings)
    job, fields = _submit(node, work / "xid.txt")
    reason = _drained(node, job, fields)
    assert reason.startswith("hoststate: health: XID 79 on PCI 0000:00:06"), reason
    assert "0000:3b:00" not in reason  # not a GPU of this node
    # The node was reset and resumed: the same record, already judged, does not drain it again.
    job, fields = _submit(node, work / "after.txt")
    assert fields["JobState"] == "COMPLETED", (fields, node.node_reason())
    cursor = json.loads((site_dir / "state" / "kmsg.cursor").read_text())
    assert cursor["seq"] == 361 and oct((site_dir / "state" / "kmsg.cursor").stat().st_mode & 0o777) == "0o600"


def _submit_as_nobody(node: SlurmNode, work: Path, out: Path, *extra: str) -> tuple[str, dict[str, str]]:
    done = subprocess.run(["sbatch", "--parsable", "-o", str(out), *extra, "--wrap", "echo ran"], user=NOBODY,
                          group=NOBODY, extra_groups=[], capture_output=True, text=True, env=node.env, cwd=work,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    return job, node.wait_job(job)


def test_a_jobs_baseline_is_read_with_the_job_users_rights(cluster, work: Path, site_dir: Path) -> None:
    """nobody names root's files in --comment: a root-only snapshot and a missing file in a root-only directory
    give the same answer, and nothing of the file reaches the stamp or the AdminComment."""
    node, conf = cluster
    tree = HOSTS / "seed-experiment"
    _config(conf, root=str(tree), only=ONLY, accept=ACCEPT, stamp_dir=str(site_dir / "stamps"), kmsg="")
    private = work / "private"
    private.mkdir(mode=0o700)
    secret = _snap(HOSTS / "seed-baseline", private / "root-only.toml")  # differs from the node: root would refuse
    hidden = {}
    for name in ("root-only.toml", "missing.toml"):
        comment = f"--comment=hoststate-baseline={private}/{name}"
        job, fields = _submit_as_nobody(node, work, work / f"{name}.out", comment)
        assert fields["JobState"] == "FAILED", fields
        stamp = json.loads((site_dir / "stamps" / f"{job}.json").read_text())
        hidden[name] = (stamp["reasons"], fields["AdminComment"])
        assert "8 WQs disabled" not in json.dumps(stamp) + fields["AdminComment"]  # root's file was not compared
    assert hidden["root-only.toml"][0] == [f"job baseline root-only.toml: not read with the job user's rights: "
                                           f"{private}: not searchable by the process's user (uid {NOBODY})"]
    assert [r.replace("missing", "root-only") for r in hidden["missing.toml"][0]] == hidden["root-only.toml"][0]
    # a baseline nobody may read is compared as before
    mine = work / "mine.toml"
    shutil.copy(secret, mine)
    mine.chmod(0o644)
    job, fields = _submit_as_nobody(node, work, work / "mine.out", f"--comment=hoststate-baseline={mine}")
    assert fields["JobState"] == "FAILED" and "job baseline mine.toml: dsa0, dsa2: 8 WQs disabled -> enabled" in \
        (work / "mine.out").read_text()
    private.chmod(0o755)
    secret.chmod(0o600)  # a root-only file in a directory nobody may search: not readable, not compared
    job, fields = _submit_as_nobody(node, work, work / "file.out", f"--comment=hoststate-baseline={secret}")
    stamp = json.loads((site_dir / "stamps" / f"{job}.json").read_text())
    assert stamp["reasons"] == [f"job baseline root-only.toml: not read with the job user's rights: not readable by "
                                f"the process's user (uid {NOBODY})"]


# -- the pieces, without Slurm --------------------------------------------------------------------------------------


def test_health_faults_name_the_gpu_and_the_xid() -> None:
    lost = {"devices.5.**": "error: GpuIsLost [devices/5]", "fabric.GPU5.**": "error: GpuIsLost [devices/5]"}
    snap = {"collectors": {"gpu": {"status": "partial", "unreadable": lost}},
            "gpu": {"devices": {"GPU-a": {"index": 2, "pci_bus_id": "00000000:18:00.0", "health": {
                "remapped_rows_pending": True, "ecc_errors_uncorrected_volatile": 3}}}}}
    kmsg = slurm.parse_kmsg(b"4,1234,5678,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
                            b"4,1235,5679,-;NVRM: Xid (PCI:0000:18:00): 13, pid=77, Graphics Exception\n")
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


# -- the kernel log ---------------------------------------------------------------------------------------------------


def test_only_the_drivers_xid_records_for_this_nodes_gpus_count() -> None:
    gpus = {(0, 0, 6)}
    forged = slurm.parse_kmsg((KMSG / "forged" / "dev" / "kmsg").read_bytes())
    assert [r.facility for r in forged if "NVRM: Xid" in r.message] == [0, 1]  # the tmpfs option, the user's write
    driver = [r for r in forged if r.message.startswith("NVRM: ") and r.seq < 357]
    assert len(driver) == 3 and {r.facility for r in driver} == {0}  # the H200 driver's own records: kernel's
    assert slurm.xids(forged, gpus) == []
    # the kernel's own record with the text anywhere but at the start (here followed by a comma, which a legacy mount
    # option cannot hold but other kernel messages quoting user text may): no XID either
    inside = slurm.KmsgRecord(0, 400, "overlayfs: bad option 'NVRM: Xid (PCI:0000:00:06): 79, x'")
    assert slurm.xids([inside], gpus) == []
    records = slurm.parse_kmsg((KMSG / "xid79" / "dev" / "kmsg").read_bytes())
    assert slurm.xids(records, gpus) == [("0000:00:06", 79), ("0000:00:06", 13)]
    assert slurm.xids(records, {(0, 0x3B, 0)}) == [("0000:3b:00", 79)]
    snap = {"gpu": {"devices": {"GPU-a": {"pci_bus_id": "00000000:00:06.0"}}}}
    assert slurm.node_gpus(snap) == gpus
    assert slurm.health_faults(snap, records) == ["XID 79 on PCI 0000:00:06"]
    assert slurm.health_faults(snap, forged) == []


def test_real_forged_records_of_this_kernel_are_not_xids(shared: Path) -> None:
    """The attack as found: nobody has the kernel log the XID text (an unprivileged user namespace mounting tmpfs
    with it as an option), and root writes it to /dev/kmsg; both records, read back from the live /dev/kmsg, are
    not the driver's."""
    require(os.geteuid() == 0 and os.path.exists("/dev/kmsg"), "root and /dev/kmsg")
    config = slurm.Config(kmsg="/dev/kmsg", state_dir=str(shared / "live-state"))
    # this run's records: those after the log's last record now, at an address drawn at random (an earlier run,
    # or another run at once, may have written records too; a worker in its own PID namespace is always PID 2)
    before = max((r.seq for r in slurm.parse_kmsg(slurm.read_kmsg(config))), default=-1)
    bus, dev = os.urandom(1)[0], os.urandom(1)[0] % 32
    gpu = f"PCI:0000:{bus:02x}:{dev:02x}"
    text = f"NVRM: Xid ({gpu}): 79"
    subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o '{text}' none /mnt"], user=NOBODY,
                   group=NOBODY, extra_groups=[], capture_output=True, timeout=30, cwd="/")
    with open("/dev/kmsg", "w") as f:
        f.write(text + ", written by root\n")
    records = [r for r in slurm.parse_kmsg(slurm.read_kmsg(config)) if r.seq > before and gpu in r.message]
    assert any(r.facility == 1 and r.message.startswith(text) for r in records)
    require(any(r.facility == 0 for r in records), "unprivileged user namespaces (the tmpfs record)")
    assert slurm.xids(records, {(0, bus, dev)}) == []
    assert slurm.xids([slurm.KmsgRecord(0, 1, r.message) for r in records if r.facility == 1],
                      {(0, bus, dev)}) == [(f"0000:{bus:02x}:{dev:02x}", 79)]  # the same text from the kernel would


def test_the_cursor_judges_each_record_once_per_boot(tmp_path: Path, monkeypatch) -> None:
    config = slurm.Config(root=str(KMSG / "xid79"), kmsg="/dev/kmsg", state_dir=str(tmp_path / "state"))
    first = slurm.new_kernel_records(config)
    assert [r.seq for r in first][-3:] == [359, 360, 361]
    assert slurm.new_kernel_records(config) == []  # already judged
    assert oct((tmp_path / "state").stat().st_mode & 0o777) == "0o700"
    monkeypatch.setattr(slurm, "_boot_id", lambda: "another boot")
    assert len(slurm.new_kernel_records(config)) == len(first)  # sequence numbers start again at a boot
    (tmp_path / "state").chmod(0o777)
    with pytest.raises(OSError, match="writable only by it"):
        slurm.new_kernel_records(config)
    assert slurm.new_kernel_records(slurm.Config(kmsg="", state_dir="/nonexistent/x")) == []


def test_an_xid_after_more_than_a_read_cap_of_kernel_records_still_drains(tmp_path: Path, capsys) -> None:
    """/dev/kmsg reads from the oldest record: the prolog stopped at 4 MiB, so on a node whose log held more (a
    large log_buf_len, or a user's flood of short kernel records, as the tmpfs option makes them) the driver's XID
    after them was never read, by any prolog, and the node never drained. The whole log is read; what is kept is
    the newest 4 MiB after the cursor, and what falls out is reported."""
    tree = tmp_path / "tree"
    (tree / "dev").mkdir(parents=True)
    flood = b"".join(b"0,%d,%d,-;tmpfs: Unknown parameter 'x%d'\n" % (seq, seq * 10, seq) for seq in range(1, 110001))
    assert len(flood) > 5 << 20
    xid = b"4,110001,1100010,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=x, GPU has fallen off the bus.\n"
    (tree / "dev" / "kmsg").write_bytes(flood + xid)
    config = slurm.Config(root=str(tree), kmsg="/dev/kmsg", state_dir=str(tmp_path / "state"))
    slurm.state_dir(config)
    (tmp_path / "state" / "kmsg.cursor").write_text(json.dumps({"boot": slurm._boot_id(), "seq": 0}))
    records = slurm.new_kernel_records(config)
    assert slurm.xids(records, {(0, 0x18, 0)}) == [("0000:18:00", 79)]
    assert sum(len(r.message) for r in records) < 4 << 20 and records[-1].seq == 110001
    lost = records[0].seq - 1
    assert lost > 0 and f"{lost} kernel log record(s) after the cursor (0) were overwritten" in capsys.readouterr().err
    assert slurm.new_kernel_records(config) == []  # judged once


def test_a_configuration_another_user_may_write_is_refused(tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (the prolog's user)")
    path = tmp_path / "c.toml"
    path.write_text('baseline = "x"\n')
    path.chmod(0o666)
    with pytest.raises(ValueError, match="writable by others"):
        slurm.load_config(str(path))
    path.chmod(0o644)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(ValueError, match="not owned by root"):
        slurm.load_config(str(path))


IGNORE_ALL = 'rule = [{ path = "**", severity = "ignore", reason = "r", source = "s" }]\n'


def _as_nobody(script: str) -> None:
    subprocess.run([SYSTEM_PYTHON, "-c", script], user=NOBODY, group=NOBODY, extra_groups=[], check=True, timeout=30)


@pytest.fixture
def site() -> Iterator[dict[str, Path]]:
    """A site whose root-only folder holds the fleet baseline (seed-baseline) and a root-only snapshot of a drifted
    node (seed-experiment), and three places another user could change: a folder nobody owns, a folder anyone may
    write (no sticky bit) and a sticky one (as /tmp)."""
    require(os.geteuid() == 0, "root (the prolog's user), to act as nobody")
    tmp_path = Path(tempfile.mkdtemp(prefix="hoststate-site-", dir="/tmp"))
    tmp_path.chmod(0o755)
    try:
        yield _site(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _site(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "site"
    home.mkdir(mode=0o755)
    places = {"site": home, "nobodys": tmp_path / "nobodys", "open": tmp_path / "open", "sticky": tmp_path / "sticky"}
    for name, mode in (("nobodys", 0o755), ("open", 0o777), ("sticky", 0o1777)):
        places[name].mkdir()
        places[name].chmod(mode)
    os.chown(places["nobodys"], NOBODY, NOBODY)
    places["baseline"] = _snap(HOSTS / "seed-baseline", home / "fleet.toml")
    places["current"] = _snap(HOSTS / "seed-experiment", home / "current.toml")
    return places


def test_files_the_configuration_names_that_another_user_could_change_are_refused(site: dict[str, Path]) -> None:
    """The prolog reads the configuration's baseline and policy as root for every job: whoever could write or swap
    them would decide every verdict. Here nobody really does, and each way is refused before anything is judged."""
    conf = site["site"] / "c.toml"
    honest = slurm.Config(baseline=str(site["baseline"]), only=ONLY, accept=ACCEPT, kmsg="")
    assert slurm.judge(honest, str(site["current"]), None, []).verdict == "refused"  # the node has drifted
    # 1. nobody's own policy file, in nobody's folder: it ignores everything, and the drifted node would match
    policy = site["nobodys"] / "policy.toml"
    _as_nobody(f"open({str(policy)!r}, 'w').write({IGNORE_ALL!r})")
    swayed = slurm.Config(**{**honest.__dict__, "policy": [str(policy)]})
    assert slurm.judge(swayed, str(site["current"]), None, []).verdict == "match"  # what nobody would get
    _config(conf, baseline=str(site["baseline"]), policy=[str(policy)], only=ONLY, accept=ACCEPT, kmsg="")
    with pytest.raises(slurm.RefusedConfig, match=r"policy .*policy.toml is owned by user nobody"):
        slurm.load_config(str(conf))
    # 2. a root-owned policy in nobody's folder: nobody renames it away and puts theirs in its place
    (site["nobodys"] / "root.toml").write_text('rule = []\n')
    _config(conf, baseline=str(site["baseline"]), policy=[str(site["nobodys"] / "root.toml")], kmsg="")
    with pytest.raises(slurm.RefusedConfig, match="a link or in a folder another user could change"):
        slurm.load_config(str(conf))
    # 3. the fleet baseline, root's, in a folder anyone may write (no sticky bit), or named there but missing
    for folder in ("open", "sticky"):
        shutil.copy(site["baseline"], site[folder] / "fleet.toml")
        _config(conf, baseline=str(site[folder] / "fleet.toml"), kmsg="")
        with pytest.raises(slurm.RefusedConfig, match="baseline .* in a folder another user could change"):
            slurm.load_config(str(conf))
        _config(conf, baseline=str(site[folder] / "missing.toml"), kmsg="")
        with pytest.raises(slurm.RefusedConfig, match="is missing, and its folder .* can be written by other users"):
            slurm.load_config(str(conf))
    # 4. a link nobody placed in the site's root-only folder would be root's to place; nobody's link elsewhere is not
    _as_nobody(f"import os; os.symlink({str(site['baseline'])!r}, {str(site['nobodys'] / 'link.toml')!r})")
    _config(conf, baseline=str(site["nobodys"] / "link.toml"), kmsg="")
    with pytest.raises(slurm.RefusedConfig, match="baseline"):
        slurm.load_config(str(conf))
    # 5. a kernel log (a captured one under root) nobody could write would let nobody drain the node
    tree = site["nobodys"] / "tree"
    _as_nobody(f"import os; os.makedirs({str(tree / 'dev')!r}); open({str(tree / 'dev' / 'kmsg')!r}, 'w')")
    _config(conf, root=str(tree), kmsg="/dev/kmsg")
    with pytest.raises(slurm.RefusedConfig, match="root .*tree is owned by user nobody"):
        slurm.load_config(str(conf))
    # the same files where only root can change them are read
    _config(conf, baseline=str(site["baseline"]), policy=[str(site["site"] / "fleet.toml")], kmsg="")
    assert slurm.load_config(str(conf)).baseline == str(site["baseline"])


def test_a_refused_configuration_refuses_the_job_where_its_task_prolog_looks(site: dict[str, Path],
                                                                             monkeypatch) -> None:
    """The prolog answers a configuration it refuses with a stamp (verdict ``error``) in the configured stamp folder,
    so the task prolog refuses the job, and the node stays in service."""
    conf = site["site"] / "c.toml"
    policy = site["nobodys"] / "policy.toml"
    _as_nobody(f"open({str(policy)!r}, 'w').write({IGNORE_ALL!r})")
    stamps = site["site"] / "stamps"
    _config(conf, baseline=str(site["baseline"]), policy=[str(policy)], stamp_dir=str(stamps), kmsg="",
            scontrol="/nonexistent/scontrol")
    monkeypatch.setenv("SLURM_JOB_ID", "13")
    assert slurm.main(["prolog", "--config", str(conf)]) == 0
    stamp = json.loads((stamps / "13.json").read_text())
    assert stamp["verdict"] == "error" and "policy.toml is owned by user nobody" in stamp["reasons"][0], stamp
    out = stdio.StringIO()
    cfg = slurm.Config(stamp_dir=str(stamps))
    assert slurm.task_prolog(cfg, {"SLURM_JOB_ID": "13"}, out) == 1


def test_a_stamp_folder_another_user_could_swap_is_refused(site: dict[str, Path]) -> None:
    """The task prolog believes ``STAMP_DIR/<job>.json``: a stamp folder whose parent nobody may write could be
    renamed away and replaced by nobody's folder with a stamp saying ``match``."""
    for folder in ("nobodys", "open"):
        stamps = site[folder] / "stamps"
        with pytest.raises(OSError, match="in a folder another user could change"):
            slurm.stamp_dir(slurm.Config(stamp_dir=str(stamps)))
        # what nobody could then do, for real: move root's folder away and put theirs with a forged stamp there
        _as_nobody(f"import os, json; os.rename({str(stamps)!r}, {str(stamps) + '.old'!r}); os.mkdir({str(stamps)!r}); "
                   f"open({str(stamps / '14.json')!r}, 'w').write(json.dumps({{'verdict': 'match'}}))")
        out = stdio.StringIO()
        assert slurm.task_prolog(slurm.Config(stamp_dir=str(stamps)), {"SLURM_JOB_ID": "14"}, out) == 0
        assert "HOSTSTATE_VERDICT=match" in out.getvalue()
    sticky = site["sticky"] / "stamps"  # a sticky parent: nobody can neither rename nor remove root's folder
    assert slurm.stamp_dir(slurm.Config(stamp_dir=str(sticky))) == str(sticky)


# -- as another user: what a job's user can name --------------------------------------------------------------------


@pytest.fixture
def nobodys_names(shared: Path, work: Path) -> dict[str, str]:
    """Paths nobody names in --comment: its link to a root-only file, a FIFO nobody writes, /proc's files, a file
    larger than a snapshot may be."""
    require(os.geteuid() == 0, "root, to act as nobody")
    secret = work / "root-only.toml"
    secret.write_text('token = "sk-rootonly0123456789abcdef"\n')
    secret.chmod(0o600)
    big = work / "big.toml"
    big.write_bytes(b"#" * (slurm.MAX_JOB_BASELINE + 1))
    big.chmod(0o644)
    script = (f"import os; os.symlink({str(secret)!r}, {str(work / 'link.toml')!r}); "
              f"os.mkfifo({str(work / 'fifo.toml')!r}, 0o666)")
    subprocess.run([SYSTEM_PYTHON, "-c", script], user=NOBODY, group=NOBODY, extra_groups=[], check=True, timeout=30)
    return {"link": str(work / "link.toml"), "fifo": str(work / "fifo.toml"), "environ": "/proc/1/environ",
            "self": "/proc/self/environ", "big": str(big), "relative": "root-only.toml"}


def test_nothing_a_job_names_is_read_beyond_its_users_rights(nobodys_names: dict[str, str]) -> None:
    env = {"SLURM_JOB_UID": str(NOBODY), "SLURM_JOB_GID": str(NOBODY)}
    answers = {name: slurm.job_user_baseline(path, env) for name, path in nobodys_names.items()}
    assert all(data is None for data, _ in answers.values())
    refused = f"not read with the job user's rights: not readable by the process's user (uid {NOBODY})"
    assert answers["link"][1] == refused
    assert answers["fifo"][1].endswith(": not a regular file")  # refused at once: nobody writes it, no hang
    assert answers["big"][1].startswith("not read with the job user's rights") and "larger" in answers["big"][1]
    assert answers["relative"][1] == "not read with the job user's rights: not an absolute path"
    assert "sk-rootonly" not in json.dumps(answers)
    assert answers["environ"][1] == answers["self"][1] == ("not read with the job user's rights: a kernel "
                                                          "pseudo-file, not a regular file")
    assert slurm.job_user_baseline(nobodys_names["link"], {})[1].startswith("the job's user is not known")


def test_records_a_user_pushed_out_of_the_ring_are_reported(tmp_path: Path, capsys) -> None:
    """Any user can flood the kernel log (the tmpfs option, in a loop) until records after the cursor are
    overwritten: they cannot be judged any more, and the prolog says how many were lost instead of passing silently."""
    config = slurm.Config(root=str(KMSG / "xid79"), kmsg="/dev/kmsg", state_dir=str(tmp_path / "state"))
    slurm.state_dir(config)
    (tmp_path / "state" / "kmsg.cursor").write_text(json.dumps({"boot": slurm._boot_id(), "seq": 300}))
    assert [r.seq for r in slurm.new_kernel_records(config)][0] == 352
    assert "51 kernel log record(s) after the cursor (300) were overwritten" in capsys.readouterr().err
    slurm.new_kernel_records(config)
    assert capsys.readouterr().err == ""
