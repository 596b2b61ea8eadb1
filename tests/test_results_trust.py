"""Whose cells ``hoststate results`` believes when other users share the folders: a forged cell another user adds
to a shared folder is refused however it is named (a folder, or each file by a shell glob), a folder another user
swapped in for the one named vouches for no one, a colleague's sweep in a folder only they can write is read, and
another user's link to a cell hides nothing. Real files owned by nobody (uid 65534), as root makes them."""

from __future__ import annotations

import os
import pathlib

import pytest

from hoststate.filetrust import placed_by_owner, trusted_uids
from hoststate.results import check_results
from tests.conftest import require
from tests.sweeps import host, write_cell

NOBODY = 65534


@pytest.fixture(autouse=True)
def _root() -> None:
    require(os.geteuid() == 0, "only root can give files to another user (CI runs as root)")


def _give(path: pathlib.Path, uid: int = NOBODY) -> None:
    """``path`` (and a result's sidecar beside it) now owned by ``uid``, as if that user had written it."""
    os.chown(path, uid, uid, follow_symlinks=False)
    side = path.with_name(path.name[: -len(".json")] + ".hoststate.json")
    if side.exists():
        os.chown(side, uid, uid)


def _shared(tmp_path: pathlib.Path) -> pathlib.Path:
    write_cell(tmp_path, "shared/sweep/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(tmp_path, "shared/sweep/run=1.json", host(), {"output_throughput": 1001.0})
    return tmp_path / "shared" / "sweep"


@pytest.mark.parametrize("mode", [0o1777, 0o777], ids=["sticky", "world-writable"])
def test_a_cell_another_user_adds_to_a_shared_folder_is_refused_however_it_is_named(tmp_path: pathlib.Path,
                                                                                    mode: int) -> None:
    folder = _shared(tmp_path)
    forged = write_cell(tmp_path, "shared/sweep/run=7.json", host(), {"output_throughput": 5000.0})
    _give(forged)  # a valid record: its digests are anyone's to compute
    folder.chmod(mode)
    for named in ([str(folder)], sorted(str(p) for p in folder.glob("*.json"))):  # the folder; a shell glob
        report = check_results(named)
        assert report.refused, named
        assert any("run=7" in r["cell"] for r in report.refused_cells) or report.reasons, named
        assert NOBODY not in trusted_uids(*named)


def test_a_folder_another_user_swapped_in_for_the_one_named_vouches_for_no_one(tmp_path: pathlib.Path) -> None:
    """proj is writable by anyone (not sticky): nobody renamed the real sweep away and made their own."""
    proj = tmp_path / "proj"
    write_cell(tmp_path, "proj/sweep/run=0.json", host(), {"output_throughput": 1000.0})
    write_cell(tmp_path, "proj/sweep/run=1.json", host(), {"output_throughput": 1400.0})
    for cell in (proj / "sweep").iterdir():
        _give(cell)
    _give(proj / "sweep")
    proj.chmod(0o777)
    report = check_results([str(proj / "sweep")])
    assert report.refused and "owned by another user" in str(report.refused_cells)
    assert not placed_by_owner(str(proj / "sweep"), (proj / "sweep").stat())
    proj.chmod(0o755)  # only root could have put it there: a colleague's sweep, named, is read
    report = check_results([str(proj / "sweep")])
    assert not report.refused and len(report.groups[0].cells) == 2
    assert NOBODY in trusted_uids(str(proj / "sweep"))


def test_a_link_another_user_adds_to_a_shared_folder_vouches_for_no_one(tmp_path: pathlib.Path) -> None:
    """nobody adds to a sticky shared sweep a link named like a cell, pointing into a folder of their own (0755,
    theirs) that holds a forged cell, and a sidecar beside the link: a glob names the link, and its target's owner
    is still not trusted."""
    folder = _shared(tmp_path)
    own = tmp_path / "nobodys"
    forged = write_cell(tmp_path, "nobodys/run=7.json", host(), {"output_throughput": 5000.0})
    _give(forged)
    _give(own)
    link = folder / "run=7.json"
    link.symlink_to(forged)
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    side = folder / "run=7.hoststate.json"
    side.write_bytes(forged.with_name("run=7.hoststate.json").read_bytes())
    _give(side)
    folder.chmod(0o1777)
    named = sorted(str(p) for p in folder.glob("*.json"))
    assert NOBODY not in trusted_uids(*named)
    report = check_results(named)
    assert report.refused and any("run=7" in r["cell"] for r in report.refused_cells)
    assert all(c.path != str(link) for g in report.groups for c in g.cells)


def test_another_users_link_to_a_cell_hides_nothing(tmp_path: pathlib.Path) -> None:
    """A link nobody made to a cell judged invalid is refused, and the cell it points to is still read and still
    refuses the sweep as invalid (it is not taken as read because the link reached it first)."""
    write_cell(tmp_path, "sweep/run=0.json", host(), {})
    write_cell(tmp_path, "sweep/run=2.json", host(), {}, verdict="invalid",
               reasons=({"verdict": "invalid", "text": "a GPU reported an XID error during the run: 1"},))
    link = tmp_path / "sweep" / "a.json"
    link.symlink_to("run=2.json")
    os.chown(link, NOBODY, NOBODY, follow_symlinks=False)
    (tmp_path / "sweep").chmod(0o1777)
    report = check_results([str(tmp_path / "sweep")])
    assert any(r["cell"].endswith("a.json") and "symbolic link" in r["problem"] for r in report.refused_cells)
    assert "runs judged invalid" in report.reasons
    assert sum(len(g.cells) for g in report.groups) == 2


def test_a_link_within_a_links_target_is_checked_too(tmp_path: pathlib.Path) -> None:
    """Root's own link, in root's folder, pointing through another user's link in a sticky folder: the walk follows
    the kernel's resolution (hoststate.filetrust.links_on_the_way), so the inner link counts as the outer one."""
    from hoststate.filetrust import links_on_the_way

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "cell.json").write_text("{}")
    _give(theirs / "cell.json")
    _give(theirs)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a").symlink_to(theirs)
    os.chown(shared / "a", NOBODY, NOBODY, follow_symlinks=False)
    shared.chmod(0o1777)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "cell.json").symlink_to(shared / "a" / "cell.json")
    named = str(mine / "cell.json")
    assert [link for link, _st, _folder in links_on_the_way(named)] == [named, str(shared / "a")]
    assert not placed_by_owner(named, os.stat(named))
    assert NOBODY not in trusted_uids(named)
    shared.chmod(0o755)  # only root could have put the inner link there: nobody's cell, named, is placed
    assert placed_by_owner(named, os.stat(named))
    os.chown(shared / "a", 1, 1, follow_symlinks=False)  # a third user's link: neither root's nor the cell owner's
    assert not placed_by_owner(named, os.stat(named))
