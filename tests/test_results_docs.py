"""docs/watch.md's seed sweep replayed end to end: cells guarded and watched by `hoststate guard --watch --attach`
on fixtures/hosts/seed-* (NVML replayed for the snapshots, a recorded H200 trace for the watch), then `hoststate
results --metric` as the page shows it. And the run record the watch writes, against its JSON Schema."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import jsonschema

from tests.conftest import FIXTURES, PYTHONPATH, REPO, require

#: A stand-in for `vllm bench serve --save-result`: the result as vLLM writes it (one json.dump object in
#: --result-dir under --result-filename), with the output_throughput the doc gives it in SEED_OUTPUT_THROUGHPUT.
VLLM = r"""#!PYTHON
import argparse, json, os
p = argparse.ArgumentParser()
p.add_argument("bench"); p.add_argument("serve"); p.add_argument("--model"); p.add_argument("--save-result",
action="store_true"); p.add_argument("--result-dir", default="."); p.add_argument("--result-filename")
a = p.parse_args()
result = {"date": "20261203-120000", "backend": "vllm", "model_id": a.model, "completed": 100, "failed": 0,
          "output_throughput": float(os.environ["SEED_OUTPUT_THROUGHPUT"])}
os.makedirs(a.result_dir, exist_ok=True)
json.dump(result, open(os.path.join(a.result_dir, a.result_filename), "w"))
"""


def _blocks(text: str | None = None) -> list[tuple[str, str]]:
    """(script, the output block after it) for each ``# seed-*.sh`` block of docs/watch.md (or of ``text``)."""
    text = (REPO / "docs" / "watch.md").read_text() if text is None else text
    return re.findall(r"```sh\n(# seed-[a-z-]+\.sh\n.*?)```\n\n```\n(.*?)```", text, re.S)


def _workdir(tmp_path: pathlib.Path) -> dict[str, str]:
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "hoststate").write_text(f'#!/bin/sh\nexec {sys.executable} -m hoststate "$@"\n')
    (bindir / "vllm").write_text(VLLM.replace("PYTHON", sys.executable))
    for stub in bindir.iterdir():
        stub.chmod(0o755)
    return _env(tmp_path)


def _env(tmp_path: pathlib.Path) -> dict[str, str]:
    """The environment the blocks run in once _workdir has set ``tmp_path`` up."""
    return {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": PYTHONPATH}


def run_blocks(tmp_path: pathlib.Path,
               text: str | None = None) -> list[tuple[str, str, subprocess.CompletedProcess[str]]]:
    """Each ``# seed-*.sh`` block of docs/watch.md (or of ``text``) run in turn in ``tmp_path``, as a reader runs
    them: (script, the output the page shows after it, the run). scripts/refresh_docs.py rewrites the shown outputs
    from these runs."""
    env = _workdir(tmp_path)
    runs = []
    for script, shown in _blocks(text):
        name = script.splitlines()[0][2:]
        (tmp_path / name).write_text(script)
        proc = subprocess.run(["bash", name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        runs.append((script, shown, proc))
    return runs


def _schema(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((REPO / "docs" / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_seed_sweep_replayed_end_to_end(tmp_path: pathlib.Path) -> None:
    require(shutil.which("bash") is not None, "bash")
    runs = run_blocks(tmp_path)
    assert [script.splitlines()[0] for script, _, _ in runs] == ["# seed-sweep.sh", "# seed-separate.sh"]
    for _script, shown, proc in runs:
        assert proc.returncode == 1, proc.stderr  # results refuses the mixed sweep
        assert proc.stdout == shown, proc.stderr  # stale: python scripts/refresh_docs.py
        assert "hoststate guard: run clean" in proc.stderr
    blocks = [(script, shown) for script, shown, _ in runs]
    env = _env(tmp_path)
    first, second = blocks[0][1], blocks[1][1]
    # both changes named, their shift, and that this sweep cannot part them ...
    assert "  B                   1355   3 cell(s), 1350-1362  output_throughput 1005 -> 1355 (+34.8 %)" in first
    assert "this sweep cannot separate them" in first and "dsa0, dsa2: 8 WQs disabled -> enabled" in first
    assert "vLLM cudagraph PIECEWISE -> FULL_AND_PIECEWISE" in first
    # ... until the cell with the DSA change alone: the graph mode moved it, the DSA queues did not
    assert "      output_throughput 1006 -> 1355 (+34.7 %)  (C -> B)" in second
    assert "(+0.1 %, within the cells' spread)  (A -> C)" in second
    record = _schema("run-record")
    for result in sorted((tmp_path / "sweep").rglob("run=?.json")):
        data = json.loads(result.read_text())
        record.validate(data["hoststate"])
        side = json.loads(result.with_name(result.stem + ".hoststate.json").read_text())
        record.validate(side)
        assert {k: v for k, v in side.items() if k != "snapshot"} == data["hoststate"]
    report = subprocess.run([sys.executable, "-m", "hoststate", "results", "sweep", "--metric", "output_throughput",
                             "--format", "json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    _schema("results").validate(json.loads(report.stdout))


def test_the_records_the_watch_writes_validate(tmp_path: pathlib.Path, monkeypatch) -> None:
    """The record of a watched run as hoststate.watch writes it (result, sidecar, and a sidecar whose result was
    no JSON object), against docs/schemas/run-record.schema.json."""
    from hoststate.watch import guard_and_watch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOSTSTATE_WATCH_REPLAY", str(FIXTURES / "watch" / "h200-foreign.json"))
    record = _schema("run-record")
    for name, body in (("run=0.json", "import json; json.dump({'completed': 100}, open('run=0.json', 'w'))"),
                       ("run=1.json", "open('run=1.json', 'w').write('[1, 2]')")):
        run = guard_and_watch(str(FIXTURES / "watch" / "h200-base-run.toml"), [sys.executable, "-c", body],
                              attach_to=name, root=str(FIXTURES / "hosts" / "seed-baseline"), only=["system"],
                              allow_unreadable=True, accept=["system.**", "hoststate.**", "collectors.**"])
        record.validate(run.record)
        side = json.loads((tmp_path / name.replace(".json", ".hoststate.json")).read_text())
        record.validate(side)
        if name == "run=0.json":
            record.validate(json.loads((tmp_path / name).read_text())["hoststate"])
        else:
            assert "attach_error" in side
    broken = dict(run.record, verdict="fine")
    assert not record.is_valid(broken)


def test_the_refresh_script_rewrites_a_stale_sweep_output(tmp_path: pathlib.Path) -> None:
    """A digest the page shows that a run no longer prints is found by ``--check`` and rewritten to what the run
    prints (scripts/refresh_docs.py sweep_outputs), leaving the rest of the page as it was."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import refresh_docs
    finally:
        sys.path.remove(str(REPO / "scripts"))
    page = tmp_path / "watch.md"
    real = (REPO / "docs" / "watch.md").read_text()
    digest = re.search(r"reference \(baseline base\.toml\): sha256:([0-9a-f]{12})", real).group(1)
    page.write_text(real.replace(digest, "0" * 12))
    assert refresh_docs.sweep_outputs(True, page) == 2 and page.read_text() != real
    assert refresh_docs.sweep_outputs(False, page) == 2
    assert page.read_text() == real
