"""One flow for a guarded run: the CLI (``hoststate guard --watch``) and the library (``guard_and_watch``) go
through hoststate.run.flow.guarded_run, so the same run writes the same files either way."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest

from hoststate.snapshot import toml_loads
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH

WATCH = FIXTURES / "watch"
SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --max-model-len 16384 -O1"
OPTS = {"only": ["system", "dsa", "vllm"], "vllm_cmd": SERVE, "vllm_version": "0.12.0"}
#: What a machine makes different between two runs of the same thing: clock readings and timings, and the sha256
#: of each run's own baseline file and sidecar snapshot (which hold their taken_at and folder).
VOLATILE = {"taken_at", "seconds", "sampler_cpu_s", "took_ms", "t", "recorded_at", "baseline_sha256",
            "snapshot_sha256"}
CLIENT = "import json, sys; json.dump({'output_throughput': 1000.0}, open(sys.argv[1], 'w'))"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_WATCH_REPLAY": str(WATCH / "h200-foreign.json")}


def _steady(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _workdir(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    work = tmp_path / name
    shutil.copytree(HOSTS / "seed-baseline", work / "host", symlinks=True)
    snap = ["snap", "-q", "--root", "host", "--only", "system,dsa,vllm", "--vllm-cmd", SERVE,
            "--vllm-version", "0.12.0", "-o", "base.toml"]
    subprocess.run([sys.executable, "-m", "hoststate", *snap], cwd=work, env=_env(), check=True, timeout=120)
    time.sleep(1.0)  # taken_at is in whole seconds: the guard's snapshot must not share the baseline's second
    return work


def _written(work: pathlib.Path) -> dict[str, Any]:
    result = json.loads((work / "r.json").read_text())
    sidecar = json.loads((work / "r.hoststate.json").read_text())
    sidecar["snapshot"] = toml_loads(sidecar["snapshot"])
    saved = toml_loads((work / "now.toml").read_text())
    trace = json.loads((work / "t.json").read_text())
    # each run has its own folder: named WORK here, the only path that differs
    text = json.dumps(_steady({"result": result, "sidecar": sidecar, "saved": saved, "trace": trace}), default=str)
    return json.loads(text.replace(str(work), "WORK"))


def test_the_cli_and_the_library_write_the_same_run(tmp_path: pathlib.Path) -> None:
    cli, api = _workdir(tmp_path, "cli"), _workdir(tmp_path, "api")
    client = [sys.executable, "-c", CLIENT, "r.json"]
    proc = subprocess.run(
        [sys.executable, "-m", "hoststate", "guard", "--baseline", "base.toml", "--allow-unreadable", "--root", "host",
         "--only", "system,dsa,vllm", "--vllm-cmd", SERVE, "--vllm-version", "0.12.0", "--watch",
         "--attach", "r.json", "--save-current", "now.toml", "--watch-trace", "t.json", "--", *client],
        cwd=cli, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    code = ("import json, sys\nfrom hoststate.watch import guard_and_watch\n"
            f"run = guard_and_watch('base.toml', {client!r}, attach_to='r.json', save_current='now.toml', "
            f"trace_to='t.json', allow_unreadable=True, root='host', **{OPTS!r})\n"
            "print(json.dumps({'verdict': run.verdict, 'written': run.written}))")
    lib = subprocess.run([sys.executable, "-c", code], cwd=api, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert lib.returncode == 0, lib.stderr
    said = json.loads(lib.stdout)
    assert said["verdict"] == "invalid"  # the recorded trace has a foreign process computing on the GPU
    # the library reports the same written files the CLI prints, in the same order
    cli_lines = [line.removeprefix("hoststate guard: ") for line in proc.stderr.splitlines()
                 if line.startswith("hoststate guard: ") and ("wrote" in line or "attached" in line)]
    assert cli_lines == said["written"]
    assert _written(cli) == _written(api)


def test_a_watched_run_writes_its_saved_snapshot_once_with_the_watch_table(tmp_path: pathlib.Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """--save-current under --watch: written after the run, holding [guard.watch]; the command is not told a
    path that does not exist yet."""
    work = _workdir(tmp_path, "once")
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOSTSTATE_WATCH_REPLAY", str(WATCH / "h200-dense-b.json"))
    from hoststate.capture import SnapOptions
    from hoststate.run.flow import WatchOptions, guarded_run

    seen = work / "seen.txt"
    probe = [sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write("
             "os.environ.get('HOSTSTATE_CURRENT', '-') + ' ' + str(os.path.exists('now.toml')))", str(seen)]
    outcome = guarded_run("base.toml", probe, SnapOptions.of(OPTS, root="host"), allow_unreadable=True,
                          watch=WatchOptions(interval=30.0), save_current="now.toml")
    assert outcome.returncode == 0 and outcome.watched is not None
    assert seen.read_text() == "- False"
    saved = toml_loads((work / "now.toml").read_text())
    assert saved["guard"]["watch"]["verdict"] == outcome.watched.verdict
    assert [line for line in outcome.written if line.startswith("wrote now.toml")] == [
        f"wrote now.toml (verdict {outcome.guard.verdict}, run {outcome.watched.verdict})"]
