"""The sweep script of docs/recipes.md, run as written against the seed's fixture trees.

A stand-in `hoststate` on PATH adds `--root TREE` (the host state of the day) and `--vllm-version`; a stand-in
`serve-and-bench.sh` records the verdict guard passed in its environment instead of starting vLLM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import HOSTS, PYTHONPATH, REPO, require

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture()
def sweep(tmp_path):
    require((HOSTS / "seed-baseline").is_dir() and (HOSTS / "seed-experiment").is_dir(), "seed fixture trees")
    require(shutil.which("bash") is not None, "bash")
    text = (REPO / "docs" / "recipes.md").read_text()
    script = re.search(r"```sh\n(#!/usr/bin/env bash\n# sweep\.sh.*?)```", text, re.S)
    assert script, "docs/recipes.md has the sweep script"
    (tmp_path / "sweep.sh").write_text(script.group(1))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "hoststate"
    stub.write_text(f'#!/usr/bin/env bash\nsub=$1; shift\nexec {sys.executable} -m hoststate "$sub" --root "$ROOT" '
                    '--vllm-version 0.12.0 "$@"\n')
    bench = tmp_path / "serve-and-bench.sh"
    bench.write_text('#!/usr/bin/env bash\nprintf \'{"serve": %s, "verdict": "%s"}\\n\' '
                     '"$(printf %s "$1" | python3 -c \'import json,sys; print(json.dumps(sys.stdin.read()))\')" '
                     '"$HOSTSTATE_GUARD_VERDICT" > "$2"\n')
    for f in (stub, bench):
        f.chmod(0o755)

    def run(tree: str, state: str, edit=None) -> subprocess.CompletedProcess:
        if edit:
            path = tmp_path / "sweep.sh"
            path.write_text(edit(path.read_text()))
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ROOT": str(HOSTS / tree),
               "PYTHONPATH": PYTHONPATH}
        return subprocess.run(["bash", "sweep.sh", MODEL, state], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    return run, tmp_path


def _outcomes(stdout: str, stderr: str) -> dict[str, str]:
    out = {}
    for line in (stdout + stderr).splitlines():
        m = re.match(r"^p(\d): (measured|REFUSED|bad input|benchmark failed)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_the_sweep_guards_every_cell_and_never_mixes_host_states(sweep) -> None:
    run, tmp = sweep
    day1 = run("seed-baseline", "wq-off")
    assert _outcomes(day1.stdout, day1.stderr) == {"1": "measured", "4": "measured"}, day1.stderr
    day2 = run("seed-experiment", "wq-on")
    assert _outcomes(day2.stdout, day2.stderr) == dict.fromkeys("2356", "measured"), day2.stderr
    verdicts = {p.name.split("-")[0]: json.loads(p.read_text())["verdict"] for p in tmp.glob("results/*/*/*.json")}
    assert verdicts == {"p1": "comparable", "p4": "comparable", "p2": "non-comparable", "p3": "non-comparable",
                        "p5": "non-comparable", "p6": "non-comparable"}
    # a baseline point measured again on the week-later host state: refused, never merged into its baseline
    rerun = run("seed-experiment", "wq-off")
    assert _outcomes(rerun.stdout, rerun.stderr) == {"1": "REFUSED", "4": "REFUSED"}, rerun.stderr


def test_a_cudagraph_mode_change_refuses_the_experiment_cells(sweep) -> None:
    """The seed's leading hypothesis: the experiment ran under another CUDA graph mode than its baseline."""
    run, _ = sweep
    day1 = run("seed-baseline", "wq-off")
    assert _outcomes(day1.stdout, day1.stderr) == {"1": "measured", "4": "measured"}, day1.stderr
    later = run("seed-experiment", "wq-on",
                edit=lambda s: s.replace("cudagraph_mode=FULL_AND_PIECEWISE", "cudagraph_mode=PIECEWISE"))
    assert _outcomes(later.stdout, later.stderr) == dict.fromkeys("2356", "REFUSED"), later.stderr
    assert "vllm.cudagraph.declared" in later.stderr
