"""Spellings of one speculative config that vLLM builds into the same SpeculativeConfig.

- The ngram method named by its draft model: SpeculativeConfig.__post_init__ sets ``method = "ngram"`` where none
  is given and ``model`` is ngram / [ngram] ("Automatically configure the method for ngram when model is used
  instead of method"), and ``model = "ngram"`` where the method is ngram and no model is given (vllm/config/
  speculative.py of 0.11.0-0.33.0, vllm/config/__init__.py of 0.10.2); the ngram proposer reads neither name again.
  ``method: "[ngram]"`` is no such spelling: pydantic refuses it (not in SpeculativeMethod).
- 0.33's ``--spec-method`` / ``--spec-model`` / ``--spec-tokens``: EngineArgs.create_speculative_config sets the
  config's ``method`` / ``model`` / ``num_speculative_tokens`` from them (refusing a flag next to the same key).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vllm_lines import BASE, VERSIONS, model_root, verdict


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return model_root(tmp_path)


def _spec(body: str) -> str:
    return f"{BASE} --speculative-config '{{{body}}}'"


METHOD = _spec('"method": "ngram", "num_speculative_tokens": 3')


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("other", [
    _spec('"model": "ngram", "num_speculative_tokens": 3'),
    _spec('"model": "[ngram]", "num_speculative_tokens": 3'),
    _spec('"method": "ngram", "model": "ngram", "num_speculative_tokens": 3'),
    _spec('"model": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5'),
])
def test_the_ngram_method_named_by_its_model_is_the_same_setting(root, version, other):
    result, findings = verdict(root, METHOD, other, version)
    assert result == "clean", findings


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("other", [
    _spec('"model": "ngram", "num_speculative_tokens": 4'),
    _spec('"model": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4'),
    _spec('"method": "[ngram]", "num_speculative_tokens": 3'),  # refused
])
def test_a_different_ngram_config_is_still_a_finding(root, version, other):
    assert verdict(root, METHOD, other, version)[0] == "invalidating"


@pytest.mark.parametrize("flags", [
    "--spec-method ngram --spec-tokens 3",
    "--spec-model ngram --spec-tokens 3",
    "--spec-tokens 3 --speculative-config '{\"method\": \"ngram\"}'",
])
def test_the_spec_flags_are_the_config_they_set_on_0330(root, flags):
    result, findings = verdict(root, METHOD, f"{BASE} {flags}", "0.33.0")
    assert result == "clean", findings


@pytest.mark.parametrize("flags", [
    "--spec-method ngram --spec-tokens 4",
    "--spec-method ngram --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'",  # refused
])
def test_spec_flags_that_differ_or_clash_are_a_finding_on_0330(root, flags):
    assert verdict(root, METHOD, f"{BASE} {flags}", "0.33.0")[0] == "invalidating"
