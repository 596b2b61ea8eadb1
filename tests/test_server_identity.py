"""Which process is the server, on a shared host: the owner of the exact socket a URL's connection reaches, and, in
discovery, the invoking user's server before another user's.

Real processes: a stand-in vLLM server (a ``serve`` script Python runs from argv ``vllm serve m --port P``) as a
child of the test on IPv4 ``0.0.0.0:P``, as vLLM listens, and another user's (``nobody``) lookalike on ``[::1]:P``,
a port IPv4's listener leaves free to anyone, started first so that it has the lower pid. Each answers
``/version`` with its own pid and ``/metrics`` with its own preemption counter, so what was read can be told apart.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hoststate import snapshot
from hoststate.collectors import Context
from hoststate.collectors import vllm as vllm_collector
from hoststate.collectors.vllm import discovery
from hoststate.collectors.vllm.http import get_from_owner
from hoststate.diff import compare
from tests.conftest import PYTHONPATH, require
from tests.test_identity_reads import NOBODY, SYSTEM_PYTHON, start  # noqa: F401 - start is a fixture

#: A stand-in server: ``--host H --port P``; /version names its pid, /metrics carries $PREEMPT preemptions;
#: $DRIP makes /metrics send one byte every DRIP seconds (a slow-loris server).
SERVE = textwrap.dedent("""\
    import http.server, json, os, socket, sys, time
    port = int(sys.argv[sys.argv.index("--port") + 1])
    host = sys.argv[sys.argv.index("--host") + 1]
    class Server(http.server.HTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/version":
                body = json.dumps({"version": "0.12.0", "pid": os.getpid()}).encode()
            elif self.path == "/metrics":
                body = f"vllm:num_preemptions_total {os.environ.get('PREEMPT', '0')}\\n".encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if os.environ.get("DRIP") and self.path == "/metrics":
                for byte in body:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(float(os.environ["DRIP"]))
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    server = Server((host, port), H)
    print("ready", flush=True)
    server.serve_forever()
    """)


def _free_port() -> int:
    """A port free on both 0.0.0.0 and ::1."""
    for _ in range(50):
        with socket.socket() as s4:
            s4.bind(("0.0.0.0", 0))
            port = s4.getsockname()[1]
            with socket.socket(socket.AF_INET6) as s6:
                try:
                    s6.bind(("::1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free on both families")


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.fixture
def two_servers(shared_dir, start):  # noqa: F811
    """(theirs, ours, port): nobody's lookalike on [::1]:P (started first: the lower pid), then our server on
    0.0.0.0:P."""
    require(_ipv6(), "an IPv6 loopback (::1)")
    port = _free_port()
    (shared_dir / "serve").write_text(SERVE)
    (shared_dir / "serve").chmod(0o644)
    env = {"PATH": "/usr/bin:/bin"}
    theirs = start(["vllm", "serve", "m", "--port", str(port), "--host", "::1", "-tp", "2"], shared_dir,
                   executable=SYSTEM_PYTHON, env={**env, "PREEMPT": "0"})
    ours = start(["vllm", "serve", "m", "--port", str(port), "--host", "0.0.0.0", "-tp", "4"], shared_dir,
                 executable=SYSTEM_PYTHON, env={**env, "PREEMPT": "7"}, user=None)
    assert theirs.pid < ours.pid
    return theirs, ours, port


def _answering_pid(host: str, port: int) -> int:
    """The pid in /version of whatever answers a connection made as urllib makes it: the test's own oracle."""
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(f"GET /version HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(json.loads(data.split(b"\r\n\r\n", 1)[1])["pid"])


def _snap(tmp: Path, *args: str, env: dict | None = None) -> tuple[dict, str]:
    out = tmp / f"snap-{len(list(tmp.glob('snap-*')))}.toml"
    done = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-o", str(out), "--only", "vllm", *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})})
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return snapshot.loads(out.read_text()), done.stderr


# -- 1. the socket the connection reaches ----------------------------------------------------------------------------


def test_a_localhost_url_adopts_the_owner_of_the_socket_it_connects_to(tmp_path, two_servers):
    theirs, ours, port = two_servers
    answering = _answering_pid("localhost", port)
    assert answering in (theirs.pid, ours.pid)
    proc, note = discovery.server_at(f"http://localhost:{port}", {})
    assert note is None and proc.pid == answering  # never the lower pid merely because it listens on loopback too
    snap, stderr = _snap(tmp_path, "--vllm-url", f"http://localhost:{port}")
    assert snap["vllm"]["pid"] == answering and snap["vllm"]["url"]["version"] == "0.12.0"
    assert "reached the socket listening on" in snap["vllm"]["selected_because"]


def test_each_family_gets_its_own_socket_owner(tmp_path, two_servers):
    theirs, ours, port = two_servers
    assert discovery.server_at(f"http://127.0.0.1:{port}", {})[0].pid == ours.pid
    proc, _ = discovery.server_at(f"http://[::1]:{port}", {})
    assert proc.pid == theirs.pid and proc.euid == NOBODY  # [::1] is theirs: described as theirs, by name
    snap, stderr = _snap(tmp_path, "--vllm-url", f"http://[::1]:{port}")
    assert snap["vllm"]["pid"] == theirs.pid and snap["vllm"]["user"] == "nobody" and snap["vllm"]["uid"] == NOBODY
    assert snap["vllm"]["args"]["tensor_parallel_size"] == 2
    assert f"another user's process: pid {theirs.pid} (user nobody (uid {NOBODY}), vllm serve)" in stderr
    assert "IPv6 to [::1]" in snap["vllm"]["selected_because"]
    # described as any server is, but a baseline of the invoking user's (root's) server is not compared with it:
    # the look-alike's command line may be the same, its owner is not
    mine, _ = _snap(tmp_path, "--vllm-url", f"http://127.0.0.1:{port}")
    assert "run_by_invoker" not in mine["vllm"] and snap["vllm"]["run_by_invoker"] is False
    found = {f.path: f.severity for f in compare(mine, snap).findings}
    assert found["vllm.run_by_invoker"] == "invalidating" and found["vllm.uid"] == "info"
    # run for nobody (sudo -u nobody), nobody's server is the invoker's
    theirs_for_them, _ = _snap(tmp_path, "--vllm-url", f"http://[::1]:{port}", env={"SUDO_UID": str(NOBODY)})
    assert "run_by_invoker" not in theirs_for_them["vllm"]


def test_metrics_are_read_from_the_servers_socket_only(two_servers):
    theirs, ours, port = two_servers
    got = get_from_owner(f"http://localhost:{port}", "/metrics", expect_pid=ours.pid)
    assert got.ok and got.owner_pid == ours.pid and "vllm:num_preemptions_total 7" in got.body
    started = discovery.start_time(ours.pid)
    assert get_from_owner(f"http://localhost:{port}", "/metrics", expect_pid=ours.pid, expect_start=started).ok
    reused = get_from_owner(f"http://localhost:{port}", "/metrics", expect_pid=ours.pid, expect_start=started + 1)
    assert reused.body is None and "no longer the server" in reused.error  # a pid given to another process
    mine = get_from_owner(f"http://127.0.0.1:{port}", "/metrics")  # no pid named: the vLLM command line holding it
    assert mine.ok and mine.owner_pid == ours.pid
    foreign = get_from_owner(f"http://[::1]:{port}", "/metrics", expect_pid=ours.pid)
    assert not foreign.ok and foreign.body is None  # nobody's counters (0 preemptions) are never read
    unnamed = get_from_owner(f"http://[::1]:{port}", "/metrics")  # no server named: nobody's look-alike is not read
    assert not unnamed.ok and unnamed.body is None and "not a server of" in unnamed.error
    assert f"held by pid {theirs.pid} (user nobody" in foreign.error and f"not by the server (pid {ours.pid})" \
        in foreign.error
    remote = get_from_owner(f"http://192.0.2.1:{port}", "/metrics", expect_pid=ours.pid, timeout=1)
    assert remote.body is None and "cannot be checked" in remote.error


def test_a_socket_nobody_holds_as_vllm_is_not_read(start, shared_dir):  # noqa: F811
    """nobody's plain program (argv not a vLLM server) on [::1]: an owner check without a pid refuses it."""
    require(_ipv6(), "an IPv6 loopback (::1)")
    port = _free_port()
    (shared_dir / "serve").write_text(SERVE)
    (shared_dir / "serve").chmod(0o644)
    proxy = start([SYSTEM_PYTHON, str(shared_dir / "serve"), "--port", str(port), "--host", "::1"], shared_dir)
    got = get_from_owner(f"http://[::1]:{port}", "/metrics")
    assert got.body is None and "no vLLM server command line" in got.error and str(proxy.pid) in got.error


def test_one_deadline_covers_the_whole_exchange(start, shared_dir):  # noqa: F811
    """A server that sends a byte every 0.5 s: a per-read timeout would wait for all 30 bytes; one deadline
    ends the read with an error, not a partial body."""
    port = _free_port()
    (shared_dir / "serve").write_text(SERVE)
    (shared_dir / "serve").chmod(0o644)
    slow = start(["vllm", "serve", "m", "--port", str(port), "--host", "127.0.0.1"], shared_dir,
                 executable=SYSTEM_PYTHON, env={"PATH": "/usr/bin:/bin", "DRIP": "0.5", "PREEMPT": "1"}, user=None)
    got = get_from_owner(f"http://127.0.0.1:{port}", "/metrics", expect_pid=slow.pid, timeout=1.5)
    assert got.body is None and got.error.startswith("timeout"), got
    assert get_from_owner(f"http://127.0.0.1:{port}", "/version", expect_pid=slow.pid).ok


def test_the_accepting_socket_is_ranked_as_the_kernel_ranks_listeners():
    v4 = socket.AF_INET
    v6 = socket.AF_INET6
    any4 = discovery.Listener(1, "0.0.0.0", 80, "tcp", 0)
    lo4 = discovery.Listener(2, "127.0.0.1", 80, "tcp", 0)
    lo6 = discovery.Listener(3, "::1", 80, "tcp6", 65534)
    any6 = discovery.Listener(4, "::", 80, "tcp6", 1000)
    assert discovery.accepting([lo6, any4], v4, ("127.0.0.1", 80))[0] == [any4]  # never the IPv6 socket
    assert discovery.accepting([lo6, any4], v6, ("::1", 80))[0] == [lo6]
    assert discovery.accepting([any4, lo4, any6], v4, ("127.0.0.1", 80))[0] == [lo4]  # exact address first
    assert discovery.accepting([any6], v4, ("127.0.0.1", 80))[0] == [any6]  # a dual-stack socket takes IPv4
    assert discovery.accepting([any6, any4], v4, ("127.0.0.1", 80))[0] == [any4]  # IPv4 before dual-stack
    v6only = discovery.Listener(6, "::", 80, "tcp6", 65534)  # V6ONLY: takes no IPv4, whatever it ranks
    assert discovery.accepting([v6only, any4], v6, ("::ffff:127.0.0.1", 80))[0] == [any4]  # mapped: IPv4
    other = discovery.Listener(5, "0.0.0.0", 80, "tcp", 65534)
    top, why = discovery.accepting([any4, other], v4, ("127.0.0.1", 80))
    assert top == [] and "several users" in why  # cannot tell: fail closed


# -- 2. discovery on a shared host ----------------------------------------------------------------------------------


@pytest.fixture
def nobodys_server(shared_dir, start):  # noqa: F811
    port = _free_port()
    (shared_dir / "serve").write_text(SERVE)
    (shared_dir / "serve").chmod(0o644)
    return start(["vllm", "serve", "m", "--port", str(port), "--host", "127.0.0.1", "-tp", "2"], shared_dir,
                 executable=SYSTEM_PYTHON, env={"PATH": "/usr/bin:/bin"}), port


@pytest.fixture
def only(monkeypatch):
    """Discovery limited to the processes a test started (the host is shared: other people's servers would count),
    each still found and read from /proc as discovery reads it."""
    pids: set[int] = set()
    real = discovery.discover
    monkeypatch.setattr(vllm_collector, "discover", lambda unreadable: [p for p in real(unreadable) if p.pid in pids])
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.delenv("SLURM_JOB_UID", raising=False)
    return pids


def _vllm_snapshot() -> tuple[dict, list[str]]:
    """(a snapshot of the vllm collector alone, the notes snap prints on stderr)."""
    from hoststate import capture

    return capture.collect(Context(), names=("vllm",)), vllm_collector.collect(Context()).notes


def test_another_users_server_alone_is_recorded_and_never_compared(nobodys_server, only):
    server, port = nobodys_server
    only.add(server.pid)
    sec = vllm_collector.collect(Context())
    assert sec.status == "absent" and "another user's" in sec.reason and f"pid {server.pid}" in sec.reason
    assert sec.data == {"other_users": {str(server.pid): {"pid": server.pid, "program": "vllm serve",
                                                          "uid": NOBODY, "user": "nobody"}}}
    assert "args" not in json.dumps(sec.data)  # none of its arguments is recorded
    # The verdict is the one without their server: a baseline with a server of ours compares the same.
    with_theirs, notes = _vllm_snapshot()
    assert any("no vLLM server of the invoking user" in n for n in notes) and str(server.pid) in " ".join(notes)
    server.kill()
    server.wait(10)
    without, _ = _vllm_snapshot()
    baseline = dict(with_theirs)
    baseline["vllm"] = {"source": "discovered", "pid": 1, "args": {"tensor_parallel_size": 2}}
    baseline["collectors"] = {**with_theirs["collectors"], "vllm": {"status": "ok"}}

    def decided(current: dict) -> list:
        return sorted((f.path, f.severity) for f in compare(baseline, current).findings
                      if f.severity not in ("info", "ignore"))

    assert decided(with_theirs) == decided(without)
    assert ("vllm.args.tensor_parallel_size", "invalidating") in decided(with_theirs)  # their -tp 2 never matched


def test_the_invoking_users_server_comes_first_and_is_named(nobodys_server, shared_dir, start, only,  # noqa: F811
                                                            monkeypatch):
    theirs, _ = nobodys_server
    port = _free_port()
    ours = start(["vllm", "serve", "m", "--port", str(port), "--host", "127.0.0.1", "-tp", "4"], shared_dir,
                 executable=SYSTEM_PYTHON, env={"PATH": "/usr/bin:/bin"}, user=None)
    only.update({theirs.pid, ours.pid})
    snap, notes = _vllm_snapshot()
    vllm = snap["vllm"]
    assert vllm["pid"] == ours.pid and vllm["uid"] == 0 and vllm["program"] == "vllm serve"
    assert vllm["selected_because"].startswith(f"pid {ours.pid}, vllm serve, run by the invoking user (user root")
    assert vllm["other_users"] == {str(theirs.pid): {"pid": theirs.pid, "program": "vllm serve", "uid": NOBODY,
                                                     "user": "nobody"}}
    assert f"ignored: pid {theirs.pid} (user nobody (uid {NOBODY}), vllm serve, port" in " ".join(notes)
    # under sudo (or for a Slurm job), the user it runs for: nobody's server is theirs to compare
    for var in ("SUDO_UID", "SLURM_JOB_UID"):
        monkeypatch.delenv("SUDO_UID", raising=False)
        monkeypatch.delenv("SLURM_JOB_UID", raising=False)
        monkeypatch.setenv(var, str(NOBODY))
        snap, _ = _vllm_snapshot()
        assert snap["vllm"]["pid"] == theirs.pid and snap["vllm"]["args"]["tensor_parallel_size"] == 2
        assert f"from ${var}" in snap["vllm"]["selected_because"]
        assert str(ours.pid) in snap["vllm"]["other_users"]


def test_snap_names_the_chosen_server_and_the_ignored_one_on_stderr(tmp_path, nobodys_server):
    """Through the command line, on this host as it is: nobody's server is never described for root."""
    server, _ = nobodys_server
    snap, stderr = _snap(tmp_path, env={"SUDO_UID": "", "SLURM_JOB_UID": ""})
    described = [snap["vllm"]] if "servers" not in snap["vllm"] else list(snap["vllm"]["servers"].values())
    assert server.pid not in [s.get("pid") for s in described]
    assert str(server.pid) in snap["vllm"]["other_users"] and str(server.pid) in stderr


def test_the_invoking_user_comes_from_the_environment_only_for_root():
    assert discovery.invoking_uid({"SLURM_JOB_UID": "1234", "SUDO_UID": "99"}) == (
        (1234, "$SLURM_JOB_UID") if os.geteuid() == 0 else (os.getuid(), "the user running hoststate"))
    assert discovery.invoking_uid({"SUDO_UID": "x"}) == (os.getuid(), "the user running hoststate")
    time.sleep(0)


# -- as another user: every socket nobody can take beside the server --------------------------------------------------

#: Run as nobody: bind every other socket on the port it can get (each kept if the kernel allows it) and answer
#: /version with its pid on each; prints what it holds.
SQUAT = textwrap.dedent("""\
    import json, os, select, socket, sys
    port = int(sys.argv[-1])
    held = []
    def take(family, addr, **opts):
        s = socket.socket(family)
        for level, name, value in opts.get("sockopts", []):
            s.setsockopt(level, name, value)
        try:
            s.bind((addr, port)); s.listen()
        except OSError:
            s.close(); return
        held.append((s, f"{addr}"))
    reuse = [(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1), (socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)]
    take(socket.AF_INET, "127.0.0.1", sockopts=reuse)
    take(socket.AF_INET, "0.0.0.0", sockopts=reuse)
    take(socket.AF_INET6, "::", sockopts=[(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)] + reuse)
    take(socket.AF_INET6, "::1", sockopts=reuse)
    take(socket.AF_INET6, "::ffff:127.0.0.1", sockopts=reuse)
    print("ready", flush=True)
    print(json.dumps([name for _, name in held]), flush=True)
    body = json.dumps({"version": "0.12.0", "pid": os.getpid()}).encode()
    while True:
        ready, _, _ = select.select([s for s, _ in held], [], [])
        for s in ready:
            c, _ = s.accept()
            c.recv(65536)
            c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
            c.close()
    """)


def test_whatever_socket_another_user_takes_the_described_server_is_the_one_that_answers(shared_dir, start):  # noqa: F811
    require(_ipv6(), "an IPv6 loopback (::1)")
    port = _free_port()
    (shared_dir / "serve").write_text(SERVE)
    (shared_dir / "serve").chmod(0o644)
    (shared_dir / "squat").mkdir(mode=0o755)
    (shared_dir / "squat" / "serve").write_text(SQUAT)
    (shared_dir / "squat" / "serve").chmod(0o644)
    ours = start(["vllm", "serve", "m", "--port", str(port), "--host", "0.0.0.0"], shared_dir,
                 executable=SYSTEM_PYTHON, env={"PATH": "/usr/bin:/bin"}, user=None)
    squat = start(["vllm", "serve", "m", str(port)], shared_dir / "squat", executable=SYSTEM_PYTHON,
                  env={"PATH": "/usr/bin:/bin"})  # a vLLM command line: the squat script as ./serve
    held = json.loads(squat.stdout.readline())
    assert "::" in held and "::1" in held  # IPv6 only (V6ONLY for [::]): the kernel keeps IPv4 ours
    assert "127.0.0.1" not in held and "0.0.0.0" not in held
    for host in ("localhost", "127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"):
        bare = host.strip("[]")
        answering = _answering_pid(bare, port)
        proc, note = discovery.server_at(f"http://{host}:{port}", {})
        assert proc is not None and proc.pid == answering, (host, note, held)
        got = get_from_owner(f"http://{host}:{port}", "/version", expect_pid=ours.pid)
        assert got.ok == (answering == ours.pid), (host, got)
        assert (got.body is not None) == (answering == ours.pid)
