"""Mutation check of the verdict: apply one-line mutations to diff/policy/guard/coverage/watch and make sure a test
notices each one.

    python scripts/mutate.py [--only ID ...] [--list] [--timeout 300]

Each mutant replaces one line of one module (the line must occur exactly once, so a mutant that no longer applies
is reported, not silently skipped) in a temporary copy of the repository (the files git knows, as they are in the
working tree), runs the targeted tests named for it there (``pytest -x``: the first failure kills it), and puts
the line back. The tests are first run unmutated and must pass, so that a mutant is never "killed" by a test
that fails anyway. Prints one line per mutant and a summary; exits 1 if any mutant survived or did not apply.
The figures of the last full run are in docs/policy.md ("Mutation check").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


PROPS = "tests/test_verdict_properties.py"
MUTANTS_TESTS = "tests/test_verdict_mutants.py"

#: The mutants: each a way the verdict could break that a test must notice.
MUTANTS: tuple[Mutant, ...] = (
    Mutant("allow-unreadable-accepts-all", "hoststate/run/guard.py",
           'if by is None and allow_unreadable and finding.change == "unreadable":',
           "if by is None and allow_unreadable:", (MUTANTS_TESTS,),
           "--allow-unreadable accepts every invalidating finding"),
    Mutant("guard-accepted-is-comparable", "hoststate/run/guard.py",
           'verdict = "refused" if refused else "non-comparable" if accepted else "comparable"',
           'verdict = "refused" if refused else "comparable"', (MUTANTS_TESTS,),
           "a run with accepted findings is called comparable"),
    Mutant("tolerance-vs-larger", "hoststate/diff.py",
           "if rule.tolerance is not None and abs(new - old) <= rule.tolerance * abs(old):",
           "if rule.tolerance is not None and abs(new - old) <= rule.tolerance * max(abs(old), abs(new)):",
           (MUTANTS_TESTS,),
           "a tolerance measured against the larger value instead of the baseline"),
    Mutant("tolerance-strict", "hoststate/diff.py",
           "if rule.tolerance is not None and abs(new - old) <= rule.tolerance * abs(old):",
           "if rule.tolerance is not None and abs(new - old) < rule.tolerance * abs(old):", (MUTANTS_TESTS,),
           "a comparison flipped: a change exactly at the tolerance counts as outside"),
    Mutant("severity-order-swapped", "hoststate/policy.py",
           'SEVERITIES = ("invalidating", "warning", "info", "ignore")',
           'SEVERITIES = ("warning", "invalidating", "info", "ignore")', (MUTANTS_TESTS,),
           "the severity order swapped: warning outranks invalidating"),
    Mutant("least-specific-rule-wins", "hoststate/policy.py",
           "if key is not None and (best is None or key > best):",
           "if key is not None and (best is None or key < best):", (PROPS, "tests/test_policy.py"),
           "a comparison flipped: the least specific matching rule wins"),
    Mutant("user-layer-ignored", "hoststate/policy.py",
           "return (self.layer, spec, -self.pattern.any_keys, -RANK[self.severity],",
           "return (spec, self.layer, -self.pattern.any_keys, -RANK[self.severity],", ("tests/test_policy.py",),
           "a more specific shipped rule beats a user rule"),
    Mutant("unread-region-dropped", "hoststate/diff.py",
           "findings = _merge(findings, _regions(policy, unknown))",
           "findings = _merge(findings, [])", (PROPS,),
           "an unread region gives no finding of its own (the fail-open of issue 29)"),
    Mutant("region-shadowed-by-same-layer", "hoststate/policy.py",
           "higher = {layer: [o for o in meeting if o.layer > layer] for layer in {r.layer for r in meeting}}",
           "higher = {layer: [o for o in meeting if o.layer >= layer] for layer in {r.layer for r in meeting}}",
           (PROPS,), "a shipped catch-all hides the more severe shipped rules inside an unread region"),
    Mutant("region-least-severe", "hoststate/policy.py",
           "return min(live, key=lambda r: (RANK[r.severity], -r.layer, len(r.pattern.parts),"
           "  # type: ignore[union-attr]",
           "return min(live, key=lambda r: (-RANK[r.severity], -r.layer, len(r.pattern.parts),"
           "  # type: ignore[union-attr]", (PROPS,),
           "an unread region rated by its least severe rule"),
    Mutant("region-rule-by-order", "hoststate/policy.py",
           "r.path, r.reason, r.origin))", "live.index(r),))", (PROPS,),
           "the rule named for an unread region depends on the order of policy files"),
    Mutant("region-merge-keeps-milder", "hoststate/diff.py",
           "rated = region if RANK[region.severity] < RANK[found.severity] else found",
           "rated = region if RANK[region.severity] > RANK[found.severity] else found", (MUTANTS_TESTS,),
           "a region that is one leaf keeps the milder of the two ratings"),
    Mutant("collector-status-ignored", "hoststate/diff.py",
           "if status in coverage.STATUS_CLASS:", 'if status == "error":', (PROPS,),
           "a denied or timed-out collector hides nothing"),
    Mutant("denied-is-known", "hoststate/coverage.py",
           'UNKNOWN = frozenset(CLASSES) - {"absent"}', 'UNKNOWN = frozenset(CLASSES) - {"absent", "denied"}',
           (PROPS, "tests/test_coverage.py"), "a denied read counts as an observed absence"),
    Mutant("covers-no-literal", "hoststate/coverage.py",
           'if part == "*" or key == part:', 'if part == "*":', (PROPS, "tests/test_coverage.py"),
           "an unreadable entry no longer hides the literal path it names"),
    Mutant("one-side-ignored", "hoststate/diff.py",
           "return rule.one_side if rule is not None and rule.one_side else severity", "return severity",
           ("tests/test_diff.py", "tests/test_policy.py", "tests/test_vllm_collector.py"),
           "a rule's one_side rating is ignored"),
    Mutant("coverage-gap-info", "hoststate/diff.py",
           '            severity = "warning"\n            side, bad',
           '            severity = "info"\n            side, bad', ("tests/test_diff.py",),
           "a collector ok on one side only is info, not a warning"),
    Mutant("set-lists-always-equal", "hoststate/diff.py",
           "return sorted(map(leaf_key, old)) == sorted(map(leaf_key, new))", "return True",
           ("tests/test_diff.py",), "a set-compared list never differs"),
    Mutant("misspelt-rule-silent", "hoststate/policy.py",
           "if id(rule) not in matched and rule.matches(path):", "if id(rule) not in matched:",
           (MUTANTS_TESTS,), "a user rule that matches nothing is not reported"),
    Mutant("index-drops-last-key", "hoststate/paths.py",
           "yield from self._exact.get(key, ())", "yield from ()", (PROPS,),
           "the rule index loses rules filed by a literal last key"),
    Mutant("watch-limit-flipped", "hoststate/run/judge.py",
           "if value > allowed:", "if value < allowed:", ("tests/test_watch.py",),
           "a comparison flipped: a run metric fires below its limit"),
    Mutant("watch-verdict-order", "hoststate/run/judge.py",
           'reasons.sort(key=lambda r: -VERDICTS.index(r["verdict"]))',
           'reasons.sort(key=lambda r: VERDICTS.index(r["verdict"]))', ("tests/test_watch.py",),
           "the run verdict is the mildest reason, not the worst"),
    Mutant("watch-fail-on-strict", "hoststate/run/flow.py",
           "VERDICTS.index(self.verdict) >= VERDICTS.index(fail_on)",
           "VERDICTS.index(self.verdict) > VERDICTS.index(fail_on)", ("tests/test_watch.py",),
           "--fail-on LEVEL no longer fails a run judged exactly LEVEL"),
)


#: Read by the tests, never mutated, and most of the repository's files: linked, not copied.
SHARED = "fixtures"


def copy_repo(dest: str) -> None:
    """The files git knows (tracked and untracked, not ignored), as they are in the working tree; links as links,
    and the fixtures as one link to this checkout's."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src, dst = os.path.join(REPO, rel), os.path.join(dest, rel)
        if rel.split("/", 1)[0] == SHARED:
            if not os.path.lexists(os.path.join(dest, SHARED)):
                os.symlink(os.path.join(REPO, SHARED), os.path.join(dest, SHARED))
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):  # the sysfs fixture trees are made of links, as /sys is
            os.symlink(os.readlink(src), dst)
        elif os.path.isfile(src):
            shutil.copy2(src, dst)


def run_tests(workdir: str, tests: tuple[str, ...], timeout: float) -> tuple[int, float, str]:
    """pytest's exit status (124 on timeout), seconds taken and the end of its output, in ``workdir``."""
    env = dict(os.environ, CI="true", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # tests/conftest.py puts the copy first on sys.path
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=workdir, env=env, capture_output=True, timeout=timeout, check=False)
        status, tail = done.returncode, (done.stdout + done.stderr).decode(errors="replace")[-3000:]
    except subprocess.TimeoutExpired:
        status, tail = 124, "timed out"
    return status, time.perf_counter() - start, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="mutant ids to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only is None or m.id in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.id:34} {m.file:22} {m.what}")
        return 0
    start = time.perf_counter()
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hoststate-mutate-") as work:
        copy_repo(work)
        tests = tuple(sorted({t for m in chosen for t in m.tests}))
        status, took, tail = run_tests(work, tests, args.timeout)
        if status != 0:
            print(f"{tail}\nthe tests fail unmutated (exit {status}): fix them first: {' '.join(tests)}")
            return 1
        print(f"unmutated: {len(tests)} test files pass ({took:.1f} s)")
        for m in chosen:
            path = os.path.join(work, m.file)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            if text.count(m.old) != 1:
                print(f"NOT APPLIED {m.id}: the line occurs {text.count(m.old)} times in {m.file}")
                bad.append(m.id)
                continue
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text.replace(m.old, m.new))
            try:
                status, took, _ = run_tests(work, m.tests, args.timeout)
            finally:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
            killed = status != 0
            print(f"{'killed  ' if killed else 'SURVIVED'} {m.id:34} {took:6.1f} s  ({m.what})")
            if not killed:
                bad.append(m.id)
    n = len(chosen)
    print(f"{n} mutants, {n - len(bad)} killed, {len(bad)} not ({', '.join(bad) or 'none'}); "
          f"{time.perf_counter() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
