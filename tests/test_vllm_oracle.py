"""hoststate against vLLM itself: every command line that scripts/vllm_oracle.py resolved with an
unmodified vLLM (fixtures/vllm/oracle/<version>.json) must read the same here.

For each recorded case: where vLLM starts, hoststate's normalised arguments equal vLLM's
non-default args and the declared CUDA graph mode equals vLLM's final cudagraph_mode; where vLLM
refuses, hoststate records a refusal and declares no mode. The model facts come from the recorded
config.json through hoststate's own reader (model.facts_from_config), not from the oracle's labels.
Cases that still differ are listed, with the reason, in fixtures/vllm/oracle-known-differences.json
and run as strict expected failures: fixing one makes the test fail until its entry is removed.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hoststate.collectors.vllm.argv import compilation_config_view, load_yaml_config, locate, normalise
from hoststate.collectors.vllm.cudagraph import declare
from hoststate.collectors.vllm.model import facts_from_config
from hoststate.collectors.vllm.versions import rules_for

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO / "fixtures" / "vllm" / "oracle"
KNOWN = REPO / "fixtures" / "vllm" / "oracle-known-differences.json"
#: vLLM's parser keeps the positional model in ``model_tag`` and copies it to ``model``; hoststate
#: has only ``model``.
VLLM_ONLY_DESTS = ("model_tag",)
#: vLLM consumes ``--config FILE`` before parsing (its options are merged in); hoststate also records the path.
HOSTSTATE_ONLY_DESTS = ("config",)


def _files() -> list[Path]:
    return sorted(ORACLE.glob("*.json"))


def _known() -> dict[str, str]:
    if not KNOWN.exists():
        return {}
    data = json.loads(KNOWN.read_text())
    return {f"{row['version']}::{row['id']}::{row['check']}": row["reason"] for row in data["cases"]}


def _cases() -> list[Any]:
    known = _known()
    params = []
    for path in _files():
        data = json.loads(path.read_text())
        for case in data["cases"]:
            if case["outcome"] not in ("ok", "refused"):
                continue  # the oracle could not run vLLM (see test_no_oracle_errors)
            for check in ("args", "mode") if case["outcome"] == "ok" else ("refused",):
                key = f"{data['vllm_version']}::{case['id']}::{check}"
                marks = [pytest.mark.xfail(strict=True, reason=known[key])] if key in known else []
                params.append(pytest.param(data, case, check, id=key, marks=marks))
    return params


def _config_loader(path: str) -> Any:
    return load_yaml_config(path if os.path.isabs(path) else str(REPO / path))


def hoststate_view(data: dict[str, Any], case: dict[str, Any]) -> tuple[Any, Any]:
    """(Normalised, Declared) for one recorded case, read the way the collector reads a --vllm-cmd."""
    version = data["vllm_version"]
    command = locate(case["argv"])
    parsed = normalise(command.args, version, program=command.program or "", config_loader=_config_loader)
    model = data["models"].get(case["model"], {})
    files = model.get("files", {})  # the recorded snapshot holds config.json and exactly these
    facts = facts_from_config(model.get("config", {}), files.get("modules.json"), files=frozenset(files))
    gpus = data["platform"]["device_count"]  # the GPUs the oracle's stubbed host answered with
    declared = declare(parsed.args, {**command.env, **case["env"]}, version, facts, gpus=gpus)
    return parsed, declared


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _defaults(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each config-object field's default, for dests vLLM records as a whole config object (its
    compilation_config dump holds every field): the value most of the version's cases hold where the
    command line did not set that field (hoststate's reading says which), else over all cases."""
    return _defaults_of(data["vllm_version"], json.dumps(data["cases"], sort_keys=True))


@functools.lru_cache(maxsize=8)
def _defaults_of(version: str, cases_json: str) -> dict[str, dict[str, str]]:
    recorded = json.loads((ORACLE / f"{version}.json").read_text())
    data = {"vllm_version": version, "models": recorded["models"], "platform": recorded["platform"]}
    unset: dict[str, dict[str, Counter[str]]] = {}
    every: dict[str, dict[str, Counter[str]]] = {}
    for case in json.loads(cases_json):
        given = _given(data, case) if case["outcome"] == "ok" else {}
        for dest, value in case.get("non_default_args", {}).items():
            if not isinstance(value, dict):
                continue
            for key, field_value in value.items():
                text = json.dumps(field_value, sort_keys=True)
                every.setdefault(dest, {}).setdefault(key, Counter())[text] += 1
                if key not in given.get(dest, {}):
                    unset.setdefault(dest, {}).setdefault(key, Counter())[text] += 1
    return {dest: {k: _default_value(unset.get(dest, {}).get(k) or c) for k, c in fields.items()}
            for dest, fields in every.items()}


#: A field vLLM generates anew for every start (``kv_transfer_config.engine_id``, a random UUID): it has
#: no default to compare with.
GENERATED = "<generated>"


def _default_value(counter: Counter[str]) -> str:
    value, count = counter.most_common(1)[0]
    return GENERATED if count == 1 and len(counter) > 1 else value


def _given(data: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """The config-object dests hoststate read from the command line, as vLLM's objects name their fields."""
    args = hoststate_view(data, case)[0].args
    rules = rules_for(data["vllm_version"])[0]
    given = {k: v for k, v in args.items() if isinstance(v, dict)}
    if "compilation_config" in given:
        given["compilation_config"] = compilation_config_view(given["compilation_config"], rules)
    return given


def _subset(mine: Any, theirs: Any) -> bool:
    """Every field hoststate set holds the same value in vLLM's object (nested objects likewise)."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return all(k in theirs and _subset(v, theirs[k]) for k, v in mine.items())
    return _jsonable(mine) == theirs


def args_agree(data: dict[str, Any], case: dict[str, Any], args: dict[str, Any]) -> list[str]:
    """Differences between hoststate's normalised args and vLLM's non-default args ([] when equal).

    Plain dests must be equal. A dest vLLM records as a whole config object (every field, defaults
    included) agrees when every field hoststate set holds the same value there, and every field of
    the object that differs from its default was set by hoststate."""
    rules = rules_for(data["vllm_version"])[0]
    theirs = {k: v for k, v in case["non_default_args"].items() if k not in VLLM_ONLY_DESTS}
    # ``--config=FILE`` is an ordinary option vLLM keeps (it pulls only ``--config FILE``): then both have it
    mine = {k: v for k, v in args.items() if k not in HOSTSTATE_ONLY_DESTS or k in theirs}
    if isinstance(mine.get("compilation_config"), dict):
        mine["compilation_config"] = compilation_config_view(mine["compilation_config"], rules)
        if not mine["compilation_config"]:
            del mine["compilation_config"]
    defaults = _defaults(data)
    problems = [f"{k}: only hoststate has it" for k in mine if k not in theirs]
    problems += [f"{k}: only vLLM has it" for k in theirs if k not in mine]
    for dest in set(mine) & set(theirs):
        if not (isinstance(theirs[dest], dict) and dest in defaults and isinstance(mine[dest], dict)):
            if _jsonable(mine[dest]) != theirs[dest]:
                problems.append(f"{dest}: hoststate {mine[dest]!r}, vLLM {theirs[dest]!r}")
            continue
        if not _subset(mine[dest], theirs[dest]):
            problems.append(f"{dest}: hoststate {mine[dest]!r} not in vLLM's {theirs[dest]!r}")
        for key, value in theirs[dest].items():
            default = defaults[dest].get(key)
            if default != GENERATED and json.dumps(value, sort_keys=True) != default and key not in mine[dest]:
                problems.append(f"{dest}.{key}: vLLM holds {value!r}, hoststate did not set it")
    return problems


#: Versions whose recorded results must be there (every other file under ORACLE is compared as well).
RECORDED = ("0.10.2", "0.11.0", "0.11.1", "0.12.0")


def test_the_oracle_data_is_there_and_large_enough():
    files = _files()
    assert set(RECORDED) <= {path.stem for path in files}, [path.name for path in files]
    for path in files:
        data = json.loads(path.read_text())
        assert data["generated_by"] == "scripts/vllm_oracle.py"
        assert len(data["cases"]) >= 100, path.name
        assert path.stem == data["vllm_version"]


def test_no_oracle_errors():
    """A case the oracle could not run says nothing about vLLM (the stub lacked something): a recorded file has none."""
    for path in _files():
        cases = json.loads(path.read_text())["cases"]
        errors = [c["id"] for c in cases if c["outcome"] not in ("ok", "refused")]
        assert errors == [], (path.name, errors)


def test_known_differences_name_recorded_cases():
    keys = {p.id for p in _cases()}
    assert set(_known()) <= keys, set(_known()) - keys


@pytest.mark.parametrize(("data", "case", "check"), _cases())
def test_hoststate_reads_the_command_line_as_vllm_does(data, case, check):
    parsed, declared = hoststate_view(data, case)
    if check == "refused":
        refused = parsed.refusals or declared.refused
        assert refused, f"vLLM refuses ({case['stage']}: {case['error']}) but hoststate declares {declared.mode}"
        return
    assert not parsed.refusals and not declared.refused, (parsed.refusals, declared.refused)
    if check == "args":
        assert args_agree(data, case, parsed.args) == []
    else:
        assert declared.mode == case["cudagraph_mode"], declared.because


#: Rules of vLLM 0.33.0 that changed from 0.12, as 0.33.0 itself resolved them (case id -> final mode).
RULES_0_33 = {
    "env-model-runner-v2-cc-mode-1": "NONE",  # Model Runner V2 + stock torch.compile (mode 1): no graphs
    "cc-dot-mode-1": "NONE",  # V2 is the default runner
    "v1-env-cc-mode-1": "FULL_DECODE_ONLY",  # V1: only the piecewise half is dropped
    "cc-mode-1-suffix": "FULL_DECODE_ONLY",  # a suffix speculator keeps the default runner at V1
    "dense-dp2-a2a-ht": "FULL_AND_PIECEWISE",  # deepep_high_throughput + DP applies to MoE only
    "moe-dp2-a2a-ht-no-ep": "NONE",
    "moe-dp2-a2a-ht-cc-mode-2": "FULL_DECODE_ONLY",  # ... and only under VLLM_COMPILE
    "cc-dot-fuse-attn-quant": "FULL",  # fuse_attn_quant empties splitting_ops
    "fuse-attn-quant-graph-partition": "FULL_AND_PIECEWISE",  # not with Inductor graph partition
    "encdec-cc-piecewise": "FULL_DECODE_ONLY",
    "encdec-mode-2-piecewise": "NONE",  # normalised before the encoder-decoder rule
    "pool-mode-2-full": "NONE",  # ... and again after the pooling rule
    "breakable-cudagraph": "FULL_AND_PIECEWISE",
    "moonep-dense-dp2": "NONE",  # MoonEP is eager-only, whatever the model and compilation mode
    "moonep-moe-dp2-mode-2": "NONE",
    "dynamic-sd-eagle-v1": "PIECEWISE",  # dynamic speculation on V1 takes no full graphs
    "dynamic-sd-eagle": "FULL_AND_PIECEWISE",  # ... V2 does
    "parallel-drafting-cc-mode-1": "FULL_DECODE_ONLY",  # EAGLE parallel drafting keeps the default runner at V1
    "kv-lmcache-layerwise": "PIECEWISE",  # layer-by-layer KV transfers cannot be captured
    "kv-lmcache-layerwise-cc-mode-2": "NONE",
}


def test_vllm_0_33_rules_are_recorded_and_read_alike():
    """The recorded corpus holds each 0.33.0 rule (so the generic comparison above exercises it), with
    the mode vLLM 0.33.0 resolved, and hoststate declares the same."""
    data = json.loads((ORACLE / "0.33.0.json").read_text())
    cases = {c["id"]: c for c in data["cases"]}
    for case_id, mode in RULES_0_33.items():
        case = cases[case_id]
        assert (case["outcome"], case["cudagraph_mode"]) == ("ok", mode), case_id
        assert hoststate_view(data, case)[1].mode == mode, case_id
    refused = [c for c in data["cases"] if c["outcome"] == "refused"]
    assert len(refused) >= 40
    for case in refused:
        parsed, declared = hoststate_view(data, case)
        assert parsed.refusals or declared.refused, case["id"]


#: Refusals that depend on the model or the host (recorded case id -> words vLLM's error and hoststate's reason share,
#: compared without case): hoststate refuses these for vLLM's reason, not merely refuses.
REFUSED_FOR_VLLMS_REASON = {
    "tp3-heads-not-divisible": "must be divisible by tensor parallel size (3)",
    "tp6-heads-not-divisible": "must be divisible by tensor parallel size (6)",
    "max-model-len-above-derived": "max_model_len (65536) is greater than the derived max_model_len",
    "max-model-len-above-llama3-rope": "max_model_len (200000) is greater than the derived max_model_len",
    "max-model-len-yarn-above-derived": "max_model_len (163841) is greater than the derived max_model_len",
    "batched-tokens-below-seqs": "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512)",
    "spec-eagle-without-model": "without speculative model",
    "spec-tokens-without-method-or-model": "without speculative model",
    "quantization-not-the-checkpoints": "does not match the quantization method specified in the `quantization` arg",
    "tp16-above-gpus": "than the number of available gpus (8)",
    "tp8-pp2-above-gpus": "than the number of available gpus (8)",
    "lora-spec-default-budget-short": "increasing max_num_batched_tokens or decreasing num_speculative_tokens",
    "lora-spec-budget-short": "increasing max_num_batched_tokens or decreasing num_speculative_tokens",
    "pcp2-refused": "prefill context parallelism is not fully supported",
    "spec-flags-suffix-async": "async scheduling",
    "spec-flags-tokens-only": "without speculative model",
    "spec-flags-clash": "--spec-method and --speculative-config['method'] are mutually exclusive",
    "kv-lmcache-expandable-segments": "incompatible with pytorch_cuda_alloc_conf=expandable_segments:true",
    "kv-nixl-expandable-segments": "nixlconnector is incompatible with pytorch_cuda_alloc_conf=expandable_segments",
}


def test_model_and_host_refusals_are_recorded_and_refused_for_vllms_reason():
    seen: dict[str, list[str]] = {}
    for path in _files():
        data = json.loads(path.read_text())
        for case in data["cases"]:
            words = REFUSED_FOR_VLLMS_REASON.get(case["id"])
            if words is None:
                continue
            assert case["outcome"] == "refused" and words in case["error"].casefold(), (path.name, case["id"])
            parsed, declared = hoststate_view(data, case)
            assert not parsed.refusals and words in (declared.refused or "").casefold(), (path.name, declared)
            seen.setdefault(case["id"], []).append(data["vllm_version"])
    assert set(seen) == set(REFUSED_FOR_VLLMS_REASON)
    assert all("0.33.0" in versions or "0.12.0" in versions for versions in seen.values()), seen


def test_0_33_hidden_no_spellings_as_vllm_0_33_parses_them():
    """0.33's parser accepts the ``--no-`` form of each enable/disable pair's declared spelling (hidden from help)
    and refuses the inverse's; the recorded cases show both, and hoststate reads them alike."""
    data = json.loads((ORACLE / "0.33.0.json").read_text())
    cases = {c["id"]: c for c in data["cases"]}
    started = {"no-enable-prefix-caching": ("enable_prefix_caching", False),
               "no-enable-chunked-prefill": ("enable_chunked_prefill", False),
               "no-disable-cascade-attn": ("disable_cascade_attn", False)}
    for case_id, (dest, value) in started.items():
        case = cases[case_id]
        assert case["outcome"] == "ok" and case["non_default_args"][dest] is value, case_id
        assert hoststate_view(data, case)[0].args[dest] is value
    for case_id in ("no-enable-cascade-attn-refused", "no-disable-prefix-caching-refused"):
        case = cases[case_id]
        assert (case["stage"], case["outcome"]) == ("parse", "refused") and "unrecognized arguments" in case["error"]
        assert any("unrecognized arguments" in r for r in hoststate_view(data, case)[0].refusals)
