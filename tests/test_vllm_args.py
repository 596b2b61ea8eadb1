"""The argument normaliser and the declared CUDA graph mode, as a table of argument vectors by version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hoststate.collectors.vllm.argv import compilation_config_view, locate, normalise, split_command
from hoststate.collectors.vllm.cudagraph import declare
from hoststate.collectors.vllm.model import ModelFacts, facts_from_config
from hoststate.collectors.vllm.modes import parse_cg_mode
from hoststate.collectors.vllm.options import human_int
from hoststate.collectors.vllm.versions import VERSIONS, rules_for
from tests.conftest import PYTHONPATH

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

SEED = ("vllm serve MODEL --speculative-config '{\"method\":\"suffix\",\"num_speculative_tokens\":32}' "
        "--gpu-memory-utilization 0.85 --max-model-len 16384 -tp 8")
SEED_ENV = "ARCTIC_INFERENCE_ENABLED=0 VLLM_PLUGINS= PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
FULL_JSON_THEN_DOTTED = (
    "vllm serve M --compilation-config '{\"cudagraph_mode\":\"FULL\"}' -cc.max_cudagraph_capture_size=64"
)

# (id, command, version, declared mode, a phrase declared_because must contain)
VECTORS = [
    # defaults by version
    ("default-0.10.2", "vllm serve M", "0.10.2", "PIECEWISE", "level 3 on V1"),
    ("default-0.11.0", "vllm serve M", "0.11.0", "FULL_AND_PIECEWISE", "compilation level 3"),
    ("default-0.11.1", "vllm serve M", "0.11.1", "FULL_AND_PIECEWISE", "compilation mode 3"),
    ("default-0.12.0", "vllm serve M", "0.12.0", "FULL_AND_PIECEWISE", "O2 (default)"),
    ("default-0.33.0", "vllm serve M", "0.33.0", "FULL_AND_PIECEWISE", "O2 (default)"),
    # the -O1 trap: NONE on 0.11, PIECEWISE on 0.12+
    ("O1-0.10.2", "vllm serve M -O1", "0.10.2", "NONE", "level 1"),
    ("O1-0.11.0", "vllm serve M -O1", "0.11.0", "NONE", "level 1"),
    ("O1-0.11.1", "vllm serve M -O1", "0.11.1", "NONE", "mode 1"),
    ("O1-0.12.0", "vllm serve M -O1", "0.12.0", "PIECEWISE", "O1"),
    ("O1-0.33.0", "vllm serve M -O1", "0.33.0", "PIECEWISE", "O1"),
    ("O-space-1-0.12.0", "vllm serve M -O 1", "0.12.0", "PIECEWISE", "O1"),
    ("O0-0.12.0", "vllm serve M -O0", "0.12.0", "NONE", "O0"),
    ("O3-0.11.0", "vllm serve M -O3", "0.11.0", "FULL_AND_PIECEWISE", "level 3"),
    ("O3-0.12.0", "vllm serve M -O3", "0.12.0", "FULL_AND_PIECEWISE", "O3"),
    # --enforce-eager wins everywhere
    ("eager-0.10.2", "vllm serve M --enforce-eager", "0.10.2", "NONE", "--enforce-eager"),
    ("eager-0.11.0", "vllm serve M --enforce-eager", "0.11.0", "NONE", "--enforce-eager"),
    ("eager-0.12.0", "vllm serve M --enforce-eager", "0.12.0", "NONE", "--enforce-eager"),
    ("eager-explicit-0.33.0", "vllm serve M --enforce-eager -cc.cudagraph_mode=FULL", "0.33.0", "NONE",
     "--enforce-eager"),
    ("eager-underscore-0.11.1", "vllm serve M --enforce_eager", "0.11.1", "NONE", "--enforce-eager"),
    # explicit cudagraph_mode wins over the table
    ("explicit-piecewise-0.12.0", "vllm serve M -cc.cudagraph_mode=PIECEWISE", "0.12.0", "PIECEWISE", "explicit"),
    ("explicit-O-dotted-0.10.2", "vllm serve M -O.cudagraph_mode=FULL", "0.10.2", "FULL", "explicit"),
    ("explicit-json-0.11.0", "vllm serve M --compilation-config '{\"cudagraph_mode\": \"full_decode_only\"}'",
     "0.11.0", "FULL_DECODE_ONLY", "explicit"),
    ("explicit-long-dotted-0.12.0", "vllm serve M --compilation-config.cudagraph_mode FULL", "0.12.0", "FULL",
     "explicit"),
    ("explicit-numeric-0.11.0", "vllm serve M -O '{\"cudagraph_mode\": [2, 0]}'", "0.11.0", "FULL_DECODE_ONLY",
     "explicit"),
    # last one wins: a full --compilation-config is replaced by later dotted keys
    ("full-then-dotted-0.12.0", FULL_JSON_THEN_DOTTED, "0.12.0", "FULL_AND_PIECEWISE", "O2 (default)"),
    ("dotted-then-full-0.12.0",
     "vllm serve M -cc.cudagraph_mode=PIECEWISE --compilation-config '{\"cudagraph_mode\":\"FULL\"}'", "0.12.0",
     "PIECEWISE", "explicit"),
    ("dotted-twice-0.33.0", "vllm serve M -cc.cudagraph_mode=FULL -cc.cudagraph_mode=PIECEWISE", "0.33.0",
     "PIECEWISE", "explicit"),
    # compilation mode and graph mode interplay
    ("mode0-explicit-fap-0.12.0", "vllm serve M -cc.mode=0 -cc.cudagraph_mode=FULL_AND_PIECEWISE", "0.12.0", "NONE",
     "not VLLM_COMPILE"),
    ("mode0-explicit-fap-0.33.0", "vllm serve M -cc.mode=0 -cc.cudagraph_mode=FULL_AND_PIECEWISE", "0.33.0",
     "FULL_DECODE_ONLY", "not VLLM_COMPILE"),
    ("compilation-mode-dotted-long-0.11.1", "vllm serve M --compilation-config.mode 3", "0.11.1",
     "FULL_AND_PIECEWISE", "mode 3"),
    ("splitting-ops-empty-0.12.0", "vllm serve M -cc.splitting_ops='[]'", "0.12.0", "FULL", "splitting_ops=[]"),
    ("torch-compile-disable-0.33.0", "TORCH_COMPILE_DISABLE=1 vllm serve M", "0.33.0", "FULL_DECODE_ONLY",
     "TORCH_COMPILE_DISABLE"),
    ("torch-compile-disable-0.12.0", "TORCH_COMPILE_DISABLE=1 vllm serve M", "0.12.0", "FULL_AND_PIECEWISE",
     "no config-time effect"),
    ("use-cudagraph-false-0.10.2", "vllm serve M -O.use_cudagraph=false", "0.10.2", "NONE", "use_cudagraph"),
    ("dcp-0.12.0", "vllm serve M -dcp 2", "0.12.0", "PIECEWISE", "context parallel"),
    ("dcp-0.33.0", "vllm serve M -dcp 2", "0.33.0", "FULL_AND_PIECEWISE", "O2"),
    ("pooling-0.11.0", "vllm serve M --runner pooling", "0.11.0", "PIECEWISE", "pooling"),
    ("deepep-ht-dp-0.12.0", "vllm serve M -dp 2 --all2all-backend deepep_high_throughput", "0.12.0", "NONE",
     "deepep"),
    # 0.10.2: deepep high-throughput keeps piecewise graphs; the legacy flags convert at any level; features the
    # V1 engine lacks select V0 (no graphs by default)
    ("deepep-ht-dp-full-0.10.2", "VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve M -dp 2 "
     "-O.cudagraph_mode=FULL", "0.10.2", "PIECEWISE", "deepep_high_throughput"),
    ("deepep-ht-dp-piecewise-0.10.2", "VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve M -dp 2", "0.10.2",
     "PIECEWISE", "level 3 on V1"),
    ("deepep-ht-dp-full-0.11.0", "VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve M -dp 2 "
     "-O.cudagraph_mode=FULL", "0.11.0", "NONE", "deepep_high_throughput"),
    ("full-cuda-graph-O1-0.10.2", "vllm serve M -O1 -O.full_cuda_graph=true", "0.10.2", "FULL", "full_cuda_graph"),
    ("partial-prefills-v0-0.10.2", "vllm serve M --max-num-partial-prefills 2", "0.10.2", "NONE",
     "Concurrent Partial Prefill (not in the V1 engine)"),
    ("partial-prefills-v0-explicit-0.10.2", "vllm serve M --max-num-partial-prefills 2 -O.cudagraph_mode=FULL",
     "0.10.2", "FULL", "explicit"),
    ("partial-prefills-v0-piecewise-level-1-0.10.2",
     "vllm serve M --max-num-partial-prefills 2 -O1 -O.cudagraph_mode=PIECEWISE", "0.10.2", "PIECEWISE", "explicit"),
    ("attention-backend-v0-0.10.2", "VLLM_ATTENTION_BACKEND=XFORMERS vllm serve M", "0.10.2", "NONE",
     "VLLM_ATTENTION_BACKEND=XFORMERS"),
    ("attention-backend-v1-0.10.2", "VLLM_ATTENTION_BACKEND=FLASH_ATTN vllm serve M", "0.10.2", "PIECEWISE",
     "level 3 on V1"),
    ("kv-fp8-flash-attn-v0-0.10.2", "VLLM_ATTENTION_BACKEND=FLASH_ATTN vllm serve M --kv-cache-dtype fp8", "0.10.2",
     "NONE", "--kv-cache-dtype (not in the V1 engine)"),
    ("kv-fp8-triton-v1-0.10.2", "VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1 vllm serve M --kv-cache-dtype fp8",
     "0.10.2", "PIECEWISE", "level 3 on V1"),
    ("preemption-mode-v0-0.10.2", "vllm serve M --preemption-mode swap", "0.10.2", "NONE",
     "--preemption-mode (not in the V1 engine)"),
    ("scheduler-delay-factor-0-v1-0.10.2", "vllm serve M --scheduler-delay-factor 0", "0.10.2", "PIECEWISE",
     "level 3 on V1"),
    ("prompt-embeds-v0-0.10.2", "vllm serve M --enable-prompt-embeds", "0.10.2", "NONE", "--enable-prompt-embeds"),
    ("sharded-state-v0-0.10.2", "vllm serve M --load-format sharded_state", "0.10.2", "NONE", "sharded_state"),
    ("use-v1-1-0.10.2", "VLLM_USE_V1=1 vllm serve M", "0.10.2", "PIECEWISE", "level 3 on V1"),
    # the seed's own command (and its vLLM 1.7.dev by the nearest older row)
    ("seed-0.12.0", SEED_ENV + SEED, "0.12.0", "FULL_AND_PIECEWISE", "O2 (default)"),
    ("seed-1.7.dev", SEED_ENV + SEED, "1.7.0.dev0", "FULL_AND_PIECEWISE", "nearest older"),
    ("seed-0.11.1", SEED, "0.11.1", "FULL_AND_PIECEWISE", "mode 3"),
    # unknown versions
    ("unknown-0.13.0", "vllm serve M -O1", "0.13.0", "PIECEWISE", "rules of 0.12.0 (nearest older)"),
    ("unknown-0.11.2", "vllm serve M -O1", "0.11.2", "NONE", "rules of 0.11.1"),
    ("api-server-module-0.11.0", "python -m vllm.entrypoints.openai.api_server --model M -O1", "0.11.0", "NONE",
     "level 1"),
]


@pytest.mark.parametrize(("cmd", "version", "mode", "because"), [v[1:] for v in VECTORS], ids=[v[0] for v in VECTORS])
def test_declared_mode(cmd, version, mode, because):
    command = locate(split_command(cmd))
    parsed = normalise(command.args, version, program=command.program)
    declared = declare(parsed.args, command.env, version)
    assert declared.mode == mode, (declared.because, parsed.args, parsed.errors)
    assert because in declared.because


def test_table_has_the_required_size():
    assert len(VECTORS) >= 30
    assert {"0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0"} <= {v[2] for v in VECTORS}


def test_seed_command_normalises_by_dest_name():
    command = locate(split_command(SEED_ENV + SEED))
    parsed = normalise(command.args, "0.12.0", program=command.program)
    assert command.env == {"ARCTIC_INFERENCE_ENABLED": "0", "VLLM_PLUGINS": "",
                           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert parsed.args == {
        "model": "MODEL",
        "speculative_config": {"method": "suffix", "num_speculative_tokens": 32},
        "gpu_memory_utilization": 0.85,
        "max_model_len": 16384,
        "tensor_parallel_size": 8,
    }
    assert parsed.errors == [] and parsed.refusals == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["M", "--tensor_parallel_size=2"], {"tensor_parallel_size": 2}),
        (["M", "-tp", "4", "-pp", "2", "-dp", "2"],
         {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "data_parallel_size": 2}),
        (["M", "--max-model-len", "1k"], {"max_model_len": 1000}),
        (["M", "--max-model-len", "1K"], {"max_model_len": 1024}),
        (["M", "--max-model-len", "-1"], {"max_model_len": -1}),
        (["M", "--no-enable-prefix-caching"], {"enable_prefix_caching": False}),
        (["M", "--enable-prefix-caching", "--no-enable-prefix-caching"], {"enable_prefix_caching": False}),
        (["M", "--max-num-seqs", "64", "--max-num-seqs", "128"], {"max_num_seqs": 128}),
        (["M", "-cc.cudagraph_capture_sizes+", "1,2,4"],
         {"compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]}}),
        (["M", "-cc.pass_config.enable_noop=true"], {"compilation_config": {"pass_config": {"enable_noop": True}}}),
        (["M", "--served-model-name", "a", "b"], {"served_model_name": ["a", "b"]}),
    ],
)
def test_normaliser_rules(argv, expected):
    parsed = normalise(argv, "0.12.0")
    assert {k: v for k, v in parsed.args.items() if k != "model"} == expected
    assert parsed.args["model"] == "M"
    assert parsed.errors == [] and parsed.refusals == []


def test_model_option_by_version():
    """0.10.1: the positional model wins over --model; 0.10.2 and 0.11.0 refuse --model; 0.11.1 and 0.12 move it
    to the front (a second positional is refused, --model alone is the model), and so does 0.33 (its
    FlexibleArgumentParser.parse_args moves ``--model M`` / ``--model=M`` after ``serve``)."""
    parsed = normalise(["A", "--model", "B"], "0.10.1")
    assert parsed.args["model"] == "A" and any("positional" in n for n in parsed.notes)
    assert parsed.refusals == []
    assert any("positional argument" in r for r in normalise(["A", "--model", "B"], "0.10.2").refusals)
    assert any("positional argument" in r for r in normalise(["--model", "B"], "0.11.0").refusals)
    assert normalise(["-tp", "2", "--model", "B"], "0.12.0").args == {"model": "B", "tensor_parallel_size": 2}
    assert normalise(["--model=B"], "0.12.0").args == {"model": "B"}
    assert normalise(["-tp", "2", "--model", "B"], "0.33.0").args == {"model": "B", "tensor_parallel_size": 2}
    assert any("unrecognized arguments: A" in r for r in normalise(["A", "--model", "B"], "0.33.0").refusals)
    assert normalise(["M", "--max-model-len", "auto"], "0.33.0").args["max_model_len"] == -1


def test_no_flag_at_its_default_is_not_a_non_default_argument():
    assert normalise(["M", "--enforce-eager", "--no-enforce-eager"], "0.12.0").args == {"model": "M"}
    assert normalise(["M", "--no-enable-prefix-caching"], "0.12.0").args["enable_prefix_caching"] is False


def test_api_server_takes_model_option():
    command = locate(["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "X", "--port", "9"])
    parsed = normalise(command.args, "0.11.0", program=command.program)
    assert command.program == "api_server"
    assert parsed.args == {"model": "X", "port": 9}


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["M", "--speculative-config", '{"method": "suffix",'], "--speculative-config: invalid JSON"),
        (["M", "--max-model-len", "auto"], "invalid human_readable_int value: 'auto'"),
        (["M", "--model", "M"], "unrecognized arguments: M"),
        (["M", "--tensor-parallel-size", "two"], "invalid int value 'two'"),
        (["M", "--max-model-len"], "expected one argument"),
        (["M", "--enforce-eager=true"], "--enforce-eager: ignored explicit argument 'true'"),
        (["M", "--compilation-config", "3"], "--compilation-config: expected a JSON object, got int"),
        (["M", "--bogus-flag", "1"], "unrecognized arguments: --bogus-flag"),
        (["M", "--performance-mode", "throughput"], "not an option of vLLM 0.12.0"),
        (["M", "extra"], "unrecognized arguments: extra"),
    ],
)
def test_what_vllm_refuses_is_recorded(argv, error):
    parsed = normalise(argv, "0.12.0")
    assert any(error in e for e in parsed.refusals), parsed.refusals
    assert parsed.args["model"] == "M"


def test_O_dotted_is_an_error_on_0_33_and_deprecated_on_0_12():
    """0.33 reads ``-O.x=y`` as ``--optimization-level .x=y``, refused when it builds its config (a later ``-O2``
    replaces it first, and the server starts); 0.12 reads it as ``-cc.x=y``."""
    alone = normalise(["M", "-O.mode=3"], "0.33.0")
    assert alone.refusals == [] and alone.args["optimization_level"] == ".mode=3"
    assert "optimization_level '.mode=3'" in (declare(alone.args, {}, "0.33.0").refused or "")
    replaced = normalise(["M", "-O.mode=3", "-O2"], "0.33.0")
    assert replaced.refusals == [] and declare(replaced.args, {}, "0.33.0").mode == "FULL_AND_PIECEWISE"
    parsed = normalise(["M", "-O.cudagraph_mode=FULL"], "0.12.0")
    assert parsed.args["compilation_config"] == {"cudagraph_mode": "FULL"}
    assert any("deprecated" in n for n in parsed.notes)


def test_level_is_gone_in_0_33():
    assert any("level is not accepted" in e for e in normalise(["M", "-cc.level=3"], "0.33.0").refusals)


def test_unbalanced_quotes_raise_value_error_naming_it():
    with pytest.raises(ValueError, match="cannot split"):
        split_command("vllm serve M --speculative-config '{\"method\": \"suffix\"}")


def test_config_file_is_below_the_command_line(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("tensor-parallel-size: 2\nmax_model_len: 4096\nenforce-eager: true\nenable-prefix-caching: false\n")
    parsed = normalise(["M", "--config", str(cfg), "--tensor-parallel-size", "4"], "0.12.0")
    assert parsed.args["tensor_parallel_size"] == 4
    assert parsed.args["max_model_len"] == 4096
    assert parsed.args["enforce_eager"] is True
    assert "enable_prefix_caching" not in parsed.args  # up to 0.12 a false key writes nothing
    assert parsed.args["model"] == "M"
    # 0.33's api_server parser pulls its own file and has --no-enable-prefix-caching; `vllm serve`'s top-level one not
    assert normalise(["--model", "M", "--config", str(cfg)], "0.33.0", program="api_server").args[
        "enable_prefix_caching"] is False
    assert "enable_prefix_caching" not in normalise(["M", "--config", str(cfg)], "0.33.0").args


def test_missing_config_file_is_recorded(tmp_path):
    parsed = normalise(["M", "--config", str(tmp_path / "nope.yaml")], "0.12.0")
    assert any("--config" in e for e in parsed.errors)


@pytest.mark.parametrize(
    ("value", "mode"),
    [("full", "FULL"), ("FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE"), (2, "FULL"), ([2, 1], "FULL_AND_PIECEWISE"),
     ("<CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>", "FULL_DECODE_ONLY"), (0, "NONE"), ("bogus", None), (True, None)],
)
def test_parse_cg_mode(value, mode):
    assert parse_cg_mode(value) == mode


def test_version_table_is_sorted_and_lookup_says_when_it_falls_back():
    keys = [tuple(int(x) for x in r.version.split(".")) for r in VERSIONS]
    assert keys == sorted(keys)
    assert rules_for("0.12.0") == (VERSIONS[-2], None)
    row, note = rules_for("0.9.0")
    assert row is VERSIONS[0] and "older than any known" in note
    row, note = rules_for(None)
    assert row is VERSIONS[-1] and "unknown" in note


def test_human_int():
    assert human_int("25.6k") == 25600
    assert human_int("2M") == 2 * 2**20
    with pytest.raises(ValueError):
        human_int("1.5K")


# -- refusals through snap and guard ---------------------------------------------------------------------------

HOSTSTATE = [sys.executable, "-m", "hoststate"]
REFUSED = [
    ("vllm serve M --enforce-eager=true", "ignored explicit argument 'true'"),
    ("vllm serve M -Ofast", "optimization_level 'fast': input should be 0, 1, 2 or 3"),
    ("vllm serve M -O 7", "optimization_level '7'"),
    ("vllm serve M --compilation-config 3", "expected a JSON object"),
    ("vllm serve M --bogus-flag 1", "unrecognized arguments: --bogus-flag"),
    ("vllm serve M --async-scheduling --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'",
     "EAGLE/MTP"),
    ("vllm serve M --max-cudagraph-capture-size 0", "greater than or equal to 1"),
]


def _hoststate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "HF_HOME": str(cwd / "no-hf-cache"), "PYTHONPATH": PYTHONPATH})


@pytest.mark.parametrize(("cmd", "reason"), REFUSED)
def test_declare_refuses_what_vllm_refuses(cmd, reason):
    command = locate(split_command(cmd))
    parsed = normalise(command.args, "0.12.0", program=command.program)
    declared = declare(parsed.args, command.env, "0.12.0")
    said = "; ".join(parsed.refusals) or declared.refused or ""
    assert reason in said, (parsed.refusals, declared)
    if not parsed.refusals:
        assert declared.mode is None


REFUSED_0102 = [
    ("vllm serve --model M", "positional argument"),
    ("vllm serve M -O 4", "expected a JSON object"),
    ("vllm serve M --enable-dbo", "not an option of vLLM 0.10.2"),
    ("vllm serve M --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'",
     "'mtp' is not a method"),
    ("vllm serve M --speculative-config '{\"method\": \"draft_model\", \"model\": \"D\"}'",
     "draft_model is not supported yet"),
    ("VLLM_USE_V1=0 vllm serve M --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'",
     "not supported on vLLM V0"),
    ("VLLM_USE_V1=1 vllm serve M --max-num-partial-prefills 2",
     "VLLM_USE_V1=1 is not supported with Concurrent Partial Prefill"),
    ("VLLM_USE_V1=1 VLLM_ATTENTION_BACKEND=XFORMERS vllm serve M",
     "VLLM_USE_V1=1 is not supported with VLLM_ATTENTION_BACKEND=XFORMERS"),
    ("VLLM_USE_V1=1 VLLM_ATTENTION_BACKEND=FLASH_ATTN vllm serve M --kv-cache-dtype fp8",
     "VLLM_USE_V1=1 is not supported with --kv-cache-dtype"),
    ("VLLM_USE_V1=1 vllm serve M --disable-async-output-proc",
     "VLLM_USE_V1=1 is not supported with --disable-async-output-proc"),
    ("vllm serve M -O '{\"use_cudagraph\": false, \"full_cuda_graph\": true}'", "mutually exclusive"),
    ("vllm serve M -O '{\"full_cuda_graph\": true, \"cudagraph_mode\": \"PIECEWISE\"}'", "mutually exclusive"),
    ("VLLM_ALL2ALL_BACKEND=deepep_high_throughput vllm serve M -dp 2 -O1 -O.cudagraph_mode=FULL",
     "piecewise CUDA graphs need compilation level 3"),
]


@pytest.mark.parametrize(("cmd", "reason"), REFUSED_0102)
def test_declare_refuses_what_vllm_0_10_2_refuses(cmd, reason):
    """Each refusal as vLLM 0.10.2's own code raises it (parser, EngineArgs, VllmConfig, CUDA platform)."""
    command = locate(split_command(cmd))
    parsed = normalise(command.args, "0.10.2", program=command.program)
    declared = declare(parsed.args, command.env, "0.10.2")
    said = "; ".join(parsed.refusals) or declared.refused or ""
    assert reason in said, (parsed.refusals, declared)
    assert declared.mode is None or parsed.refusals


def test_data_parallel_short_aliases_from_0_10_2():
    """0.10.2's parser has -asc and the -dp* short options (each checked against its own parser's dests)."""
    argv = split_command("M -dp 4 -dpl 2 -dpa 10.0.0.1 -dpp 13345 -dpb ray -dpr 2 -dpn 1 -asc 2")
    parsed = normalise(argv, "0.10.2")
    assert parsed.refusals == []
    assert parsed.args == {"model": "M", "data_parallel_size": 4, "data_parallel_size_local": 2,
                           "data_parallel_address": "10.0.0.1", "data_parallel_rpc_port": 13345,
                           "data_parallel_backend": "ray", "data_parallel_start_rank": 2, "data_parallel_rank": 1,
                           "api_server_count": 2}


def test_options_of_0_10_2_that_later_parsers_dropped():
    """0.10.2 takes the V0 engine's options; 0.11.0 dropped them, 0.11.1 --rope-theta, 0.12 the eplb window options."""
    argv = split_command("M --preemption-mode swap --rope-theta 1e6 --eplb-window-size 100 --skip-mm-profiling")
    assert normalise(argv, "0.10.2").refusals == []
    for version, dropped in (("0.11.0", "--preemption-mode"), ("0.11.1", "--rope-theta"),
                             ("0.12.0", "--eplb-window-size")):
        assert any(dropped in r and version in r for r in normalise(argv, version).refusals), version


def test_legacy_flags_are_held_as_a_graph_mode_by_0_10_2():
    """0.10.2 converts full_cuda_graph / use_cudagraph in CompilationConfig itself: the parsed config holds the mode."""
    rules = rules_for("0.10.2")[0]
    for dotted, mode in (("-O.full_cuda_graph=true", "FULL"), ("-O.use_cudagraph=false", "NONE")):
        cc = normalise(["M", "-O1", dotted], "0.10.2").args["compilation_config"]
        assert compilation_config_view(cc, rules)["cudagraph_mode"] == mode


def test_an_fp8_kv_cache_on_0_10_2_records_what_it_assumes():
    """vLLM 0.10.2 keeps V1 for an fp8 KV cache only when the attention backend takes it (an H100 does)."""
    declared = declare(normalise(["M", "--kv-cache-dtype", "fp8"], "0.10.2").args, {}, "0.10.2")
    assert declared.mode == "PIECEWISE"
    assert any("kv_cache_dtype fp8" in a for a in declared.assumes)


def test_snap_records_a_refused_command_and_guard_refuses_to_start_it(tmp_path):
    cmd, reason = REFUSED[5]
    snap = _hoststate("snap", "--only", "vllm", "--vllm-version", "0.12.0", "--vllm-cmd", cmd,
                      "-o", str(tmp_path / "s.toml"), cwd=tmp_path)
    assert snap.returncode == 0, snap.stderr
    cudagraph = tomllib.loads((tmp_path / "s.toml").read_text())["vllm"]["cudagraph"]
    assert reason in cudagraph["refused"] and "declared" not in cudagraph
    base = _hoststate("snap", "--only", "vllm", "--vllm-version", "0.12.0", "--vllm-cmd", "vllm serve M",
                      "-o", str(tmp_path / "base.toml"), cwd=tmp_path)
    assert base.returncode == 0, base.stderr
    marker = tmp_path / "ran"
    guard = _hoststate("guard", "--baseline", str(tmp_path / "base.toml"), "--only", "vllm", "--vllm-version",
                       "0.12.0", "--vllm-cmd", cmd, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
                       cwd=tmp_path)
    assert guard.returncode == 2 and not marker.exists()
    lines = guard.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0] and lines[0].startswith("hoststate: --vllm-cmd: vLLM 0.12.0 refuses")
    ok = _hoststate("guard", "--baseline", str(tmp_path / "base.toml"), "--only", "vllm", "--vllm-version",
                    "0.12.0", "--vllm-cmd", "vllm serve M", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
                    cwd=tmp_path)
    assert ok.returncode == 0 and marker.exists(), ok.stderr


#: (version, compilation config spelling, vLLM's words or None where vLLM takes it)
COMPILATION_MODE_SPELLINGS = [
    ("0.12.0", "-cc.mode=PIECEWISE", "Invalid compilation mode: PIECEWISE"),  # an old CompilationLevel name
    ("0.12.0", "-cc.mode=NO_COMPILATION", "Invalid compilation mode: NO_COMPILATION"),
    ("0.12.0", "-cc.mode=DYNAMO_AS_IS", "Invalid compilation mode: DYNAMO_AS_IS"),
    ("0.33.0", "-cc.mode=DYNAMO_ONCE", "Invalid compilation mode: DYNAMO_ONCE"),
    ("0.12.0", """--compilation-config '{"mode": "3"}'""", "Invalid compilation mode: 3"),  # a string, not 3
    ("0.33.0", """-cc '{"mode": "3"}'""", "Invalid compilation mode: 3"),
    ("0.11.1", "-O.mode=PIECEWISE", "Invalid compilation mode: PIECEWISE"),  # 0.11.1 has no -cc
    ("0.11.1", "-O.level=PIECEWISE", "Input should be a valid integer"),  # level: int | None
    ("0.11.0", """-O '{"level": "PIECEWISE"}'""", "Input should be a valid integer"),  # level: Optional[int]
    ("0.10.2", "-O.level=VLLM_COMPILE", "Input should be a valid integer"),
    # pydantic's lax int takes ASCII digits with a zero fraction only: float() would take all of these
    ("0.11.0", """-O '{"level": "3.5"}'""", "Input should be a valid integer"),
    ("0.11.0", """-O '{"level": "inf"}'""", "Input should be a valid integer"),
    ("0.11.0", """-O '{"level": "1e3"}'""", "Input should be a valid integer"),
    ("0.11.0", """-O '{"level": "\u0663"}'""", "Input should be a valid integer"),  # ARABIC-INDIC DIGIT THREE
    ("0.11.0", """-O '{"level": 3.5}'""", "Input should be a valid integer"),  # a float with a fraction
    ("0.11.0", """-O '{"level": "3.0"}'""", None),
    ("0.11.0", """-O '{"level": 3.0}'""", None),
    ("0.12.0", "-cc.mode=3", None),  # JSON 3: the member's value
    ("0.12.0", "-cc.mode=vllm_compile", None),  # upper-cased to a member name
    ("0.33.0", "-cc.mode=NONE", None),
    ("0.11.1", "-O.mode=STOCK_TORCH_COMPILE", None),
    ("0.11.0", """-O '{"level": "3"}'""", None),  # pydantic parses a numeric string as the int
    ("0.11.0", "-O.mode=PIECEWISE", None),  # not a field before 0.11.1: ignored
    ("0.10.1", "-O.level=PIECEWISE", None),  # a version whose code was not read: not refused here
]


@pytest.mark.parametrize(("version", "spelling", "words"), COMPILATION_MODE_SPELLINGS)
def test_a_compilation_mode_is_refused_where_vllm_refuses_its_spelling(version, spelling, words):
    """CompilationConfig.validate_mode_before (vllm/config/compilation.py of 0.11.1, 0.12.0, 0.33.0) upper-cases a
    ``mode`` string and raises unless it names a CompilationMode member (NONE, STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE,
    VLLM_COMPILE); a number passes to the enum. ``level`` is an int field of the pydantic dataclass (0.10.2-0.12.0),
    which refuses a name. A refused command line has no declared mode, so guard will not start it."""
    command = locate(split_command(f"vllm serve M {spelling}"))
    parsed = normalise(command.args, version, program=command.program)
    declared = declare(parsed.args, command.env, version)
    if words is None:
        assert parsed.refusals == [] and declared.refused is None and declared.mode is not None
    else:
        assert any(words in r for r in parsed.refusals), parsed.refusals
        assert words in (declared.refused or "") or parsed.refusals


def test_a_refused_compilation_mode_name_is_recorded_and_guard_refuses_it(tmp_path):
    """Through snap: vllm.cudagraph.refused holds vLLM's words and no mode is declared, and guard does not start it."""
    cmd = "vllm serve M -cc.mode=PIECEWISE"
    snap = _hoststate("snap", "--only", "vllm", "--vllm-version", "0.12.0", "--vllm-cmd", cmd,
                      "-o", str(tmp_path / "s.toml"), cwd=tmp_path)
    assert snap.returncode == 0, snap.stderr
    cudagraph = tomllib.loads((tmp_path / "s.toml").read_text())["vllm"]["cudagraph"]
    assert "Invalid compilation mode: PIECEWISE" in cudagraph["refused"] and "declared" not in cudagraph
    marker = tmp_path / "ran"
    guard = _hoststate("guard", "--baseline", str(tmp_path / "s.toml"), "--only", "vllm", "--vllm-version", "0.12.0",
                       "--vllm-cmd", cmd, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert guard.returncode == 2 and not marker.exists() and "Invalid compilation mode" in guard.stderr


# -- vLLM 0.11.1 against 0.11.0: each expectation below is what vLLM 0.11.1 / 0.11.0 itself gave for the same
# command line (scripts/vllm_oracle.py), on models other than the recorded cases' where it matters --------------

_LLAMA = ModelFacts(moe=False, pooling=False, encoder_decoder=False, kv_heads=8, mla=False, source="test")
_GQA4 = replace(_LLAMA, moe=True, kv_heads=4)  # Qwen3-30B-A3B: 4 KV heads
_MLA = replace(_LLAMA, moe=True, kv_heads=128, mla=True)  # DeepSeek-V3
_POOLING = replace(_LLAMA, pooling=True)
_ENC_DEC = replace(_LLAMA, encoder_decoder=True)
_ATTN_FUSION = "-O.pass_config.enable_attn_fusion=true"
_EAGLE3 = "'{\"method\": \"eagle3\", \"model\": \"E3\", \"num_speculative_tokens\": 2}'"
_NGRAM = "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 4}'"

# (id, command, version, model facts, declared mode or "refused: <phrase of the reason>")
RULES_0_11_1 = [
    # ModelConfig.verify_with_parallel_config: DCP without MLA needs TP > KV heads and DCP <= TP // KV heads
    ("dcp-fits-0.11.1", "vllm serve M -tp 8 -dcp 2", "0.11.1", _GQA4, "PIECEWISE"),
    ("dcp-too-large-0.11.1", "vllm serve M -tp 8 -dcp 4", "0.11.1", _GQA4, "refused: at most tensor parallel size 8"),
    ("dcp-tp-not-above-heads-0.11.1", "vllm serve M -tp 4 -dcp 2", "0.11.1", _LLAMA,
     "refused: tensor parallel size 4 must be greater than total num kv heads 8"),
    ("dcp-mla-exempt-0.11.1", "vllm serve M -tp 8 -dcp 2", "0.11.1", _MLA, "PIECEWISE"),
    ("dcp-unchecked-0.11.0", "vllm serve M -tp 8 -dcp 4", "0.11.0", _GQA4, "FULL_AND_PIECEWISE"),
    # VllmConfig._set_cudagraph_sizes: asserted only while graphs are on
    ("sizes-empty-0.11.1", "vllm serve M -O.cudagraph_capture_sizes=[] -O.cudagraph_mode=PIECEWISE", "0.11.1",
     _LLAMA, "refused: at least one element"),
    ("sizes-empty-no-graphs-0.11.1", "vllm serve M -O.cudagraph_capture_sizes=[] -O.cudagraph_mode=NONE", "0.11.1",
     _LLAMA, "NONE"),
    ("sizes-empty-0.11.0", "vllm serve M -O.cudagraph_capture_sizes=[] -O.cudagraph_mode=PIECEWISE", "0.11.0",
     _LLAMA, "PIECEWISE"),
    ("max-size-0-dotted-0.11.1", "vllm serve M -O.max_cudagraph_capture_size=0 -O.cudagraph_mode=FULL_DECODE_ONLY",
     "0.11.1", _LLAMA, "refused: greater than or equal to 1"),
    ("max-size-0-no-graphs-0.11.1", "vllm serve M --max-cudagraph-capture-size 0 -O.cudagraph_mode=NONE", "0.11.1",
     _LLAMA, "NONE"),
    # VllmConfig.__post_init__: async scheduling takes EagleModelTypes only (0.11.0: no speculation at all)
    ("async-eagle3-0.11.1", f"vllm serve M --async-scheduling --speculative-config {_EAGLE3}", "0.11.1", _LLAMA,
     "FULL_AND_PIECEWISE"),
    ("async-ngram-0.11.1", f"vllm serve M --async-scheduling --speculative-config {_NGRAM}", "0.11.1", _LLAMA,
     "refused: EAGLE/MTP"),
    ("async-eagle3-0.11.0", f"vllm serve M --async-scheduling --speculative-config {_EAGLE3}", "0.11.0", _LLAMA,
     "refused: no speculative decoding"),
    # VllmConfig.__post_init__: pooling / encoder-decoder models lose full graphs even when the mode is explicit
    ("pooling-explicit-fdo-0.11.1", "vllm serve M -O.cudagraph_mode=FULL_DECODE_ONLY", "0.11.1", _POOLING,
     "PIECEWISE"),
    ("pooling-explicit-none-0.11.1", "vllm serve M -O.cudagraph_mode=NONE", "0.11.1", _POOLING, "NONE"),
    ("pooling-explicit-fdo-0.11.0", "vllm serve M -O.cudagraph_mode=FULL_DECODE_ONLY", "0.11.0", _POOLING,
     "FULL_DECODE_ONLY"),
    ("enc-dec-explicit-fdo-0.11.1", "vllm serve M -O.cudagraph_mode=FULL_DECODE_ONLY", "0.11.1", _ENC_DEC,
     "PIECEWISE"),
    ("enc-dec-explicit-fdo-0.11.0", "vllm serve M -O.cudagraph_mode=FULL_DECODE_ONLY", "0.11.0", _ENC_DEC,
     "FULL_DECODE_ONLY"),
    # CompilationConfig.set_splitting_ops_for_attn_fusion: splitting_ops emptied, piecewise modes -> FULL
    ("attn-fusion-piecewise-0.11.1", f"vllm serve M {_ATTN_FUSION} -O.cudagraph_mode=PIECEWISE", "0.11.1", _LLAMA,
     "FULL"),
    ("attn-fusion-fdo-0.11.1", f"vllm serve M {_ATTN_FUSION} -O.cudagraph_mode=FULL_DECODE_ONLY", "0.11.1", _LLAMA,
     "FULL_DECODE_ONLY"),
    ("attn-fusion-mode-1-0.11.1", f"vllm serve M {_ATTN_FUSION} -O.mode=1", "0.11.1", _LLAMA, "NONE"),
    ("attn-fusion-own-splitting-ops-0.11.1",
     "vllm serve M --compilation-config '{\"pass_config\": {\"enable_attn_fusion\": true}, "
     "\"splitting_ops\": [\"vllm::unified_attention\"]}'", "0.11.1", _LLAMA, "FULL_AND_PIECEWISE"),
    ("fuse-attn-quant-not-a-field-0.11.1", "vllm serve M -O.pass_config.fuse_attn_quant=true", "0.11.1", _LLAMA,
     "FULL_AND_PIECEWISE"),
    ("attn-fusion-piecewise-0.11.0", f"vllm serve M {_ATTN_FUSION} -O.cudagraph_mode=PIECEWISE", "0.11.0", _LLAMA,
     "PIECEWISE"),
    # CompilationConfig.set_splitting_ops_for_v1: with attention fusion or Inductor partitioning, splitting_ops=[]
    # changes no mode (0.11.0 has the partition field, not the fusion rule)
    ("attn-fusion-empty-splitting-ops-0.11.1", f"vllm serve M {_ATTN_FUSION} -O.splitting_ops=[]", "0.11.1", _LLAMA,
     "FULL_AND_PIECEWISE"),
    ("attn-fusion-empty-splitting-ops-pw-0.12.0",
     "vllm serve M -cc.pass_config.fuse_attn_quant=true -cc.splitting_ops=[] -cc.cudagraph_mode=PIECEWISE", "0.12.0",
     _LLAMA, "PIECEWISE"),
    ("partition-empty-splitting-ops-0.11.1", "vllm serve M -O.use_inductor_graph_partition=true -O.splitting_ops=[]",
     "0.11.1", _LLAMA, "FULL_AND_PIECEWISE"),
    ("partition-attn-fusion-0.11.1", f"vllm serve M -O.use_inductor_graph_partition=true {_ATTN_FUSION}", "0.11.1",
     _LLAMA, "FULL_AND_PIECEWISE"),
    ("partition-off-empty-splitting-ops-0.11.1",
     "vllm serve M -O.use_inductor_graph_partition=false -O.splitting_ops=[]", "0.11.1", _LLAMA, "FULL"),
    ("partition-empty-splitting-ops-pw-0.11.0",
     "vllm serve M -O.use_inductor_graph_partition=true -O.splitting_ops=[] -O.cudagraph_mode=PIECEWISE", "0.11.0",
     _LLAMA, "PIECEWISE"),
    # VllmConfig.__post_init__: async scheduling with EAGLE/MTP refuses disable_padded_drafter_batch
    ("async-eagle-unpadded-0.11.1", "vllm serve M --async-scheduling --speculative-config "
     "'{\"method\": \"eagle\", \"model\": \"E\", \"num_speculative_tokens\": 2, "
     "\"disable_padded_drafter_batch\": true}'", "0.11.1", _LLAMA, "refused: disable_padded_drafter_batch"),
    ("eagle-unpadded-sync-0.11.1", "vllm serve M --speculative-config "
     "'{\"method\": \"eagle\", \"model\": \"E\", \"num_speculative_tokens\": 2, "
     "\"disable_padded_drafter_batch\": true}'", "0.11.1", _LLAMA, "FULL_AND_PIECEWISE"),
    # EngineArgs.create_engine_config: a capture-size option next to the compilation_config key it sets
    ("cuda-graph-sizes-and-cc-0.11.1", "vllm serve M --cuda-graph-sizes 1 2 -O.cudagraph_capture_sizes=[4]",
     "0.11.1", _LLAMA, "refused: cuda_graph_sizes and compilation_config.cudagraph_capture_sizes"),
    ("capture-sizes-and-cc-0.12.0", "vllm serve M --cudagraph-capture-sizes 1 2 -cc.cudagraph_capture_sizes=[4]",
     "0.12.0", _LLAMA, "refused: cudagraph_capture_sizes and compilation_config.cudagraph_capture_sizes"),
    ("both-size-options-0.11.1", "vllm serve M --cuda-graph-sizes 8 --cudagraph-capture-sizes 1 2", "0.11.1",
     _LLAMA, "refused: mutually exclusive"),
    ("max-size-and-cc-0.11.1", "vllm serve M --max-cudagraph-capture-size 8 -O.max_cudagraph_capture_size=16",
     "0.11.1", _LLAMA, "refused: max_cudagraph_capture_size and compilation_config"),
    # VllmConfig._set_cudagraph_sizes: a given maximum must be the largest given capture size kept
    ("max-size-not-largest-size-0.11.1",
     "vllm serve M --max-cudagraph-capture-size 8 -O.cudagraph_capture_sizes=[4]", "0.11.1", _LLAMA,
     "refused: max_cudagraph_capture_size(=8) should be consistent with the max value of cudagraph_capture_sizes(=4)"),
    ("max-size-is-largest-size-0.11.1", "vllm serve M --max-cudagraph-capture-size 8 --cudagraph-capture-sizes 2 8",
     "0.11.1", _LLAMA, "FULL_AND_PIECEWISE"),
    ("max-size-above-batched-tokens-0.11.1",
     "vllm serve M --max-num-batched-tokens 4 -O.max_cudagraph_capture_size=8 -O.cudagraph_capture_sizes=[2,8]",
     "0.11.1", _LLAMA, "refused: cudagraph_capture_sizes(=2)"),
    ("max-size-not-largest-no-graphs-0.11.1",
     "vllm serve M --max-cudagraph-capture-size 8 -O.cudagraph_capture_sizes=[4] -O.cudagraph_mode=NONE", "0.11.1",
     _LLAMA, "NONE"),
    ("cuda-graph-sizes-and-cc-0.11.0", "vllm serve M --cuda-graph-sizes 1 2 -O.cudagraph_capture_sizes=[4]",
     "0.11.0", _LLAMA, "FULL_AND_PIECEWISE"),
    # SchedulerConfig: max_num_seqs / max_num_batched_tokens >= 1
    ("max-num-seqs-0-0.11.1", "vllm serve M --max-num-seqs 0", "0.11.1", _LLAMA,
     "refused: max_num_seqs 0: input should be greater than or equal to 1"),
    ("max-num-batched-tokens-0-0.12.0", "vllm serve M --max-num-batched-tokens 0", "0.12.0", _LLAMA,
     "refused: max_num_batched_tokens 0"),
    ("max-num-seqs-1-0.11.1", "vllm serve M --max-num-seqs 1", "0.11.1", _LLAMA, "FULL_AND_PIECEWISE"),
]


@pytest.mark.parametrize(("cmd", "version", "facts", "expected"), [r[1:] for r in RULES_0_11_1],
                         ids=[r[0] for r in RULES_0_11_1])
def test_0_11_1_rules_against_0_11_0(cmd, version, facts, expected):
    command = locate(split_command(cmd))
    parsed = normalise(command.args, version, program=command.program)
    assert parsed.refusals == [] and parsed.errors == []
    declared = declare(parsed.args, command.env, version, facts)
    if expected.startswith("refused: "):
        assert declared.mode is None and expected.removeprefix("refused: ") in (declared.refused or ""), declared
    else:
        assert declared.refused is None and declared.mode == expected, declared.because


def test_0_11_1_moves_model_option_to_the_front():
    """FlexibleArgumentParser.parse_args of 0.11.1 moves ``--model M`` / ``--model=M`` to the front, so
    it is the model wherever it stands and a positional model next to it is a stray positional."""
    parsed = normalise(["-tp", "2", "--model", "L", "--enforce-eager"], "0.11.1")
    assert parsed.refusals == []
    assert parsed.args == {"model": "L", "tensor_parallel_size": 2, "enforce_eager": True}
    assert normalise(["A", "-tp", "2", "--model=B"], "0.11.1").refusals == ["unrecognized arguments: A"]
    assert any("positional argument" in r for r in normalise(["-tp", "2", "--model", "L"], "0.11.0").refusals)


def test_pass_config_spellings_by_version():
    """0.11.1's PassConfig has ``enable_attn_fusion`` and ignores ``fuse_attn_quant`` (a 0.12 name); 0.12 reads
    the old spelling into the new field."""
    cc = {"pass_config": {"enable_attn_fusion": True}}
    assert compilation_config_view(cc, rules_for("0.11.1")[0]) == cc
    assert compilation_config_view(cc, rules_for("0.12.0")[0]) == {"pass_config": {"fuse_attn_quant": True}}
    parsed = normalise(["M", "-O.pass_config.fuse_attn_quant=true"], "0.11.1")
    assert any("pass_config.fuse_attn_quant is not a field" in n for n in parsed.notes), parsed.notes
    assert compilation_config_view(parsed.args["compilation_config"], rules_for("0.11.1")[0]) == {}
    declared = declare(parsed.args, {}, "0.11.1", _LLAMA)
    assert declared.mode == "FULL_AND_PIECEWISE"
    fused = declare(normalise(["M", _ATTN_FUSION], "0.11.1").args, {}, "0.11.1", _LLAMA)
    assert fused.mode == "FULL" and "pass_config.enable_attn_fusion=true" in fused.because


def test_breakable_cuda_graphs_by_architecture_on_0_33():
    """0.33 runs the architectures it lists with breakable CUDA graphs unless VLLM_USE_BREAKABLE_CUDAGRAPH
    is set: compilation mode NONE, piecewise graphs kept (vllm/config/vllm.py). An unknown model is
    assumed not listed, and the assumption is recorded."""
    listed = ModelFacts(moe=True, pooling=False, encoder_decoder=False, architectures=("DeepseekV32ForCausalLM",),
                        source="test")
    other = ModelFacts(moe=False, pooling=False, encoder_decoder=False, architectures=("LlamaForCausalLM",),
                       source="test")
    env = {"TORCH_COMPILE_DISABLE": "1"}
    on = declare({"model": "M"}, env, "0.33.0", listed)
    assert (on.mode, on.compilation_mode) == ("FULL_AND_PIECEWISE", "NONE")
    assert declare({"model": "M"}, {**env, "VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, "0.33.0", listed).mode == \
        "FULL_DECODE_ONLY"
    assert declare({"model": "M"}, env, "0.33.0", other).mode == "FULL_DECODE_ONLY"
    assert declare({"model": "M"}, env, "0.12.0", listed).mode == "FULL_AND_PIECEWISE"  # 0.12: no such rule
    unknown = declare({"model": "M"}, {}, "0.33.0")
    assert any(a.startswith("breakable_cudagraph_architecture=no assumed") for a in unknown.assumes)


def test_0_33_short_options():
    """0.33's parser (its serve subcommand's option strings) has these short spellings; 0.12 lacks -ep and -pcp."""
    args = normalise(["M", "-ep", "-pcp", "2", "-dpn", "1", "-dpl", "2", "--disable-dbo"], "0.33.0").args
    assert args == {"model": "M", "enable_expert_parallel": True, "prefill_context_parallel_size": 2,
                    "data_parallel_rank": 1, "data_parallel_size_local": 2}
    assert normalise(["M", "-ep"], "0.12.0").refusals


def test_compilation_config_as_0_11_1_holds_it():
    """A mode name is held as its number (0.11.1+); max_cudagraph_capture_size is not a 0.11.0 field."""
    parsed = normalise(["M", "-O.mode=VLLM_COMPILE"], "0.11.1")
    assert compilation_config_view(parsed.args["compilation_config"], rules_for("0.11.1")[0]) == {"mode": 3}
    view = compilation_config_view({"max_cudagraph_capture_size": 0, "cudagraph_mode": "full"}, rules_for("0.11.0")[0])
    assert view == {"cudagraph_mode": "FULL"}
    view = compilation_config_view({"max_cudagraph_capture_size": 0}, rules_for("0.11.1")[0])
    assert view == {"max_cudagraph_capture_size": 0}


@pytest.mark.parametrize(("flag", "dest", "value"), [
    ("--no-enable-prefix-caching", "enable_prefix_caching", False),
    ("--no-enable-chunked-prefill", "enable_chunked_prefill", False),
    ("--no-disable-cascade-attn", "disable_cascade_attn", False),
    ("--disable-prefix-caching", "enable_prefix_caching", False),
    ("--enable-cascade-attn", "disable_cascade_attn", False),
])
def test_0_33_accepts_the_hidden_no_spellings(flag, dest, value):
    """0.33's EnableDisableAction keeps ``--no-`` + the declared spelling registered with the parser and only drops
    it from ``--help`` (fixtures/vllm/oracle/options/0.33.0.json lists it under ``hidden``)."""
    parsed = normalise(["M", flag], "0.33.0")
    assert parsed.refusals == []
    assert parsed.args[dest] is value


@pytest.mark.parametrize("flag", ["--no-enable-cascade-attn", "--no-disable-prefix-caching", "--no-headless"])
def test_0_33_refuses_no_spellings_its_parser_never_registered(flag):
    """The inverse spelling's ``--no-`` form is not registered (only the declared one's is)."""
    assert any("unrecognized arguments" in r for r in normalise(["M", flag], "0.33.0").refusals)


# -- refusals that depend on the model and the host (each as vLLM's own code decides it; the recorded oracle cases
# in scripts/vllm_oracle_cases.json cover them on the config-only models, these cover what the oracle's stub cannot) --

def _facts(**config: object) -> ModelFacts:
    return facts_from_config({"architectures": ["LlamaForCausalLM"], "model_type": "llama", **config})


def _refused(cmd: str, version: str, facts: ModelFacts = _LLAMA, gpus: int | None = 8, env=None) -> str | None:
    command = locate(split_command(cmd))
    parsed = normalise(command.args, version, program=command.program)
    assert parsed.refusals == []
    declared = declare(parsed.args, {**command.env, **(env or {})}, version, facts, gpus=gpus)
    assert (declared.mode is None) == (declared.refused is not None)
    return declared.refused


def test_config_limits_read_from_config_json():
    limits = _facts(num_attention_heads=40, max_position_embeddings=32768, n_positions=4096, sliding_window=1024,
                    rope_scaling={"type": "dynamic", "factor": 2.0},
                    quantization_config={"quant_method": "fp8"}).limits
    assert (limits.attention_heads, limits.max_positions, limits.max_positions_key) == (40, 4096, "n_positions")
    assert (limits.rope_type, limits.rope_factor, limits.sliding_window, limits.quant_method) == \
        ("dynamic", 2.0, 1024, "fp8")
    assert _facts(max_position_embeddings=8192, model_max_length=131072).limits.max_positions == 131072
    assert _facts(text_config={"num_attention_heads": 16}).limits.attention_heads == 16


def test_world_size_counts_the_gpus_cuda_visible_devices_leaves():
    """cuda_device_count_stateless counts the devices CUDA_VISIBLE_DEVICES lists (ParallelConfig, 0.11.1+)."""
    assert "World size (4) is larger than the number of available GPUs (2)" in _refused(
        "CUDA_VISIBLE_DEVICES=0,1 vllm serve M -tp 4", "0.12.0")
    assert _refused("CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve M -tp 4", "0.12.0") is None
    assert _refused("vllm serve M -tp 4 -pp 2", "0.33.0", gpus=4) is not None
    assert _refused("vllm serve M -tp 4 -pp 2 --distributed-executor-backend ray", "0.33.0", gpus=4) is None
    assert _refused("vllm serve M -tp 16 --nnodes 2", "0.33.0") is None  # multi-node: mp across nodes
    assert _refused("vllm serve M -tp 16", "0.11.0") is None  # 0.11.0 turns to Ray instead of refusing


def test_world_size_with_the_gpu_count_unknown_is_an_assumption():
    command = locate(split_command("vllm serve M -tp 16"))
    declared = declare(normalise(command.args, "0.33.0").args, {}, "0.33.0", _facts(num_attention_heads=64))
    assert declared.mode is not None
    assert "world size 16 assumed to fit the host's GPUs (GPU count unknown)" in declared.assumes


@pytest.mark.parametrize(("cmd", "version", "config", "refused"), [
    # RoPE factor applied for a type outside (su, longrope, llama3): 4096 x 2 = 8192
    ("vllm serve M --max-model-len 8192", "0.12.0", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, False),
    ("vllm serve M --max-model-len 8193", "0.12.0", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, True),
    # yarn: original_max_position_embeddings x factor up to 0.12; 0.33 leaves max_position_embeddings as it is
    ("vllm serve M --max-model-len 8192", "0.12.0",
     {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}, False),
    ("vllm serve M --max-model-len 8192", "0.33.0",
     {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}, True),
    # --disable-sliding-window caps it at the window
    ("vllm serve M --max-model-len 2048 --disable-sliding-window", "0.12.0", {"sliding_window": 1024}, True),
    ("vllm serve M --max-model-len 2048", "0.12.0", {"sliding_window": 1024}, False),
])
def test_max_model_len_against_the_derived_length(cmd, version, config, refused):
    facts = _facts(max_position_embeddings=4096, num_attention_heads=32, **config)
    assert (_refused(cmd, version, facts) is not None) == refused


def test_unknown_model_facts_are_assumed_not_refused():
    """Without config.json, heads and maximum length are assumed to fit, and the assumption is recorded."""
    command = locate(split_command("vllm serve M -tp 3 --max-model-len 1000000"))
    declared = declare(normalise(command.args, "0.33.0").args, {}, "0.33.0", gpus=8)
    assert declared.mode is not None
    assert any("tensor parallel size 3 assumed to divide" in a for a in declared.assumes)
    assert any("max_model_len 1000000 assumed within" in a for a in declared.assumes)


def test_a_quantization_that_may_take_over_the_checkpoint_is_assumed():
    """gptq_marlin and the other override methods may claim a checkpoint (ModelConfig._verify_quantization); only a
    plain format against another method is refused outright."""
    facts = _facts(num_attention_heads=32, quantization_config={"quant_method": "gptq"})
    command = locate(split_command("vllm serve M -q gptq_marlin"))
    declared = declare(normalise(command.args, "0.12.0").args, {}, "0.12.0", facts, gpus=8)
    assert declared.mode is not None and any("take over the checkpoint's gptq" in a for a in declared.assumes)
    fp8 = _facts(num_attention_heads=32, quantization_config={"quant_method": "fp8"})
    assert "does not match" in _refused("vllm serve M -q bitsandbytes", "0.12.0", fp8)


def test_0_10_2_lets_listed_model_types_draft_for_themselves():
    """0.10.2's SpeculativeConfig takes the target model as the draft for deepseek_v3, mimo, ernie4_5_moe and
    qwen3_next, whatever the method; 0.11.0+ does it only for MTP methods."""
    spec = "--speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 1}'"
    deepseek = _facts(model_type="deepseek_v3", num_attention_heads=128)
    assert _refused(f"vllm serve M {spec}", "0.10.2", deepseek) is None
    assert "without speculative model" in _refused(f"vllm serve M {spec}", "0.10.2", _facts(num_attention_heads=32))
    assert "without speculative model" in _refused(f"vllm serve M {spec}", "0.11.0", deepseek)


def test_lora_budget_with_default_batch_sizes_is_an_assumption():
    command = locate(split_command(f"vllm serve M --enable-lora --speculative-config {_NGRAM}"))
    declared = declare(normalise(command.args, "0.33.0").args, {}, "0.33.0", _facts(num_attention_heads=32), gpus=8)
    assert declared.mode is not None
    assert any("defaults for a 70-160 GiB GPU assumed" in a for a in declared.assumes)


def test_kv_connector_with_expandable_segments_needs_the_cumem_allocator():
    kv = "--kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}'"
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512"}
    assert "NixlConnector is incompatible" in _refused(f"vllm serve M {kv}", "0.33.0", env=env)
    assert _refused(f"vllm serve M {kv} --enable-cumem-allocator", "0.33.0", env=env) is None
    assert _refused(f"vllm serve M {kv}", "0.12.0", env=env) is None  # 0.33's check


def test_the_collector_takes_the_gpu_count_from_the_gpu_section(tmp_path):
    """snap/guard: the gpu section (collected first) gives the host's GPU count; without it the fit is assumed."""
    from hoststate.collectors import Context, Section
    from hoststate.collectors import vllm as vllm_collector

    cmd = "vllm serve M -tp 16"
    with_gpus = Context(root=str(tmp_path), vllm_cmd=cmd, vllm_version="0.33.0",
                        sections={"gpu": Section(data={"count": 8})})
    cudagraph = vllm_collector.collect(with_gpus).data["cudagraph"]
    assert "World size (16) is larger than the number of available GPUs (8)" in cudagraph["refused"]
    assert "declared" not in cudagraph
    alone = vllm_collector.collect(Context(root=str(tmp_path), vllm_cmd=cmd, vllm_version="0.33.0")).data["cudagraph"]
    assert alone["declared"] and any("GPU count unknown" in a for a in alone["declared_assumes"])


@pytest.mark.parametrize("version", ["0.10.2", "0.12.0", "0.33.0"])
@pytest.mark.parametrize("option, value", [("--allowed-origins", '["*"]'), ("--allowed-methods", '["GET", "POST"]'),
                                           ("--allowed-headers", '["*"]')])
def test_options_vllm_reads_with_json_loads_take_any_json_value(version: str, option: str, value: str) -> None:
    """vLLM parses the CORS options with json.loads (its default for --allowed-origins is the list ["*"]): a list
    is accepted, not refused as "expected a JSON object"."""
    from hoststate.collectors.vllm.options import JSONVAL, OPTIONS, convert

    dest = option[2:].replace("-", "_")
    assert OPTIONS[dest] == JSONVAL
    assert convert(dest, JSONVAL, value) == json.loads(value)


@pytest.mark.parametrize(("value", "expected"), [
    ("plain-text", "plain-text"),  # not in braces: vLLM's union_dict_and_str keeps the string
    ('{"max_position_embeddings": 4096}', {"max_position_embeddings": 4096}),
    ("{'max_position_embeddings': 4096}", None),  # in braces but not JSON (a --config file's str() on 0.12): refused
])
def test_dict_or_string_options_read_as_vllms_union_dict_and_str(value, expected):
    parsed = normalise(["M", "--hf-overrides", value], "0.12.0")
    if expected is None:
        assert any("--hf-overrides: invalid JSON" in r for r in parsed.refusals)
    else:
        assert parsed.refusals == [] and parsed.args["hf_overrides"] == expected


class _GatedNvml:
    """A replayed host whose nvmlInit waits until ``gate`` opens (at most 10 s): NVML still answering."""

    def __init__(self, gate: object) -> None:
        from hoststate.nvml_replay import load_data, synthetic_hgx

        self._replay, self._gate = load_data(synthetic_hgx(gpus=8)), gate
        self.opened: bool | None = None  # whether the gate opened before NVML stopped waiting for it

    def nvmlInit(self) -> None:
        self.opened = self._gate.wait(10)
        self._replay.nvmlInit()

    def __getattr__(self, name: str) -> object:
        return getattr(self._replay, name)


@pytest.mark.parametrize("server", [False, True], ids=["no server", "a server"])
def test_the_vllm_collector_waits_for_the_gpu_section_only_where_a_servers_arguments_need_it(tmp_path, server):
    """On a GPU host the GPU section comes last (NVML's start): a host without a server is described meanwhile, and
    a server's world size is still checked against the host's GPU count once the section has come."""
    import threading
    import time

    from hoststate.collectors import Context, run_all

    gate, finished = threading.Event(), {}

    def finish(name: str, _section: object) -> None:
        finished[name] = time.monotonic()
        if name == "vllm":
            gate.set()  # NVML answers once the vLLM section is done: had vLLM waited for it, 10 s

    nvml = _GatedNvml(gate)
    ctx = Context(root=str(tmp_path), timeout=30, nvml=nvml,
                  vllm_cmd="vllm serve M -tp 16" if server else None, vllm_version="0.33.0" if server else None)
    (tmp_path / "proc").mkdir()
    opened = threading.Timer(1, gate.set)  # with a server the vLLM section needs the GPU section: NVML answers later
    if server:
        opened.start()
    try:
        sections = run_all(ctx, ("gpu", "vllm"), finish)
    finally:
        opened.cancel()
    assert sections["gpu"].status == "ok" and sections["gpu"].data["count"] == 8
    if server:
        assert finished["gpu"] <= finished["vllm"]
        refused = sections["vllm"].data["cudagraph"]["refused"]
        assert "World size (16) is larger than the number of available GPUs (8)" in refused
    else:
        assert sections["vllm"].status in ("absent", "skipped") and "cudagraph" not in sections["vllm"].data
        assert nvml.opened is True and finished["vllm"] < finished["gpu"]  # described while NVML still waited


def test_a_wedged_gpu_collector_costs_the_vllm_section_one_wait_not_its_budget(tmp_path) -> None:
    """NVML that never answers: the vLLM collector reads the GPU count twice for these arguments (the declared
    mode and the same-graphs check at -O 2) and waits for it once, then assumes the fit, within its own budget."""
    import threading

    from hoststate.collectors import Context, run_all

    gate = threading.Event()
    ctx = Context(root=str(tmp_path), timeout=1, nvml=_GatedNvml(gate), vllm_cmd="vllm serve M -tp 2 -O 2",
                  vllm_version="0.33.0")
    (tmp_path / "proc").mkdir()
    try:
        sections = run_all(ctx, ("gpu", "vllm"))
    finally:
        gate.set()  # the abandoned GPU thread ends
    assert sections["gpu"].status == "timeout"
    assert sections["vllm"].status == "ok", (sections["vllm"].status, sections["vllm"].reason)
    assumes = sections["vllm"].data["cudagraph"]["declared_assumes"]
    assert any("GPU count unknown" in a for a in assumes), assumes
    assert ctx.ready == {} and "Event" not in repr(ctx)  # the collection's events are gone with it


def test_context_section_waits_for_a_wedged_section_once() -> None:
    from hoststate.collectors import Context, Section

    class Never:
        calls = 0

        def wait(self, _timeout: float) -> bool:
            Never.calls += 1
            return False

    ctx = Context(timeout=0.01, ready={"gpu": Never()})
    assert ctx.section("gpu") is None and ctx.section("gpu") is None
    assert Never.calls == 1
    done = Context(sections={"gpu": Section(data={"count": 4})})  # outside a collection: what is there
    assert done.section("gpu") is not None and done.section("gpu").data["count"] == 4
