"""Round 4 of reading vLLM command lines as vLLM resolves them: values vLLM's argument types read as unset.

Each expectation is read from vLLM's released source (0.10.2-0.33.0):

- ``optional_type`` (vllm/engine/arg_utils.py: ``if val == "" or val == "None": return None``) wraps the type of every
  option whose config field admits None (_compute_kwargs: "If None is in type_hints, make the argument optional"), and
  ``--speculative-config`` is ``optional_type(json.loads)``, so ``null`` is None too. None is those options' parser
  default, so ``--speculative-config None`` or ``--seed None`` (0.10.2-0.11.1, where seed is ``int | None``) is the
  server without the option, not a refused command line. Where the field is a Literal without ``str``, argparse
  also has choices, to which 0.10.2-0.12.0 append the string "None": the None the type returns is not among them, and
  argparse refuses it (checked with argparse itself; tests/test_vllm_round6.py). ``--quantization`` is not one of
  them: its field is ``QuantizationMethods | None``, but the config module binds ``QuantizationMethods = Any`` at run
  time up to 0.12.0 (imported under TYPE_CHECKING only), and 0.33's ``QuantizationMethods | str | None`` has no
  choices either, so ``--quantization None`` runs as the server without it on every version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vllm_lines import BASE, VERSIONS, model_root
from tests.vllm_lines import parsed as _parsed
from tests.vllm_lines import snap as _snap
from tests.vllm_lines import verdict as _verdict


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return model_root(tmp_path)


# -- optional_type: "None" and "" are None, the parser default ------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("extra", ["--speculative-config None", "--speculative-config null", "--speculative-config=",
                                   "--kv-transfer-config None", "--num-gpu-blocks-override None",
                                   "--distributed-executor-backend None", "--revision None",
                                   "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
                                   "\"prompt_lookup_max\": 4}' --speculative-config None"])
def test_none_on_an_optional_option_is_the_server_without_it(root, version, extra):
    data = _snap(root, f"{BASE} {extra}", version)["vllm"]
    assert "refused" not in data["cudagraph"], data["cudagraph"]
    dest = extra.split()[-2 if " " in extra.split("--")[-1] else -1].lstrip("-").split("=")[0].replace("-", "_")
    assert dest not in data["args"] and dest in data["args_resolved"]["same_as_unset"], data
    verdict, findings = _verdict(root, BASE, f"{BASE} {extra}", version)
    assert verdict == "clean", findings


@pytest.mark.parametrize("version", ("0.10.2", "0.11.0", "0.11.1"))
def test_seed_none_is_unset_where_the_seed_is_optional(root, version):
    assert _verdict(root, BASE, f"{BASE} --seed None", version)[0] == "clean"
    assert _verdict(root, BASE, f"{BASE} --seed 7 --seed None", version)[0] == "clean"  # the last one wins


@pytest.mark.parametrize("version", ("0.12.0", "0.33.0"))
def test_seed_none_is_refused_where_the_seed_is_an_int(version):
    assert any("--seed" in r for r in _parsed(f"{BASE} --seed None", version).refusals)


@pytest.mark.parametrize("version", ("0.11.1", "0.12.0"))
def test_max_cudagraph_capture_size_none_is_unset_where_it_is_optional(root, version):
    assert _verdict(root, BASE, f"{BASE} --max-cudagraph-capture-size None", version)[0] == "clean"


def test_max_cudagraph_capture_size_none_is_refused_on_0330():
    assert _parsed(f"{BASE} --max-cudagraph-capture-size None", "0.33.0").refusals


@pytest.mark.parametrize("version", VERSIONS)
def test_quantization_none_is_the_server_without_it(root, version):
    """No version has argparse choices for --quantization (QuantizationMethods is Any at run time up to 0.12.0)."""
    assert not _parsed(f"{BASE} --quantization None", version).refusals
    assert _verdict(root, BASE, f"{BASE} --quantization None", version)[0] == "clean"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_speculative_config_is_still_a_change_from_none(root, version):
    spec = "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 4}'"
    verdict, _ = _verdict(root, f"{BASE} --speculative-config None", f"{BASE} --speculative-config {spec}", version)
    assert verdict == "invalidating"


@pytest.mark.parametrize("extra", ["--num-gpu-blocks-override None", "--speculative-config None", "--revision None"])
def test_an_unrecorded_version_reads_none_as_before(extra):
    """No recorded parser for 0.12.1: "None" is read as it was (no None value is left that no default drops)."""
    parsed = _parsed(f"{BASE} {extra}", "0.12.1")
    assert None not in parsed.args.values()
