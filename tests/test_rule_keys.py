"""Rule keys that rate a change by its size or by other facts: ``absolute``, ``tolerance`` (both from the
baseline), ``floor``/``above_floor``, ``rated_by``/``when_same``, ``listed_in``/``unlisted_patch``, ``source``, and
``[[variable]]`` entries (one rating for a variable wherever it is read)."""

from __future__ import annotations

import pytest

from hoststate.diff import compare
from hoststate.errors import PolicyError
from hoststate.policy import VARIABLE_PLACES, Policy, parse_rules


def _policy(*rules: dict, variables: tuple[dict, ...] = ()) -> Policy:
    doc = {"rule": [{"path": "**", "severity": "warning", "reason": "other"}, *rules]}
    if variables:
        doc["variable"] = list(variables)
    return Policy(parse_rules(doc, "t.toml"))


def _snap(**tables) -> dict:
    return {"hoststate": {}, "collectors": {k: {"status": "ok"} for k in tables}, **tables}


def _rated(policy: Policy, before: dict, after: dict) -> dict[str, tuple[str, str]]:
    return {f.path: (f.severity, f.reason) for f in compare(before, after, policy, include_ignored=True).findings}


def test_absolute_tolerance_in_the_values_unit():
    policy = _policy({"path": "gpu.limit_mw", "severity": "invalidating", "reason": "power", "absolute": 1000,
                      "source": "NVML reports milliwatts"})
    base = _snap(gpu={"limit_mw": 700000})
    within = _rated(policy, base, _snap(gpu={"limit_mw": 700999}))["gpu.limit_mw"]
    assert within[0] == "ignore" and "1000 absolute from the baseline 700000" in within[1]
    assert _rated(policy, base, _snap(gpu={"limit_mw": 698999}))["gpu.limit_mw"][0] == "invalidating"
    assert _rated(policy, base, _snap(gpu={"limit_mw": 701001}))["gpu.limit_mw"][0] == "invalidating"


def test_relative_tolerance_is_measured_from_the_baseline_not_the_larger_value():
    """2 % of the baseline 100 is 2: 102.5 is outside, although it is within 2 % of 102.5 itself; and 98 from 100
    is inside, although it is outside 2 % of 98."""
    policy = _policy({"path": "vllm.kv", "severity": "invalidating", "reason": "kv", "tolerance": 0.02})
    base = _snap(vllm={"kv": 100.0})
    assert _rated(policy, base, _snap(vllm={"kv": 102.01}))["vllm.kv"][0] == "invalidating"
    assert _rated(policy, base, _snap(vllm={"kv": 98.0}))["vllm.kv"][0] == "ignore"
    # and the other way round the baseline is the other value: the same pair is rated from it
    assert _rated(policy, _snap(vllm={"kv": 98.0}), _snap(vllm={"kv": 100.0}))["vllm.kv"][0] == "invalidating"


def test_floor_rates_a_size_that_is_enough_on_both_sides():
    policy = _policy({"path": "vllm.shm", "severity": "invalidating", "reason": "shm", "floor": 1 << 30,
                      "above_floor": "info"})
    big, small = _snap(vllm={"shm": 2 << 30}), _snap(vllm={"shm": 64 << 20})
    assert _rated(policy, big, _snap(vllm={"shm": 8 << 30}))["vllm.shm"][0] == "info"
    assert _rated(policy, big, small)["vllm.shm"][0] == "invalidating"
    assert _rated(policy, small, big)["vllm.shm"][0] == "invalidating"
    assert _rated(policy, _snap(vllm={}), big)["vllm.shm"][0] == "info"  # added, enough
    assert _rated(policy, _snap(vllm={}), small)["vllm.shm"][0] == "invalidating"  # added, too small


def test_rated_by_other_facts_when_they_are_there_and_equal():
    policy = _policy({"path": "env.LD_LIBRARY_PATH", "severity": "invalidating", "reason": "path",
                      "rated_by": "vllm.**.libraries.**", "when_same": "info"})
    libs = {"libraries": {"nccl": {"path": "/a/libnccl.so.2", "version": "2.27.3"}}}
    base = _snap(env={"LD_LIBRARY_PATH": "/a"}, vllm=libs)
    same = _snap(env={"LD_LIBRARY_PATH": "/a:/b"}, vllm=libs)
    other = _snap(env={"LD_LIBRARY_PATH": "/b"}, vllm={"libraries": {"nccl": {"path": "/b/libnccl.so.2",
                                                                                 "version": "2.21.5"}}})
    none = _snap(env={"LD_LIBRARY_PATH": "/a:/b"}, vllm={})
    assert _rated(policy, base, same)["env.LD_LIBRARY_PATH"][0] == "info"
    assert _rated(policy, base, other)["env.LD_LIBRARY_PATH"][0] == "invalidating"
    assert _rated(policy, base, none)["env.LD_LIBRARY_PATH"][0] == "invalidating"  # no evidence: the rule stands
    unread = {**same, "collectors": {"env": {"status": "ok"}, "vllm": {"status": "denied"}}}
    assert _rated(policy, base, unread)["env.LD_LIBRARY_PATH"][0] == "invalidating"


def test_listed_in_rates_a_patch_release_off_the_serving_path():
    policy = _policy({"path": "vllm.packages.*", "severity": "invalidating", "reason": "pkg",
                      "listed_in": "vllm.serving_path", "unlisted_patch": "warning"})

    def snap(version: str, loaded: list[str] | None) -> dict:
        table: dict = {"packages": {"xformers": version}}
        if loaded is not None:
            table["serving_path"] = loaded
        return _snap(vllm=table)

    assert _rated(policy, snap("0.0.32", ["torch"]), snap("0.0.33", ["torch"]))["vllm.packages.xformers"][0] == \
        "warning"
    assert _rated(policy, snap("0.0.32", ["torch", "xformers"]),
                  snap("0.0.33", ["torch", "xformers"]))["vllm.packages.xformers"][0] == "invalidating"
    assert _rated(policy, snap("0.0.32", ["torch"]), snap("0.1.0", ["torch"]))["vllm.packages.xformers"][0] == \
        "invalidating"  # a minor release may be selected where the old one was not
    assert _rated(policy, snap("0.0.32", None), snap("0.0.33", None))["vllm.packages.xformers"][0] == \
        "invalidating"  # what the server loads is not known


def test_a_variable_entry_is_one_rule_per_place_it_is_read():
    policy = _policy(variables=({"name": "NCCL_ALGO", "severity": "invalidating", "reason": "algo",
                                 "source": "NCCL env docs"},))
    paths = {r.path for r in policy.rules if r.reason == "algo"}
    assert paths == {p.format(name="NCCL_ALGO") for p in VARIABLE_PLACES}
    assert all(r.source == "NCCL env docs" for r in policy.rules if r.reason == "algo")
    base = _snap(env={"NCCL_ALGO": "Ring"}, vllm={"env": {"NCCL_ALGO": "Ring"},
                                                   "nccl_conf": {"user": {"settings": {"NCCL_ALGO": "Ring"}}}})
    after = _snap(env={"NCCL_ALGO": "Tree"}, vllm={"env": {"NCCL_ALGO": "Tree"},
                                                    "nccl_conf": {"user": {"settings": {"NCCL_ALGO": "Tree"}}}})
    assert {p: s for p, (s, _r) in _rated(policy, base, after).items()} == {
        "env.NCCL_ALGO": "invalidating", "vllm.env.NCCL_ALGO": "invalidating",
        "vllm.nccl_conf.user.settings.NCCL_ALGO": "invalidating"}


@pytest.mark.parametrize("rule, message", [
    ({"absolute": -1}, "'absolute' must be a non-negative number"),
    ({"absolute": float("inf")}, "'absolute' must be a non-negative number"),
    ({"source": 3}, "'source' must be a string"),
    ({"floor": 10}, "'floor' and 'above_floor' go together"),
    ({"floor": 10, "above_floor": "fine"}, "above_floor 'fine' is not one of"),
    ({"rated_by": "a.**x", "when_same": "info"}, "bad 'rated_by' pattern"),
    ({"listed_in": "x"}, "'listed_in' and 'unlisted_patch' go together"),
    ({"name": "X"}, "unknown key(s) ['name']"),
])
def test_bad_new_keys_name_the_rule(rule, message):
    with pytest.raises(PolicyError, match=None) as err:
        parse_rules({"rule": [{"path": "a.b", "severity": "info", **rule}]}, "t.toml")
    assert message in str(err.value) and "rule 1 (a.b)" in str(err.value)


@pytest.mark.parametrize("entry, message", [
    ({"name": "A.B", "severity": "info"}, "'name' must be one variable name"),
    ({"severity": "info"}, "'name' must be one variable name"),
    ({"name": "X", "severity": "info", "path": "env.X"}, "unknown key(s) ['path']"),
    ({"name": "X", "severity": "loud"}, "severity 'loud' is not one of"),
])
def test_bad_variable_entries_are_refused(entry, message):
    with pytest.raises(PolicyError) as err:
        parse_rules({"variable": [entry]}, "t.toml")
    assert message in str(err.value)
