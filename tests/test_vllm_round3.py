"""Round 3 of reading vLLM command lines as vLLM resolves them: KV transfer configs and -O under --enforce-eager.

Each expectation is read from vLLM's released source (0.10.2-0.33.0):

- ``--kv-transfer-config``: KVTransferConfig.__post_init__ (vllm/config/kv_transfer.py) refuses a ``kv_connector``
  without a ``kv_role`` and a role outside KVRole; a config naming no connector is accepted, but the V1 engine core's
  Scheduler.__init__ (vllm/v1/core/sched/scheduler.py) creates a connector for any ``kv_transfer_config`` that is not
  None, and KVConnectorFactory (vllm/distributed/kv_transfer/kv_connector/factory.py) refuses a missing name. So
  ``--kv-transfer-config {}`` is no server at all, not the server without the option (an empty table used to compare
  equal to none).
- ``-O<n>`` next to ``--enforce-eager`` on 0.12.0: VllmConfig.__post_init__ (vllm/config/vllm.py) overrides any level
  above O0 to O0 before the level's defaults are applied, so the level given changes nothing. 0.33.0 keeps the level,
  whose defaults set ``kernel_config.enable_flashinfer_autotune`` (OPTIMIZATION_LEVEL_02), so it stays a setting.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from hoststate.collectors.vllm.argv import locate, normalise
from hoststate.collectors.vllm.cudagraph import declare
from hoststate.collectors.vllm.defaults import resolve
from hoststate.collectors.vllm.model import UNKNOWN
from hoststate.collectors.vllm.versions import rules_for
from tests.vllm_lines import BASE, VERSIONS, model_root
from tests.vllm_lines import snap as _snap
from tests.vllm_lines import verdict as _verdict


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return model_root(tmp_path)


def _args(cmd: str, version: str) -> dict:
    command = locate(cmd.split())
    return normalise(command.args, version, program=command.program or "").args


# -- --kv-transfer-config ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_an_empty_kv_transfer_config_is_refused_not_read_as_no_option(root, version):
    data = _snap(root, f"{BASE} --kv-transfer-config {{}}", version)["vllm"]
    assert "Connector name is not set in KVTransferConfig" in data["cudagraph"]["refused"]
    assert "declared" not in data["cudagraph"]
    verdict, findings = _verdict(root, BASE, f"{BASE} --kv-transfer-config {{}}", version)
    assert verdict == "invalidating" and findings["vllm.cudagraph.refused"] == "invalidating", findings


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("kv", "words"), [
    ({"kv_role": "kv_both"}, "Connector name is not set"),
    ({"kv_connector": "NixlConnector"}, "Please specify kv_role when kv_connector is set"),
    ({"kv_connector": "NixlConnector", "kv_role": "both"}, "Unsupported kv_role: both"),
])
def test_a_kv_transfer_config_vllm_cannot_start_with_is_refused(root, version, kv, words):
    data = _snap(root, f"{BASE} --kv-transfer-config {shlex.quote(json.dumps(kv))}", version)["vllm"]
    assert words in data["cudagraph"]["refused"] and "declared" not in data["cudagraph"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_connector_with_a_role_is_still_a_server_and_a_setting(root, version):
    kv = "'{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}'"
    data = _snap(root, f"{BASE} --kv-transfer-config {kv}", version)["vllm"]
    assert "refused" not in data["cudagraph"] and data["cudagraph"]["declared"]
    verdict, findings = _verdict(root, BASE, f"{BASE} --kv-transfer-config {kv}", version)
    assert findings["vllm.args.kv_transfer_config.kv_connector"] == "invalidating"
    assert "vllm.cudagraph.refused" not in findings


@pytest.mark.parametrize(("version", "extra"), [
    ("0.12.0", "--kv-offloading-backend native --kv-offloading-size 4"),  # VllmConfig fills in OffloadingConnector
    ("0.33.0", "--kv-offloading-size 4"),
])
def test_kv_offloading_fills_in_the_connector(version, extra):
    args = _args(f"{BASE} --kv-transfer-config {{}} {extra}", version)
    assert args["kv_transfer_config"] == {}
    refused = declare(args, {}, version).refused
    assert refused is None or "Connector name" not in refused


def test_the_v0_engine_of_0102_starts_without_a_connector():
    """VLLM_USE_V1=0: the V0 engine connects only for a connector with a role, so {} is not refused."""
    args = {"model": "/models/llama", "kv_transfer_config": {}}
    assert declare(args, {"VLLM_USE_V1": "0"}, "0.10.2").refused is None


def test_an_unread_model_on_0102_is_not_claimed_to_run_v1(tmp_path):
    """Without config.json the 0.10.2 engine (V0 or V1) is not known, so the missing connector is not claimed."""
    data = _snap(tmp_path, "vllm serve /models/none --kv-transfer-config {}", "0.10.2")["vllm"]
    assert "Connector name" not in (data["cudagraph"].get("refused") or "")


# -- -O<n> next to --enforce-eager ------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["-O0", "-O1", "-O3", "-O 0", "--optimization-level 1"])
def test_a_level_under_enforce_eager_on_0120_is_the_server_without_it(root, level):
    verdict, findings = _verdict(root, f"{BASE} --enforce-eager", f"{BASE} --enforce-eager {level}", "0.12.0")
    assert verdict == "clean", findings
    data = _snap(root, f"{BASE} --enforce-eager {level}", "0.12.0")["vllm"]
    assert "optimization_level" not in data["args"]
    assert "overrides any optimization level to -O0" in data["args_resolved"]["same_as_unset"]["optimization_level"]


def test_a_level_without_enforce_eager_stays_a_setting(root):
    verdict, findings = _verdict(root, BASE, f"{BASE} -O0", "0.12.0")
    assert verdict == "invalidating" and findings["vllm.args.optimization_level"] == "invalidating"


@pytest.mark.parametrize("level", ["-O0", "-O1"])
def test_0330_keeps_the_level_under_enforce_eager(root, level):
    """0.33 applies the level's defaults under --enforce-eager (kernel_config.enable_flashinfer_autotune)."""
    verdict, findings = _verdict(root, f"{BASE} --enforce-eager", f"{BASE} --enforce-eager {level}", "0.33.0")
    assert verdict == "invalidating" and findings["vllm.args.optimization_level"] == "invalidating"


def test_a_level_vllm_refuses_is_not_left_out(root):
    data = _snap(root, f"{BASE} --enforce-eager -O5", "0.12.0")["vllm"]
    assert data["cudagraph"]["refused"]
    assert "optimization_level" not in data.get("args_resolved", {}).get("same_as_unset", {})


def test_an_unknown_version_compares_the_level_as_given():
    """No version: the newest row (0.33) applies, which keeps the level."""
    rules = rules_for(None)[0]
    out = resolve({"model": "/models/llama", "enforce_eager": True, "optimization_level": "0"}, UNKNOWN, {}, rules)
    assert out.args["optimization_level"] == "0" and "optimization_level" not in out.same_as_unset


# -- the ngram lookup window ------------------------------------------------------------------------------------
# SpeculativeConfig.__post_init__ (vllm/config/speculative.py 0.11.0-0.33.0; vllm/config/__init__.py 0.10.2): for the
# ngram method a missing end of the window takes the other end, neither given is 5 and 5; then min <= max, each >= 1.

NGRAM = '"method": "ngram", "num_speculative_tokens": 3'


def _spec(body: str) -> str:
    return f"{BASE} --speculative-config '{{{body}}}'"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("before", "after"), [
    (NGRAM, f'{NGRAM}, "prompt_lookup_max": 5'),
    (NGRAM, f'{NGRAM}, "prompt_lookup_min": 5, "prompt_lookup_max": 5'),
    (f'{NGRAM}, "prompt_lookup_min": 3', f'{NGRAM}, "prompt_lookup_max": 3'),
    ('"model": "ngram", "num_speculative_tokens": 3', '"model": "ngram", "num_speculative_tokens": 3, '
                                                      '"prompt_lookup_min": 5'),
])
def test_an_ngram_window_spelled_as_vllm_fills_it_in_is_not_a_change(root, version, before, after):
    verdict, findings = _verdict(root, _spec(before), _spec(after), version)
    assert verdict == "clean", findings


@pytest.mark.parametrize("version", VERSIONS)
def test_another_ngram_window_is_a_change(root, version):
    verdict, findings = _verdict(root, _spec(NGRAM), _spec(f'{NGRAM}, "prompt_lookup_max": 4'), version)
    assert findings["vllm.args.speculative_config.prompt_lookup_max"] == "invalidating"
    assert findings["vllm.args.speculative_config.prompt_lookup_min"] == "invalidating"  # 4 too, as vLLM fills it


@pytest.mark.parametrize("version", VERSIONS)
def test_the_window_of_another_method_is_left_out(root, version):
    """Another method named (eagle here) has both ends set to 0 by SpeculativeConfig.__post_init__'s last branch
    (0.10.2-0.33.0), so a window given to it is the config without one; a window below 1, which 0.12+ refuses in
    the field (ge=1), and suffix's (it validates its own settings), are kept as given."""
    body = '"method": "eagle", "model": "/models/llama", "num_speculative_tokens": 3'
    data = _snap(root, _spec(f'{body}, "prompt_lookup_max": 4'), version)["vllm"]
    assert "prompt_lookup_max" not in data["args"]["speculative_config"]
    verdict, findings = _verdict(root, _spec(body), _spec(f'{body}, "prompt_lookup_min": 2, "prompt_lookup_max": 7'),
                                 version)
    assert verdict == "clean", findings
    zero = _snap(root, _spec(f'{body}, "prompt_lookup_max": 0'), version)["vllm"]
    assert zero["args"]["speculative_config"]["prompt_lookup_max"] == 0
    if version not in ("0.10.2", "0.11.0"):  # suffix decoding from 0.11.1 on
        suffix = _snap(root, _spec('"method": "suffix", "num_speculative_tokens": 3, "prompt_lookup_max": 4'),
                       version)["vllm"]
        assert suffix["args"]["speculative_config"]["prompt_lookup_max"] == 4


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("window", "words"), [
    ('"prompt_lookup_min": 6, "prompt_lookup_max": 5', "prompt_lookup_min=6 must be <= prompt_lookup_max=5"),
    ('"prompt_lookup_min": 6', None),  # max takes 6: accepted
    ('"prompt_lookup_max": 0', "must be > 0"),
])
def test_an_ngram_window_vllm_refuses_is_refused(root, version, window, words):
    data = _snap(root, _spec(f"{NGRAM}, {window}"), version)["vllm"]
    refused = data["cudagraph"].get("refused")
    assert (refused is None) if words is None else (words in refused), refused


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("tokens", [0, -1])
def test_no_speculative_tokens_is_refused_not_a_server(root, version, tokens):
    """SpeculativeConfig._verify_args: "Expected num_speculative_tokens to be greater than zero", any method."""
    data = _snap(root, _spec(f'"method": "ngram", "num_speculative_tokens": {tokens}'), version)["vllm"]
    assert f"greater than zero ({tokens})" in data["cudagraph"]["refused"]
    assert "declared" not in data["cudagraph"]


def test_one_speculative_token_is_a_server(root):
    data = _snap(root, _spec('"method": "ngram", "num_speculative_tokens": 1'), "0.12.0")["vllm"]
    assert "refused" not in data["cudagraph"] and data["cudagraph"]["declared"]


# -- --async-scheduling on 0.33 ---------------------------------------------------------------------------------
# VllmConfig.__post_init__ (vllm/config/vllm.py of 0.33.0) turns async scheduling on when the flag is not given,
# unless the model is a pooling one, the executor lacks it (Ray), or Model Runner V1 runs speculative decoding it lacks
# or pipeline parallelism. Up to 0.12 the parser default is False and it stays a setting.

@pytest.mark.parametrize("extra", ["", "-tp 2", "--distributed-executor-backend mp -tp 2"])
def test_async_scheduling_where_0330_turns_it_on_anyway_is_not_a_change(root, extra):
    verdict, findings = _verdict(root, f"{BASE} {extra}", f"{BASE} {extra} --async-scheduling", "0.33.0")
    assert verdict == "clean", findings
    same = _snap(root, f"{BASE} {extra} --async-scheduling", "0.33.0")["vllm"]["args_resolved"]["same_as_unset"]
    assert "VllmConfig.__post_init__" in same["async_scheduling"]


@pytest.mark.parametrize(("version", "extra"), [
    ("0.12.0", ""),  # off unless given
    ("0.11.1", ""),
    ("0.33.0", "--distributed-executor-backend ray"),  # the Ray executor does not support it: off unset
    ("0.33.0", "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'"),
])
def test_async_scheduling_stays_a_setting_where_vllm_would_not_turn_it_on(root, version, extra):
    verdict, findings = _verdict(root, f"{BASE} {extra}", f"{BASE} {extra} --async-scheduling", version)
    assert findings["vllm.args.async_scheduling"] == "invalidating", findings


def test_async_scheduling_on_an_unread_model_is_compared_as_given(tmp_path):
    """No config.json: the model could be a pooling one, which 0.33 runs without async scheduling unless given."""
    cmd = "vllm serve /models/none"
    verdict, findings = _verdict(tmp_path, cmd, f"{cmd} --async-scheduling", "0.33.0")
    assert findings["vllm.args.async_scheduling"] == "invalidating", findings


def test_no_async_scheduling_on_0330_stays_a_setting(root):
    verdict, findings = _verdict(root, BASE, f"{BASE} --no-async-scheduling", "0.33.0")
    assert findings["vllm.args.async_scheduling"] == "invalidating", findings


# -- --max-cpu-loras with --enable-lora -------------------------------------------------------------------------
# EngineArgs.create_engine_config passes None for a value not above 0; LoRAConfig.__post_init__ makes None max_loras and
# refuses a value below max_loras (vllm/engine/arg_utils.py, vllm/config/lora.py of 0.10.2-0.33.0).

LORA = f"{BASE} --enable-lora"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("before", "after"), [
    ("--max-loras 4", "--max-loras 4 --max-cpu-loras 4"),
    ("", "--max-cpu-loras 1"),  # max_loras' parser default
    ("", "--max-cpu-loras 0"),
    ("--max-loras 2", "--max-loras 2 --max-cpu-loras -1"),
])
def test_max_cpu_loras_at_what_lora_config_takes_unset_is_not_a_change(root, version, before, after):
    verdict, findings = _verdict(root, f"{LORA} {before}", f"{LORA} {after}", version)
    assert verdict == "clean", findings


@pytest.mark.parametrize("version", VERSIONS)
def test_more_cpu_lora_slots_are_a_change(root, version):
    verdict, findings = _verdict(root, f"{LORA} --max-loras 4", f"{LORA} --max-loras 4 --max-cpu-loras 8", version)
    assert findings["vllm.args.max_cpu_loras"] == "invalidating", findings


@pytest.mark.parametrize("version", VERSIONS)
def test_fewer_cpu_lora_slots_than_loras_are_refused(root, version):
    data = _snap(root, f"{LORA} --max-loras 4 --max-cpu-loras 2", version)["vllm"]
    assert "max_cpu_loras (2) must be >= max_loras (4)" in data["cudagraph"]["refused"]


def test_max_cpu_loras_on_an_unrecorded_version_is_compared_as_given(root):
    """0.10.1's parser defaults are not recorded: max_loras unset is not known to be 1 there."""
    verdict, findings = _verdict(root, LORA, f"{LORA} --max-cpu-loras 1", "0.10.1")
    assert findings["vllm.args.max_cpu_loras"] == "invalidating", findings
