"""docs/watch.md's example run as written, its results output as the command prints it, and docs/performance.md's
sampler figures as measured (fixtures/watch/h200-cost.json)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

from tests.conftest import FIXTURES, PYTHONPATH, REPO, require

#: A stand-in for `vllm bench serve --save-result`: the result file as vLLM writes it (one json.dump object,
#: each --metadata KEY=VALUE a top-level string), in --result-dir under --result-filename.
VLLM = r"""#!PYTHON
import argparse, json, os
p = argparse.ArgumentParser()
p.add_argument("bench"); p.add_argument("serve"); p.add_argument("--model"); p.add_argument("--save-result",
action="store_true"); p.add_argument("--result-dir", default="."); p.add_argument("--result-filename")
p.add_argument("--metadata", nargs="*", default=[])
a = p.parse_args()
result = {"date": "20261203-120000", "backend": "vllm", "model_id": a.model, "completed": 100, "failed": 0,
          "request_throughput": 8.0, "latencies": [1.0], "queue_times": [0.0]}
for item in a.metadata:
    key, value = item.split("=", 1)
    result[key] = value
os.makedirs(a.result_dir, exist_ok=True)
json.dump(result, open(os.path.join(a.result_dir, a.result_filename), "w"))
"""


def _block(doc: str, start: str) -> str:
    text = (REPO / "docs" / doc).read_text()
    found = re.search(r"```(?:sh)?\n(" + re.escape(start) + r".*?)```", text, re.S)
    assert found, f"docs/{doc} has a block starting {start!r}"
    return found.group(1)


def test_the_watch_example_runs_as_written(tmp_path) -> None:
    require(shutil.which("bash") is not None, "bash")
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    (tmp_path / "example.sh").write_text(_block("watch.md", "# watch-example.sh"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "hoststate").write_text(f'#!/bin/sh\nexec {sys.executable} -m hoststate "$@"\n')
    (bindir / "vllm").write_text(VLLM.replace("PYTHON", sys.executable))
    for stub in bindir.iterdir():
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": PYTHONPATH}
    proc = subprocess.run(["bash", "example.sh"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "guard: 4" in proc.stdout
    assert "DEGRADED  clocks held down by the power cap more than in the baseline: 99.6 %, baseline 0.0 %" \
        in proc.stderr
    digest = json.loads((tmp_path / "sweep" / "run=0.json").read_text())["hoststate"]["host"]["digest"]
    assert proc.stdout.endswith("hoststate results: 1 cell(s), 1 host state(s): comparable\n"
                                f"  A reference (baseline base-run.toml): {digest[:19]}, 1 cell(s), first run=0.json\n"
                                "  DEGRADED    run=0.json\n"
                                "      clocks held down by the power cap more than in the baseline: 99.6 %, "
                                "baseline 0.0 %\n")
    result = json.loads((tmp_path / "sweep" / "run=0.json").read_text())
    assert result["hoststate_current_digest"] == result["hoststate"]["host"]["digest"]
    assert (tmp_path / "sweep" / "run=0.hoststate.json").is_file()


def test_performance_doc_has_the_measured_sampler_figures() -> None:
    from benchmarks.bench_watch import cost_rows

    rows = cost_rows(json.loads((FIXTURES / "watch" / "h200-cost.json").read_text()))
    doc = (REPO / "docs" / "performance.md").read_text()
    section = doc.split("## The watch sampler", 1)[1]
    assert len(rows) == 4
    for row in rows:
        assert row in section
    default = next(r for r in rows if r.startswith("| 1 Hz | 8 |"))
    worst = float(default.split("|")[3].split("-")[-1])
    assert worst < 1.0  # design.md's target: under 1 % of a core on 8 GPUs at the default rate


def test_the_python_api_example_runs_as_written(tmp_path) -> None:
    text = (REPO / "docs" / "watch.md").read_text()
    code = re.search(r"```python\n(# watch-api\.py.*?)```", text, re.S)
    assert code, "docs/watch.md has the API example"
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    (tmp_path / "watch-api.py").write_text(code.group(1))
    proc = subprocess.run([sys.executable, "watch-api.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("invalid ['another process computed on a watched GPU during the run (it shares the SMs "
                           "and memory bandwidth): 1', 'clocks held down by the power cap more than in the baseline: "
                           "99.6 %, baseline 0.0 %'] 0 4\n")
    assert json.loads((tmp_path / "api-run.json").read_text())["hoststate"]["verdict"] == "invalid"
