"""Log parsing on real-format server logs of 0.11 (JSON config) and 0.12+ (Python repr config)."""

from __future__ import annotations

import pytest

from hoststate.collectors.vllm.log import mode_from_captures, parse_log, parse_pyrepr, split_config
from tests.conftest import FIXTURES

LOGS = FIXTURES / "vllm" / "logs"

# file, version, engine-config mode, observed mode, observed from, downgrade count
CASES = [
    ("v0.11.0-default.log", "0.11.0", "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", "capture lines", 0),
    ("v0.11.1-full-spec-downgrade.log", "0.11.1", "FULL", "PIECEWISE", "capture lines", 1),
    ("v0.12.0-flashinfer-spec.log", "0.12.0", "FULL_AND_PIECEWISE", "PIECEWISE", "capture lines", 1),
    ("v0.33.0-eager.log", "0.33.0", "NONE", "NONE", "engine config line", 0),
]


@pytest.mark.parametrize(("name", "version", "config_mode", "observed", "origin", "downgrades"), CASES)
def test_log_fixtures(name, version, config_mode, observed, origin, downgrades):
    facts = parse_log((LOGS / name).read_text(encoding="utf-8"))
    assert facts.version == version
    assert facts.config_cudagraph_mode == config_mode
    mode, where = facts.observed
    assert mode == observed and origin in where
    assert len(facts.downgrades) == downgrades
    assert facts.errors == []
    assert facts.non_default_args is not None and "model" in facts.non_default_args


def test_full_to_piecewise_downgrade_warning():
    facts = parse_log((LOGS / "v0.11.1-full-spec-downgrade.log").read_text(encoding="utf-8"))
    assert facts.downgrades[0].startswith("FULL -> PIECEWISE")
    assert facts.downgraded_to == "PIECEWISE"
    assert facts.config["speculative_config"] == {"method": "suffix", "model": None, "num_spec_tokens": 32}
    assert facts.attention_backends == ["FLASHINFER"]


def test_downgrade_alone_without_capture_lines():
    line = ("(Worker_TP0 pid=1) WARNING 12-04 08:31:00 [gpu_model_runner.py:4357] CUDAGraphMode.FULL is not "
            "supported with FlashInferBackend backend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); "
            "setting cudagraph_mode=FULL_AND_PIECEWISE")
    facts = parse_log(line)
    assert facts.observed == ("FULL_AND_PIECEWISE", "log: cudagraph_mode downgrade warning")


def test_012_config_repr_reads_enums_and_nested_dicts():
    facts = parse_log((LOGS / "v0.12.0-flashinfer-spec.log").read_text(encoding="utf-8"))
    assert facts.config_compilation_mode == "VLLM_COMPILE"
    assert facts.config["tensor_parallel_size"] == 8
    assert facts.config["dtype"] == "torch.bfloat16"


@pytest.mark.parametrize(
    ("kinds", "mode"),
    [
        ({("mixed prefill-decode", "PIECEWISE"), ("decode", "FULL")}, "FULL_AND_PIECEWISE"),
        ({("mixed prefill-decode", "PIECEWISE")}, "PIECEWISE"),
        ({("decode", "FULL")}, "FULL_DECODE_ONLY"),
        ({("mixed prefill-decode", "FULL")}, "FULL"),
        (set(), None),
    ],
)
def test_mode_from_captures(kinds, mode):
    assert mode_from_captures(kinds) == mode


def test_a_restarted_server_counts_only_its_last_start():
    first = (LOGS / "v0.11.0-default.log").read_text(encoding="utf-8")
    second = (LOGS / "v0.33.0-eager.log").read_text(encoding="utf-8")
    facts = parse_log(first + second)
    assert facts.version == "0.33.0"
    assert facts.captures == [] and facts.observed[0] == "NONE"


def test_garbage_is_recorded_not_raised():
    facts = parse_log("INFO non-default args: {'model': <object at 0x7f>}\n\x00\xff random text")
    assert facts.errors and facts.non_default_args is None


def test_split_config_respects_nesting_and_quotes():
    items = split_config("model='a, b=c', x=F(y=1, z=[1, 2]), w={'k': 'v, q=1'}")
    assert list(items) == ["model", "x", "w"]
    assert parse_pyrepr(items["x"]) == {"y": 1, "z": [1, 2]}
