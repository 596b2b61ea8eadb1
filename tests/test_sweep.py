"""``vllm bench sweep serve`` guarded cell by cell, checked against vLLM's own sweep code: the command lines vLLM
0.12.0 built for a wrapped ``--bench-cmd`` and what it did with each result (fixtures/vllm/sweep/0.12.0.json,
recorded by scripts/vllm_sweep_oracle.py from vLLM's unmodified functions) are replayed here through the real
``hoststate guard --watch --attach-from-argv``: each cell is stamped where the sweep looks for it, vLLM's rewrite
keeps it verified, and a resumed sweep refuses a cell whose earlier cells ran on another host state."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
from typing import Any

import pytest

from hoststate.run.sweep import experiment_of, result_from_argv
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH

ORACLE = json.loads((FIXTURES / "vllm" / "sweep" / "0.12.0.json").read_text())
CASES = {c["name"]: c for c in ORACLE["cases"]}
HOST = ["--only", "system,dsa,vllm", "--vllm-version", "0.12.0",
        "--vllm-cmd", "vllm serve meta-llama/Llama-3.1-8B-Instruct -O1"]
#: ``vllm bench serve`` stand-in: writes the oracle's canned result where its command line says, with the prompts
#: and rate it was given (as vllm bench serve records them: a number, a float), as vLLM's does.
BENCH = (f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n"
         "def last(o, default=None):\n"
         "    return args[len(args) - 1 - args[::-1].index(o) + 1] if o in args else default\n"
         f"result = {ORACLE['result']!r}\n"
         "result['num_prompts'] = int(last('--num-prompts', result['num_prompts']))\n"
         "result['request_rate'] = float(last('--request-rate', 'inf'))\n"
         "result['request_rate'] = 'inf' if result['request_rate'] == float('inf') else result['request_rate']\n"
         "json.dump(result, open(last('--result-dir') + '/' + last('--result-filename'), 'w'))\n")


def _bin(tmp: pathlib.Path, root: pathlib.Path) -> dict[str, str]:
    """PATH with ``vllm`` (the bench stand-in) and ``hoststate`` reading the fixture tree ``root`` (no GPU here:
    --root, the values both sides lack accepted, the H200's idle trace replayed for the watch)."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "vllm").write_text(BENCH)
    host = f"--root {shlex.quote(str(root))} {shlex.join(HOST)}"
    guard = (f'#!/bin/sh\nsub=$1; shift\ncase $sub in\n  guard) exec {sys.executable} -m hoststate guard {host} '
             f'--allow-unreadable "$@";;\n  snap) exec {sys.executable} -m hoststate snap {host} "$@";;\n'
             f'  *) exec {sys.executable} -m hoststate "$sub" "$@";;\nesac\n')
    (bindir / "hoststate").write_text(guard)
    for name in ("vllm", "hoststate"):
        (bindir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": PYTHONPATH,
            "HOSTSTATE_WATCH_REPLAY": str(FIXTURES / "watch" / "h200-idle.json")}


def _vllm_rewrite(path: pathlib.Path, case: dict[str, Any], run_number: int) -> None:
    """What vLLM's run_benchmark does to a result after the bench command (_update_run_data, indent 4); the test
    below checks this against the files vLLM itself wrote."""
    data = json.loads(path.read_text())
    data["run_number"] = run_number
    data.update(case["serve_comb"])
    data.update(case["bench_comb"])
    path.write_text(json.dumps(data, indent=4))


def _summary(folder: pathlib.Path, runs: int) -> None:
    """run_comb's summary.json: the rewritten runs, as a list."""
    items = [json.loads((folder / f"run={n}.json").read_text()) for n in range(runs)]
    (folder / "summary.json").write_text(json.dumps(items, indent=4))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_result_path_is_the_one_vllm_writes_and_guards_options_are_left_alone(name: str) -> None:
    case = CASES[name]
    wrapper = shlex.split(case["bench_cmd"])
    own = wrapper[: wrapper.index("--")]
    written = {f"TMP/results/20261203_120000/{f}" for f in case["files"] if not f.endswith("summary.json")}
    for cmd in case["commands"]:
        assert cmd[: cmd.index("--")] == own  # vLLM's overrides never reach guard's own options (--name=value)
        assert result_from_argv(cmd[cmd.index("--") + 1:]) in written
    assert len(case["commands"]) == case["num_runs"]
    assert case["resumed_commands"] == 0 and len(case["resumed_said"]) == case["num_runs"]  # reused, not rerun


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_rewrite_replayed_here_is_vllms(name: str, tmp_path: pathlib.Path) -> None:
    case = CASES[name]
    for rel, content in case["files"].items():
        if rel.endswith("summary.json"):
            continue
        path = tmp_path / "run.json"
        path.write_text(json.dumps(ORACLE["result"]))
        _vllm_rewrite(path, case, int(rel.rsplit("=", 1)[1].split(".")[0]))
        assert json.loads(path.read_text()) == content


def _run_cells(tmp: pathlib.Path, case: dict[str, Any], env: dict[str, str], first: int = 0) -> list[Any]:
    procs = []
    for n, cmd in enumerate(case["commands"], start=first):
        argv = [a.replace("TMP", str(tmp)) for a in cmd]
        argv[argv.index("--result-filename") + 1] = f"run={n}.json"
        folder = pathlib.Path(argv[argv.index("--result-dir") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
        procs.append(proc)
        if proc.returncode == 0:
            _vllm_rewrite(folder / f"run={n}.json", case, n)
    return procs


def _doc_block(first: str) -> list[str]:
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "watch.md").read_text()
    block = text[text.index(first):]
    return block[: block.index("```")].splitlines()


def _baseline(tmp: pathlib.Path, root: pathlib.Path, env: dict[str, str]) -> None:
    subprocess.run(["hoststate", "snap", "-q", "-o", "base.toml"], cwd=tmp, env=env, check=True, timeout=120)


@pytest.mark.parametrize("name", ["default", "overrides"])
def test_a_guarded_sweep_is_stamped_where_vllm_looks_and_stays_verified(name: str, tmp_path: pathlib.Path) -> None:
    case = CASES[name]
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-baseline", root, symlinks=True)
    env = _bin(tmp_path, root)
    _baseline(tmp_path, root, env)
    procs = _run_cells(tmp_path, case, env)
    assert [p.returncode for p in procs] == [0] * case["num_runs"], procs[0].stderr
    first = pathlib.Path(case["commands"][0][case["commands"][0].index("--result-dir") + 1].replace("TMP",
                                                                                                  str(tmp_path)))
    _summary(first, case["num_runs"])
    for n in range(case["num_runs"]):
        cell = json.loads((first / f"run={n}.json").read_text())
        assert cell["run_number"] == n and cell["hoststate"]["verdict"] == "clean"
        assert (first / f"run={n}.hoststate.json").is_file()
    proc = subprocess.run([sys.executable, "-m", "hoststate", "results", str(experiment_of(str(first / "x.json")))],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{case['num_runs']} cell(s), 1 host state(s)" in proc.stdout
    assert "sweep summaries (each lists exactly its verified cells)" in proc.stdout


def test_a_resumed_sweep_refuses_a_cell_from_another_host_state(tmp_path: pathlib.Path) -> None:
    """The seed: two cells ran before the DSA work queues were enabled by hand; the sweep resumed afterwards (vLLM
    reuses run=0/1) must not add run=2 from the changed host."""
    case = CASES["default"]
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-baseline", root, symlinks=True)
    env = _bin(tmp_path, root)
    _baseline(tmp_path, root, env)
    assert [p.returncode for p in _run_cells(tmp_path, case, env)] == [0, 0]
    shutil.rmtree(root)
    shutil.copytree(HOSTS / "seed-experiment", root, symlinks=True)  # the host changed between the two sessions
    later = subprocess.run(["hoststate", "snap", "-q", "-o", "later.toml"], cwd=tmp_path, env=env, timeout=120)
    assert later.returncode == 0
    resumed = dict(case, commands=[[a.replace("--baseline=base.toml", "--baseline=later.toml") for a in
                                    case["commands"][0]]])
    proc = _run_cells(tmp_path, resumed, env, first=2)[0]
    assert proc.returncode == 3, proc.stderr
    shown = _doc_block("  MISMATCH  run=0.hoststate.json")
    assert proc.stderr.splitlines()[-len(shown):] == shown  # docs/watch.md shows what the refusal prints
    assert not (tmp_path / "results" / "20261203_120000" / "run=2.json").exists()  # the bench never started


def test_attach_from_argv_needs_the_file_the_command_names(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-baseline", root, symlinks=True)
    env = _bin(tmp_path, root)
    _baseline(tmp_path, root, env)
    proc = subprocess.run(["hoststate", "guard", "--baseline", "base.toml", "--watch", "--attach-from-argv", "--",
                           "vllm", "bench", "serve", "--save-result"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "--attach-from-argv: the command names no --result-filename" in proc.stderr
    proc = subprocess.run(["hoststate", "guard", "--baseline", "base.toml", "--attach-from-argv", "--", "true"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--attach-from-argv needs --watch" in proc.stderr


#: Where vLLM's sweeps put a cell below the experiment folder: serve.py ``_get_comb_base_path`` (every version),
#: serve_sla.py ``_get_sla_iter_path`` (0.11.1, 0.12.0: an iteration folder below the combination's, or below the
#: experiment's without overrides), serve_workload.py (0.33.0: ``WL-`` parts, alone without serve/bench overrides).
LAYOUTS = {
    "serve": ("SERVE--max_num_seqs=64-BENCH--request_rate=1", "SERVE--max_num_seqs=128-BENCH--request_rate=1"),
    "serve, no override": ("", ""),
    "serve_sla": ("SERVE--max_num_seqs=64/request_rate=1", "SERVE--max_num_seqs=64/request_rate=16"),
    "serve_sla, no override": ("request_rate=1", "max_concurrency=8"),
    "serve_workload": ("WL--max_concurrency=1", "WL--max_concurrency=16"),
    "serve_workload with overrides": ("SERVE--max_num_seqs=64-WL--max_concurrency=1",
                                      "SERVE--max_num_seqs=128-WL--max_concurrency=1"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_resumed_sweep_finds_every_earlier_cell_in_each_vllm_layout(layout: str, tmp_path: pathlib.Path) -> None:
    """The earlier cell ran on the baseline host; the next cell of the sweep, in another combination or SLA
    iteration folder, is about to run after DSA was enabled: the earlier cell is found and named, whatever folders
    vLLM's sweep put between the two cells and their experiment."""
    from hoststate.policy import load_policy
    from hoststate.run.sweep import earlier_conflicts
    from tests.sweeps import host, write_cell

    first, later = LAYOUTS[layout]
    experiment = tmp_path / "results" / "20261203_120000"
    write_cell(experiment, f"{first}/run=0.json".lstrip("/"), host(), {"output_throughput": 1000.0})
    result = experiment / later / "run=1.json"
    assert experiment_of(str(result)) == experiment.resolve()
    lines = earlier_conflicts(str(result), host("dsa"), load_policy(()))
    assert lines and lines[0].startswith(os.path.join(first, "run=0.hoststate.json").lstrip("/") + ": another host")
    assert earlier_conflicts(str(result), host(), load_policy(())) == []  # the same host state: no conflict
