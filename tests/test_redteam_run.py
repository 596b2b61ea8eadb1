"""Another local user against guard --watch --attach, --attach-from-argv and results: each case is an attack as it
was found, played by the real ``nobody`` user (a forked child that dropped to its uid) in a shared folder, against
the real command line (a real child process as the benchmark, the seed's host tree, the H200's trace replayed)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest

from hoststate.run.record import content_digest, text_digest
from hoststate.run.sweep import _sidecars
from hoststate.snapshot import to_toml
from tests.conftest import HOSTS, PYTHONPATH, require
from tests.sweeps import host, write_cell
from tests.test_output_shared import _nobody, as_nobody
from tests.test_watch import HOST, guard_watch, hs

SYSTEM_PYTHON = "/usr/bin/python3"

#: A benchmark writing its result where its command line says, as vllm bench serve does (--result-dir/-filename).
WRITER = ("import json, sys\nargs = sys.argv[1:]\nfolder = args[args.index('--result-dir') + 1]\n"
          "name = args[args.index('--result-filename') + 1]\n"
          "json.dump({'completed': 100, 'output_throughput': 1000.0}, open(folder + '/' + name, 'w'))\n")


@pytest.fixture
def shared() -> Iterator[pathlib.Path]:
    """A folder every user can reach (pytest's tmp_path is root's alone)."""
    require(os.geteuid() == 0, "playing another user needs root (CI runs as root)")
    top = pathlib.Path(tempfile.mkdtemp(prefix="hs-redteam-", dir="/tmp"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)  # shutil.rmtree recurses: 1500 folders deep is too deep


@pytest.fixture
def host_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the seed host's tree, and a baseline snapshot of it (``base.toml``), as tests/test_watch.py has."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-baseline", root, symlinks=True)
    proc = hs("snap", "-q", "--root", str(root), *HOST, "-o", "base.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return root


def results(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hoststate", "results", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})


def _sticky(path: pathlib.Path) -> pathlib.Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    return path


def _forge(folder: pathlib.Path, source: str, name: str, **numbers: float) -> None:
    """A copy of cell ``source`` as cell ``name`` with ``numbers`` changed, every digest and name computed again
    (what anyone who can read a cell can do)."""
    res = json.loads((folder / f"{source}.json").read_text())
    side = json.loads((folder / f"{source}.hoststate.json").read_text())
    res.update(numbers)
    record = res["hoststate"]
    record["sidecar"] = f"{name}.hoststate.json"
    record["result_sha256"] = content_digest(res, record["result_keys"])
    side.update(record)
    (folder / f"{name}.json").write_text(json.dumps(res))
    (folder / f"{name}.hoststate.json").write_text(json.dumps(side))


# -- results: what another user puts into a shared sweep ------------------------------------------------------------


def test_a_cell_another_user_forged_in_a_shared_sweep_is_refused(shared: pathlib.Path) -> None:
    """nobody copies a cell of a sweep in a sticky shared folder with its throughput raised five-fold and its digests
    computed again: the cell was accepted (3 cells, comparable, 1000-5000); it is refused, naming its owner."""
    sweep = _sticky(shared / "sweep")
    write_cell(shared, "sweep/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(shared, "sweep/run=1.json", host(), {"output_throughput": 1001.0})
    as_nobody(lambda: _forge(sweep, "run=0", "run=7", output_throughput=5000.0))
    proc = results(str(sweep), "--metric", "output_throughput")
    assert proc.returncode == 1, proc.stdout
    assert "  UNVERIFIED  run=7.json\n      is owned by another user, user nobody (uid 65534)\n" in proc.stdout
    assert "1000-1001" in proc.stdout and "5000" not in proc.stdout


def test_another_users_links_never_bring_a_cell_into_a_sweep(shared: pathlib.Path) -> None:
    """nobody links a genuine cell of another sweep (root's, a better run) into this one: a file link was read
    through and counted as a cell of this sweep; a folder link was skipped without a word. Both are refused."""
    sweep = _sticky(shared / "sweep")
    write_cell(shared, "sweep/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(shared, "other/run=5.json", host(), {"output_throughput": 1400.0})

    def link() -> None:
        for name in ("run=5.json", "run=5.hoststate.json"):
            os.symlink(shared / "other" / name, sweep / name)
        os.symlink(shared / "other", sweep / "more")

    as_nobody(link)
    proc = results(str(sweep), "--metric", "output_throughput", "--format", "json")
    assert proc.returncode == 1, proc.stdout
    refused = {r["cell"]: r["problem"] for r in json.loads(proc.stdout)["refused"]}
    assert refused["run=5.json"].startswith("is a symbolic link (not followed")
    assert refused["more"] == "a symbolic link to a folder: not followed"
    assert [g["cells"] for g in json.loads(proc.stdout)["groups"]] == [["run=0.json"]]


def test_another_users_files_in_a_shared_sweep_are_refused_unread(shared: pathlib.Path) -> None:
    """nobody's FIFO (no writer: an open would block), a link loop, a link to /proc, a 300 MiB file, an
    unreadable folder: refused at once by who owns them, never opened, never a hang or a crash."""
    sweep = _sticky(shared / "sweep")
    write_cell(shared, "sweep/run=0.json", host(), {"output_throughput": 1000.0})

    def plant() -> None:
        os.mkfifo(sweep / "run=1.json")
        os.symlink("loop.json", sweep / "loop.json")
        os.symlink("/proc/self/environ", sweep / "run=2.json")
        with open(sweep / "run=3.json", "wb") as fh:
            fh.truncate(300 << 20)
        (sweep / "hidden").mkdir(mode=0o700)
        (sweep / "hidden" / "run=4.json").write_text("{}")
        (sweep / "hidden").chmod(0o000)

    as_nobody(plant)
    proc = results(str(sweep), "--format", "json")  # as root: the unreadable folder is readable, and nobody's
    assert proc.returncode == 1, proc.stderr
    refused = {r["cell"]: r["problem"] for r in json.loads(proc.stdout)["refused"]}
    assert refused["run=1.json"] == refused["run=3.json"] == "is owned by another user, user nobody (uid 65534)"
    assert refused["loop.json"].startswith("is a symbolic link") and refused["run=2.json"].startswith("is a symbolic")
    assert refused["hidden"].startswith("a folder that is owned by another user, user nobody (uid 65534): not sear")


def test_another_users_folder_thousands_deep_is_never_walked(shared: pathlib.Path) -> None:
    """nobody nests folders 1500 deep in a shared sweep: os.walk recursed into them and results ended in a
    RecursionError. Another user's folder is refused and not entered; one of ours deeper than 32 is not searched."""
    sweep = _sticky(shared / "sweep")
    write_cell(shared, "sweep/run=0.json", host(), {"output_throughput": 1000.0})

    def nest(top: pathlib.Path, depth: int) -> None:
        fd = os.open(top, os.O_RDONLY)
        for _ in range(depth):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(fd)

    as_nobody(lambda: nest(sweep, 1500))
    proc = results(str(sweep), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["refused"] == [
        {"cell": "a", "problem": "a folder that is owned by another user, user nobody (uid 65534): not searched "
                                 "(another user could add, move or remove cells in it)"}]
    os.rename(sweep / "a", shared / "ours")
    ours = shared / "ours"
    subprocess.run(["chown", "-R", "0:0", str(ours)], check=True)  # the same tree, ours now
    proc = results(str(ours), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    [refused] = json.loads(proc.stdout)["refused"]
    assert refused == {"cell": "a/" * 32 + "a", "problem": "a folder deeper than 32 below the sweep's: not searched"}


def test_a_sweep_in_a_folder_others_can_write_is_refused(shared: pathlib.Path) -> None:
    """A sweep folder anyone may write and that is not sticky: nobody removed the cell judged invalid, and the
    two left were comparable. Every cell of such a folder is refused (cells could be added, moved or removed)."""
    sweep = shared / "sweep"
    write_cell(shared, "sweep/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(shared, "sweep/run=1.json", host(), {"output_throughput": 1001.0})
    write_cell(shared, "sweep/run=2.json", host(), {"output_throughput": 600.0}, verdict="invalid",
               reasons=[{"verdict": "invalid", "metric": "foreign_processes", "value": 1, "text": "another process"}])
    sweep.chmod(0o777)
    as_nobody(lambda: [os.unlink(sweep / n) for n in ("run=2.json", "run=2.hoststate.json")])
    proc = results(str(sweep), "--format", "json")
    assert proc.returncode == 1, proc.stdout
    problems = {r["problem"] for r in json.loads(proc.stdout)["refused"]}
    assert problems == {"the sweep's folder can be written by other users: another user could add, move or "
                        "remove its cells"}


def _swapped_by_nobody(shared: pathlib.Path) -> pathlib.Path:
    """Two sweeps of ours, exp (1000 tok/s) and the older exp-old (1400), each in a folder of ours alone, in a team
    folder anyone may write (no sticky bit), whose names nobody then swapped: the team folder."""
    team = shared / "team"
    write_cell(shared, "team/exp/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(shared, "team/exp-old/run=0.json", host(), {"output_throughput": 1400.0})
    team.chmod(0o777)
    swap = [(team / "exp", team / "t"), (team / "exp-old", team / "exp"), (team / "t", team / "exp-old")]
    as_nobody(lambda: [os.rename(a, b) for a, b in swap])
    return team


def test_a_sweep_another_user_could_swap_for_another_is_refused(shared: pathlib.Path) -> None:
    """Two sweeps of ours, each in a folder of ours alone, in a team folder anyone may write (no sticky bit): nobody
    swapped their names, and results reported the older sweep's cells (another day's numbers, genuinely stamped) as
    the named one's. A sweep folder whose parent another user may write is refused."""
    team = _swapped_by_nobody(shared)
    assert json.loads((team / "exp" / "run=0.json").read_text())["output_throughput"] == 1400.0  # swapped
    proc = results(str(team / "exp"), "--format", "json")
    assert proc.returncode == 1, proc.stdout
    report = json.loads(proc.stdout)
    assert report["groups"] == []
    assert {r["problem"] for r in report["refused"]} == {
        f"the sweep's folder sits in {team}, which can be written by other users: another user could put another "
        "folder in its place"}
    team.chmod(0o1777)  # sticky: nobody can no longer rename our folders
    assert results(str(team / "exp")).returncode == 0


def test_a_result_named_in_a_folder_another_user_could_swap_is_refused(shared: pathlib.Path) -> None:
    """A result named on its own, its folder ours alone, in a team folder anyone may write (no sticky bit): nobody
    swapped that folder with an older experiment of ours, and results reported the older cell of the same name (its
    record names its sidecar by name only) as the named one. Refused, as a named sweep folder is there; in its own
    folder anyone may write it is refused too."""
    team = _swapped_by_nobody(shared)
    named = team / "exp" / "run=0.json"
    assert json.loads(named.read_text())["output_throughput"] == 1400.0  # swapped
    proc = results(str(named), "--format", "json")
    assert proc.returncode == 1, proc.stdout
    report = json.loads(proc.stdout)
    assert report["groups"] == [] and report["refused"] == [{
        "cell": str(named), "problem": f"its folder sits in {team}, which can be written by other users: another "
                                      "user could have put another cell in its place"}]
    team.chmod(0o1777)  # sticky: nobody can no longer rename our folders
    assert results(str(named)).returncode == 0
    (team / "exp").chmod(0o777)
    assert "its folder can be written by other users" in results(str(named)).stdout


def test_a_record_of_the_wrong_shape_is_refused_not_a_crash(tmp_path: pathlib.Path) -> None:
    """A record whose reasons are not a list (its sidecar's copy alike): results ended in a TypeError."""
    write_cell(tmp_path, "sweep/run=0.json", host(), {"output_throughput": 1000.0}, verdict="invalid")
    for name in ("run=0.json", "run=0.hoststate.json"):
        path = tmp_path / "sweep" / name
        data = json.loads(path.read_text())
        (data.get("hoststate") or data)["reasons"] = 5
        path.write_text(json.dumps(data))
    proc = results(str(tmp_path / "sweep"))
    assert proc.returncode == 1, proc.stderr
    assert "      record's reasons is not a list\n" in proc.stdout


def test_a_number_beyond_a_float_keeps_its_digest_exact() -> None:
    """The digest took every number as a float: 2**53 + 1 read as 2**53 (an edit that kept the stamp), and an int
    beyond a float's range raised OverflowError (guard's attach and results ended in an internal error)."""
    assert content_digest({"completed": 2**53 + 1}) != content_digest({"completed": 2**53})
    assert content_digest({"completed": 10**400}) != content_digest({"completed": 10**400 + 1})
    assert content_digest({"completed": 100}) == content_digest({"completed": 100.0})


def test_a_result_holding_a_huge_integer_is_stamped(tmp_path: pathlib.Path, host_tree: pathlib.Path) -> None:
    writer = "open('r.json', 'w').write('{\"completed\": 1' + '0' * 400 + '}')"
    proc = guard_watch(tmp_path, host_tree, "base.toml", "dense-b", "--attach", "r.json",
                       cmd=(sys.executable, "-c", writer))
    assert proc.returncode == 0, proc.stderr
    assert "hoststate guard: attached to r.json" in proc.stderr
    assert results(str(tmp_path / "r.json")).returncode == 0


# -- guard --watch --attach: what another user does to the result's folder ---------------------------------------


def test_a_result_in_another_users_folder_is_not_stamped(tmp_path: pathlib.Path, host_tree: pathlib.Path,
                                                         shared: pathlib.Path) -> None:
    """The benchmark wrote its result into a folder nobody owns: the stamp was attached, and nobody could then
    move, replace or remove stamped cells at will. Not stamped; the sidecar still records the run."""
    folder = shared / "theirs"
    uid, gid = _nobody()
    folder.mkdir()
    os.chown(folder, uid, gid)
    result = folder / "run=0.json"
    proc = guard_watch(tmp_path, host_tree, "base.toml", "dense-b", "--attach", str(result),
                       cmd=(sys.executable, "-c", WRITER, "--result-dir", str(folder), "--result-filename",
                            "run=0.json"))
    assert proc.returncode == 0, proc.stderr
    assert f"not attached: {result}: its folder is owned by another user, user nobody (uid 65534)" in proc.stderr
    assert "hoststate" not in json.loads(result.read_text())
    assert results(str(folder)).returncode == 1


def test_a_result_in_a_folder_anyone_can_write_is_not_stamped(tmp_path: pathlib.Path, host_tree: pathlib.Path,
                                                              shared: pathlib.Path) -> None:
    folder = shared / "open"
    folder.mkdir()
    folder.chmod(0o777)
    result = folder / "run=0.json"
    proc = guard_watch(tmp_path, host_tree, "base.toml", "dense-b", "--attach", str(result),
                       cmd=(sys.executable, "-c", WRITER, "--result-dir", str(folder), "--result-filename",
                            "run=0.json"))
    assert f"not attached: {result}: its folder can be written by other users; not stamped" in proc.stderr


def test_a_result_whose_folder_another_user_could_swap_is_not_stamped(tmp_path: pathlib.Path, host_tree: pathlib.Path,
                                                                      shared: pathlib.Path) -> None:
    """Two experiment folders of ours, both ours alone, in a team folder others may write (no sticky bit). As the
    benchmark ends, nobody (a real process of theirs) swaps their names: the older experiment's ``run=0.json``, a
    number measured on another day, then stood where the run's result was, and got this run's stamp, which
    ``results`` believed. Every folder above the result is checked too: not stamped, and results refuses it."""
    team = shared / "team"
    team.mkdir()
    team.chmod(0o777)
    now, old = team / "exp", team / "exp-old"
    for folder in (now, old):
        folder.mkdir(mode=0o755)
    (old / "run=0.json").write_text(json.dumps({"completed": 100, "output_throughput": 9999.0}))
    uid, gid = _nobody()
    swap = (f"import os; os.rename({str(now)!r}, {str(team / 't')!r}); os.rename({str(old)!r}, {str(now)!r}); "
            f"os.rename({str(team / 't')!r}, {str(old)!r})")
    bench = WRITER + (f"import subprocess\nsubprocess.run([{SYSTEM_PYTHON!r}, '-c', {swap!r}], user={uid}, "
                      f"group={gid}, extra_groups=[], check=True)\n")
    result = now / "run=0.json"
    proc = guard_watch(tmp_path, host_tree, "base.toml", "dense-b", "--attach", str(result),
                       cmd=(sys.executable, "-c", bench, "--result-dir", str(now), "--result-filename", "run=0.json"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(result.read_text())["output_throughput"] == 9999.0  # nobody's swap was made
    assert (f"not attached: {result}: its folder sits in {team}, which can be written by other users; "
            "not stamped") in proc.stderr, proc.stderr
    assert "hoststate" not in json.loads(result.read_text())
    assert results(str(result)).returncode == 1


def test_a_result_and_sidecar_another_user_placed_first_are_never_stamped(tmp_path: pathlib.Path,
                                                                          host_tree: pathlib.Path,
                                                                          shared: pathlib.Path) -> None:
    """In a sticky shared folder nobody places the result's name first (mode 0666: the benchmark, run as root,
    writes into their file) and the sidecar's name as a link to a forged sidecar of theirs: nothing is stamped or
    written through, and results refuses the cell."""
    folder = _sticky(shared / "sweep")
    result = folder / "run=0.json"

    def plant() -> None:
        fd = os.open(result, os.O_CREAT | os.O_WRONLY, 0o666)
        os.fchmod(fd, 0o666)
        os.close(fd)
        (folder / "forged.json").write_text("{}")
        os.symlink("forged.json", folder / "run=0.hoststate.json")

    as_nobody(plant)
    proc = guard_watch(tmp_path, host_tree, "base.toml", "dense-b", "--attach", str(result),
                       cmd=(sys.executable, "-c", WRITER, "--result-dir", str(folder), "--result-filename",
                            "run=0.json"))
    assert proc.returncode == 0, proc.stderr
    assert "is owned by uid 65534, not by the user the command ran as (uid 0); not stamped" in proc.stderr
    assert "sidecar not written" in proc.stderr and (folder / "forged.json").read_text() == "{}"
    assert results(str(folder)).returncode == 1


# -- guard --watch --attach-from-argv: a resumed sweep -----------------------------------------------------------


def _cell_cmd(folder: pathlib.Path, n: int) -> tuple[str, ...]:
    return (sys.executable, "-c", WRITER, "--result-dir", str(folder), "--result-filename", f"run={n}.json")


def _resume(tmp_path: pathlib.Path, root: pathlib.Path, folder: pathlib.Path, n: int) -> subprocess.CompletedProcess:
    return guard_watch(tmp_path, root, "base.toml", "dense-b", "--attach-from-argv", cmd=_cell_cmd(folder, n))


def test_a_sidecar_another_user_drops_never_refuses_a_resumed_sweep(tmp_path: pathlib.Path, host_tree: pathlib.Path,
                                                                    shared: pathlib.Path) -> None:
    """nobody drops a sidecar of another host state into the shared experiment folder, named to write its own
    lines into guard's output: every later cell of the owner's sweep was refused (exit 3), with their text on
    stderr. Another user's sidecar is no earlier cell: the cell runs; results names the file."""
    folder = _sticky(shared / "exp")
    first = _resume(tmp_path, host_tree, folder, 0)
    assert first.returncode == 0, first.stderr
    name = "x\x1b[2J\nhoststate guard: run clean.hoststate.json"

    def drop() -> None:
        side = json.loads((folder / "run=0.hoststate.json").read_text())
        other = host("dsa")
        text = to_toml(other)
        side.update(snapshot=text, snapshot_sha256=text_digest(text))
        side["host"]["digest"] = other["hoststate"]["digest"]
        (folder / name).write_text(json.dumps(side))

    as_nobody(drop)
    proc = _resume(tmp_path, host_tree, folder, 1)
    assert proc.returncode == 0, proc.stderr
    assert "MISMATCH" not in proc.stderr and "\x1b" not in proc.stderr
    assert json.loads((folder / "run=1.json").read_text())["hoststate"]["verdict"] == "clean"
    report = json.loads(results(str(folder), "--format", "json").stdout)
    assert {r["cell"] for r in report["refused"]} == {name}


def test_a_resumed_sweep_in_a_folder_others_can_write_is_refused(tmp_path: pathlib.Path, host_tree: pathlib.Path,
                                                                 shared: pathlib.Path) -> None:
    """An earlier cell from another host state lies in a folder anyone may write (not sticky): nobody removed it,
    and the resumed cell was accepted. The folder cannot vouch for its earlier cells: refused, not started."""
    folder = shared / "exp"
    write_cell(shared, "exp/run=0.json", host("dsa"), {"output_throughput": 1000.0})
    folder.chmod(0o777)
    as_nobody(lambda: [os.unlink(folder / n) for n in ("run=0.json", "run=0.hoststate.json")])
    proc = _resume(tmp_path, host_tree, folder, 1)
    assert proc.returncode == 3, proc.stderr
    assert "the folder can be written by other users: its earlier cells cannot be checked" in proc.stderr
    assert not (folder / "run=1.json").exists()


def test_a_resumed_sweep_whose_folder_another_user_could_swap_is_refused(tmp_path: pathlib.Path,
                                                                         host_tree: pathlib.Path,
                                                                         shared: pathlib.Path) -> None:
    """The experiment folder is ours alone, but sits in a team folder anyone may write: nobody swapped it for an
    empty folder of ours, the earlier cell from another host state was out of sight, and the resumed cell was
    accepted. A folder above that another user may write cannot vouch for the earlier cells: refused, not started."""
    team = shared / "team"
    folder = team / "exp"
    write_cell(shared, "team/exp/run=0.json", host("dsa"), {"output_throughput": 1000.0})
    team.chmod(0o777)
    (team / "empty").mkdir(mode=0o755)
    swap = [(folder, team / "t"), (team / "empty", folder)]
    as_nobody(lambda: [os.rename(a, b) for a, b in swap])
    proc = _resume(tmp_path, host_tree, folder, 1)
    assert proc.returncode == 3, proc.stderr
    assert f"MISMATCH  {folder}: the folder s" in proc.stderr and "its earlier cells cannot be checked" in proc.stderr
    assert not (folder / "run=1.json").exists()
    problems: list[str] = []
    _sidecars(str(folder / "run=1.json"), problems)
    assert problems == [f"{folder}: the folder sits in {team}, which can be written by other users: its earlier "
                        "cells cannot be checked"]


def test_a_combination_folder_another_user_links_in_is_not_an_earlier_cell(tmp_path: pathlib.Path,
                                                                           host_tree: pathlib.Path,
                                                                           shared: pathlib.Path) -> None:
    """nobody links a folder of root's old cells (another host state) into the experiment as a combination
    folder (``SERVE-...``): its cells were read as this sweep's and refused every later cell."""
    folder = _sticky(shared / "exp")
    write_cell(shared, "old/run=0.json", host("dsa"), {"output_throughput": 1000.0})
    as_nobody(lambda: os.symlink(shared / "old", folder / "SERVE--old"))
    proc = _resume(tmp_path, host_tree, folder, 0)
    assert proc.returncode == 0, proc.stderr
    assert "MISMATCH" not in proc.stderr


def test_an_earlier_cell_is_weighed_by_its_snapshot_not_by_the_digest_its_record_claims(
        tmp_path: pathlib.Path, host_tree: pathlib.Path, shared: pathlib.Path) -> None:
    """An earlier sidecar whose record claims this host's digest but holds another host state's snapshot was taken
    at its word (the resumed cell ran); its snapshot's own digest, recomputed, decides."""
    folder = _sticky(shared / "exp")
    assert _resume(tmp_path, host_tree, folder, 0).returncode == 0
    here = json.loads((folder / "run=0.json").read_text())["hoststate"]["host"]["digest"]
    side = write_cell(shared, "exp/run=5.json", host("dsa"), {"output_throughput": 1000.0}).with_name(
        "run=5.hoststate.json")
    data = json.loads(side.read_text())
    data["host"]["digest"] = here
    side.write_text(json.dumps(data))
    proc = _resume(tmp_path, host_tree, folder, 1)
    assert proc.returncode == 3, proc.stderr
    assert "  MISMATCH  run=5.hoststate.json: another host state (" in proc.stderr
