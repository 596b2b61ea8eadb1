"""Docs executed: every block of README.md, docs/tutorial.md and docs/recipes.md runs, in that order, in one shell and
one directory (as a reader following them would), and each output they show is the whole of what the code prints
(tests/docexec.py says how each kind of block runs and the only differences it allows).

When ratings or wording change, `python scripts/refresh_docs.py` rewrites the shown outputs from a fresh run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from tests import docexec
from tests.conftest import FIXTURES, PYTHONPATH, REPO, require

DOCS = [REPO / "README.md", REPO / "docs" / "tutorial.md", REPO / "docs" / "recipes.md"]
RECIPES = DOCS[2]

#: docs/recipes.md runs programs a test machine lacks; these stand-ins take their place (nothing else is faked):
#: hoststate reads the seed's baseline tree (no live NVML, no vLLM), srun runs its command for three nodes, Ray's
#: remote functions run here once per node of a two-node cluster (STANDIN_MODULES).
STANDINS = {
    "vllm": '#!/bin/sh\necho "vllm $1 $2 (stand-in: no GPU here)"\n',
    "pytest": '#!/bin/sh\necho "pytest $* (stand-in)"\n',
    "hoststate": ('#!/usr/bin/env bash\nsub=$1; shift\ncase $sub in\n'
                  '  snap|guard) exec "$HS_PYTHON" -m hoststate "$sub" --root "$HS_ROOT" --vllm-version 0.12.0 "$@";;\n'
                  '  *) exec "$HS_PYTHON" -m hoststate "$sub" "$@";;\nesac\n'),
    "srun": ('#!/usr/bin/env python3\nimport os, subprocess, sys\nargs, opts = sys.argv[1:], {}\n'
             'while args and args[0].startswith("--"):\n    k, _, v = args.pop(0)[2:].partition("=")\n    opts[k] = v\n'
             'rc = 0\nfor i in range(int(opts.get("nodes") or 1)):\n    node = f"node{i + 1}"\n'
             '    out = open(opts["output"].replace("%N", node), "w") if "output" in opts else None\n'
             '    err = open(opts["error"].replace("%N", node), "w") if "error" in opts else None\n'
             '    rc |= subprocess.run(args, stdout=out, stderr=err).returncode\nsys.exit(rc)\n'),
}
#: Python packages a test machine lacks, as stand-ins on the recipes' PYTHONPATH (path -> source).
STANDIN_MODULES = {
    "ray/__init__.py": (
        '"""Stand-in for Ray (tests/test_docs.py): two alive nodes; a remote call runs here, at once."""\n'
        'def init(*args, **kwargs):\n    pass\n'
        'def nodes():\n    return [{"Alive": True, "NodeID": f"node{i + 1}"} for i in range(2)]\n'
        'class _Ref:\n    def __init__(self, value):\n        self.value = value\n'
        'def get(refs):\n    return [r.value for r in refs] if isinstance(refs, list) else refs.value\n'
        'class _Remote:\n    def __init__(self, fn):\n        self.fn = fn\n'
        '    def options(self, **kwargs):\n        return self\n'
        '    def remote(self, *args, **kwargs):\n        return _Ref(self.fn(*args, **kwargs))\n'
        'def remote(*args, **kwargs):\n    return _Remote(args[0]) if args and callable(args[0]) else _Remote\n'),
    "ray/util/__init__.py": "",
    "ray/util/placement_group.py": (
        'import ray\nclass _Group:\n    def ready(self):\n        return ray._Ref(True)\n'
        'def placement_group(bundles, strategy="PACK"):\n    assert len(bundles) <= len(ray.nodes()) or strategy != '
        '"STRICT_SPREAD"\n    return _Group()\n'),
    "ray/util/scheduling_strategies.py": (
        'class PlacementGroupSchedulingStrategy:\n    def __init__(self, placement_group, '
        'placement_group_bundle_index=-1):\n        self.index = placement_group_bundle_index\n'),
}
#: Shell code run before a document's first block: what the document assumes the reader has (a CI runner's
#: variables and its reviewed baseline, the seed's baseline tree as the host, a Slurm allocation, a server script).
PRELUDE = {"recipes.md": """export PATH="$HS_DOCBIN:$PATH" HS_ROOT="$PWD/fixtures/hosts/seed-baseline"
export PYTHONPATH="$HS_DOCLIB:$PYTHONPATH"
export SLURM_JOB_NUM_NODES=3 SLURM_JOB_ID=42
export RUNNER_NAME=gpu-runner-1 GITHUB_STEP_SUMMARY="$PWD/step-summary.md"
mkdir -p baselines; cp seed-experiment.toml "baselines/$RUNNER_NAME.toml"   # the runner's baseline: another state
printf '#!/bin/sh\\necho "serve-and-bench $1 (stand-in)"\\n' > serve-and-bench.sh; chmod +x serve-and-bench.sh"""}
#: A block's exit status when it is not 0, by the document and the start of its first line, and why.
EXPECTED_STATUS = {
    ("recipes.md", "# the server is not up yet"): (3, "no server answers at localhost:8000 here: guard refuses"),
    ("recipes.md", "mkdir -p snaps"): (1, "the golden baseline.toml is README's live-host snapshot: the nodes differ"),
    ("recipes.md", 'hoststate fleet "snaps/$SLURM_JOB_ID"'): (1, "no snaps/42 here: the gate stops the job"),
    ("recipes.md", "# .github/workflows/bench.yml"): (3, "the runner's baseline is another host state: guard refuses"),
}


def standins(directory) -> str:
    directory.mkdir(exist_ok=True)
    for name, text in STANDINS.items():
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    return str(directory)


def standin_modules(directory) -> str:
    for name, text in STANDIN_MODULES.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return str(directory)


def docs_env(stand, lib) -> dict[str, str]:
    """The environment the documents run in (tests and scripts/refresh_docs.py alike)."""
    return {"PYTHONPATH": PYTHONPATH, "HS_PYTHON": sys.executable, "HS_DOCBIN": standins(stand),
            "HS_DOCLIB": standin_modules(lib)}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    work = tmp_path_factory.mktemp("docs")
    env = docs_env(tmp_path_factory.mktemp("docbin"), tmp_path_factory.mktemp("doclib"))
    return SimpleNamespace(cmds=docexec.run(DOCS, work, env=env, prelude=PRELUDE), work=work)


def test_every_documented_command_runs(ran):
    assert len(ran.cmds) >= 20
    def expected(c) -> int:
        return next((code for (doc, start), (code, _why) in EXPECTED_STATUS.items()
                     if doc == c.doc and c.text.startswith(start)), 0)

    failed = [f"{c.doc}:{c.line}: exit {c.status}: {c.text[:80]!r}\n" + "\n".join(c.actual[-8:])
              for c in ran.cmds if c.shown is None and c.status != expected(c)]
    assert not failed, "\n\n".join(failed)


def test_every_shown_output_is_what_the_code_prints(ran):
    stale = [f"{c.doc}:{c.line}: {c.text.splitlines()[0][:90]}" for c in ran.cmds
             if c.shown is not None and not docexec.matches(c.shown, c.actual)]
    assert not stale, ("stale shown output (run `python scripts/refresh_docs.py` and review the change):\n"
                       + "\n".join(stale))


def test_shown_outputs_keep_to_120_columns(ran):
    """Text reports keep to 120 columns (Markdown and JSON are for other programs and pages)."""
    wide = [f"{c.doc}:{c.line}" for c in ran.cmds
            if c.shown and "--format" not in c.text and max(map(len, c.shown)) > 120]
    assert not wide, wide


def test_every_block_of_the_docs_is_one_that_runs():
    """Each fence is a kind docexec runs (a ```text block would be shown and never run): every block is parsed,
    python and yaml ones too."""
    kinds = {c.kind for d in DOCS for c in docexec.parse(d)}
    assert {"console", "sh", "script", "python", "python-file", "yaml-job", "yaml"} <= kinds


def test_a_block_of_another_language_is_refused(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("```console\n$ true\n```\n\n```text\nnot run\n```\n")
    with pytest.raises(ValueError, match=r"x.md:5: a ```text block is not run"):
        docexec.parse(doc)


@pytest.mark.parametrize(("shown", "actual", "ok"), [
    (["a", "b"], ["a", "b", ""], True),
    (["a", "b"], ["a", "c"], False),
    (["a"], ["a", "b"], False),  # a shown start is not the whole output
    (["took 82.2 ms"], ["took 3.0 ms"], True),
    (["at 2026-12-03T14:35:41+00:00"], ["at 2027-01-01T00:00:00+00:00"], True),
    (["78 invalidating, 19 ignore"], ["78 invalidating, 20 ignore"], False),  # a count is never normalised
    (["sha256:f2b99a21bd1c"], ["sha256:4391da106e51"], False),
])
def test_the_matcher(shown, actual, ok):
    assert docexec.matches(shown, actual) is ok


def test_each_normalisation_is_named_in_the_docstring():
    assert [v.name for v in docexec.VOLATILE] == ["workdir", "duration", "timestamp"]
    for v in docexec.VOLATILE:
        assert f"``{v.name}``" in (docexec.__doc__ or ""), v.name


def test_the_workdir_is_shown_as_dot(tmp_path):
    assert docexec.without_workdir(f"wrote {tmp_path}/a.toml in {tmp_path}", tmp_path) == "wrote a.toml in ."


# -- the recipes' python and yaml blocks, used as a reader would -------------------------------------------------


def test_the_ci_job_posts_the_drift_to_the_step_summary(ran):
    """The CI job's run step (tests/docexec.py runs it as a runner would): guard refuses against the runner's
    baseline, the markdown diff lands in the step summary, the job fails with 3 and the artifact step still runs."""
    job = next(c for c in ran.cmds if c.kind == "yaml-job")
    assert job.status == 3, job.actual
    summary = (ran.work / "step-summary.md").read_text()
    assert summary.startswith("### host drifted from its baseline: benchmark not run\n### hoststate diff: :x: "
                              "invalidating\n"), summary[:300]
    assert "| **invalidating** | `dsa.devices.*.wqs.*.state` | 8 |" in summary
    assert (ran.work / "host.toml").is_file()  # what upload-artifact uploads (its stand-in checks it)


def test_the_node_selector_names_the_label_export_writes(ran):
    """The Kubernetes fragment selects on the digest label `hoststate export nfd` writes (40 hex characters)."""
    fragment = next(c for c in docexec.parse(RECIPES) if c.kind == "yaml")
    selector = yaml.safe_load(fragment.text)["spec"]["nodeSelector"]
    out = subprocess.run([sys.executable, "-m", "hoststate", "export", "nfd", str(ran.work / "baseline.toml")],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    labels = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line and not line.startswith("#"))
    assert set(selector) <= set(labels), (selector, labels)
    assert re.fullmatch(r"[0-9a-f]{40}", labels["hoststate.feature.node.kubernetes.io/digest"])


def test_the_pyperf_script_records_the_verdict_in_its_metadata(ran):
    cmd = next(c for c in ran.cmds if c.text.startswith("python -m pyperf metadata"))
    assert cmd.actual and all("hoststate" in line for line in cmd.actual), cmd.actual
    meta = json.loads((ran.work / "bench.json").read_text())["metadata"]
    assert meta["hoststate_verdict"] == "comparable"


BENCH_TEST = "def test_sort(benchmark):\n    benchmark(sorted, list(range(1000)))\n"
QUICK = ("--benchmark-autosave", "--benchmark-max-time=0.0001", "--benchmark-min-rounds=1", "--benchmark-warmup=off")


def _pytest_with_the_recipe(tmp_path, baseline) -> subprocess.CompletedProcess:
    conftest = next(c.text for c in docexec.parse(RECIPES) if c.file == "conftest.py")
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_bench.py").write_text(BENCH_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}  # a user's own session
    env.update(PYTHONPATH=PYTHONPATH, HOSTSTATE_BASELINE=str(baseline))
    env.pop("HOSTSTATE_ACCEPT", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *QUICK], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_conftest_recipe_stops_a_session_on_another_host_state(tmp_path):
    """docs/recipes.md's conftest.py in a real pytest run: a baseline of another host (the seed's captured tree)
    stops the session with status 3 and the refused findings, before any benchmark runs."""
    require(importlib.util.find_spec("pytest_benchmark") is not None, "pytest-benchmark (the test extras)")
    proc = _pytest_with_the_recipe(tmp_path, FIXTURES / "snapshots" / "seed-baseline.toml")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "host differs from the benchmark baseline:" in proc.stdout + proc.stderr
    assert re.search(r"^\S+: .* -> .* \(.+\)$", proc.stdout + proc.stderr, re.M)
    assert not list(tmp_path.glob(".benchmarks/**/*.json"))  # no benchmark ran, none was saved


def test_the_conftest_recipe_records_the_verdict_in_machine_info(tmp_path):
    """Against a baseline of this host the session runs, and the saved run's machine_info carries the verdict."""
    require(importlib.util.find_spec("pytest_benchmark") is not None, "pytest-benchmark (the test extras)")
    base = tmp_path / "host-baseline.toml"
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "-o", str(base)], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": PYTHONPATH})
    proc = _pytest_with_the_recipe(tmp_path, base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (saved,) = (tmp_path / ".benchmarks").rglob("0001_*.json")
    info = json.loads(saved.read_text())["machine_info"]["hoststate"]
    digest = re.search(r'^digest = "(.*)"', base.read_text(), re.M).group(1)
    assert info == {"verdict": "comparable", "digest": digest, "baseline_digest": digest, "accepted": []}
