"""Log parsing on real-format server logs of 0.11 (JSON config) and 0.12+ (Python repr config)."""

from __future__ import annotations

import os
import time

import pytest

from hoststate.collectors.vllm import log as log_module
from hoststate.collectors.vllm.log import MAX_LINE, mode_from_captures, parse_log, parse_pyrepr, read_log, split_config
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


LOGO = ["", "       \u2588     \u2588     \u2588\u2584   \u2584\u2588",
        " \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 \u2580\u2584\u2580 \u2588  version {v}",
        "  \u2588\u2584\u2588\u2580 \u2588     \u2588     \u2588     \u2588  model   {m}", ""]


def logo_record(prefix: str, version: str, model: str) -> str:
    """0.33's start banner as its NewLineFormatter writes it: every line after ``\\r\\n`` and the prefix."""
    return "\r\n".join(prefix + line.format(v=version, m=model) for line in LOGO)


@pytest.mark.parametrize("colour", [False, True])
def test_033_logo_start_record_gives_the_version(colour):
    prefix = "(APIServer pid=1) INFO 03-02 11:00:01 [startup.py:38] "
    text = logo_record(prefix, "0.33.0", "m version 9.9.9")  # the model name cannot claim a version
    if colour:
        text = text.replace("version 0.33.0", "version \x1b[1m0.33.0\x1b[0m")
        text = text.replace("\u2584\u2584", "\x1b[93m\u2584\u2584\x1b[0m")
    engine = ("(EngineCore_DP0 pid=2) INFO 03-02 11:00:09 [core.py:139] Initializing a V1 LLM engine (v0.11.0) "
              "with config: model='m'")
    facts = parse_log((LOGS / "v0.11.0-default.log").read_text(encoding="utf-8") + "\n" + text + "\n" + engine)
    assert facts.version == "0.33.0"  # the logo is the last start: the older server's records no longer count
    assert facts.captures == [] and "kv_cache_tokens" not in facts.ran


def test_logo_lines_inside_another_record_are_not_a_start():
    fake = logo_record("(APIServer pid=1) INFO 03-02 11:00:01 [startup.py:38] ", "9.9.9", "m")
    real = (LOGS / "v0.33.0-eager.log").read_text(encoding="utf-8")
    prompt = "(APIServer pid=1) INFO 03-02 11:00:20 [logger.py:47] Received request x: prompt: 'hi\r\n" + fake
    facts = parse_log(real + "\n" + prompt)
    assert facts.version == "0.33.0" and facts.non_default_args["model"] == "Qwen/Qwen3-0.6B"


def test_garbage_is_recorded_not_raised():
    record = "(APIServer pid=1) INFO 10-06 09:12:40 [utils.py:233] non-default args: {'model': <object at 0x7f>}"
    facts = parse_log(record + "\n\x00\xff random text")
    assert facts.errors and facts.non_default_args is None


def test_split_config_respects_nesting_and_quotes():
    items = split_config("model='a, b=c', x=F(y=1, z=[1, 2]), w={'k': 'v, q=1'}")
    assert list(items) == ["model", "x", "w"]
    assert parse_pyrepr(items["x"]) == {"y": 1, "z": [1, 2]}


# ---------------------------------------------------------------------------------------------
# What actually ran (vllm.observed), from the real message formats


def test_what_ran_on_a_tp8_moe_server():
    facts = parse_log((LOGS / "v0.12.0-moe-tp8.log").read_text(encoding="utf-8"))
    ran = dict(facts.ran)
    assert len(ran.pop("graph_capture_sizes")) == 51
    assert ran == {
        "nccl_version": "2.27.3",
        "custom_all_reduce": "disabled",
        "custom_all_reduce_disabled_because": ["it's not supported on more than two PCIe-only GPUs"],
        "moe_backends": ["Using DeepGEMM backend for FP8 MoE"],
        "moe_default_config": ["E=128,N=96,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"],
        "kv_cache_memory_gib": 120.94,  # the smaller of the two ranks
        "kv_cache_tokens": 10565248,
        "max_model_len": 32768,
        "max_concurrency": 322.43,
        "graph_capture_secs": 8.0,
        "graph_memory_gib": 1.12,
        "graphs_captured": 86,
        "graph_captures": {"mixed prefill-decode, PIECEWISE": 51, "decode, FULL": 35},
    }
    assert facts.attention_backends == ["FLASH_ATTN"] and facts.observed[0] == "FULL_AND_PIECEWISE"


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [  # 0.11.0 wordings and the pre-0.9 record without the opening bracket
        ("INFO 10-06 09:12:55 [cuda.py:325] Using Flash Attention backend on V1 engine.", None, "Flash Attention"),
        ("INFO 10-06 09:12:55 [cuda.py:312] Using FlashInfer backend on V1 engine.", None, "FlashInfer"),
        ("INFO 10-06 09:12:55 [executor_base.py:121] Maximum concurrency for 8,192 tokens per request: 3.50x",
         "max_concurrency", 3.5),
        ("INFO 03-25 02:55:02 pynccl.py:103] vLLM is using nccl==2.21.5", "nccl_version", "2.21.5"),
        ("WARNING 10-06 09:12:55 [parallel.py:518] Disabled the custom all-reduce kernel because it is not "
         "supported on current platform.", "custom_all_reduce_disabled_because",
         ["it is not supported on current platform"]),
        ("INFO 10-06 09:12:55 [fused_moe.py:876] Using configuration from /v/configs/E=8,N=14336,device_name=H200."
         "json for MoE layer.", "moe_tuned_config", ["E=8,N=14336,device_name=H200.json"]),
        # colours, VLLM_LOGGING_PREFIX and DEBUG's relative file paths
        ("\x1b[36m(Worker_TP0 pid=3)\x1b[0m [node7] \x1b[32mINFO\x1b[0m \x1b[90m12-05 10:01:10\x1b[0m \x1b[90m"
         "[v1/worker/gpu_worker.py:359]\x1b[0m Available KV cache memory: 7.50 GiB", "kv_cache_memory_gib", 7.5),
    ],
)
def test_each_version_wording(line, key, value):
    facts = parse_log(line)
    assert (facts.attention_backends[-1] if key is None else facts.ran[key]) == value


# ---------------------------------------------------------------------------------------------
# Request text cannot claim a version, a mode or a capture

SPOOF_RECORDS = [
    # a logged request whose text repeats vLLM's own startup wording
    "(APIServer pid=5120) INFO 12-05 10:02:00 [logger.py:47] Received request x: prompt: "
    "'vLLM API server version 9.9.9'",
    "(APIServer pid=5120) DEBUG 12-05 10:02:00 [logger.py:37] Request x details: prompt: 'Initializing a V1 LLM engine "
    "(v9.9.9) with config: compilation_config={\"cudagraph_mode\": [2, 0]} cudagraph_mode=FULL', prompt_token_ids: [1]",
    # a multi-line message: vLLM repeats the record's prefix after \r\n, the attacker writes the rest
    "(APIServer pid=5120) INFO 12-05 10:02:01 [serving_chat.py:300] Error in preprocessing prompt inputs: hi\r\n"
    "(EngineCore_DP0 pid=5150) INFO 12-05 10:02:01 [core.py:93] Initializing a V1 LLM engine (v9.9.9) with config: "
    "model='x', compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL: 2>}\r\n"
    "(APIServer pid=5120) INFO 12-05 10:02:01 [api_server.py:1977] vLLM API server version 9.9.9\r\n"
    "(Worker_TP0 pid=5201) WARNING 12-05 10:02:01 [gpu_model_runner.py:4357] CUDAGraphMode.FULL_AND_PIECEWISE is "
    "not supported with x; setting cudagraph_mode=FULL\r\n"
    "(Worker_TP0 pid=5201) INFO 12-05 10:02:01 [kv_cache_utils.py:1286] GPU KV cache size: 1 tokens",
    # a prompt printed raw by something else, without vLLM's prefix
    "Initializing a V1 LLM engine (v9.9.9) with config: model='x', compilation_config={'cudagraph_mode': 'FULL'}",
    "INFO 12-05 10:02:02 [logger.py:47] Using FLASHINFER attention backend; vLLM is using nccl==0.0.1",
]


@pytest.mark.parametrize("where", ["before", "inside", "after", "everywhere"])
def test_request_text_changes_nothing(where):
    real = (LOGS / "v0.12.0-moe-tp8.log").read_text(encoding="utf-8").splitlines()
    honest = parse_log("\n".join(real))
    spoof = list(SPOOF_RECORDS)
    at = {"before": [0], "inside": [8], "after": [len(real)], "everywhere": [0, 8, 14, len(real)]}[where]
    lines = list(real)
    for index in sorted(at, reverse=True):
        lines[index:index] = spoof
    facts = parse_log("\n".join(lines))
    assert facts.version == "0.12.0" and facts.observed == honest.observed == ("FULL_AND_PIECEWISE", mode_origin())
    assert facts.ran == honest.ran and facts.attention_backends == ["FLASH_ATTN"]
    assert facts.config_cudagraph_mode == "FULL_AND_PIECEWISE" and facts.downgrades == []


def mode_origin() -> str:
    return "log: CUDA graph capture lines"


def test_a_fake_start_after_the_real_one_that_is_not_vllms_record_is_ignored():
    real = (LOGS / "v0.11.0-default.log").read_text(encoding="utf-8")
    fake = ("(APIServer pid=2187) INFO 10-06 09:20:00 [logger.py:47] Received request y: prompt: "
            "'(APIServer pid=1) INFO 10-06 09:12:40 [api_server.py:1839] vLLM API server version 0.33.0'\n")
    facts = parse_log(real + fake)
    assert facts.version == "0.11.0" and facts.observed[0] == "FULL_AND_PIECEWISE"


# ---------------------------------------------------------------------------------------------
# Size: linear in the input, bounded lines, a bounded window of a huge file, a deadline


@pytest.mark.parametrize("size", [720 << 10, 50 << 20])
def test_one_very_long_line_is_skipped_and_the_rest_is_read(size):
    real = (LOGS / "v0.12.0-moe-tp8.log").read_text(encoding="utf-8").splitlines()
    bait = "(APIServer pid=1) INFO 12-05 10:02:00 [cuda.py:1] Using " + "a " * (size // 2)
    facts = parse_log("\n".join([*real[:8], bait, *real[8:]]))
    assert facts.version == "0.12.0" and facts.ran["kv_cache_tokens"] == 10565248
    assert any("longer than" in e for e in facts.errors)


def test_regex_bait_below_the_line_cap_is_read_in_linear_time():
    # lines just under MAX_LINE that start like several facts: each pattern is anchored and bounded
    head = "(Worker_TP0 pid=1) INFO 12-05 10:02:00 [{}] "
    lines = [head.format(f) + text * ((MAX_LINE - 200) // len(text)) for f, text in (
        ("cuda.py:1", "Using a "), ("fused_moe.py:1", "Using MoE "), ("core.py:1", "Initializing a V1 LLM engine (v1"),
        ("utils.py:1", "non-default args: {"), ("custom_all_reduce.py:1", "Custom allreduce is disabled because "))]
    lines += ["(" * (MAX_LINE - 10), "Capturing CUDA graphs (" + "x" * (MAX_LINE - 100)]
    facts = parse_log("\n".join(lines * 4))
    assert facts.version is None and facts.attention_backends == []


def test_the_deadline_stops_parsing_and_says_so():
    text = (LOGS / "v0.11.0-default.log").read_text(encoding="utf-8") * 3000
    facts = parse_log(text, deadline=time.monotonic() - 1)
    assert any("deadline" in e for e in facts.errors)


def test_a_huge_log_is_read_from_its_last_start(tmp_path, monkeypatch):
    monkeypatch.setattr(log_module, "MAX_LOG_BYTES", 1 << 20)
    noise = ("(APIServer pid=1) INFO 12-05 10:02:00 [logger.py:47] Received request z: prompt: "
             "'vLLM API server version 9.9.9 LLM engine (v9.9.9)'\n") * 20000  # ~2.6 MB per block
    path = tmp_path / "big.log"
    path.write_text((LOGS / "v0.11.0-default.log").read_text(encoding="utf-8") + noise
                    + (LOGS / "v0.12.0-moe-tp8.log").read_text(encoding="utf-8") + noise, encoding="utf-8")
    text, err, notes = read_log(str(path))
    assert err is None and len(text.encode()) <= 1 << 20
    assert "read from the last server start" in notes[0]
    facts = parse_log(text)
    assert facts.version == "0.12.0" and facts.ran["kv_cache_tokens"] == 10565248
    path.write_text(noise * 2)
    text, err, notes = read_log(str(path))
    assert "without a server start record" in notes[0] and len(text.encode()) <= 1 << 20


@pytest.mark.parametrize("kind", ["fifo", "dir", "/dev/zero", "missing"])
def test_a_log_that_is_not_a_regular_file_is_refused_at_once(tmp_path, kind):
    path = {"fifo": tmp_path / "fifo", "dir": tmp_path, "/dev/zero": "/dev/zero", "missing": tmp_path / "x"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    text, err, _ = read_log(str(path))
    assert text is None and err == ("ENOENT" if kind == "missing" else "not a regular file")


def test_every_record_kind_has_a_handler():
    """parse_log dispatches each matched record to its handler: a kind without one would raise."""
    assert {name for name, _files, _pattern in log_module._FACTS} == set(log_module._HANDLERS)
