"""The bad-input corpus (tests/bad_inputs/) and fuzzing: malformed snapshots and policies are one clear
line and exit 2, never a traceback, whatever the bytes."""

from __future__ import annotations

import datetime as dt
import json
import math
import pathlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hoststate.collectors import NAMES, Section
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


# -- wrong types, NaN/infinity and deep nesting anywhere in a snapshot -------------------------------------------

_META = {"schema": 1, "version": "0.1.0", "taken_at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
         "digest": "sha256:0"}
_KEYS = st.sampled_from(["devices", "dsa0", "wqs", "wq0.0", "state", "clients", "cpu", "GPU-1", "index", "nvlink",
                         "servers", "args", "cudagraph", "declared", "kernel", "release", "cpufreq", "governor", "x"])
_LEAF = st.one_of(st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(), st.text(max_size=8),
                  st.datetimes(timezones=st.just(dt.timezone.utc)))
_TREE = st.recursive(
    _LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=15,
)


def _strict_json(text: str) -> None:
    """Parse as strict JSON: NaN and Infinity are not JSON."""
    def refuse(token: str) -> None:
        raise AssertionError(f"{token} in JSON output")

    json.loads(text, parse_constant=refuse)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([*NAMES, "collectors"]), _TREE, max_size=4),
       st.dictionaries(st.sampled_from(NAMES), _TREE, max_size=3))
@example({"vllm": {"servers": {"8000": True}}}, {})  # a server that is not a table: export once raised here
def test_fuzz_wrong_types_reach_every_command_as_input_error_or_output(a: dict, b: dict) -> None:
    """Any shape under any table: InputError at load, or every command renders it (strict JSON included)."""
    from hoststate import export
    from hoststate.check import run_checks
    from hoststate.diff import compare
    from hoststate.digest import digest
    from hoststate.render.check import render_checks
    from hoststate.render.diff import render_diff
    from hoststate.render.show import render_summary
    from hoststate.snapshot import jsonable, to_toml, validate

    try:
        base = validate({**a, "hoststate": dict(_META)}, "a.toml")
        cur = validate({**b, "hoststate": dict(_META)}, "b.toml")
    except InputError as err:
        assert "\n" not in str(err)
        return
    digest(base)
    render_summary(base, "a.toml")
    _strict_json(json.dumps(jsonable(base)))
    _strict_json(render_checks(run_checks(base), "json"))
    result = compare(base, cur)
    _strict_json(render_diff(result, "json", baseline="a", current="b"))
    render_diff(result, "text", baseline="a", current="b")
    render_diff(result, "markdown", baseline="a", current="b")
    export.to_prometheus(base, cur)
    export.to_nfd(base, cur)
    loads(to_toml(base), "round-trip")


@settings(max_examples=200, deadline=None)
@given(st.floats() | st.integers(min_value=-(2**1100), max_value=2**1100))
def test_fuzz_tolerance_is_finite_and_non_negative(tolerance) -> None:
    # an int converts to a float below 2**1024 - 2**970 (from there it rounds to infinity)
    in_range = tolerance < 2**1024 - 2**970 if isinstance(tolerance, int) else math.isfinite(tolerance)
    usable = tolerance >= 0 and in_range
    doc = {"rule": [{"path": "system.x", "severity": "info", "tolerance": tolerance}]}
    try:
        (rule,) = parse_rules(doc, "fuzz.toml")
    except PolicyError as err:
        assert not usable and "finite" in str(err) and "\n" not in str(err)
    else:
        assert usable and rule.tolerance == float(tolerance)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=20000), st.sampled_from(["[", "{a = ", "table"]))
def test_fuzz_nesting_depth(depth: int, kind: str) -> None:
    """Any depth of arrays, inline tables or dotted tables: parsed, or one InputError line; never RecursionError."""
    from hoststate.policy import _read_toml

    head = '[hoststate]\nschema = 1\nversion = "0.1.0"\ntaken_at = 2026-01-01T00:00:00Z\ndigest = "sha256:0"\n'
    if kind == "table":
        body = "[system." + ".".join(["a"] * depth) + "]\nx = 1\n"
    else:
        close = "]" if kind == "[" else "}"
        body = "[system]\nx = " + kind * depth + ("" if kind == "[" else "1") + close * depth + "\n"
    for parse in (lambda: loads(head + body, "deep.toml"), lambda: _read_toml(body, "deep.toml")):
        try:
            parse()
        except InputError as err:
            assert "\n" not in str(err)


def test_collected_nan_is_written_as_a_string_and_json_stays_json() -> None:
    """A collector that hands over NaN/infinity (a /metrics gauge, say) gets strings in the snapshot, so what
    hoststate writes it can read back, and JSON output never holds NaN or Infinity."""
    from hoststate.capture import assemble
    from hoststate.snapshot import jsonable, to_toml

    sections = {"vllm": Section(status="ok", data={"metrics": {"a": math.nan, "b": math.inf, "c": [-math.inf, 1.5]}})}
    snap = assemble(sections, dict(_META))
    assert snap["vllm"]["metrics"] == {"a": "nan", "b": "inf", "c": ["-inf", 1.5]}
    back = loads(to_toml(snap), "nan.toml")
    _strict_json(json.dumps(jsonable(back)))
    assert jsonable({"x": math.nan, "y": [math.inf]}) == {"x": "nan", "y": ["inf"]}


def test_show_json_of_the_corpus_is_strict_json() -> None:
    for path in sorted((pathlib.Path(__file__).parent.parent / "fixtures" / "snapshots").glob("*.toml")):
        proc = subprocess.run([sys.executable, "-m", "hoststate", "show", str(path), "--format", "json"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        _strict_json(proc.stdout)
