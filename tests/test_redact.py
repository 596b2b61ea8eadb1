"""The shared redaction module: names, options, value shapes, URLs, nested values."""

from __future__ import annotations

import pytest

from hoststate.redact import (
    REDACTED,
    is_secret_key,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_url,
    redact_value,
)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("OPENAI_API_KEY", True), ("AWS_ACCESS_KEY_ID", True),
        ("AWS_SECRET_ACCESS_KEY", True), ("AWS_SESSION_TOKEN", True), ("DB_PASSWORD", True), ("MY_PASSWD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True), ("PROXY_AUTH", True), ("VLLM_API_KEY", True), ("hf_token", True),
        ("CUDA_VISIBLE_DEVICES", False), ("VLLM_USE_V1", False), ("TOKENIZERS_PARALLELISM", False),
        ("VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", False), ("NCCL_P2P_DISABLE", False),
    ],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("key", "secret"),
    [("api_key", True), ("hf_token", True), ("db_password", True), ("max_num_batched_tokens", False),
     ("num_speculative_tokens", False), ("tokenizer", False), ("skip_tokenizer_init", False)],
)
def test_secret_keys_follow_option_rules(key, secret):
    assert is_secret_key(key) is secret


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["vllm", "serve", "M", "--api-key", "sk-abcdefgh12345678"], ["vllm", "serve", "M", "--api-key", REDACTED]),
        (["--api-key=abc"], [f"--api-key={REDACTED}"]),
        (["--api_key", "k1", "k2", "--port", "1"], ["--api_key", REDACTED, REDACTED, "--port", "1"]),
        (["--hf-token", "hf_abcdefghijklmnop"], ["--hf-token", REDACTED]),
        (["HF_TOKEN=hf_abcdefghijkl", "vllm"], [f"HF_TOKEN={REDACTED}", "vllm"]),
        (["--header", "Authorization: Bearer abcdefghijkl"], ["--header", f"Authorization: {REDACTED}"]),
        (["positional-sk-abcdefghijklmnop"], [f"positional-{REDACTED}"]),
        (["--max-num-batched-tokens", "8192", "--tokenizer", "t"], ["--max-num-batched-tokens", "8192",
                                                                    "--tokenizer", "t"]),
    ],
)
def test_redact_argv(argv, expected):
    assert redact_argv(argv) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:pass@host:8000/v1", f"http://user:{REDACTED}@host:8000/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("https://h/x?api_key=abc&x=1", f"https://h/x?api_key={REDACTED}&x=1"),
        ("https://ghp_abcdefghijklmnopqrstu@github.com/x", f"https://{REDACTED}@github.com/x"),
    ],
)
def test_redact_url(url, expected):
    assert redact_url(url) == expected


def test_redact_env_and_nested_values():
    env = redact_env({"HF_TOKEN": "hf_x", "VLLM_X": "postgres://u:pw@db/x", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert env == {"HF_TOKEN": REDACTED, "VLLM_X": f"postgres://u:{REDACTED}@db/x", "CUDA_VISIBLE_DEVICES": "0,1"}
    value = redact_value({"api_key": ["k"], "kv": {"auth_token": "t", "n": [{"hf_token": "x"}]}, "ok": 1})
    assert value == {"api_key": REDACTED, "kv": {"auth_token": REDACTED, "n": [{"hf_token": REDACTED}]}, "ok": 1}
