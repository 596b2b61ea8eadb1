"""Each command loads only what it uses (docs/performance.md): the module set of a fresh `python -m hoststate CMD`,
as a user runs it, on the seed host tree and snapshots made from it. A command never pays for the import of a
module it does not call, so a stray top-level import is caught here, not in a benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, PYTHONPATH

TREE = FIXTURES / "hosts" / "seed-baseline"
COLLECTOR_MODULES = ("system", "dsa", "accel_config", "gpu", "vllm", "env", "packages")
#: The vLLM collector's parsers: loaded only when a server (or --vllm-cmd/--vllm-log/--vllm-url) is read.
VLLM_PARSERS = tuple(f"hoststate.collectors.vllm.{m}" for m in ("argv", "cudagraph", "http", "limits", "log",
                                                                  "model", "modes", "options", "versions"))
#: The verdict side and the other commands' own modules.
NOT_SNAP = ("hoststate.diff", "hoststate.report", "hoststate.guard", "hoststate.nvml_replay", "hoststate.check",
            "hoststate.render", "hoststate.fleet", "hoststate.export", "hoststate.watch", "hoststate.rebaseline",
            "hoststate.results", "hoststate.policy_table", "hoststate.render.timeline")
#: What reading snapshots never needs: the collectors, redaction and the host-reading libraries (`check FILE`
#: validates its --timeout option with hoststate.io).
CAPTURE = ("hoststate.capture", "hoststate.collectors", "hoststate.redact", "hoststate.procfiles",
           "hoststate.userread", "pynvml", "psutil", "pyudev", "tomli_w",
           *(f"hoststate.collectors.{m}" for m in COLLECTOR_MODULES))

# Runs the CLI as `python -m hoststate` does and writes the names in sys.modules at exit (click exits via SystemExit).
RUNNER = """
import atexit, json, runpy, sys
out, args = sys.argv[1], sys.argv[2:]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["hoststate", *args]
runpy.run_module("hoststate", run_name="__main__", alter_sys=True)
"""


def loaded(tmp_path: Path, *args: str, env: dict[str, str | None] | None = None, site: bool = True) -> set[str]:
    """The modules a fresh process of ``hoststate ARGS`` has loaded when it exits (``env``: variables set, or
    unset where None). Without ``site`` the interpreter runs no start-up hooks (``-S``: an editable install's
    ``.pth`` finder imports pathlib and urllib.parse before any command), and finds the installed packages by
    their folders on PYTHONPATH."""
    out = tmp_path / "modules.json"
    path = PYTHONPATH if site else os.pathsep.join([PYTHONPATH, *sysconfig_paths()])
    merged = {**os.environ, "PYTHONPATH": path, **(env or {})}
    env = {k: v for k, v in merged.items() if v is not None}
    flags = [] if site else ["-S"]
    proc = subprocess.run([sys.executable, *flags, "-c", RUNNER, str(out), *args], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    return set(json.loads(out.read_text()))


def sysconfig_paths() -> list[str]:
    """The folders the installed packages (click, tomli-w, hoststate when installed) are in."""
    import sysconfig

    return sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    tmp = tmp_path_factory.mktemp("imports")
    paths = []
    for name, tree in (("a.toml", "seed-baseline"), ("b.toml", "seed-experiment")):
        path = tmp / name
        subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", str(FIXTURES / "hosts" / tree),
                        "-o", str(path)], check=True, env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=120)
        paths.append(str(path))
    return paths[0], paths[1]


def test_the_runner_sees_what_a_command_loads(tmp_path: Path) -> None:
    """The control: snap does load its collectors and the digest's policy, so an empty set cannot pass."""
    mods = loaded(tmp_path, "snap", "-q", "--root", str(TREE))
    assert {f"hoststate.collectors.{m}" for m in COLLECTOR_MODULES} <= mods
    assert {"hoststate.capture", "hoststate.digest", "hoststate.policy", "click"} <= mods


#: Standard modules a snap without a server has no use for (docs/performance.md): a temporary file's name needs
#: no ``secrets``, a path no ``pathlib``, finding accel-config on PATH no ``shutil`` (hoststate.io.which), and
#: addresses and URLs (``ipaddress``, ``urllib.parse``) are parsed only where a server is looked for or a text
#: holds an encoded word.
NOT_SNAP_STDLIB = ("secrets", "pathlib", "shutil", "ipaddress", "urllib.parse")

#: hashlib loads OpenSSL's libcrypto (4-5 ms a process): the digest and the baseline's sha256 take CPython's own
#: SHA-256 (hoststate.digest); only stamping or reading a benchmark's result loads hashlib.
OPENSSL = {"hashlib", "_hashlib"}
#: An interpreter without CPython's own SHA-256 modules, as some FIPS builds are: the digest falls back to hashlib.
NO_BUILTIN_SHA = "import sys; sys.modules['_sha2'] = sys.modules['_sha256'] = None\n"


def test_snap_loads_no_verdict_module_and_no_vllm_parser_without_a_server(tmp_path: Path) -> None:
    mods = loaded(tmp_path, "snap", "-q", "--root", str(TREE))
    assert not mods & set(NOT_SNAP), sorted(mods & set(NOT_SNAP))
    assert not mods & set(VLLM_PARSERS), sorted(mods & set(VLLM_PARSERS))
    bare = loaded(tmp_path, "snap", "-q", "--root", str(TREE), site=False)
    assert "hoststate.collectors.system" in bare
    assert not bare & set(NOT_SNAP_STDLIB), sorted(bare & set(NOT_SNAP_STDLIB))
    assert not any(m.startswith(("deepdiff", "urllib.request", "http.client")) for m in mods)
    assert not mods & OPENSSL, sorted(mods & OPENSSL)


def test_a_snap_parses_no_toml_once_the_shipped_tables_are_kept(tmp_path: Path) -> None:
    """The shipped policy and gitleaks table are read from their copies beside the bytecode (hoststate.parsed)
    after the first process: a snap then imports no TOML parser. The first process, which writes the copies, is
    the control."""
    env = {"PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "PYTHONDONTWRITEBYTECODE": None}
    first = loaded(tmp_path, "snap", "-q", "--root", str(TREE), "-o", str(tmp_path / "a.toml"), env=env)
    then = loaded(tmp_path, "snap", "-q", "--root", str(TREE), "-o", str(tmp_path / "b.toml"), env=env)
    assert "tomli" in first or "tomllib" in first
    assert not then & {"tomli", "tomllib"}, sorted(then & {"tomli", "tomllib"})


def test_a_snap_that_reads_no_other_users_file_loads_no_socket(tmp_path: Path) -> None:
    """The reader that holds another user's identity (hoststate.procfiles) is the only part of a snap without a
    URL that needs sockets, and the live host's name is read without one. The control: a snap given a vLLM URL
    resolves it through the socket module."""
    live = loaded(tmp_path, "snap", "-q", "--only", "system,env,packages", "-o", str(tmp_path / "live.toml"))
    tree = loaded(tmp_path, "snap", "-q", "--root", str(TREE), "-o", str(tmp_path / "tree.toml"))
    assert "socket" not in live and "socket" not in tree
    url = loaded(tmp_path, "snap", "-q", "--only", "vllm", "--vllm-url", "http://127.0.0.1:9", "--timeout", "5",
                 "-o", str(tmp_path / "url.toml"))
    assert "socket" in url


def test_a_guard_that_watches_nothing_loads_no_sampler(tmp_path: Path, snapshots: tuple[str, str]) -> None:
    """`guard -- CMD` rates the host and runs the command: the watch's sampler (and the vLLM metrics client it
    imports) and its thresholds file are `--watch`'s alone. The control: `guard --watch` loads them."""
    base = snapshots[0]
    plain = loaded(tmp_path, "guard", "--baseline", base, "--root", str(TREE), "--", "true")
    watched = loaded(tmp_path, "guard", "--watch", "--baseline", base, "--root", str(TREE), "--", "true")
    watch_only = {"hoststate.run.sampler", "hoststate.collectors.vllm.http"}
    assert not plain & watch_only, sorted(plain & watch_only)
    assert not plain & OPENSSL, sorted(plain & OPENSSL)
    assert watch_only <= watched
    assert "importlib.resources" not in plain and "importlib.resources" in watched  # the thresholds' reader


#: What the child collecting the GPUs ahead never imports (hoststate.ahead): its imports are the path every snap of
#: a GPU host waits for. ``dataclasses`` brings ``inspect`` (ast, dis, tokenize), the replay's reader ``json``, the
#: command's modules click; ``uuid`` (which loads libuuid) is not needed to write a UUID.
NOT_IN_THE_GPU_CHILD = ("uuid", "dataclasses", "inspect", "json", "click", "hoststate.capture", "hoststate.cli",
                        "hoststate.nvml_replay", "hoststate.redact", "hoststate.digest")
CHILD = """
import sys
out, marker = sys.argv[1], sys.argv[2]
before = set(sys.modules)
import hoststate.nvml
hoststate.nvml.DRIVER_MARKERS = (marker,)  # a driver's marker, so that pynvml is imported without a GPU too
from hoststate.__main__ import _gpu_section
section = _gpu_section()  # the child's whole work, on the live host: NVML or its absence
loaded = sorted(set(sys.modules) - before)
open(out, "w").write(__import__("json").dumps({"status": section["status"], "loaded": loaded}))
"""


def test_the_gpu_child_imports_only_what_the_collector_needs(tmp_path: Path) -> None:
    out, marker = tmp_path / "child.json", tmp_path / "nvidiactl"
    marker.touch()
    env = {k: v for k, v in os.environ.items() if k != "HOSTSTATE_NVML_REPLAY"}
    env["PYTHONPATH"] = os.pathsep.join([PYTHONPATH, *sysconfig_paths()])
    subprocess.run([sys.executable, "-S", "-c", CHILD, str(out), str(marker)], env=env, timeout=120, check=True)
    child = json.loads(out.read_text())
    assert {"hoststate.collectors.gpu", "pynvml"} <= set(child["loaded"]), child  # it did collect
    assert child["status"] in ("ok", "partial", "absent", "error"), child
    extra = set(child["loaded"]) & set(NOT_IN_THE_GPU_CHILD)
    assert not extra, sorted(extra)


def test_snap_of_one_collector_loads_no_other(tmp_path: Path) -> None:
    mods = loaded(tmp_path, "snap", "-q", "--root", str(TREE), "--only", "gpu")
    assert "hoststate.collectors.gpu" in mods
    others = {f"hoststate.collectors.{m}" for m in COLLECTOR_MODULES if m != "gpu"}
    assert not mods & others, sorted(mods & others)
    assert "hoststate.procfiles" not in mods


def test_snap_with_a_vllm_command_loads_the_parsers(tmp_path: Path) -> None:
    """The other side of the lazy imports: a server's arguments are still parsed when there is one."""
    mods = loaded(tmp_path, "snap", "-q", "--root", str(TREE), "--only", "vllm",
                  "--vllm-cmd", "vllm serve facebook/opt-125m --enforce-eager")
    assert {"hoststate.collectors.vllm.argv", "hoststate.collectors.vllm.cudagraph"} <= mods


@pytest.mark.parametrize("command", ["show", "check", "digest", "diff"])
def test_reading_snapshots_loads_no_capture_module(tmp_path: Path, snapshots: tuple[str, str], command: str) -> None:
    args = [command, *snapshots] if command == "diff" else [command, snapshots[0]]
    mods = loaded(tmp_path, *args)
    assert {"show": "hoststate.render.show"}.get(command, f"hoststate.{command}") in mods
    assert not mods & set(CAPTURE), sorted(mods & set(CAPTURE))
    bare = loaded(tmp_path, *args, site=False)  # the seed host's snapshots are ASCII: no character table is asked
    assert "hoststate.render.text" in bare or command == "digest"
    assert "unicodedata" not in bare
    assert not mods & {"hoststate.guard", "hoststate.fleet", "hoststate.watch", "hoststate.nvml_replay"}
    assert not mods & OPENSSL, sorted(mods & OPENSSL)


def test_show_parses_no_policy(tmp_path: Path, snapshots: tuple[str, str]) -> None:
    """show summarises a file: it never loads the digest or the diff's position matching."""
    mods = loaded(tmp_path, "show", snapshots[0])
    assert not mods & {"hoststate.digest", "hoststate.positions", "hoststate.parsed"}


@pytest.mark.parametrize("command", ["show", "check"])
def test_show_and_check_load_no_diff_or_policy_module(tmp_path: Path, snapshots: tuple[str, str],
                                                      command: str) -> None:
    """They read one snapshot: the diff engine, the policy and the diff's renderers stay unloaded."""
    mods = loaded(tmp_path, command, snapshots[0])
    assert {"hoststate.render.text", f"hoststate.render.{command}"} <= mods
    assert not {m for m in mods if m.startswith(("hoststate.diff", "hoststate.policy", "hoststate.report",
                                                 "hoststate.render.diff", "hoststate.render.findings"))}


def test_a_snap_without_cpythons_sha256_takes_hashlibs_and_writes_the_same_digest(tmp_path: Path) -> None:
    """The control for the OPENSSL checks: the runner does see hashlib where the digest needs it."""
    out = tmp_path / "modules.json"
    snaps = {}
    for name, prelude in (("own", ""), ("openssl", NO_BUILTIN_SHA)):
        path = tmp_path / f"{name}.toml"
        proc = subprocess.run([sys.executable, "-c", prelude + RUNNER, str(out), "snap", "-q", "--root", str(TREE),
                               "-o", str(path)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": PYTHONPATH})
        assert proc.returncode == 0, proc.stderr
        assert bool(set(json.loads(out.read_text())) & OPENSSL) == (name == "openssl")
        snaps[name] = [line for line in path.read_text().splitlines() if line.startswith("digest = ")]
    assert len(snaps["own"]) == 1 and snaps["own"] == snaps["openssl"], snaps
