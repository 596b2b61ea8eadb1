"""`hoststate guard` as a benchmark script runs it: real subprocesses, the seed fixture trees, marker files.

Every guard run goes through ``guard()``, which also checks that the baseline file is byte-identical and keeps its
mtime afterwards. A marker file written by the guarded command tells whether the command was started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hoststate.digest import digest
from hoststate.snapshot import loads
from tests.conftest import HOSTS, require
from tests.inproc import hoststate as hoststate_here

HOSTSTATE = [sys.executable, "-m", "hoststate"]
PY = sys.executable
SEED_BASELINE = HOSTS / "seed-baseline"
SEED_EXPERIMENT = HOSTS / "seed-experiment"
WQ_STATE = 'dsa.devices.dsa0.wqs."wq0.0".state'


def _seed_trees() -> None:
    require(SEED_BASELINE.is_dir() and SEED_EXPERIMENT.is_dir(), "seed fixture trees not built (tests/dsatree.py)")


def snap(root: Path, out: Path, *extra: str) -> Path:
    proc = subprocess.run([*HOSTSTATE, "snap", "--root", str(root), "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def seed_baseline(tmp_path_factory) -> Path:
    """A baseline snapped from the seed's baseline host (DSA work queues disabled), read-only on disk."""
    _seed_trees()
    path = snap(SEED_BASELINE, tmp_path_factory.mktemp("baseline") / "baseline.toml")
    path.chmod(0o444)
    return path


def _fingerprint(path: Path) -> tuple[bytes, int, int] | None:
    if not path.is_file():
        return None
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_mode


def guard(baseline: Path | str, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """Run `hoststate guard --baseline B ARGS...`; assert the baseline is untouched afterwards."""
    before = _fingerprint(Path(baseline))
    proc = subprocess.run([*HOSTSTATE, "guard", "--baseline", str(baseline), *args],
                          capture_output=True, text=True, timeout=timeout, **kw)
    assert _fingerprint(Path(baseline)) == before, "the baseline file changed"
    return proc


def guard_here(baseline: Path | str, *args: str) -> subprocess.CompletedProcess:
    """``guard()`` through the same entry point in this process (tests/inproc.py), for runs that start no command
    (bad input, no command given): what is tested is the exit code and stderr, not a process."""
    before = _fingerprint(Path(baseline))
    proc = hoststate_here(["guard", "--baseline", str(baseline), *args])
    assert _fingerprint(Path(baseline)) == before, "the baseline file changed"
    return proc


def touch_cmd(marker: Path, code: int = 0) -> list[str]:
    """A command that creates ``marker`` then exits with ``code``."""
    return [PY, "-c", f"import sys; open({str(marker)!r}, 'w').close(); sys.exit({code})"]


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- refusal and acceptance on the seed trees -------------------------------------------------------------------


def test_refuses_the_seed_experiment_and_does_not_start_the_command(seed_baseline, tmp_path) -> None:
    marker = tmp_path / "started"
    proc = guard(seed_baseline, "--root", str(SEED_EXPERIMENT), "--", *touch_cmd(marker))
    assert proc.returncode == 3, proc.stderr
    assert not marker.exists()
    err = proc.stderr.splitlines()
    refused = err[err.index(next(line for line in err if line.startswith("REFUSED ("))):]
    assert any(line == '  8 x dsa.devices.*.wqs.*.state: "disabled" -> "enabled"' for line in refused), err
    assert any(line.startswith("next: ") and "--accept 'dsa.**'" in line for line in err), err
    assert all(len(line) <= 120 for line in err)
    assert err[-1].startswith("hoststate: refused (") and "not started" in err[-1]
    assert proc.stdout == ""


def test_accepts_the_same_host_state_and_runs_the_command(seed_baseline, tmp_path) -> None:
    marker = tmp_path / "started"
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--", *touch_cmd(marker))
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    assert ": comparable (0 invalidating" in proc.stderr


def test_accept_pattern_runs_as_non_comparable_and_records_it(seed_baseline, tmp_path) -> None:
    marker, saved = tmp_path / "started", tmp_path / "current.toml"
    proc = guard(seed_baseline, "--root", str(SEED_EXPERIMENT), "--accept", "dsa.**", "--save-current", str(saved),
                 "--", *touch_cmd(marker))
    assert proc.returncode == 0, proc.stderr
    assert marker.exists()
    assert "ACCEPTED (" in proc.stderr and "dsa.devices.*.wqs.*.state" in proc.stderr, proc.stderr
    assert "non-comparable" in proc.stderr

    current = loads(saved.read_bytes(), str(saved))  # still a valid snapshot with the [guard] table
    table = current["guard"]
    base = loads(seed_baseline.read_bytes())
    assert table["verdict"] == "non-comparable"
    assert table["baseline"] == str(seed_baseline)
    assert table["baseline_digest"] == base["hoststate"]["digest"]
    assert table["accept"] == ["dsa.**"]
    accepted = {a["path"]: a for a in table["accepted"]}
    assert accepted[WQ_STATE]["old"] == "disabled" and accepted[WQ_STATE]["new"] == "enabled"
    assert accepted[WQ_STATE]["accepted_by"] == "dsa.**" and accepted[WQ_STATE]["reason"]
    assert table["counts"]["invalidating"] == len(table["accepted"])
    assert "refused" not in table
    # the [guard] table is not host state: it leaves the digest alone
    assert digest(current) == current["hoststate"]["digest"] != base["hoststate"]["digest"]


def test_a_narrow_accept_does_not_let_other_findings_through(seed_baseline, tmp_path) -> None:
    marker = tmp_path / "started"
    proc = guard(seed_baseline, "--root", str(SEED_EXPERIMENT), "--accept", "dsa.devices.*.wqs.*.state",
                 "--", *touch_cmd(marker))
    assert proc.returncode == 3
    assert not marker.exists()
    text = proc.stderr
    accepted, refused = text[text.index("ACCEPTED ("):], text[text.index("REFUSED ("):text.index("ACCEPTED (")]
    assert "8 x dsa.devices.*.wqs.*.state:" in accepted and "dsa.devices.*.wqs.*.state" not in refused, text
    assert "8 x dsa.devices.*.wqs.*.size: 0 -> 32" in refused, text


def test_a_comparable_run_records_verdict_comparable(seed_baseline, tmp_path) -> None:
    saved = tmp_path / "current.toml"
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--save-current", str(saved))
    assert proc.returncode == 0, proc.stderr
    table = loads(saved.read_bytes())["guard"]
    assert table["verdict"] == "comparable" and table["accepted"] == []


def test_a_refused_run_saves_the_current_snapshot_as_refused(seed_baseline, tmp_path) -> None:
    marker, saved = tmp_path / "started", tmp_path / "current.toml"
    proc = guard(seed_baseline, "--root", str(SEED_EXPERIMENT), "--save-current", str(saved), "--",
                 *touch_cmd(marker))
    assert proc.returncode == 3 and not marker.exists()
    table = loads(saved.read_bytes())["guard"]
    assert table["verdict"] == "refused"
    assert WQ_STATE in {r["path"] for r in table["refused"]}


def test_a_saved_current_can_serve_as_the_next_baseline(seed_baseline, tmp_path) -> None:
    saved = tmp_path / "current.toml"
    assert guard(seed_baseline, "--root", str(SEED_EXPERIMENT), "--accept", "**", "--save-current",
                 str(saved)).returncode == 0
    proc = guard(saved, "--root", str(SEED_EXPERIMENT), "-v")
    assert proc.returncode == 0, proc.stderr
    assert ": comparable (0 invalidating" in proc.stderr, proc.stderr
    assert not any(line.split()[1].startswith("guard.") for line in proc.stderr.splitlines()
                   if line.lstrip().startswith(("warning", "ACCEPTED", "REFUSED"))), proc.stderr  # [guard] not compared


def test_no_command_exit_codes(seed_baseline) -> None:
    assert guard_here(seed_baseline, "--root", str(SEED_BASELINE)).returncode == 0
    assert guard_here(seed_baseline, "--root", str(SEED_EXPERIMENT)).returncode == 3


def test_refuses_another_cpu_and_kernel(tmp_path) -> None:
    baseline = snap(HOSTS / "xeon-2s", tmp_path / "xeon.toml", "--only", "system")
    marker = tmp_path / "started"
    proc = guard(baseline, "--root", str(HOSTS / "epyc-amd"), "--only", "system", "-v", "--", *touch_cmd(marker))
    assert proc.returncode == 3 and not marker.exists()
    assert any("system.kernel.release" in line for line in proc.stderr.splitlines())  # -v: every finding


def test_vllm_cudagraph_mode_change_is_refused(tmp_path) -> None:
    """The seed's leading hypothesis: the same arguments but another CUDA graph mode."""
    tree = HOSTS / "xeon-2s"
    serve = "vllm serve meta-llama/Llama-3.1-8B-Instruct -cc.cudagraph_mode={}"
    baseline = snap(tree, tmp_path / "b.toml", "--only", "vllm", "--vllm-cmd", serve.format("PIECEWISE"),
                    "--vllm-version", "0.12.0")
    marker = tmp_path / "started"
    same = guard(baseline, "--root", str(tree), "--only", "vllm", "--vllm-cmd", serve.format("PIECEWISE"),
                 "--vllm-version", "0.12.0", "--", *touch_cmd(marker))
    assert same.returncode == 0, same.stderr
    marker.unlink()
    other = guard(baseline, "--root", str(tree), "--only", "vllm", "--vllm-cmd",
                  serve.format("FULL_AND_PIECEWISE"), "--vllm-version", "0.12.0", "--", *touch_cmd(marker))
    assert other.returncode == 3, other.stderr
    assert not marker.exists()
    assert "cudagraph" in other.stderr


# -- the command: exit status, stdio, signals ------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 7])
def test_exit_status_passes_through(seed_baseline, tmp_path, code) -> None:
    marker = tmp_path / "started"
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--", *touch_cmd(marker, code))
    assert proc.returncode == code, proc.stderr
    assert marker.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_command_killed_by_a_signal_gives_128_plus_n(seed_baseline, signum) -> None:
    code = f"import os; os.kill(os.getpid(), {int(signum)})"
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--", PY, "-c", code)
    assert proc.returncode == 128 + signum, proc.stderr


def test_the_command_gets_stdin_stdout_and_its_own_options(seed_baseline) -> None:
    # -v and --help after the command are the command's, not guard's
    code = "import sys; print(sys.stdin.read().upper(), sys.argv[1:])"
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--", PY, "-c", code, "-v", "--help",
                 input="from stdin")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "FROM STDIN ['-v', '--help']\n"


def test_the_command_without_double_dash(seed_baseline) -> None:
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), PY, "-c", "print('ran')", "-v")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran\n"


def test_command_not_found_is_127(seed_baseline) -> None:
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--", "/nonexistent/bench-command")
    assert proc.returncode == 127
    assert "hoststate: /nonexistent/bench-command: command not found" in proc.stderr.splitlines()


def _start_trapping(seed_baseline: Path, tmp_path: Path, signame: str,
                    code: int | None) -> tuple[subprocess.Popen, Path]:
    """Guard a command that traps ``signame`` (exits ``code``; None: no trap) in its own session, once it is ready."""
    ready = tmp_path / "ready"
    trap = f"signal.signal(signal.{signame}, lambda *a: sys.exit({code}))\n" if code is not None else ""
    child = (
        "import signal, sys, time\n"
        + trap +
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(60)\n"
        "sys.exit(99)\n"
    )
    proc = subprocess.Popen([*HOSTSTATE, "guard", "--baseline", str(seed_baseline), "--root", str(SEED_BASELINE),
                             "--", PY, "-c", child], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"guarded command never became ready: {proc.communicate()[1]}")
        time.sleep(0.02)
    return proc, ready


# A real terminal's Ctrl-C (delivered once, guard returning the command's status): tests/test_guard_signals.py.


def test_ctrl_c_kills_a_command_that_does_not_trap_it(seed_baseline, tmp_path) -> None:
    """The command starts with SIGINT at its default (guard's own handling is not inherited): 128 + 2."""
    proc, _ = _start_trapping(seed_baseline, tmp_path, "SIGINT", None)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, err


def test_sigterm_to_guard_is_forwarded_to_the_command(seed_baseline, tmp_path) -> None:
    """A scheduler or `timeout` signals guard's pid only; guard passes it on and returns the command's status."""
    proc, _ = _start_trapping(seed_baseline, tmp_path, "SIGTERM", 43)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 43, err


# -- bad input: exit 2, one line, the command not started -------------------------------------------------------


def _bad_baselines(tmp_path: Path) -> dict[str, Path]:
    files = {
        "missing": tmp_path / "nope.toml",
        "empty": tmp_path / "empty.toml",
        "not-toml": tmp_path / "garbage.toml",
        "not-a-snapshot": tmp_path / "other.toml",
        "wrong-schema": tmp_path / "schema.toml",
        "directory": tmp_path / "adir",
    }
    files["empty"].write_bytes(b"")
    files["not-toml"].write_bytes(b"[hoststate\nschema = 1\n")
    files["not-a-snapshot"].write_text('[tool]\nname = "x"\n')
    files["wrong-schema"].write_text('[hoststate]\nschema = 99\nversion = "0"\ndigest = "sha256:0"\n'
                                     "taken_at = 2026-06-02T00:00:00Z\n")
    files["directory"].mkdir()
    return files


@pytest.mark.parametrize("kind", ["missing", "empty", "not-toml", "not-a-snapshot", "wrong-schema", "directory"])
def test_a_bad_or_missing_baseline_is_exit_2_with_one_line(tmp_path, kind) -> None:
    _seed_trees()
    baseline = _bad_baselines(tmp_path)[kind]
    marker = tmp_path / "started"
    proc = guard_here(baseline, "--root", str(SEED_BASELINE), "--", *touch_cmd(marker))
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert line.startswith("hoststate: ") and str(baseline) in line
    assert not marker.exists()


@pytest.mark.parametrize("args", [
    ["--accept", 'dsa."unbalanced'],
    ["--accept", "dsa.x**"],
    ["--policy", "/nonexistent/policy.toml"],
    ["--only", "nosuchcollector"],
    ["--root", "/nonexistent/tree"],
])
def test_bad_options_are_exit_2_with_one_line(seed_baseline, tmp_path, args) -> None:
    marker = tmp_path / "started"
    proc = guard_here(seed_baseline, *args, "--", *touch_cmd(marker))
    assert proc.returncode == 2, proc.stderr
    one_line(proc.stderr)
    assert not marker.exists()


def test_a_bad_policy_file_is_exit_2(seed_baseline, tmp_path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rule]]\npath = "dsa.**"\nseverity = "fatal"\n')
    marker = tmp_path / "started"
    proc = guard_here(seed_baseline, "--policy", str(policy), "--root", str(SEED_BASELINE), "--",
                      *touch_cmd(marker))
    assert proc.returncode == 2 and "severity" in one_line(proc.stderr)
    assert not marker.exists()


def test_a_user_policy_can_downgrade_a_finding(seed_baseline, tmp_path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rule]]\npath = "dsa.**"\nseverity = "warning"\nreason = "DSA unused by this benchmark"\n')
    proc = guard_here(seed_baseline, "--policy", str(policy), "--root", str(SEED_EXPERIMENT))
    assert proc.returncode == 0, proc.stderr


def test_save_current_never_overwrites_silently(seed_baseline, tmp_path) -> None:
    saved, marker = tmp_path / "current.toml", tmp_path / "started"
    saved.write_bytes(b"precious\n")
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--save-current", str(saved), "--", *touch_cmd(marker))
    assert proc.returncode == 2 and "--force" in one_line(proc.stderr)
    assert saved.read_bytes() == b"precious\n" and not marker.exists()
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--save-current", str(saved), "--force", "--",
                 *touch_cmd(marker))
    assert proc.returncode == 0 and marker.exists()
    assert loads(saved.read_bytes())["guard"]["verdict"] == "comparable"


def test_save_current_onto_the_baseline_is_refused_even_with_force(tmp_path) -> None:
    _seed_trees()
    baseline = snap(SEED_BASELINE, tmp_path / "baseline.toml")  # writable: guard must still not touch it
    marker = tmp_path / "started"
    for target in (baseline, tmp_path / "." / "baseline.toml"):
        proc = guard_here(baseline, "--root", str(SEED_EXPERIMENT), "--accept", "**", "--save-current", str(target),
                          "--force", "--", *touch_cmd(marker))
        assert proc.returncode == 2 and "baseline" in one_line(proc.stderr)
        assert not marker.exists()


def test_the_overhead_benchmark_runs(capsys) -> None:
    """benchmarks/bench_guard.py measures guard minus its command against snap + diff; no timing is asserted."""
    _seed_trees()
    from benchmarks import bench_guard

    rows = bench_guard.main(runs=1)
    assert [r[0] for r in rows] == ["seed-baseline (comparable)", "seed-experiment (accepted)"]
    assert all(isinstance(float(cell), float) for r in rows for cell in r[1:])
    assert "overhead / (snap + diff)" in capsys.readouterr().out


def test_the_command_learns_the_verdict_from_its_environment(seed_baseline, tmp_path) -> None:
    saved = tmp_path / "current.toml"
    code = ("import os; print(*(os.environ.get(k, '-') for k in ('HOSTSTATE_GUARD_VERDICT', 'HOSTSTATE_ACCEPTED',"
            " 'HOSTSTATE_BASELINE_DIGEST', 'HOSTSTATE_CURRENT')))")
    proc = guard(seed_baseline, "--root", str(SEED_EXPERIMENT), "--accept", "dsa.**", "--save-current", str(saved),
                 "--", PY, "-c", code)
    assert proc.returncode == 0, proc.stderr
    verdict, accepted, base_digest, current = proc.stdout.split()
    table = loads(saved.read_bytes())["guard"]
    assert (verdict, int(accepted), base_digest) == ("non-comparable", len(table["accepted"]), table["baseline_digest"])
    assert current == str(saved)
    proc = guard(seed_baseline, "--root", str(SEED_BASELINE), "--", PY, "-c", code)
    assert proc.stdout.split()[:2] == ["comparable", "0"] and proc.stdout.split()[3] == "-"
