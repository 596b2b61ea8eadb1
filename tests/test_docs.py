"""Docs executed: every command block of README.md, docs/tutorial.md and docs/recipes.md runs, in that order, in one
shell and one directory (as a reader following them would), and each output they show is what the code prints.

When ratings or wording change, `python scripts/refresh_docs.py` rewrites the shown outputs from a fresh run.
"""

from __future__ import annotations

import pytest

from tests import docexec
from tests.conftest import PYTHONPATH, REPO

DOCS = [REPO / "README.md", REPO / "docs" / "tutorial.md"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    return docexec.run(DOCS, tmp_path_factory.mktemp("docs"), env={"PYTHONPATH": PYTHONPATH})


def test_every_documented_command_runs(ran):
    assert len(ran) >= 20
    failed = [f"{c.doc}:{c.line}: exit {c.status}: {c.text[:80]!r}\n" + "\n".join(c.actual[-8:])
              for c in ran if c.shown is None and c.status != 0]
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
