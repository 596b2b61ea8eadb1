"""The suite's xdist workers each run in their own PID namespace (tests/conftest.py, tests/nsinit.py): a test that
snaps the live host sees only its own worker's processes, never the stand-in servers another worker starts and ends
(the race that once failed test_faults_all.py under xdist). Under CI=true these fail when the isolation is missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import NSINIT, REPO, UNSHARE, require

#: execnet's bootstrap, in the command line of every xdist worker
WORKER_ARGV = b"import sys;exec(eval(sys.stdin.readline()))"


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:  # ended since the listing
        return b""


def _pids() -> list[str]:
    return [p for p in os.listdir("/proc") if p.isdigit()]


def test_a_worker_is_alone_in_its_pid_namespace() -> None:
    # CI runs the README's command (-n auto): a run there without workers is not the command the README gives
    require(os.environ.get("PYTEST_XDIST_WORKER") is not None, "xdist workers (-n auto, as the README runs the suite)")
    require(os.getpid() == 2 and str(NSINIT).encode() in _cmdline("1"),
            "this xdist worker is not PID 2 under tests/nsinit.py in its own PID namespace")
    workers = [p for p in _pids() if p != "1" and WORKER_ARGV in _cmdline(p)]  # PID 1: nsinit, given its args
    assert workers == [str(os.getpid())], "another xdist worker is visible: " + repr(workers)


INIT_CHECK = r"""
import os, signal, subprocess, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append("TERM"))
orphan = subprocess.run(["sh", "-c", "sleep 0.1 & echo $!"], capture_output=True, text=True).stdout.strip()
os.kill(1, signal.SIGTERM)  # PID 1 has a handler: it forwards the signal here
deadline = time.monotonic() + 20
while (os.path.exists(f"/proc/{orphan}") or not got) and time.monotonic() < deadline:
    time.sleep(0.02)  # the orphan's /proc entry goes when PID 1 waits for it
print(os.getpid(), got, "zombie" if os.path.exists(f"/proc/{orphan}") else "reaped")
sys.stdout.flush()
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(7)
"""


@pytest.mark.parametrize("end, status", [("exit", 7), ("kill", 128 + 9)])
def test_nsinit_forwards_signals_reaps_orphans_and_exits_as_the_worker(end: str, status: int) -> None:
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare (util-linux)")
    done = subprocess.run([*UNSHARE, sys.executable, "-I", "-S", str(NSINIT), "-c", INIT_CHECK, end],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout == "2 ['TERM'] reaped\n", done.stdout + done.stderr
    assert done.returncode == status, done.stderr


GROUP_CHECK = r"""
import signal, sys, time
got = []
signal.signal(signal.SIGINT, lambda *_: got.append("INT"))
print("ready", flush=True)
deadline = time.monotonic() + 20
while not got and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.5)  # time for a second copy to arrive
print(got, flush=True)
"""


def test_a_terminals_interrupt_reaches_the_worker_once() -> None:
    """Ctrl-C signals the whole process group, the worker included: nsinit must not forward another copy (a
    second KeyboardInterrupt would land in the worker's clean-up)."""
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare (util-linux)")
    proc = subprocess.Popen([*UNSHARE, sys.executable, "-I", "-S", str(NSINIT), "-c", GROUP_CHECK],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out == "['INT']\n", out
    assert proc.returncode == 0


BARRIER_TEST = '''
import os, pathlib, subprocess, sys, time

SYNC = pathlib.Path(os.environ["HS_SYNC"])


def wait_for(step):
    """Both workers at STEP: each has started its process before either looks, and looks before either ends it."""
    me = os.environ["PYTEST_XDIST_WORKER"]
    (SYNC / f"{step}-{me}").touch()
    deadline = time.monotonic() + 60
    while len(list(SYNC.glob(f"{step}-*"))) < 2:
        assert time.monotonic() < deadline, f"the other worker never reached {step}"
        time.sleep(0.02)


def test_a_process_of_the_other_worker_is_invisible():
    me = os.environ["PYTEST_XDIST_WORKER"]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "hs-isolation-" + me])
    try:
        wait_for("started")
        seen = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\\0")
            except OSError:
                continue
            seen += [a.decode() for a in argv if a.startswith(b"hs-isolation-") and a.decode() != "hs-isolation-" + me]
        wait_for("looked")
        assert not seen, f"SEEN {seen}"
    finally:
        proc.kill()
        proc.wait()
'''


@pytest.mark.parametrize("isolated", [True, False], ids=["own-namespaces", "shared-namespace"])
def test_a_worker_never_sees_a_process_another_worker_started(tmp_path, isolated: bool) -> None:
    """Two workers of a small session under this conftest each start a process and list /proc at the same time:
    with their own namespaces neither sees the other's; sharing one (HOSTSTATE_TEST_NO_PIDNS=1), each does."""
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare (util-linux)")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_pair.py").write_text(textwrap.dedent(BARRIER_TEST))
    (tmp_path / "sync").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HOSTSTATE_TEST_"))}
    env.update(HS_SYNC=str(tmp_path / "sync"), **({} if isolated else {"HOSTSTATE_TEST_NO_PIDNS": "1"}))
    # --basetemp: a session given none numbers its own under /tmp/pytest-of-USER and deletes the oldest there (an
    # earlier full run's: tens of seconds)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "inner"), "-n", "2", "--dist", "each", "-q",
                           str(tmp_path / "test_pair.py")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    if isolated:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode == 1 and "SEEN ['hs-isolation-gw" in done.stdout, done.stdout + done.stderr
