"""Other users' processes: their files are read with their real rights, and a lookalike never stands in for a server.

Real processes started as ``nobody``: a setuid-style one whose real uid is nobody and effective uid
root (as ``su`` at its password prompt), servers whose files sit behind a POSIX ACL, and a sleeping
lookalike with a server's command line next to a real child that listens on 127.0.0.1. None of
them is vLLM: each runs a small ``serve`` script that Python starts from argv ``vllm serve ...``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hoststate import procfiles, snapshot
from hoststate.collectors import Context
from hoststate.collectors import vllm as vllm_collector
from hoststate.collectors.vllm import discovery
from tests.conftest import PYTHONPATH, require

SYSTEM_PYTHON = "/usr/bin/python3"  # reachable for the nobody user (the test venv may live under /root)
NOBODY = 65534
SLEEP = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
#: A server that answers /version on the --port of its argv, on 127.0.0.1 only.
LISTEN = textwrap.dedent("""\
    import http.server, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/version":
                self.send_error(404)
                return
            body = b'{"version": "0.12.0"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", port), H)
    print("ready", flush=True)
    server.serve_forever()
    """)
#: Run as root: become real nobody with effective and saved root (``su`` before it asks for the password),
#: then exec the server script with argv[1:] as its command line.
SETUID_STYLE = textwrap.dedent(f"""\
    import os, sys
    os.setgroups([])
    os.setresgid({NOBODY}, 0, 0)
    os.setresuid({NOBODY}, 0, 0)
    os.execv({SYSTEM_PYTHON!r}, sys.argv[1:])
    """)
DENSE = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8}


@pytest.fixture
def start():
    require(os.geteuid() == 0, "only root can start processes as another user (CI runs as root)")
    started: list[subprocess.Popen] = []

    def run(argv: list[str], cwd: Path, user: int | None = NOBODY, env: dict | None = None, **kw) -> subprocess.Popen:
        extra = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
        child = subprocess.Popen(argv, cwd=cwd, env=env or {"PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, **extra, **kw)
        started.append(child)
        line = child.stdout.readline()
        assert line.strip() == b"ready", child.stderr.read()
        return child

    try:
        yield run
    finally:
        for child in started:
            child.kill()
            child.wait(timeout=30)


def _snap(tmp: Path, *args: str) -> tuple[dict, str, str]:
    """(snapshot, its text, snap's stderr) of ``hoststate snap --only vllm``."""
    out = tmp / f"snap-{len(list(tmp.glob('snap-*')))}.toml"
    done = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-o", str(out), "--only", "vllm", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert done.returncode in (0, 1), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    text = out.read_text()
    return snapshot.loads(text), text, done.stderr


def _unreadable(snap: dict) -> str:
    return " | ".join(f"{k} {v}" for k, v in snap["collectors"]["vllm"].get("unreadable", {}).items())


def _ids(pid: int) -> tuple[list[str], list[str]]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(line for line in status if line.startswith("Uid:")).split()[1:]
    gid = next(line for line in status if line.startswith("Gid:")).split()[1:]
    return uid, gid


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Real and effective ids differ


def test_identities_leave_root_out_when_the_process_holds_another():
    status = "Uid:\t65534\t0\t0\t0\nGid:\t65534\t0\t0\t0\nGroups:\t5 0\n"
    assert procfiles.identities(status) == [procfiles.Creds(65534, 65534, (0, 5))]
    both = "Uid:\t1000\t1001\t1001\t1001\nGid:\t1000\t1000\t1000\t1000\nGroups:\n"
    assert procfiles.identities(both) == [procfiles.Creds(1000, 1000, ()), procfiles.Creds(1001, 1000, ())]
    assert procfiles.identities("Uid:\t0\t0\t0\t0\nGid:\t0\t1000\t1000\t1000\n") == [procfiles.Creds(0, 0, ())]
    assert procfiles.identities("Uid:\t0\t0\n") is None


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_a_setuid_style_process_is_read_with_its_real_users_rights(tmp_path, shared_dir, start, mode):
    secret = "sk-setuidroot0123456789abcdef"
    cfg = shared_dir / "cfg.yaml"
    cfg.write_text(f"tensor-parallel-size: 4\nserved-model-name: {secret}\n")
    cfg.chmod(mode)
    (shared_dir / "serve").write_text(SLEEP)
    (shared_dir / "serve").chmod(0o644)
    (shared_dir / "launch.py").write_text(SETUID_STYLE)
    child = start([SYSTEM_PYTHON, str(shared_dir / "launch.py"), "vllm", "serve", "m", "--config", "cfg.yaml"],
                  shared_dir, user=None)
    assert _ids(child.pid) == (["65534", "0", "0", "0"], ["65534", "0", "0", "0"])  # real nobody, effective root
    snap, text, _ = _snap(tmp_path, "--vllm-pid", str(child.pid))
    assert snap["vllm"]["argv"] == ["vllm", "serve", "m", "--config", "cfg.yaml"]
    if mode == 0o600:  # root may read it, the process's real user may not
        assert secret not in text and "tensor_parallel_size" not in snap["vllm"].get("args", {})
        assert "not readable by the process's user (uid 65534)" in _unreadable(snap)
    else:  # readable to nobody: read, so the check above can fail
        assert snap["vllm"]["args"]["tensor_parallel_size"] == 4


def _cache(base: Path, refs_target: Path | None, refs_text: str | None) -> None:
    """A Hugging Face cache for org/dense whose refs/main is ``refs_text`` or a link to ``refs_target``."""
    repo = base / "hub" / "models--org--dense"
    (repo / "refs").mkdir(parents=True)
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(DENSE))
    if refs_target is not None:
        (repo / "refs" / "main").symlink_to(refs_target)
    else:
        (repo / "refs" / "main").write_text(refs_text or "")
    for path in [base, *base.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.mark.parametrize("refs", ["root-only", "not-a-commit", "commit"])
def test_a_cache_refs_file_never_carries_a_root_only_file_into_the_snapshot(tmp_path, shared_dir, start, refs):
    secret = "SECRETREFS0123456789"
    private = shared_dir / "private"
    private.write_text(secret + "\n")
    private.chmod(0o600)
    _cache(shared_dir / "hf", private if refs == "root-only" else None,
           {"not-a-commit": f"{secret}\n", "commit": "a" * 40}.get(refs))
    (shared_dir / "serve").write_text(SLEEP)
    (shared_dir / "launch.py").write_text(SETUID_STYLE)
    child = start([SYSTEM_PYTHON, str(shared_dir / "launch.py"), "vllm", "serve", "org/dense",
                   "--enable-expert-parallel"], shared_dir, user=None,
                  env={"PATH": "/usr/bin:/bin", "HF_HOME": str(shared_dir / "hf")})
    snap, text, _ = _snap(tmp_path, "--vllm-pid", str(child.pid), "--vllm-version", "0.12.0")
    cudagraph = snap["vllm"]["cudagraph"]
    assert secret not in text
    if refs == "commit":  # the cache is read: vLLM refuses expert parallelism on a dense model
        assert "experts" in cudagraph["refused"]
    else:
        assert "refused" not in cudagraph and cudagraph["declared_assumes"]


# ---------------------------------------------------------------------------------------------
# ACLs: the kernel decides


def _acl_server(start, shared_dir: Path) -> subprocess.Popen:
    (shared_dir / "serve").write_text(SLEEP)
    (shared_dir / "serve").chmod(0o644)
    return start(["vllm", "serve", "m", "--config", "sub/cfg.yaml"], shared_dir, executable=SYSTEM_PYTHON)


@pytest.mark.parametrize(("target", "acl", "readable"), [
    ("sub", "u:nobody:---", False),  # mode bits say anyone may search sub; the ACL denies nobody
    ("sub", "u:daemon:---", True),  # the same kind of entry for another user changes nothing for nobody
    ("sub/cfg.yaml", "u:nobody:r", True),  # a root-only file that an ACL grants to nobody
])
def test_a_posix_acl_is_honoured(tmp_path, shared_dir, start, target, acl, readable):
    require(shutil.which("setfacl") is not None, "setfacl (Debian package acl) is not installed")
    (shared_dir / "sub").mkdir(mode=0o755)
    cfg = shared_dir / "sub" / "cfg.yaml"
    cfg.write_text("tensor-parallel-size: 4\n")
    cfg.chmod(0o644 if target == "sub" else 0o600)
    subprocess.run(["setfacl", "-m", acl, str(shared_dir / target)], check=True)
    child = _acl_server(start, shared_dir)
    snap, _, _ = _snap(tmp_path, "--vllm-pid", str(child.pid))
    if readable:
        assert snap["vllm"]["args"]["tensor_parallel_size"] == 4
    else:
        assert "tensor_parallel_size" not in snap["vllm"].get("args", {})
        assert "/sub: not searchable by the process's user (uid 65534)" in _unreadable(snap)


def test_one_reader_per_identity_is_reused(shared_dir, start):
    (shared_dir / "f").write_text("x")
    (shared_dir / "f").chmod(0o644)
    child = _acl_server(start, shared_dir)
    with procfiles.ProcView(child.pid) as view:
        assert view.identities == [procfiles.Creds(NOBODY, NOBODY, ())]
        assert view.read("f") == (b"x", None)
        reader = procfiles._READERS[view.identities[0]]
        first = reader.proc.pid
        assert _ids(first) == ([str(NOBODY)] * 4, [str(NOBODY)] * 4)  # the reader holds nobody's identity
        assert os.stat(f"/proc/{first}/environ").st_uid == 0  # non-dumpable: nobody cannot ptrace or read it
        for _ in range(20):
            assert view.read("f") == (b"x", None)
        assert reader.proc.pid == first
        reader.proc.kill()  # a reader that died is started again, once
        reader.proc.wait()
        assert view.read("f") == (b"x", None) and reader.proc.pid != first


# ---------------------------------------------------------------------------------------------
# A lookalike next to a real server


@pytest.fixture
def decoy_and_server(shared_dir, start):
    """(decoy, server, port): a sleeping ``vllm serve m --port P -tp 2`` started first by nobody, then a
    real child ``vllm serve m --port P -tp 4`` that listens on 127.0.0.1:P."""
    port = _free_port()
    for name, script in (("decoy", SLEEP), ("real", LISTEN)):
        (shared_dir / name).mkdir(mode=0o755)
        (shared_dir / name / "serve").write_text(script)
        (shared_dir / name / "serve").chmod(0o644)
    decoy = start(["vllm", "serve", "m", "--port", str(port), "-tp", "2"], shared_dir / "decoy",
                  executable=SYSTEM_PYTHON)
    server = start(["vllm", "serve", "m", "--port", str(port), "-tp", "4"], shared_dir / "real",
                   executable=SYSTEM_PYTHON)
    return decoy, server, port


def test_the_server_behind_a_url_is_the_socket_owner(tmp_path, decoy_and_server):
    decoy, server, port = decoy_and_server
    snap, _, _ = _snap(tmp_path, "--vllm-url", f"http://127.0.0.1:{port}")
    vllm = snap["vllm"]
    assert vllm["url"]["reachable"] is True and vllm["version"] == "0.12.0"
    assert vllm["pid"] == server.pid and vllm["args"]["tensor_parallel_size"] == 4
    assert discovery.listening_ports(server.pid) == ([port], None)
    assert discovery.listening_ports(decoy.pid) == ([], None)


@pytest.mark.parametrize("host", ["192.0.2.1", "example.invalid", "[::1]"])
def test_a_url_of_another_host_or_address_adopts_no_local_process(decoy_and_server, host):
    _, server, port = decoy_and_server
    assert discovery.server_at(f"http://localhost:{port}", {})[0].pid == server.pid  # the check below can fail
    proc, note = discovery.server_at(f"http://{host}:{port}", {})
    assert proc is None
    assert ("could not connect" if host == "[::1]" else "host other than") in note  # it listens on IPv4 only


def test_discovery_prefers_the_listening_server_and_says_why(tmp_path, decoy_and_server, monkeypatch):
    decoy, server, port = decoy_and_server
    monkeypatch.setenv("SUDO_UID", str(NOBODY))  # both are nobody's: run for nobody, as sudo -u would
    monkeypatch.delenv("SLURM_JOB_UID", raising=False)
    found, notes = discovery.select([discovery.inspect(decoy.pid, {}), discovery.inspect(server.pid, {})])
    assert [p.pid for p in found] == [server.pid]
    assert found[0].selected_because == (
        f"pid {server.pid}, vllm serve, run by the invoking user (user nobody (uid {NOBODY}), from $SUDO_UID); "
        f"owns a listening TCP socket (port {port}) (of 2 vLLM server command lines)")
    assert f"pid {decoy.pid} (user nobody (uid {NOBODY}), vllm serve, no listening socket)" in notes[0]
    sec = vllm_collector.collect(Context())
    described = [sec.data] if "servers" not in sec.data else list(sec.data["servers"].values())
    pids = [s.get("pid") for s in described]
    assert server.pid in pids and decoy.pid not in pids  # another user's idle process does not decide
    assert any(str(decoy.pid) in note for note in sec.notes)
    snap, _, stderr = _snap(tmp_path)
    assert str(decoy.pid) in stderr and "selected_because" in snapshot.to_toml(snap)


def test_several_idle_lookalikes_are_all_described_and_the_note_says_so(shared_dir, start):
    (shared_dir / "serve").write_text(SLEEP)
    procs = [start(["vllm", "serve", "m", "--port", str(_free_port())], shared_dir, executable=SYSTEM_PYTHON)
             for _ in range(2)]
    found, notes = discovery.select([discovery.inspect(p.pid, {}) for p in procs], (NOBODY, "a test"))
    assert [p.pid for p in found] == [p.pid for p in procs]
    assert all(p.selected_because.endswith("owns no listening TCP socket (of 2 vLLM server command lines)")
               for p in found)
    assert "none owns a listening TCP socket" in notes[0]


def test_a_reader_its_user_stops_is_killed_and_its_identity_refused_without_waiting(shared_dir, start, monkeypatch):
    monkeypatch.setattr(procfiles, "CALL_TIMEOUT", 1.0)
    (shared_dir / "f").write_text("x")
    (shared_dir / "f").chmod(0o644)
    child = _acl_server(start, shared_dir)
    with procfiles.ProcView(child.pid) as view:
        assert view.read("f") == (b"x", None)
        reader = procfiles._READERS[view.identities[0]]
        stopped = reader.proc
        # The reader runs as nobody, so nobody may signal it: a stopped reader must not hang hoststate.
        subprocess.run(["kill", "-STOP", str(stopped.pid)], user=NOBODY, group=NOBODY, extra_groups=[], check=True)
        assert view.read("f") == (None, f"reader for uid {NOBODY}: timeout")
        assert stopped.poll() is not None and reader.proc is None  # killed and reaped
        assert view.read("f") == (None, f"reader for uid {NOBODY}: timeout")  # refused at once, no new wait
        assert reader.proc is None
        reader.broken_until = 0.0  # once the refusal lapses, a fresh reader answers
        assert view.read("f") == (b"x", None)


def test_parse_net_tcp_keeps_listening_sockets_with_address_port_and_inode():
    require(sys.byteorder == "little", "the sample tables are as a little-endian kernel prints them")
    tcp = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
           "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0\n"
           "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 112 1 0 20 4\n"
           "   2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 113 1 0 100 0\n")
    tcp6 = ("  sl  local_address                         remote_address                        st\n"
            "   0: 00000000000000000000000001000000:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000 "
            "00:00000000 00000000     0        0 114 1 0 100 0\n")
    assert discovery.parse_net_tcp(tcp) == [discovery.Listener(111, "127.0.0.1", 8080),
                                            discovery.Listener(113, "0.0.0.0", 8081)]
    assert discovery.parse_net_tcp(tcp6) == [discovery.Listener(114, "::1", 8082)]
    assert discovery.parse_net_tcp("garbage\n0: zz:zz 0 0A a b c d e f\n") == []
