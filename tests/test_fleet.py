"""`hoststate fleet`: grouping by recomputed digest, the majority or --reference, outliers' findings, bad files.

The fleet is generated from one real snapshot (the xeon-2s host tree plus an enabled SPR DSA layout built by
tests.dsatree, collected by the library), copied per host with a new hostname and new volatile values, with three
drifts planted in fields the shipped default policy rates invalidating.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest

from hoststate import fleet
from hoststate.digest import digest
from hoststate.errors import InputError
from hoststate.render.fleet import render as render_fleet
from hoststate.snapshot import to_toml
from tests.conftest import HOSTS

HOSTSTATE = [sys.executable, "-m", "hoststate"]

#: host index -> (dotted path, path parts, planted value): one invalidating drift each.
DRIFTS: dict[int, tuple[str, tuple[str, ...], Any]] = {
    7: ("system.kernel.release", ("system", "kernel", "release"), "6.8.0-45-generic"),
    23: ('dsa.devices.dsa0.wqs."wq0.1".state', ("dsa", "devices", "dsa0", "wqs", "wq0.1", "state"), "disabled"),
    41: ("system.cpufreq.scaling_max_khz.0-223", ("system", "cpufreq", "scaling_max_khz", "0-223"), 2000000),
}


# -- generation (also used by benchmarks/bench_fleet.py) ---------------------------------------------------------


def base_snapshot(workdir: str) -> dict[str, Any]:
    """A realistic snapshot: the xeon-2s tree with two enabled DSA devices, collected through the library."""
    from hoststate.capture import collect
    from hoststate.collectors import Context
    from tests import dsatree

    root = os.path.join(workdir, "xeon-2s-dsa")
    shutil.copytree(HOSTS / "xeon-2s", root, symlinks=True)
    dsatree.build(root, dsatree.spr_devices(True))
    snap = collect(Context(root=root), ("system", "dsa"), label="sweep-42")
    assert snap["collectors"]["dsa"]["status"] == "ok", snap["collectors"]["dsa"]
    return snap


def _set(snap: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    node = snap
    for key in parts[:-1]:
        node = node[key]
    assert parts[-1] in node, parts  # a planted drift changes an existing value
    node[parts[-1]] = value


def host_snapshot(base: dict[str, Any], i: int, drift: tuple[str, ...] | None = None, value: Any = None
                  ) -> dict[str, Any]:
    """Copy ``i`` of the base: its own hostname, time and volatile readings; optionally one planted drift."""
    snap = copy.deepcopy(base)
    snap["hoststate"]["hostname"] = f"node{i:03d}"
    snap["hoststate"]["taken_at"] = base["hoststate"]["taken_at"] + dt.timedelta(seconds=i)
    snap["collectors"]["system"]["took_ms"] = 50.0 + i
    wq = snap["dsa"]["devices"]["dsa0"]["wqs"]["wq0.0"]
    wq["clients"] = i % 3  # per-process noise the policy does not rate invalidating
    wq["occupancy"] = i % 5
    if drift is not None:
        _set(snap, drift, value)
    snap["hoststate"]["digest"] = digest(snap)
    return snap


def write_fleet(base: dict[str, Any], directory: str, n: int, drifts: dict[int, tuple[str, tuple[str, ...], Any]]
                ) -> list[str]:
    """``n`` snapshot files ``node000.toml``...; hosts in ``drifts`` carry their planted drift."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i in range(n):
        _, parts, value = drifts.get(i, ("", None, None))
        path = os.path.join(directory, f"node{i:03d}.toml")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(to_toml(host_snapshot(base, i, parts, value)))
        paths.append(path)
    return paths


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Any]:
    return base_snapshot(str(tmp_path_factory.mktemp("base")))


@pytest.fixture(scope="module")
def fleet_dir(base, tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("fleet") / "snaps")
    write_fleet(base, directory, 50, DRIFTS)
    return directory


def run_cli(*args: str, cwd: pathlib.Path | str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


# -- the acceptance case -----------------------------------------------------------------------------------


def test_fifty_snapshots_three_planted_drifts(fleet_dir) -> None:
    report = fleet.run_fleet([fleet_dir])
    assert report.total == 50 and report.skipped == [] and report.warnings == []
    assert report.reference_from == "majority"
    assert len(report.groups) == 4
    ref_digest, ref_members = report.groups[0]
    assert ref_digest == report.reference_digest and len(ref_members) == 47
    assert [len(m) for _, m in report.groups[1:]] == [1, 1, 1]

    expected = {os.path.join(fleet_dir, f"node{i:03d}.toml"): drift for i, drift in DRIFTS.items()}
    assert {o["snapshot"] for o in report.outliers} == set(expected)
    for outlier in report.outliers:
        path, _, value = expected[outlier["snapshot"]]
        assert outlier["hostname"] == os.path.basename(outlier["snapshot"])[:-5]
        assert outlier["label"] == "sweep-42"
        assert [(f["path"], f["change"], f["new"], f["severity"]) for f in outlier["findings"]] == [
            (path, "changed", value, "invalidating")]
        assert outlier["findings"][0]["reason"] and outlier["findings"][0]["rule"]
    assert report.exit_code == 1


def test_process_pool_and_one_process_agree(fleet_dir) -> None:
    pooled = fleet.run_fleet([fleet_dir], jobs=2)  # 50 files: read by the pool
    alone = fleet.run_fleet([fleet_dir], jobs=1)
    assert pooled.to_dict() == alone.to_dict()


def test_cli_json_is_design_shape(fleet_dir) -> None:
    proc = run_cli("fleet", fleet_dir, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"reference", "groups", "outliers", "skipped", "warnings"}
    assert set(data["reference"]) == {"digest", "from"} and data["reference"]["from"] == "majority"
    assert data["reference"]["digest"].startswith("sha256:")
    assert all(set(g) == {"digest", "members"} for g in data["groups"])
    assert sum(len(g["members"]) for g in data["groups"]) == 50
    for outlier in data["outliers"]:
        assert set(outlier) == {"snapshot", "hostname", "label", "findings"}
        for f in outlier["findings"]:
            assert set(f) == {"path", "change", "old", "new", "severity", "rule", "reason"}
    assert [o["hostname"] for o in data["outliers"]] == ["node007", "node023", "node041"]


def test_cli_text_and_markdown(fleet_dir) -> None:
    text = run_cli("fleet", fleet_dir)
    assert text.returncode == 1, text.stderr
    assert "50 snapshot(s), 4 group(s)" in text.stdout
    assert 'system.kernel.release: "5.15.0-131-generic" -> "6.8.0-45-generic"' in text.stdout
    assert "\x1b[" not in text.stdout  # no colour when not a TTY
    md = run_cli("fleet", fleet_dir, "--format", "markdown")
    assert md.returncode == 1, md.stderr
    assert "| snapshot | host | path | reference | outlier | reason |" in md.stdout
    assert '`dsa.devices.dsa0.wqs."wq0.1".state`' in md.stdout


def test_one_group_exits_zero(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path), 5, {})
    report = fleet.run_fleet([str(tmp_path)])
    assert len(report.groups) == 1 and report.outliers == [] and report.exit_code == 0
    proc = run_cli("fleet", str(tmp_path))
    assert proc.returncode == 0, proc.stderr


# -- reference, ties, digest recomputed ----------------------------------------------------------------------------


def test_reference_file_makes_its_group_the_reference(fleet_dir) -> None:
    ref = os.path.join(fleet_dir, "node007.toml")
    report = fleet.run_fleet([fleet_dir], reference=ref)
    assert report.reference_from == ref
    assert report.groups[0][1] == [ref]
    assert len(report.outliers) == 49
    # the 47 majority hosts differ from node007 in the kernel only
    by_host = {o["hostname"]: o["findings"] for o in report.outliers}
    assert [f["path"] for f in by_host["node000"]] == ["system.kernel.release"]
    assert by_host["node000"][0]["old"] == "6.8.0-45-generic"
    assert sorted(f["path"] for f in by_host["node023"]) == sorted(
        ["system.kernel.release", 'dsa.devices.dsa0.wqs."wq0.1".state'])
    proc = run_cli("fleet", fleet_dir, "--reference", ref, "--format", "json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["reference"] == {"digest": report.reference_digest, "from": ref}


def test_reference_outside_the_inputs(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path / "a"), 3, {})
    write_fleet(base, str(tmp_path / "b"), 1, {0: DRIFTS[7]})
    ref = str(tmp_path / "b" / "node000.toml")
    report = fleet.run_fleet([str(tmp_path / "a")], reference=ref)
    assert report.reference_from == ref and len(report.outliers) == 3
    assert all(len(o["findings"]) == 1 for o in report.outliers)


def test_bad_reference_is_input_error(fleet_dir, tmp_path) -> None:
    bad = tmp_path / "ref.toml"
    bad.write_text("not = [toml")
    with pytest.raises(InputError, match="not valid TOML"):
        fleet.run_fleet([fleet_dir], reference=str(bad))
    proc = run_cli("fleet", fleet_dir, "--reference", str(bad))
    assert proc.returncode == 2 and proc.stderr.startswith("hoststate: ") and len(proc.stderr.splitlines()) == 1


def test_tie_goes_to_first_sorted_group_and_says_so(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path), 4, {2: DRIFTS[7], 3: DRIFTS[7]})
    report = fleet.run_fleet([str(tmp_path)])
    assert report.groups[0][1] == [str(tmp_path / "node000.toml"), str(tmp_path / "node001.toml")]
    assert any("no strict majority" in w["message"] for w in report.warnings)


def test_digest_is_recomputed_not_trusted(base, tmp_path) -> None:
    paths = write_fleet(base, str(tmp_path), 4, {})
    # tamper: a stored digest that claims another group, on an unchanged host
    text = pathlib.Path(paths[1]).read_text(encoding="utf-8")
    fake = "sha256:" + "0" * 64
    assert text.count(digest(host_snapshot(base, 1))) == 1
    with open(paths[1], "w", encoding="utf-8") as fh:
        fh.write(text.replace(digest(host_snapshot(base, 1)), fake))
    # hand edit: a real drift whose stored digest was left as it was
    text = pathlib.Path(paths[2]).read_text(encoding="utf-8")
    with open(paths[2], "w", encoding="utf-8") as fh:
        fh.write(text.replace('release = "5.15.0-131-generic"', 'release = "6.1.0-1-generic"'))
    report = fleet.run_fleet([str(tmp_path)])
    assert [len(m) for _, m in report.groups] == [3, 1]
    assert paths[1] in report.groups[0][1]  # grouped by content despite the fake stored digest
    assert [o["snapshot"] for o in report.outliers] == [paths[2]]
    assert report.outliers[0]["findings"][0]["path"] == "system.kernel.release"
    assert {w["file"] for w in report.warnings} == {paths[1], paths[2]}
    assert all("stored digest" in w["message"] and "differs from content" in w["message"] for w in report.warnings)


# -- bad input -----------------------------------------------------------------------------------------------------


def test_bad_files_are_skipped_not_fatal(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path), 3, {})
    (tmp_path / "empty.toml").write_bytes(b"")
    (tmp_path / "broken.toml").write_text("[hoststate\n")
    (tmp_path / "other.toml").write_text('title = "not a snapshot"\n')
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "notes.txt").write_text("ignored: not *.toml")
    (tmp_path / ".hidden.toml").write_text("ignored: hidden")
    missing = str(tmp_path / "gone.toml")
    report = fleet.run_fleet([str(tmp_path), missing])
    assert report.total == 3 and len(report.groups) == 1 and report.exit_code == 1  # a gate fails on a bad file
    skipped = {os.path.basename(s["file"]): s["error"] for s in report.skipped}
    assert set(skipped) == {"empty.toml", "broken.toml", "other.toml", "binary.toml", "gone.toml"}
    assert skipped["empty.toml"] == "empty file"
    assert skipped["broken.toml"].startswith("not valid TOML")
    assert skipped["other.toml"].startswith("not a hoststate snapshot")
    assert skipped["gone.toml"] == "no such file or directory"
    assert all("\n" not in e for e in skipped.values())
    proc = run_cli("fleet", str(tmp_path), missing)
    assert proc.returncode == 1, proc.stderr
    assert "SKIPPED (5: unreadable or not a snapshot; the gate fails)" in proc.stdout
    assert proc.stdout.index("SKIPPED") < proc.stdout.index("groups:")


def test_unreadable_file_is_skipped(base, tmp_path) -> None:
    """EACCES injected at open (tests run as root in CI, where chmod 000 does not stop a read)."""
    import errno

    from tests.faults import inject

    paths = write_fleet(base, str(tmp_path), 2, {})
    with inject({paths[0]: errno.EACCES}):
        report = fleet.run_fleet([str(tmp_path)], jobs=1)
    assert report.skipped == [{"file": paths[0], "error": "cannot read snapshot: Permission denied"}]
    assert report.total == 1


def test_no_readable_snapshot_is_exit_two(tmp_path) -> None:
    (tmp_path / "broken.toml").write_text("[hoststate\n")
    with pytest.raises(InputError, match="no readable snapshot"):
        fleet.run_fleet([str(tmp_path)])
    for args in ([str(tmp_path)], [str(tmp_path / "nothing-here")]):
        proc = run_cli("fleet", *args)
        assert proc.returncode == 2, proc.stdout
        assert proc.stderr.startswith("hoststate: no readable snapshot") and len(proc.stderr.splitlines()) == 1
    proc = run_cli("fleet")
    assert proc.returncode == 2  # usage: FILES-or-DIRS is required


def test_files_and_dirs_mixed_each_read_once(base, tmp_path) -> None:
    paths = write_fleet(base, str(tmp_path / "d"), 3, {})
    report = fleet.run_fleet([paths[0], str(tmp_path / "d"), paths[0]])
    assert report.total == 3
    assert report.groups[0][1] == sorted(paths)


def test_nested_directories_are_walked_sorted(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path / "rack2"), 2, {})
    write_fleet(base, str(tmp_path / "rack1"), 2, {1: DRIFTS[41]})
    report = fleet.run_fleet([str(tmp_path)])
    assert report.total == 4
    assert [o["snapshot"] for o in report.outliers] == [str(tmp_path / "rack1" / "node001.toml")]


def test_render_rejects_unknown_format(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path), 1, {})
    with pytest.raises(ValueError):
        render_fleet(fleet.run_fleet([str(tmp_path)]), "yaml")


def test_hostile_values_are_escaped_and_lines_fit(base, tmp_path) -> None:
    """Snapshots come from other hosts: a hostname or value carrying a terminal escape, a bidi override, a
    Markdown pipe or HTML must reach neither the terminal nor the table as markup, and text lines keep to 120."""
    hostile = "evil\x1b]0;owned\x07\u202egpj.exe|<img src=x>" + "w" * 300
    drifts = {1: ("", ("system", "kernel", "release"), hostile)}
    paths = write_fleet(base, str(tmp_path / "snaps"), 3, drifts)
    snap = host_snapshot(base, 1, ("system", "kernel", "release"), hostile)
    snap["hoststate"]["hostname"] = hostile[:36]
    with open(paths[1], "w", encoding="utf-8") as fh:
        fh.write(to_toml(snap))
    report = fleet.run_fleet([str(tmp_path / "snaps")])
    assert len(report.outliers) == 1
    text = render_fleet(report, "text")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "evil\\e]0;owned\\x07\\u202egpj.exe|<img src=x>" in text  # the hostname escaped, not dropped
    assert '"evil\\u001b]0;owned\\u0007' in text  # the value too
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "kernel.release" in text  # the finding's path survives the width limit
    markdown = render_fleet(report, "markdown")
    assert "\x1b" not in markdown and "\u202e" not in markdown
    assert "\\<img" in markdown and not re.search(r"(?<!\\)<img", markdown)  # HTML made inert
    rows = [line for line in markdown.splitlines() if "kernel.release" in line]
    assert rows and all(line.replace("\\|", "").count("|") == 7 for line in rows)  # six cells, no injected one


# -- a gate: outliers first and short, names whole -------------------------------------------------------------------


def test_three_outliers_in_a_hundred_hosts_fit_one_screen(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path / "snaps"), 100, DRIFTS)
    directory = "snaps"  # named as a user types it, so the screen does not depend on where tmp_path is
    proc = run_cli("fleet", directory, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) < 30 and max(map(len, lines)) <= 120, proc.stdout
    assert lines[0].startswith("100 snapshot(s), 4 group(s)") and lines[2].startswith("OUTLIERS (3 in 3 group(s))")
    assert lines.index("groups:") > max(i for i, line in enumerate(lines) if "node041.toml (node041" in line)
    for i, (path, _, _) in DRIFTS.items():  # each outlier and its finding are named
        assert any(f"node{i:03d}.toml (node{i:03d}, sweep-42): 1 invalidating" in line for line in lines)
        assert any(line.startswith(f"    {path}: ") for line in lines), path
    verbose = run_cli("fleet", directory, "-v", cwd=tmp_path).stdout.splitlines()
    assert max(map(len, verbose)) <= 120


def test_member_names_are_never_cut(base, tmp_path) -> None:
    """`node1.toml,... node3.toml` once hid node2: names are listed whole, the rest counted."""
    deep = tmp_path / ("rack-" + "x" * 4) / ("row-" + "y" * 4)
    paths = write_fleet(base, str(deep), 5, {})
    assert 40 < len(paths[0]) < 116  # three names do not fit one line, one does (also under a worker's tmp_path)
    text = render_fleet(fleet.run_fleet([str(tmp_path)]), "text")
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120
    for p in paths[:3]:  # each on a line, whole
        assert any(p in line for line in lines), (p, text)
    assert "+2 more" in text and "..." not in text.split("groups:")[1].replace("sha256:", "").split("  ", 2)[-1]


def test_an_empty_or_broken_snapshot_fails_the_gate(base, tmp_path) -> None:
    write_fleet(base, str(tmp_path), 3, {})
    assert run_cli("fleet", str(tmp_path)).returncode == 0
    (tmp_path / "node003.toml").write_bytes(b"")
    proc = run_cli("fleet", str(tmp_path))
    assert proc.returncode == 1 and "node003.toml: empty file" in proc.stdout, proc.stdout
