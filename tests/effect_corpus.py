"""Take the two snapshots of each case of tests/data/effect_corpus.toml with hoststate's own collectors and rate
them with the default policy; ``python -m tests.effect_corpus`` prints the agreement with the verdicts written in
the file.

Kinds (see the data file's head): file, env, cmd and package go through scripts/precision_table.py's Workspace
(a copy of a fixture host tree, this process's environment, a --vllm-cmd, a distribution on the import path);
nvml edits one call of a copy of an NVML replay; p2p the hgx-p2p tree; server the vllm-container tree's server;
process a real child process read with --vllm-pid.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hoststate.snapshot import toml_loads

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "effect_corpus.toml"
HOSTS = REPO / "fixtures" / "hosts"
NVML = REPO / "fixtures" / "nvml"
#: The server's packages every server case starts from (the vllm-container tree maps NCCL, cuBLAS, torch's cudart).
SERVER_PACKAGES = {"vllm": "0.11.0", "torch": "2.8.0", "transformers": "4.57.1", "nvidia-nccl-cu12": "2.27.3",
                   "nvidia-cublas-cu12": "12.8.4.1", "nvidia-cufft-cu12": "11.3.3.83", "xformers": "0.0.32",
                   "flashinfer-python": "0.3.1", "rich": "14.0.0"}
SEVERE = ("invalidating", "warning", "info", "clean")


def cases() -> list[dict[str, Any]]:
    return toml_loads(DATA.read_text())["case"]


@dataclass
class Rated:
    case: dict[str, Any]
    rating: str
    findings: list[str]

    @property
    def agrees(self) -> bool:
        return self.rating == self.case["expect"]

    @property
    def refuses_harmless(self) -> bool:
        """An engineer's "clean" or "info" rated invalidating: the guard would refuse a run for nothing, which
        teaches its users to accept everything."""
        return self.case["expect"] in ("clean", "info") and self.rating == "invalidating"

    @property
    def fails_open(self) -> bool:
        """An engineer's "invalidating" rated below it: the guard would let a re-measure through."""
        return self.case["expect"] == "invalidating" and self.rating != "invalidating"


def verdict(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, list[str]]:
    """The most severe finding between two snapshots ("clean" for none; ignore counts as clean)."""
    from hoststate.diff import compare
    from hoststate.policy import RANK

    if "hoststate" in before and "hoststate" in after:  # when and how long each snapshot took always differs
        after = {**after, "hoststate": {**before["hoststate"], "hostname": after["hoststate"].get("hostname")}}
    found = sorted(compare(before, after, include_ignored=True).findings, key=lambda f: (RANK[f.severity], f.path))
    listed = [f"{f.path}={f.severity}" for f in found]
    top = found[0].severity if found else "clean"
    return ("clean" if top == "ignore" else top), listed


class Corpus:
    """Workspaces shared by the cases: the seed host tree, NVML replays, the p2p and container trees."""

    def __init__(self) -> None:
        from scripts.precision_table import Workspace

        self.dir = Path(tempfile.mkdtemp(prefix="hoststate-corpus-"))
        self.ws = Workspace()
        self._trees: dict[str, Any] = {}  # host trees other than the seed baseline (a case's "tree"), one each
        self._libs: dict[str, Path] = {}

    def close(self) -> None:
        self.ws.close()
        for ws in self._trees.values():
            ws.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _workspace(self, tree: str | None) -> Any:
        from scripts.precision_table import Workspace

        if tree is None:
            return self.ws
        if tree not in self._trees:
            self._trees[tree] = Workspace(HOSTS / tree)
        return self._trees[tree]

    def rate(self, case: dict[str, Any]) -> Rated:
        before, after = getattr(self, f"_{case['kind']}")(case)
        rating, findings = verdict(before, after)
        return Rated(case, rating, findings)

    # -- through scripts/precision_table.py -------------------------------------------------------------------

    def _table(self, case: dict[str, Any], kind: str, edit: tuple[Any, ...]) -> tuple[dict, dict]:
        from scripts.precision_table import Case, _only

        c = Case(case["family"], case["change"], kind, edit, case["expect"])
        if kind == "file":
            c = Case("accel_config" if case["family"] == "accel-config" else
                     "dsa" if case["family"] == "dsa" else "system", c.change, kind, edit, c.expect)
        elif kind == "env":
            c = Case("env", c.change, kind, edit, c.expect)
        elif kind in ("cmd", "version"):
            c = Case("vllm", c.change, kind, edit, c.expect)
        elif kind == "package":
            c = Case(edit[0], c.change, kind, edit, c.expect)
        ws = self._workspace(case.get("tree"))
        return _only(ws.snap(c, False), c), _only(ws.snap(c, True), c)

    def _file(self, case: dict[str, Any]) -> tuple[dict, dict]:
        return self._table(case, "file", (case["path"], case.get("old"), case.get("new")))

    def _env(self, case: dict[str, Any]) -> tuple[dict, dict]:
        return self._table(case, "env", tuple(sorted(case["env"].items())))

    def _cmd(self, case: dict[str, Any]) -> tuple[dict, dict]:
        return self._table(case, "cmd", (case["cmd"],))

    def _package(self, case: dict[str, Any]) -> tuple[dict, dict]:
        return self._table(case, "package", (case["where"], case["name"], case["version"]))

    # -- NVML replays -----------------------------------------------------------------------------------------

    def _nvml_snap(self, data: dict[str, Any], server_pid: int | None = None) -> dict[str, Any]:
        from hoststate.capture import collect
        from hoststate.collectors import Context
        from hoststate.nvml_replay import ReplayNvml

        snap = collect(Context(root=str(self.ws.root), nvml=ReplayNvml(data), vllm_pid=server_pid), ("gpu",))
        return {"hoststate": snap["hoststate"], "collectors": {"gpu": snap["collectors"]["gpu"]}, "gpu": snap["gpu"]}

    def _nvml(self, case: dict[str, Any]) -> tuple[dict, dict]:
        base = json.loads((NVML / "h200.json" if case.get("occupied") else
                           NVML / f"{case.get('fixture', 'h200')}.json").read_text())
        if case.get("occupied"):
            return self._nvml_snap(base), self._nvml_snap(json.loads((NVML / "h200-occupied.json").read_text()))
        changed = copy.deepcopy(base)
        device = case.get("device", 0)
        if "swap" in case:  # two GPUs enumerated in the other order: each keeps its bus id, the indices swap
            i, j = case["swap"]
            changed["devices"][i], changed["devices"][j] = changed["devices"][j], changed["devices"][i]
        elif device < 0:
            changed["system"][case["call"]] = case["value"]
        else:
            changed["devices"][device]["calls"][case["call"]] = case["value"]
        changed["system"].update(case.get("system", {}))
        if "memory_used" in case:
            info = changed["devices"][0]["calls"]["nvmlDeviceGetMemoryInfo"]
            info.update(used=case["memory_used"], free=info["total"] - case["memory_used"])
        server = case.get("vllm_pid")  # the server named by --vllm-pid: its processes are the benchmark's
        return self._nvml_snap(base, server), self._nvml_snap(changed, server)

    # -- the PCI path of the hgx-p2p tree -------------------------------------------------------------------

    def _p2p(self, case: dict[str, Any]) -> tuple[dict, dict]:
        tree = self.dir / "p2p"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(HOSTS / "hgx-p2p", tree, symlinks=True)
        before = _p2p_snap(tree)
        target = tree / case["path"]
        if "byte" in case:
            raw = bytearray(target.read_bytes())
            raw[case["offset"]] = case["byte"]
            target.write_bytes(bytes(raw))
        else:
            target.write_text(case["new"])
        return before, _p2p_snap(tree)

    # -- the vllm-container tree's server --------------------------------------------------------------------

    def _server(self, case: dict[str, Any]) -> tuple[dict, dict]:
        def tree(name: str, new: str | None) -> Path:
            root = self.dir / name
            shutil.rmtree(root, ignore_errors=True)
            shutil.copytree(HOSTS / "vllm-container", root, symlinks=True)
            if "path" in case and new is not None:
                target = root / case["path"]
                if "rename" in case:
                    target.rename(root / case["rename"])
                elif "old" in case:
                    text = target.read_text()
                    assert case["old"] in text, case
                    target.write_text(text.replace(case["old"], new))
                else:
                    target.write_text(new)
            return root

        base_edit = case.get("base_new")
        before = _server_snap(tree("base", base_edit), SERVER_PACKAGES)
        new = case.get("new", case.get("rename"))
        after = _server_snap(tree("changed", new), {**SERVER_PACKAGES, **case.get("packages", {})})
        if "interpreter" in case:  # hoststate's own interpreter (packages.*), beside the server it reads
            for snap, extra in ((before, {}), (after, case["interpreter"])):
                snap["collectors"]["packages"] = {"status": "ok"}
                snap["packages"] = {**SERVER_PACKAGES, **extra}
        return before, after

    # -- a real child process read with --vllm-pid -----------------------------------------------------------

    def _lib(self, which: str) -> Path:
        if which not in self._libs:
            name = ctypes.util.find_library("m")
            src = next(p for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                                   "/lib/aarch64-linux-gnu") if name and os.path.exists(p := f"{d}/{name}"))
            folder = self.dir / which
            folder.mkdir(exist_ok=True)
            os.chmod(self.dir, 0o755)
            lib = folder / {"a": "libnccl.so.2.27.3", "b": "libnccl.so.2.21.5"}.get(which, "libnccl.so.2")
            shutil.copy(src, lib)
            self._libs[which] = lib
        return self._libs[which]

    def _process(self, case: dict[str, Any]) -> tuple[dict, dict]:
        dirs = {k: str(self._lib(k).parent) for k in ("a", "b", "c")}
        conf = self.dir / "nccl.conf"

        def env(extra: dict[str, str]) -> dict[str, str]:
            out = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NCCL_CONF_FILE": str(conf),
                   "LD_LIBRARY_PATH": dirs["a"]}
            out.update({k: v.format(**dirs) for k, v in extra.items()})
            return out

        before = _process_snap(env({}), self._lib("a"), conf, "")
        after = _process_snap(env(case.get("env", {})), self._lib(case.get("lib", "a")), conf, case.get("conf", ""))
        return before, after


def _p2p_snap(tree: Path) -> dict[str, Any]:
    from hoststate import io
    from hoststate.collectors import Section, settle_coverage, system

    sec = Section()
    sec.data = {"p2p": system._p2p(io.Reader(str(tree), sec.unreadable))}
    sec = settle_coverage(sec.settle(), system.SOURCES)
    entry: dict[str, Any] = {"status": sec.status, **({"unreadable": sec.unreadable} if sec.unreadable else {})}
    return {"collectors": {"system": entry}, "system": sec.data}


def _server_snap(tree: Path, packages: dict[str, str]) -> dict[str, Any]:
    from hoststate.collectors import Section, settle_coverage
    from hoststate.collectors import vllm as vllm_collector
    from hoststate.collectors.vllm import placement

    sec = Section()
    sec.data = {"packages": dict(packages), **placement.server_facts(4242, {}, sec.unreadable, root=str(tree),
                                                                      packages=packages)}
    sec = settle_coverage(sec.settle(), vllm_collector.SOURCES)
    entry: dict[str, Any] = {"status": sec.status, **({"unreadable": sec.unreadable} if sec.unreadable else {})}
    return {"collectors": {"vllm": entry}, "vllm": sec.data}


@contextlib.contextmanager
def _child(env: dict[str, str], lib: Path) -> Iterator[subprocess.Popen[str]]:
    code = f"import ctypes,time; ctypes.CDLL({str(lib)!r}); print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield child
    finally:
        child.kill()
        child.wait()


def _process_snap(env: dict[str, str], lib: Path, conf: Path, text: str) -> dict[str, Any]:
    from hoststate.capture import collect
    from hoststate.collectors import Context

    conf.write_text(text)
    with _child(env, lib) as child:
        snap = collect(Context(vllm_pid=child.pid, vllm_version="0.11.0"), ("vllm",))
    return {"hoststate": snap["hoststate"], "collectors": {"vllm": snap["collectors"]["vllm"]}, "vllm": snap["vllm"]}


def rate_all() -> list[Rated]:
    corpus = Corpus()
    try:
        return [corpus.rate(case) for case in cases()]
    finally:
        corpus.close()


def report(rated: list[Rated]) -> str:
    agree = sum(r.agrees for r in rated)
    lines = [f"{agree}/{len(rated)} agree ({100 * agree / len(rated):.1f} %), "
             f"{sum(r.fails_open for r in rated)} fail-open, {sum(r.refuses_harmless for r in rated)} refusing "
             "a harmless change"]
    for r in rated:
        if not r.agrees:
            lines.append(f"  [{r.case['family']}] {r.case['change']}: rated {r.rating}, engineer {r.case['expect']}"
                         f" ({r.case['why']}); {r.findings[:4]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    print(report(rate_all()))
