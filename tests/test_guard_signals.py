"""guard and signals, with real processes: every forwardable signal sent to guard reaches the command once, guard
waits for the command and returns its status (never orphans it), and a terminal's Ctrl-C or Ctrl-\\ (sent by the
kernel to the whole foreground process group) is not delivered twice. A recording command writes every signal it
gets to a file, so each test reads what the command really received.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import PYTHONPATH

HANG = 60
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM")

#: The guarded command: records each forwardable signal it gets (one name a line) and exits 42 on the one named by
#: argv[2]; it writes argv[1] + ".ready" once its handlers are in place.
RECORDER = f"""
import os, signal, sys, time
FORWARDED = {FORWARDED!r}
record, stop = sys.argv[1], sys.argv[2]
def got(signum, _frame):
    name = signal.Signals(signum).name
    with open(record, "a") as fh:
        fh.write(name + "\\n")
    if name == stop:
        os._exit(42)
for name in FORWARDED:
    signal.signal(getattr(signal, name), got)
open(record + ".ready", "w").close()
while True:
    time.sleep(0.05)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHONPATH
    return env


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """A baseline of the env collector alone: guard takes a second to decide, and the verdict is comparable."""
    path = tmp_path_factory.mktemp("signals") / "baseline.toml"
    proc = subprocess.run([sys.executable, "-m", "hoststate", "snap", "--only", "env", "-o", str(path)],
                          capture_output=True, text=True, env=_env(), timeout=HANG, check=False)
    assert proc.returncode == 0, proc.stderr
    return path


def _guard_argv(baseline: Path, record: Path, stop: str) -> list[str]:
    return [sys.executable, "-m", "hoststate", "guard", "--baseline", str(baseline), "--only", "env", "--",
            sys.executable, "-c", RECORDER, str(record), stop]


def _wait_for(path: Path, alive) -> None:
    """Poll for ``path`` (a hang detector, not a timing assertion)."""
    deadline = time.monotonic() + HANG
    while not path.exists():
        assert alive(), "guard ended before its command was ready"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _received(record: Path) -> list[str]:
    return record.read_text().split() if record.exists() else []


@pytest.mark.parametrize("name", FORWARDED)
def test_each_signal_sent_to_guard_reaches_the_command_once_and_guard_waits_for_it(baseline, tmp_path, name):
    record = tmp_path / "record"
    proc = subprocess.Popen(_guard_argv(baseline, record, name), env=_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(Path(f"{record}.ready"), lambda: proc.poll() is None)
        os.kill(proc.pid, getattr(signal, name))  # guard's pid only, as a scheduler or `kill PID` does
        _, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # 42 is the command's own status: guard was not killed by the signal, it waited and passed the status on
    assert proc.returncode == 42, err
    assert _received(record) == [name]
    assert "Traceback" not in err


@pytest.mark.parametrize("name", ["SIGHUP", "SIGUSR1", "SIGALRM"])
def test_a_command_killed_by_a_forwarded_signal_gives_128_plus_n(baseline, tmp_path, name):
    """The command starts with default dispositions: a forwarded SIGUSR1 kills it, and guard says so (138)."""
    code = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(60); sys.exit(99)"
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "hoststate", "guard", "--baseline", str(baseline), "--only", "env",
                             "--", sys.executable, "-c", code, str(ready)], env=_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ready, lambda: proc.poll() is None)
        os.kill(proc.pid, getattr(signal, name))
        _, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + getattr(signal, name), err


def _drain(fd: int, out: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        out.append(chunk)


@pytest.mark.parametrize(("key", "name"), [(b"\x03", "SIGINT"), (b"\x1c", "SIGQUIT")])
def test_a_terminal_key_reaches_the_command_once(baseline, tmp_path, key, name):
    """Ctrl-C / Ctrl-\\ on guard's terminal: the kernel signals the foreground process group, guard and the command
    alike; guard does not forward it a second time (a second Ctrl-C aborts many benchmarks). SIGUSR1 afterwards ends
    the command: had guard forwarded the key's signal, the command would have recorded it twice before SIGUSR1."""
    record = tmp_path / "record"
    argv = _guard_argv(baseline, record, "SIGUSR1")
    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader with the pty as its controlling terminal, as a login shell's job
        try:
            os.execve(argv[0], argv, _env())
        finally:
            os._exit(127)
    output: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(master, output), daemon=True)
    reader.start()
    status = None
    try:
        _wait_for(Path(f"{record}.ready"), lambda: os.waitpid(pid, os.WNOHANG) == (0, 0))
        os.write(master, key)
        deadline = time.monotonic() + HANG
        while name not in _received(record):
            assert time.monotonic() < deadline, f"the command never got {name}: {b''.join(output)!r}"
            time.sleep(0.02)
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + HANG
        while status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            else:
                assert time.monotonic() < deadline, "guard did not end"
                time.sleep(0.02)
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(master)
    assert os.waitstatus_to_exitcode(status) == 42, b"".join(output)
    assert _received(record) == [name, "SIGUSR1"]


def test_guard_debug_option_belongs_to_the_command_after_the_subcommand(baseline, tmp_path):
    """`hoststate guard ... -- tool --debug`: the command's --debug; a refusal stays exit 3 and one line."""
    other = tmp_path / "other.toml"  # taken with one more VLLM_* variable: env drift, invalidating
    proc = subprocess.run([sys.executable, "-m", "hoststate", "snap", "--only", "env", "-o", str(other)],
                          capture_output=True, text=True, env={**_env(), "VLLM_ONLY_IN_BASELINE": "1"}, timeout=HANG,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "hoststate", "guard", "--baseline", str(other), "--only", "env",
                           "--", sys.executable, "-c", "print('ran')", "--debug"],
                          capture_output=True, text=True, env=_env(), timeout=HANG, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "ran" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith("hoststate: refused")
    # before the subcommand, --debug is hoststate's: a refusal is still a verdict (3, no traceback) ...
    proc = subprocess.run([sys.executable, "-m", "hoststate", "--debug", "guard", "--baseline", str(other), "--only",
                           "env", "--", "true"], capture_output=True, text=True, env=_env(), timeout=HANG, check=False)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    # ... and an error shows its traceback, with the same exit code as without --debug
    missing = str(tmp_path / "missing.toml")
    plain = subprocess.run([sys.executable, "-m", "hoststate", "guard", "--baseline", missing, "--", "x", "--debug"],
                           capture_output=True, text=True, env=_env(), timeout=HANG, check=False)
    debug = subprocess.run([sys.executable, "-m", "hoststate", "--debug", "guard", "--baseline", missing, "--", "x"],
                           capture_output=True, text=True, env=_env(), timeout=HANG, check=False)
    assert plain.returncode == debug.returncode == 2
    assert "Traceback" not in plain.stderr and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == plain.stderr.strip()
