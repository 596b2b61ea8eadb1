"""vLLM arguments compared by the engine setting they resolve to, not by how they were spelled.

Each pair below is two ``--vllm-cmd`` snapshots of the same server, taken through the collector and diffed under the
default policy. Where the second spells a setting the first left out, at exactly what vLLM takes without it, the
verdict is clean and the change shows only as info (``vllm.argv``, ``vllm.args_resolved``); where it changes the
setting, it refuses as before. The expectations come from vLLM itself: the parser defaults are those recorded from
each version's own parser (fixtures/vllm/oracle/options, turned into hoststate/data/vllm_defaults.json by
scripts/vllm_defaults.py); ``--dtype`` resolves as ModelConfig's ``_get_and_verify_dtype`` does (``auto`` is the
checkpoint's ``torch_dtype`` unless it is float32); the V1 engine of 0.10-0.11 seeds 0 when no seed is given
(``ModelConfig.__post_init__``: ``if envs.VLLM_USE_V1 and self.seed is None: self.seed = 0``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hoststate.collectors import Context
from hoststate.collectors import vllm as vllm_collector
from hoststate.collectors.vllm.argv import locate, normalise
from hoststate.collectors.vllm.defaults import defaults_for
from hoststate.diff import compare
from tests.conftest import data_script

REPO = Path(__file__).resolve().parent.parent
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 32,
          "num_key_value_heads": 8, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A captured tree holding one model directory (/models/llama) with a bfloat16 config.json."""
    (tmp_path / "models" / "llama").mkdir(parents=True)
    (tmp_path / "models" / "llama" / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "models" / "remote").mkdir()
    (tmp_path / "models" / "remote" / "config.json").write_text(json.dumps(
        {**CONFIG, "auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}))
    return tmp_path


def _snap(root: Path, cmd: str, version: str) -> dict:
    sec = vllm_collector.collect(Context(root=str(root), vllm_cmd=cmd, vllm_version=version))
    return {"vllm": sec.data}


def _verdict(root: Path, before: str, after: str, version: str) -> tuple[str, dict[str, str]]:
    result = compare(_snap(root, before, version), _snap(root, after, version))
    return result.verdict, {f.path: f.severity for f in result.findings}


BASE = "vllm serve /models/llama"

#: (version, extra arguments spelled at what the engine takes without them)
SAME_SETTING = [
    ("0.12.0", "--seed 0"),  # the parser default from 0.12
    ("0.11.0", "--seed 0"),  # parser default None, the V1 engine seeds 0
    ("0.10.2", "--seed 0"),
    ("0.33.0", "--gpu-memory-utilization 0.92"),  # 0.33's own default (0.9 before)
    ("0.12.0", "--gpu-memory-utilization 0.9"),
    ("0.12.0", "--dtype auto"),
    ("0.12.0", "--dtype bfloat16"),  # the checkpoint's own dtype
    ("0.33.0", "--dtype bfloat16"),
    ("0.12.0", "--port 8000 --host 0.0.0.0"),  # port at its default; a host is plumbing (info)
    ("0.12.0", "--served-model-name /models/llama"),
    ("0.12.0", "--trust-remote-code"),  # config.json names no remote code
    ("0.11.1", "-tp 1 --kv-cache-dtype auto"),
    ("0.33.0", "--tensor_parallel_size=1"),
]


@pytest.mark.parametrize(("before", "after"), [
    ("--max-model-len 8192", "--max-model 8192"),  # argparse reads the unique prefix as the option
    ("--max-num-seqs 64 -tp 1", "--max_num_seqs=64"),
    ("-cc.cudagraph_mode=PIECEWISE", "--compilation-config '{\"cudagraph_mode\": \"PIECEWISE\"}'"),
])
def test_another_spelling_of_the_same_arguments_is_not_a_change(root, before, after):
    verdict, findings = _verdict(root, f"{BASE} {before}", f"{BASE} {after}", "0.12.0")
    assert verdict == "clean", findings


def test_the_same_options_from_another_config_file_are_not_a_change(root, tmp_path):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("max-num-seqs: 64\n")
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    verdict, findings = _verdict(root, f"{BASE} --config {a}", f"{BASE} --config {b}", "0.12.0")
    assert verdict == "clean" and findings["vllm.args.config"] == "info", findings


@pytest.mark.parametrize(("version", "extra"), SAME_SETTING)
def test_a_setting_spelled_at_what_the_engine_takes_anyway_is_not_a_change(root, version, extra):
    verdict, findings = _verdict(root, BASE, f"{BASE} {extra}", version)
    assert verdict == "clean", findings
    assert not any(path.startswith("vllm.args.") and sev == "invalidating" for path, sev in findings.items())
    assert "vllm.argv" in findings  # the spelling changed, and says so at info


#: (version, extra arguments that change the engine setting)
OTHER_SETTING = [
    ("0.12.0", "--dtype float16"),  # not the checkpoint's bfloat16
    ("0.12.0", "--gpu-memory-utilization 0.92"),  # 0.33's default is not 0.12's
    ("0.33.0", "--gpu-memory-utilization 0.9"),
    ("0.12.0", "-tp 2"),
    ("0.12.0", "--kv-cache-dtype fp8"),
]


@pytest.mark.parametrize(("version", "extra"), OTHER_SETTING)
def test_a_setting_that_differs_from_the_default_still_refuses(root, version, extra):
    verdict, findings = _verdict(root, BASE, f"{BASE} {extra}", version)
    assert verdict == "invalidating", findings


def test_remote_code_named_by_the_model_keeps_trust_remote_code_a_setting(root):
    cmd = "vllm serve /models/remote"
    verdict, findings = _verdict(root, cmd, f"{cmd} --trust-remote-code", "0.12.0")
    assert verdict == "invalidating" and findings["vllm.args.trust_remote_code"] == "invalidating"


def test_a_dtype_is_compared_as_given_where_the_model_cannot_be_read(tmp_path):
    """No config.json: the checkpoint's dtype is unknown, so --dtype bfloat16 may be a change: it refuses."""
    verdict, findings = _verdict(tmp_path, "vllm serve /models/none", "vllm serve /models/none --dtype bfloat16",
                                 "0.12.0")
    assert verdict == "invalidating" and findings["vllm.args.dtype"] == "invalidating"


def test_an_unrecorded_version_keeps_refusing_and_says_why(root):
    """vLLM 0.10.1's parser was never recorded: --dtype auto might be a change there, so it is compared as given and
    the snapshot says the defaults are unknown."""
    result = compare(_snap(root, BASE, "0.10.1"), _snap(root, f"{BASE} --kv-cache-dtype auto", "0.10.1"))
    finding = next(f for f in result.findings if f.path == "vllm.args.kv_cache_dtype")
    assert result.verdict == finding.severity == "invalidating"
    assert "parser defaults are not recorded" in finding.reason and "compared as given" in finding.reason
    resolved = _snap(root, BASE, "0.10.1")["vllm"]["args_resolved"]
    assert "parser defaults of vLLM 0.10.1 are not recorded" in resolved["defaults"]


def test_the_snapshot_says_which_arguments_were_left_out_and_why(root):
    data = _snap(root, f"{BASE} --seed 0 --dtype bfloat16 --port 8000", "0.12.0")["vllm"]
    assert "seed" not in data["args"] and "dtype" not in data["args"] and "port" not in data["args"]
    same = data["args_resolved"]["same_as_unset"]
    assert same["seed"] == same["port"] == "its parser default"
    assert "checkpoint's own dtype (bfloat16" in same["dtype"]
    assert "vLLM 0.12.0's parser defaults" in data["args_resolved"]["defaults"]


def test_a_seed_change_is_a_warning_not_a_refusal(root):
    verdict, findings = _verdict(root, f"{BASE} --seed 1", f"{BASE} --seed 2", "0.12.0")
    assert (verdict, findings["vllm.args.seed"]) == ("warning", "warning")


def test_the_defaults_table_is_derived_from_the_recorded_parsers():
    """hoststate/data/vllm_defaults.json is exactly what scripts/vllm_defaults.py derives from the recordings."""
    module = data_script("vllm_defaults")  # the package under test's tables (installed or checkout)
    assert module.main(["--check"]) == 0, "run: python scripts/vllm_defaults.py"
    recorded = json.loads((REPO / "fixtures/vllm/oracle/options/0.12.0.json").read_text())
    assert defaults_for("0.12.0").defaults["seed"] == recorded["dests"]["seed"]["actions"][0]["default"] == 0
    assert defaults_for("0.12.1").defaults is None  # another version's defaults are never borrowed


def test_normalised_args_leave_out_what_vllms_non_default_args_leave_out():
    """vLLM's log_non_default_args keeps a dest only when it differs from the parser default."""
    command = locate(["vllm", "serve", "m", "--seed", "0", "--dtype", "auto", "--max-num-seqs", "8"])
    parsed = normalise(command.args, "0.12.0", program=command.program or "")
    assert parsed.args == {"model": "m", "max_num_seqs": 8} and sorted(parsed.at_default) == ["dtype", "seed"]


MULTIMODAL = {"architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next",
              "torch_dtype": "bfloat16",
              "text_config": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                              "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768,
                              "torch_dtype": "float16"}}


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0"])
def test_a_multimodal_checkpoints_dtype_is_its_root_configs(tmp_path, version):
    """vLLM's ``_find_dtype`` reads the root config's torch_dtype/dtype and the text_config's only when the root names
    none (vllm/config/model.py of 0.11.0-0.12.0, vllm/config/__init__.py of 0.10.2, 0.33's
    transformers_utils/model_arch_config_convertor.py): here bfloat16, so --dtype bfloat16 is --dtype auto and
    --dtype float16 (the text_config's) is another dtype."""
    (tmp_path / "models" / "mm").mkdir(parents=True)
    (tmp_path / "models" / "mm" / "config.json").write_text(json.dumps(MULTIMODAL))
    cmd = "vllm serve /models/mm"
    verdict, findings = _verdict(tmp_path, cmd, f"{cmd} --dtype bfloat16", version)
    assert verdict == "clean", findings
    assert "bfloat16" in _snap(tmp_path, f"{cmd} --dtype bfloat16", version)["vllm"]["args_resolved"][
        "same_as_unset"]["dtype"]
    verdict, findings = _verdict(tmp_path, cmd, f"{cmd} --dtype float16", version)
    assert verdict == "invalidating" and findings["vllm.args.dtype"] == "invalidating"


def test_the_text_configs_dtype_is_read_where_the_root_names_none(tmp_path):
    """The fallback of ``_find_dtype``: a root config without torch_dtype takes its text_config's."""
    config = {k: v for k, v in MULTIMODAL.items() if k != "torch_dtype"}
    (tmp_path / "models" / "mm").mkdir(parents=True)
    (tmp_path / "models" / "mm" / "config.json").write_text(json.dumps(config))
    cmd = "vllm serve /models/mm"
    assert _verdict(tmp_path, cmd, f"{cmd} --dtype float16", "0.12.0")[0] == "clean"
    assert _verdict(tmp_path, cmd, f"{cmd} --dtype bfloat16", "0.12.0")[0] == "invalidating"
