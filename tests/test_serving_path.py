"""Packages by serving path: which of a server's packages it loaded (hoststate/collectors/vllm/placement.py
serving_path, from its /proc/PID/maps), a patch release of one it did not load rated a warning, and a server's
packages never read from this interpreter under --root."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from hoststate.collectors import Context
from hoststate.collectors import vllm as vllm_collector
from hoststate.collectors.vllm import placement
from hoststate.diff import compare
from tests.conftest import HOSTS

TREE = HOSTS / "vllm-container"
MAPS = (TREE / "proc" / "4242" / "maps").read_text()
PACKAGES = {"vllm": "0.11.0", "torch": "2.8.0", "transformers": "4.57.1", "nvidia-nccl-cu12": "2.27.3",
            "nvidia-cublas-cu12": "12.8.4.1", "nvidia-cufft-cu12": "11.3.3.83", "xformers": "0.0.32",
            "flashinfer-python": "0.3.1", "deep-gemm": "2.1.0"}


def test_the_serving_path_is_what_the_server_mapped_and_what_vllm_always_imports():
    assert placement.serving_path(MAPS, PACKAGES) == ["nvidia-cublas-cu12", "nvidia-nccl-cu12", "torch",
                                                      "transformers", "vllm"]
    jit = MAPS + ("7f00-7f01 r-xp 0 00:00 1 /root/.cache/flashinfer/0.3.1/90a/cached_ops/decode/decode.so\n"
                  "7f00-7f01 r-xp 0 00:00 1 /opt/venv/lib/python3.12/site-packages/xformers/_C.so\n")
    assert {"flashinfer-python", "xformers"} <= set(placement.serving_path(jit, PACKAGES))


def _server(version: dict[str, str], maps: str, tmp_path: Path, name: str) -> dict:
    """A snapshot's vllm table as the collector assembles one server: its packages and the facts of its tree."""
    tree = tmp_path / name
    import shutil

    shutil.copytree(TREE, tree, symlinks=True)
    (tree / "proc" / "4242" / "maps").write_text(maps)
    unreadable: dict[str, str] = {}
    facts = placement.server_facts(4242, {}, unreadable, root=str(tree), packages=version)
    return {"hoststate": {}, "collectors": {"vllm": {"status": "ok"}}, "vllm": {"packages": version, **facts}}


def _rating(before: dict, after: dict, package: str) -> str:
    (found,) = [f for f in compare(before, after).findings if f.path == f"vllm.packages.{package}"]
    return found.severity


def test_a_patch_release_off_the_serving_path_is_a_warning_on_it_invalidating(tmp_path):
    base = _server(PACKAGES, MAPS, tmp_path, "a")
    for package, new, expected in (
            ("xformers", "0.0.33", "warning"),  # not loaded, patch release
            ("nvidia-cufft-cu12", "11.3.3.90", "warning"),
            ("xformers", "0.1.0", "invalidating"),  # a minor release may be chosen where the old was not
            ("nvidia-nccl-cu12", "2.27.5", "invalidating"),  # loaded: any release
            ("torch", "2.8.1", "invalidating"), ("transformers", "4.57.2", "invalidating")):  # always imported
        after = _server({**PACKAGES, package: new}, MAPS, tmp_path, f"{package}-{new}")
        assert _rating(base, after, package) == expected, (package, new)


def test_without_the_servers_maps_every_release_of_the_stack_is_invalidating(tmp_path):
    base, after = _server(PACKAGES, MAPS, tmp_path, "a"), _server({**PACKAGES, "xformers": "0.0.33"}, MAPS,
                                                                  tmp_path, "b")
    for snap in (base, after):
        snap["vllm"].pop("serving_path")
    assert _rating(base, after, "xformers") == "invalidating"
    unread = copy.deepcopy(after)
    unread["collectors"]["vllm"]["unreadable"] = {"serving_path": "denied: EACCES [proc/4242/maps]"}
    assert _rating(_server(PACKAGES, MAPS, tmp_path, "c"), unread, "xformers") == "invalidating"


def test_under_root_the_servers_packages_are_skipped_not_read_from_this_interpreter(tmp_path, monkeypatch):
    """Installing a package between two snaps of a seed tree (here: a distribution put first on this
    interpreter's path) changes nothing in vllm: both sides skipped the server's packages."""
    from hoststate.capture import collect

    cmd = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2"
    ctx = Context(root=str(HOSTS / "seed-baseline"), vllm_cmd=cmd, vllm_version="0.11.0")
    before = collect(ctx, ("vllm",))
    site = tmp_path / "site"
    (site / "pyperf-2.99.0.dist-info").mkdir(parents=True)
    (site / "pyperf-2.99.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: pyperf\nVersion: 2.99.0\n")
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    after = collect(ctx, ("vllm",))
    assert "packages" not in after["vllm"] or not after["vllm"]["packages"]
    assert after["collectors"]["vllm"]["unreadable"]["packages.**"].startswith("skipped: ")
    findings = [f for f in compare(before, after).findings if not f.path.startswith("hoststate.")]
    assert all(f.severity == "info" for f in findings), findings
    assert {f.path for f in findings if f.path.startswith("vllm")} <= {"vllm.packages"}  # the others: --only


def test_live_a_vllm_cmd_still_reads_the_interpreter_it_runs_from():
    sec = vllm_collector.collect(Context(vllm_cmd="vllm serve m", vllm_version="0.12.0"))
    assert sec.data.get("packages") and vllm_collector.SKIPPED_PACKAGES not in sec.unreadable
