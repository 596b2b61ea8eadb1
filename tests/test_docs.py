"""Docs executed: every command block of README.md, docs/tutorial.md and docs/recipes.md runs, in that order, in one
shell and one directory (as a reader following them would), and each output they show is what the code prints.

When ratings or wording change, `python scripts/refresh_docs.py` rewrites the shown outputs from a fresh run.
"""

from __future__ import annotations

import pytest

from tests import docexec
from tests.conftest import PYTHONPATH, REPO

DOCS = [REPO / "README.md", REPO / "docs" / "tutorial.md", REPO / "docs" / "recipes.md"]

#: docs/recipes.md runs programs a test machine lacks; these stand-ins take their place (nothing else is faked):
#: hoststate reads the seed's baseline tree (no live NVML, no vLLM), srun runs its command for three nodes.
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
PRELUDE = {"recipes.md": """export PATH="$HS_DOCBIN:$PATH" HS_ROOT="$PWD/fixtures/hosts/seed-baseline"
export SLURM_JOB_NUM_NODES=3 SLURM_JOB_ID=42
printf '#!/bin/sh\\necho "serve-and-bench $1 (stand-in)"\\n' > serve-and-bench.sh; chmod +x serve-and-bench.sh
echo 'print("bench.py (stand-in for the pyperf script shown)")' > bench.py"""}
#: A block's exit status when it is not 0, by the document and the start of its first line, and why.
EXPECTED_STATUS = {
    ("recipes.md", "# the server is not up yet"): (3, "no server answers at localhost:8000 here: guard refuses"),
    ("recipes.md", "mkdir -p snaps"): (1, "the golden baseline.toml is README's live-host snapshot: the nodes differ"),
    ("recipes.md", 'hoststate fleet "snaps/$SLURM_JOB_ID"'): (1, "no snaps/42 here: the gate stops the job"),
}


def standins(directory) -> str:
    directory.mkdir(exist_ok=True)
    for name, text in STANDINS.items():
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    return str(directory)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    import sys

    work = tmp_path_factory.mktemp("docs")
    env = {"PYTHONPATH": PYTHONPATH, "HS_PYTHON": sys.executable,
           "HS_DOCBIN": standins(tmp_path_factory.mktemp("docbin"))}
    return docexec.run(DOCS, work, env=env, prelude=PRELUDE)


def test_every_documented_command_runs(ran):
    assert len(ran) >= 20
    def expected(c) -> int:
        return next((code for (doc, start), (code, _why) in EXPECTED_STATUS.items()
                     if doc == c.doc and c.text.startswith(start)), 0)

    failed = [f"{c.doc}:{c.line}: exit {c.status}: {c.text[:80]!r}\n" + "\n".join(c.actual[-8:])
              for c in ran if c.shown is None and c.status != expected(c)]
    assert not failed, "\n\n".join(failed)


def test_every_shown_output_is_what_the_code_prints(ran):
    stale = [f"{c.doc}:{c.line}: {c.text.splitlines()[0][:90]}" for c in ran
             if c.shown is not None and not docexec.matches(c.shown, c.actual, c.prefix_only)]
    assert not stale, ("stale shown output (run `python scripts/refresh_docs.py` and review the change):\n"
                       + "\n".join(stale))


def test_shown_outputs_keep_to_120_columns(ran):
    """Text reports keep to 120 columns (Markdown and JSON are for other programs and pages)."""
    wide = [f"{c.doc}:{c.line}" for c in ran if c.shown and "--format" not in c.text and max(map(len, c.shown)) > 120]
    assert not wide, wide


@pytest.mark.parametrize(("shown", "actual", "prefix", "ok"), [
    (["a", "b"], ["a", "b", ""], False, True),
    (["a", "b"], ["a", "c"], False, False),
    (["a", "...", "z"], ["a", "b", "c", "z"], False, True),
    (["a", "...", "z"], ["a", "b", "c", "y"], False, False),
    (["a"], ["a", "b"], True, True),
    (["took 82.2 ms"], ["took N ms"], False, True),
])
def test_the_matcher(shown, actual, prefix, ok):
    assert docexec.matches(shown, actual, prefix) is ok
