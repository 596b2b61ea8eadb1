"""The bad-input corpus (tests/bad_inputs/) and fuzzing: malformed snapshots and policies are one clear
line and exit 2, never a traceback, whatever the bytes."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoststate.errors import InputError, PolicyError
from hoststate.policy import load_policy, parse_rules
from hoststate.snapshot import loads

CORPUS = pathlib.Path(__file__).parent / "bad_inputs"
SNAPSHOTS = sorted((CORPUS / "snapshots").iterdir())
POLICIES = sorted((CORPUS / "policies").iterdir())


def test_corpus_is_large_enough() -> None:
    assert len(SNAPSHOTS) + len(POLICIES) >= 40


def one_clear_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hoststate: ") and "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize("path", SNAPSHOTS, ids=[p.name for p in SNAPSHOTS])
def test_bad_snapshot_library_error(path: pathlib.Path) -> None:
    with pytest.raises(InputError) as info:
        loads(path.read_bytes(), str(path))
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_bad_snapshots_through_the_cli() -> None:
    """One interpreter per file is slow; `show` over every file, each must fail alone with one line."""
    for path in SNAPSHOTS:
        proc = subprocess.run([sys.executable, "-m", "hoststate", "show", str(path)],
                              capture_output=True, text=True, timeout=60)
        assert path.name in one_clear_line(proc) or str(path) in proc.stderr


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_bad_policy_names_the_file_and_rule(path: pathlib.Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy([str(path)])
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    if b"[[rule]]" in path.read_bytes() and path.name not in ("top-level-junk.toml",):
        assert "rule " in message  # names the rule


def test_third_rule_is_named() -> None:
    with pytest.raises(PolicyError, match=r"rule 3 .*unbalanced quote"):
        load_policy([str(CORPUS / "policies" / "third-rule-bad.toml")])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_fuzz_snapshot_loader_bytes(data: bytes) -> None:
    try:
        loads(data, "fuzz.toml")
    except InputError as err:
        assert "\n" not in str(err)


TOML_ISH = st.text(alphabet=st.sampled_from(list('[]{}="\'.,\n #tuple_abc019-:schemahostsatetkn\\')), max_size=200)


@settings(max_examples=300, deadline=None)
@given(TOML_ISH)
def test_fuzz_snapshot_loader_tomlish_text(text: str) -> None:
    try:
        loads("[hoststate]\nschema = 1\n" + text, "fuzz.toml")
    except InputError as err:
        assert "\n" not in str(err)


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["rule", "x"]), JSONISH, max_size=2))
def test_fuzz_policy_documents(doc: dict) -> None:
    try:
        parse_rules(doc, "fuzz.toml")
    except PolicyError as err:
        assert "\n" not in str(err)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["path", "severity", "reason", "tolerance", "compare"]),
                                JSONISH | st.text(alphabet='ab.*"\\', max_size=12), max_size=5), max_size=4))
def test_fuzz_policy_rules(rules: list) -> None:
    try:
        parsed = parse_rules({"rule": rules}, "fuzz.toml")
    except PolicyError as err:
        assert "\n" not in str(err)
    else:
        for rule in parsed:
            rule.matches(("a", "b"))  # a rule that parsed can be matched
