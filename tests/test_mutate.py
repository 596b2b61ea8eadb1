"""scripts/mutate.py in the suite: the two mutants issue 29 names are killed, every mutant still applies to the code
(a line that moved would otherwise make a mutant silently test nothing), and a surviving mutant fails the run."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

# The harness mutates the source tree's files in a copy: .ci/run runs this file from the checkout, since its
# installed-wheel run (from a copy without hoststate/) leaves it out.

SCRIPT = REPO / "scripts" / "mutate.py"
sys.path.insert(0, str(REPO / "scripts"))

import mutate  # noqa: E402


def test_every_mutant_applies_to_exactly_one_line() -> None:
    for m in mutate.MUTANTS:
        text = (REPO / m.file).read_text(encoding="utf-8")
        assert text.count(m.old) == 1, m.id
        assert m.old != m.new and all((REPO / t).exists() for t in m.tests), m.id
    assert len({m.id for m in mutate.MUTANTS}) == len(mutate.MUTANTS)


def test_the_named_mutants_are_killed() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", "allow-unreadable-accepts-all",
                           "tolerance-vs-larger"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 mutants, 2 killed, 0 not" in done.stdout


def test_a_mutant_that_survives_fails_the_run(tmp_path) -> None:
    """A mutant no test can notice (a comment changed) is reported as surviving, with exit status 1."""
    harmless = mutate.Mutant("harmless", "hoststate/diff.py", "COVERAGE_RULE = \"coverage\"",
                             "COVERAGE_RULE = \"coverage\"  # unchanged", ("tests/test_verdict_mutants.py",), "none")
    saved = mutate.MUTANTS
    mutate.MUTANTS = (harmless,)
    try:
        assert mutate.main(["--only", "harmless"]) == 1
    finally:
        mutate.MUTANTS = saved
