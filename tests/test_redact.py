"""The shared redaction module: names, options, value shapes, URLs, nested values."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from hoststate import gitleaks
from hoststate.redact import (
    REDACTED,
    SERVER_SECRET_OPTIONS,
    TOKEN_FORMATS,
    VALUE_RULES,
    is_secret_key,
    is_secret_name,
    redact_argv,
    redact_command_line,
    redact_env,
    redact_mentions,
    redact_strings,
    redact_text,
    redact_url,
    redact_value,
    url_secrets,
)
from tests import secrets_corpus as corpus


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


# -- names: environment variables and keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        # PASS joins design.md's words; words that merely contain it do not count
        ("DB_PASS", True), ("VLLM_S3_PASS", True), ("MY_PASSPHRASE", True), ("PGPASSWORD", True),
        ("MYSQL_PWD", True), ("REDISCLI_AUTH", True), ("TORCHINDUCTOR_BYPASS_CACHE", False),
        ("NCCL_PASSTHROUGH", False),
        # KEY anywhere is secret (fail closed: an unknown CUDA_*_KEY is hidden, its name still recorded) except the
        # InfiniBand partition key index NCCL_IB_PKEY, a tuning value
        ("CUDA_LICENSE_KEY", True), ("NCCL_KEYSTORE_PASSPHRASE", True), ("NCCL_IB_PKEY", False),
        ("CUDA_REGISTRY_CREDENTIALS", True), ("PWD", False), ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", False),
    ],
)
def test_env_name_decisions(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    ("key", "secret"),
    [("secret_key", True), ("access_key", True), ("access_key_id", True), ("private_key_path", True),
     ("passphrase", True), ("client_secret", True), ("key", True), ("X-Amz-Credential", True),
     ("X-Amz-Signature", True), ("AWSAccessKeyId", True), ("hfToken", True), ("db_pass", True),
     ("kv_transfer_config.x.password", True), ("cc.foo.token", True),
     ("pass_config", False), ("num_key_value_heads", False), ("ssl_keyfile", False), ("bypass", False),
     ("kv_connector", False), ("num_speculative_tokens", False), ("tokenizer_mode", False)],
)
def test_key_decisions(key, secret):
    assert is_secret_key(key) is secret


# -- every shape, in every function that takes text ----------------------------------------------------------------

#: (what, text, the secret it holds): each must leave no trace of the secret.
SHAPES = [
    ("JSON hf_token nested", '{"model": "m", "draft": {"cfg": {"hf_token": "S3CRETjson1"}}}', "S3CRETjson1"),
    ("JSON password in a list", '{"a": [{"password": "S3CRETjson2"}]}', "S3CRETjson2"),
    ("Python literal secret_key", "{'architectures': ['X'], 'secret_key': 'S3CRETpy1'}", "S3CRETpy1"),
    ("Python literal access_key", "{'s3': {'access_key': 'S3CRETpy2', 'n': 1}}", "S3CRETpy2"),
    ("passphrase", '{"passphrase": "S3CRET pass phrase"}', "S3CRET pass phrase"),
    ("escaped JSON in JSON", '{"cfg": "{\\"hf_token\\": \\"S3CRETesc\\"}"}', "S3CRETesc"),
    ("dotted option", "--kv-transfer-config.x.password=S3CRETdot1", "S3CRETdot1"),
    ("dotted short option", "-cc.foo.token=S3CRETdot2", "S3CRETdot2"),
    ("option then value in a message", "cannot run vllm serve M --api-key S3CRETmsg --port 1", "S3CRETmsg"),
    ("URL password with @ and /", "redis://u:p@ss/S3CRETurl@host:6379/0", "S3CRETurl"),
    ("URL password in JSON", '{"url": "http://u:S3CRET@url2@h/x", "n": 1}', "S3CRET@url2"),
    ("fragment access_token", "https://app/cb#access_token=S3CRETfrag&token_type=bearer", "S3CRETfrag"),
    ("presigned S3 signature", "https://b.s3.amazonaws.com/k?X-Amz-Signature=S3CRETsig&X-Amz-Date=1", "S3CRETsig"),
    ("presigned S3 credential", "https://b/k?X-Amz-Credential=AKID%2FS3CRETcred&x=1", "S3CRETcred"),
    ("Stripe secret key", "key sk_live_S3CRETstripe0123", "S3CRETstripe"),
    ("Stripe restricted key", "rk_live_S3CRETstripe4567", "S3CRETstripe"),
    ("GitLab token", "glpat-S3CRETgitlab012345678", "S3CRETgitlab"),
    ("Google API key", "AIzaSyS3CRETgoogle0123456789abcdefghij", "S3CRETgoogle"),
    ("Slack bot token", "xoxb-123456789012-S3CRETslack", "S3CRETslack"),
    ("Slack webhook", "https://hooks.slack.com/services/T000/B000/S3CRETwebhook", "S3CRETwebhook"),
    ("JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.S3CRETjwtSignature", "S3CRETjwt"),
    ("GitHub fine-grained", "github_pat_S3CRETgithub_0123456789", "S3CRETgithub"),
    ("HF token", "hf_S3CRETabcdefghijklmnopqrst", "S3CRETabcdef"),
    ("OpenAI key", "sk-proj-S3CRETopenai01", "S3CRETopenai"),
    ("AWS key id", "AKIAS3CRETAWSKEY0123", "S3CRETAWSKEY"),
    ("PEM block", "-----BEGIN RSA PRIVATE KEY-----\nMIIS3CRETpem\n-----END RSA PRIVATE KEY-----", "S3CRETpem"),
    ("PEM block, escaped newlines", "-----BEGIN PRIVATE KEY-----\\nMIIS3CRETpem2\\n-----END PRIVATE KEY-----",
     "S3CRETpem2"),
    ("unterminated PEM block", "x -----BEGIN OPENSSH PRIVATE KEY-----\nS3CRETpem3", "S3CRETpem3"),
    ("Authorization header", "-H 'Authorization: Bearer S3CRETbearer'", "S3CRETbearer"),
]


@pytest.mark.parametrize(("what", "text", "secret"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_shape_is_redacted_wherever_it_is_given(what, text, secret):
    outputs = {
        "redact_text": redact_text(text),
        "redact_argv": " ".join(redact_argv([text])),
        "redact_command_line": redact_command_line(text),
        "redact_env (harmless name)": redact_env({"VLLM_X": text})["VLLM_X"],
        "redact_value": str(redact_value({"x": [text]})),
        "redact_strings": str(redact_strings({"x": (text,)})),
        "redact_url": redact_url(text),
    }
    for where, out in outputs.items():
        assert secret not in out and REDACTED in out, (where, out)
        for piece in (secret[:8], secret[-8:]):
            assert piece not in out, (where, out)


@pytest.mark.parametrize(("name", "value"), corpus.NOT_SECRETS, ids=[n for n, _v in corpus.NOT_SECRETS])
def test_values_that_only_look_like_secrets_come_through(name, value):
    assert redact_text(value) == value
    assert redact_argv([value]) == [value]
    assert redact_command_line(value) == value
    assert redact_env({"VLLM_X": value}) == {"VLLM_X": value}
    assert redact_value({"model": value}) == {"model": value}
    assert redact_strings([value]) == [value]


def test_every_value_rule_fires_on_an_example():
    """A rule whose hints miss its own shape would be skipped silently: each rule redacts its example."""
    examples = {
        "pem-block": "-----BEGIN X-----\nabc", "header": "Cookie: a=b", "bearer": "Bearer abcdefghijk",
        "url-userinfo": "http://u:pw@h", "userinfo-no-scheme": "u:pw@db", "url-token-user": "https://abcdefghijklmnopqrstuvwxyz@h",
        "slack-webhook": "hooks.slack.com/services/T/B/x", "discord-webhook": "discord.com/api/webhooks/1/x",
        "teams-webhook": "https://x.webhook.office.com/webhookb2/abc@def/IncomingWebhook/0123/xyz",
        "aws-access-key": "ASIAABCDEFGHIJKLMNOP", "azure-ad-client-secret": "abc8Q~" + "d" * 31,
        "terraform-cloud-token": "abcdefghij1234.atlasv1." + "x" * 60, "twilio-api-key": "SK" + "0a" * 16,
        "jwt": "eyJabcdefghij.eyJabcdefghij.abcdefghijk",
    }
    assert set(examples) == {rule.name for rule in VALUE_RULES}
    for rule in VALUE_RULES:
        out = redact_text(examples[rule.name])
        assert REDACTED in out and out != examples[rule.name], rule.name


def _token_example(prefix: str, body: str, least: int) -> str:
    """A token of one TOKEN_FORMATS entry: its prefix and ``least`` body characters of its alphabet."""
    alphabet = [c for c in "Ab3Xy7Qz9K0mN5pR2sT8uV4wL6" if re.fullmatch(body, c)]
    return prefix.removesuffix("(?i)") + "".join(alphabet[i % len(alphabet)] for i in range(least))


@pytest.mark.parametrize(("rule_id", "prefix", "body", "least"), TOKEN_FORMATS,
                         ids=[f"{f[0]} {f[1]}" for f in TOKEN_FORMATS])
def test_every_token_format_is_redacted_and_one_char_short_is_not_a_token(rule_id, prefix, body, least):
    token = _token_example(prefix, body, least)
    for text in (token, f"key {token} next", f'{{"x": "{token}"}}', f"https://h/?q={token}&v=1"):
        out = redact_text(text)
        assert token not in out and token[-8:] not in out and REDACTED in out, (rule_id, out)
    # the floor is a floor: the prefix with too short a body is a word like any other (unless a shorter
    # format of the same prefix takes it, as sk- does for sk-ant-, or gitleaks' own rule does: its slack
    # xoxa- tokens start at 8 characters)
    short = token[:-1]
    if not any(short.startswith(p.removesuffix("(?i)")) and p != prefix for _r, p, _b, _n in TOKEN_FORMATS) \
            and not gitleaks.secret_spans(f"x {short} y"):
        assert redact_text(f"x {short} y") == f"x {short} y", rule_id


def test_the_token_table_anchors_on_gitleaks_and_covers_the_planted_providers():
    ids = {rule_id for rule_id, *_rest in TOKEN_FORMATS}
    from_gitleaks = {i for i in ids if not i.endswith(" *")}
    assert len(from_gitleaks) >= 90 and len(ids) >= 100
    prefixes = {prefix.removesuffix("(?i)") for _r, prefix, _b, _n in TOKEN_FORMATS}
    assert {"nvapi-", "ya29.", "pypi-", "hvs.", "npm_", "gsk_", "xai-", "sk-ant-", "glpat-", "dop_v1_"} <= prefixes
    # a prefix in any case is marked as such, and no entry repeats another
    assert len({(p, b) for _r, p, b, _n in TOKEN_FORMATS}) == len(TOKEN_FORMATS)


def test_a_token_inside_a_word_is_not_a_token():
    for text in ("mask-abcdefghijklmnopqrstuvwx", "xghp_abcdefghijklmnopqrstu", "my_hf_abcdefghijklmnopqrstuvwxyz"):
        assert redact_text(text) == text


# -- guard's command echo: programs with their own secret options --------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["curl", "-u", "user:pw1", "http://h/"], ["curl", "-u", f"user:{REDACTED}", "http://h/"]),
        (["curl", "-uuser:pw1"], ["curl", f"-uuser:{REDACTED}"]),
        (["curl", "--user=user:pw1"], ["curl", f"--user=user:{REDACTED}"]),
        (["sudo", "/usr/bin/mysql", "-h", "db", "-pPW2", "mydb"], ["sudo", "/usr/bin/mysql", "-h", "db",
                                                                   f"-p{REDACTED}", "mydb"]),
        (["mysql", "-p", "mydb"], ["mysql", "-p", "mydb"]),  # a lone -p prompts; the next word is the database
        (["redis-cli", "-a", "PW3", "ping"], ["redis-cli", "-a", REDACTED, "ping"]),
        (["docker", "run", "--env=HF_TOKEN=x1", "-e", "AWS_SECRET_ACCESS_KEY=x2", "-e", "FOO=1", "--env", "A_KEY=x3"],
         ["docker", "run", f"--env=HF_TOKEN={REDACTED}", "-e", f"AWS_SECRET_ACCESS_KEY={REDACTED}", "-e", "FOO=1",
          "--env", f"A_KEY={REDACTED}"]),
        (["tool", "--password=x4", "--db-pass", "x5"], ["tool", f"--password={REDACTED}", "--db-pass", REDACTED]),
        (["bash", "-c", "mysql -pPW6 db"], ["bash", "-c", f"mysql -p{REDACTED} db"]),
        (["ssh", "-p", "2222", "host"], ["ssh", "-p", "2222", "host"]),  # -p is a port here
        (["vllm", "serve", "M", "-tp", "8", "-pp", "2"], ["vllm", "serve", "M", "-tp", "8", "-pp", "2"]),
    ],
)
def test_command_echo(argv, expected):
    assert redact_argv(argv) == expected


@pytest.mark.parametrize(
    ("text", "kept", "secret"),
    [
        ("vllm serve M --api-key K1 --served-model-name 'unclosed", "vllm serve M --api-key", "K1"),
        ('vllm serve M --hf-token "unclosed-secret', "vllm serve M --hf-token", "unclosed-secret"),
        ("HF_TOKEN=abc 'vllm serve", "'vllm serve", "abc"),
        ("vllm serve M --api-key=K2 \\", "vllm serve M --api-key=", "K2"),
    ],
)
def test_a_command_line_shlex_cannot_split_is_redacted_as_written(text, kept, secret):
    import shlex

    with pytest.raises(ValueError):
        shlex.split(text)
    out = redact_command_line(text)
    assert kept in out and secret not in out, out


def test_url_password_with_at_and_slash():
    url = "http://bench:p@ss/w0rd@127.0.0.1:8000/v1"
    assert redact_url(url) == f"http://bench:{REDACTED}@127.0.0.1:8000/v1"
    assert "p@ss/w0rd" in url_secrets(url)
    assert "w0rd" not in redact_mentions("nonnumeric port: 'ss/w0rd@127.0.0.1:8000'", url)


# -- round three: names, abbreviations, long and escaped keys, long URL user names ---------------------------------


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("VLLM_DB_CREDS", True), ("S3_CREDS", True), ("DB_PWD", True), ("VLLM_SESSION_COOKIE", True),
        ("VLLM_REQUEST_SIGNATURE", True), ("VLLM_TOKENIZER_HF_TOKEN", True), ("CUDA_TOKENIZER_API_KEY", True),
        ("VLLM_TOKENIZER_POOL_SIZE", False), ("VLLM_TOKENIZER_MODE", False), ("PWD", False), ("OLDPWD", False),
        ("VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", False), ("TOKENIZERS_PARALLELISM", False),
    ],
)
def test_env_names_with_short_words_and_prefixes(name, secret):
    assert is_secret_name(name) is secret
    assert (redact_env({name: "value1"})[name] == REDACTED) is secret


def test_server_secret_options_are_the_secret_options_of_the_vllm_table():
    """SERVER_SECRET_OPTIONS (abbreviations) must follow the option table when vLLM adds a secret option."""
    from hoststate.collectors.vllm.options import OPTIONS

    assert set(SERVER_SECRET_OPTIONS) == {dest for dest in OPTIONS if is_secret_key(dest)}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--api-ke", "S1"], ["--api-ke", REDACTED]),
        (["--api-k=S1"], [f"--api-k={REDACTED}"]),
        (["--api_ke", "S1", "S2", "--port", "8000"], ["--api_ke", REDACTED, REDACTED, "--port", "8000"]),
        (["--hf-t", "S1"], ["--hf-t", REDACTED]),
        (["--hf-toke=S1"], [f"--hf-toke={REDACTED}"]),
        (["--passw", "S1"], ["--passw", REDACTED]),
        (["--db-passwo", "S1"], ["--db-passwo", REDACTED]),
        # ambiguous in vLLM (api_server_count, hf_overrides): argparse refuses them; other options stay
        (["--api-server-count", "4", "--hf-overrides", "{}", "--tokenizer", "t", "--tok", "3"],
         ["--api-server-count", "4", "--hf-overrides", "{}", "--tokenizer", "t", "--tok", "3"]),
    ],
)
def test_argparse_abbreviations_of_secret_options(argv, expected):
    assert redact_argv(argv) == expected
    assert redact_command_line(" ".join(argv)) == " ".join(expected)


def test_an_abbreviated_option_in_parsed_args_is_redacted():
    """vLLM's argv reader keeps an option it does not know under its own name (``api_ke``)."""
    assert redact_value({"api_ke": ["S1"], "hf_tok": "S2", "api_server_count": 4}) == {
        "api_ke": REDACTED, "hf_tok": REDACTED, "api_server_count": 4}


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('{"api\\u005fkey": "S3CRETesc1"}', "S3CRETesc1"),
        ('{"\\u0068f_token": "S3CRETesc2", "n": 1}', "S3CRETesc2"),
        ('{\\"hf\\\\u005ftoken\\": \\"S3CRETesc3\\"}', "S3CRETesc3"),
        ("{'pass\\x77ord': 'S3CRETesc4'}", "S3CRETesc4"),
        ("https://h/x?api%5Fkey=S3CRETesc5&v=1", "S3CRETesc5"),
        ('{"' + "x" * 5000 + '_token": "S3CRETlong1"}', "S3CRETlong1"),
        ('{"a": {"' + "nested_" * 1000 + 'password": "S3CRETlong2"}}', "S3CRETlong2"),
    ],
)
def test_escaped_and_very_long_keys(text, secret):
    for out in (redact_text(text), redact_command_line(text), str(redact_value({"x": text}))):
        assert secret not in out and REDACTED in out, out[-200:]


@pytest.mark.parametrize("user", ["u" * 300, "a-" * 5000 + "b", "svc.account_" * 100])
def test_a_very_long_url_user_name_still_hides_the_password(user):
    url = f"postgres://{user}:S3CRETuser1@db:5432/x"
    assert redact_url(url) == f"postgres://{user}:{REDACTED}@db:5432/x"
    assert redact_text(f"url={url} next") == f"url=postgres://{user}:{REDACTED}@db:5432/x next"
    assert "S3CRETuser1" in url_secrets(url)
    token_user = "ghx" + "a" * 600
    assert redact_url(f"https://{token_user}@github.com/o/r") == f"https://{REDACTED}@github.com/o/r"


#: Values a snapshot holds that a loose secret rule would take: each must come through every function intact.
ORDINARY = [
    "0123456789abcdef0123456789abcdef01234567",  # a git SHA
    "sha256:4b1d5f0e2a7c9d3b6e8f1a2c4d6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e",
    "GPU-8f2a3c1e-5b7d-4e9f-a1c3-5e7f9b1d3f5a", "MIG-4e9fa1c3-5e7f-9b1d-3f5a-8f2a3c1e5b7d",
    "00000000:1B:00.0", "meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3",
    "deepseek-ai/DeepSeek-V3", "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF", "Qwen/Qwen2.5-72B-Instruct-AWQ",
    "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B/snapshots/0123456789abcdef0123456789abcdef01234567",
    "scikit-learn==1.5.2", "sk-learn-tutorial-v2", "torch-2.5.1+cu124", "flashinfer-python", "hf_transfer",
    "nvidia-cublas-cu12==12.4.5.8", "tokenizer_mode=auto", "api_server_count=4", "--hf-overrides={}",
    "AGE-SECRET-KEY-1 is a prefix", "Bearer", "pypi-simple", "npm_config_cache=/tmp/npm",
]


@pytest.mark.parametrize("value", ORDINARY)
def test_ordinary_values_are_not_redacted(value):
    assert redact_text(value) == value
    assert redact_argv([value]) == [value]
    assert redact_command_line(value) == value
    assert redact_env({"VLLM_X": value}) == {"VLLM_X": value}
    assert redact_strings({"k": [value]}) == {"k": [value]}


#: Inputs that make a backtracking pattern quadratic or worse (hours at this size; a linear scan takes well under
#: a second each): a piece repeated to about N characters, or one long run.
N = 150_000
HOSTILE = [
    *(piece * (N // len(piece)) for piece in (
        "sk-", "ghp_", "-ghp_a", "x://", "a:", "a_", "\\u0041", '{"k": [', "api_key=", "-----BEGIN A-----",
        "Authorization: ", "%5F", "hvs.a-", "\\", "'api_key': '", "--api-ke ",
        # gitleaks' rules, escaped literals, encoded words and program options (issue 34)
        '"\\', "'\\", '<add key="Password" value="', "kind: secret data: ", "curl -u ", "curl\n", "mysql -p",
        "mysql ", "%3D", "a%3D", "adafruit = ", "u:p@", "-----BEGIN PRIVATE KEY-----",
        # a hash's separator, a bare value of closing brackets, a quote in a URL password, a secret in a decoded
        # literal and as written, a curl command in a string (scripts/gitleaks_hunt.py)
        "'k' => ", "password=)", "a:b'@", '"a\\u0041 sk-abcdefghijklmnop" ', 'curl -u a:b"')),
    "http://" + "u" * N + "@h", "http://" + "a:" * (N // 2), "http://u:" + "@" * N + " x", '{"' + "a" * N,
    "a_" * (N // 2) + "token", "hvs." + "a" * N, "a:" * (N // 2) + "@", "%5F" * (N // 3) + "=x", "x" * N + "Q~",
]

#: The hostile inputs run in this many processes (every PARTS-th input each), so that parallel test workers share them.
PARTS = 4

_HOSTILE_RUN = """
import sys
from hoststate.redact import redact_argv, redact_command_line, redact_text, redact_url, url_secrets
from tests.test_redact import HOSTILE, PARTS
part = HOSTILE[int(sys.argv[1])::PARTS]
for text in part:
    redact_text(text); redact_url(text); url_secrets(text); redact_argv([text]); redact_command_line(text)
print("done", len(part))
"""


@pytest.mark.parametrize("part", range(PARTS))
def test_redaction_of_hostile_megabyte_inputs_finishes(part):
    """Every scan is linear: a quadratic one would take hours on these inputs. The timeout only detects a hang
    (it is far above what a linear scan needs), it measures nothing."""
    proc = subprocess.run([sys.executable, "-c", _HOSTILE_RUN, str(part)], capture_output=True, text=True,
                          timeout=300, cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert proc.returncode == 0 and proc.stdout.split() == ["done", str(len(HOSTILE[part::PARTS]))], \
        proc.stderr[-2000:]


#: Free-text forms (issue 34): a password glued to a program's short option, ``user:pw@host`` without a scheme,
#: ``key%3Dvalue`` URL-encoded (also twice); each with the secret that must go.
FREE_TEXT_FORMS = [
    ("mysql -uroot -pS3cr3tFree01 db", "S3cr3tFree01"),
    ('mysql -p"Sec ret Free02" -h db', "Sec ret Free02"),
    ("run: /usr/bin/mysqldump -p'Free03quoted' --all-databases", "Free03quoted"),
    ("redis-cli -h cache -a Free04redis ping", "Free04redis"),
    ("curl -s -u bob:Free05curl https://x.example/", "Free05curl"),
    ("sshpass -p Free06ssh ssh host", "Free06ssh"),
    ("dsn admin:Free07pw@db.example.com:5432/app", "Free07pw"),
    ("backup user:Free08p@ss@store.example", "Free08p@ss"),
    ("DefaultEndpointsProtocol%3Dhttps%3BAccountName%3Dacct%3BAccountKey%3DFree09KeyAbc%2Bdef%3D%3D%3BEndpoint"
     "Suffix%3Dcore.windows.net", "Free09KeyAbc"),
    ("https://h.example/cb?next=%2Fx%3Fpassword%3DFree10pw%26a%3D1", "Free10pw"),
    ("state=token%253DFree11double%2526x%253D1", "Free11double"),
    ('{"cmd": "mysql -pFree12json db", "n": 1}', "Free12json"),
    # found by scripts/gitleaks_hunt.py --free (docs/security.md section 5): a hash's ``=>``, Go's ``:=``, a
    # subscript, a value that starts with a closing bracket, a "'" in a URL password, curl quoted in JSON
    ("'db_password' => \"Free13 ruby\"", "Free13 ruby"),
    ('db_pass := "Free14go"', "Free14go"),
    ("$cfg['db_password'] = 'Free15php';", "Free15php"),
    ("AccountName%3Dacct%3BAccountKey%3D%29Free16%5Dparen%3BEndpointSuffix%3Dcore.windows.net", "%29Free16%5Dparen"),
    ("dsn admin:Free17'quote@db.example.com:5432/app", "Free17'quote"),
    ("postgres://admin:Free18'quote@db.example.com/app", "Free18'quote"),
    ('{"cmd": "curl -s -u bob:Free19curl"}', "Free19curl"),
]


@pytest.mark.parametrize(("text", "secret"), FREE_TEXT_FORMS, ids=[s for _t, s in FREE_TEXT_FORMS])
def test_free_text_forms_are_redacted_in_argv_env_and_text(text, secret):
    outputs = {
        "text": redact_text(text),
        "log line": redact_text(f"INFO 01-01 [launcher.py:1] starting {text} (pid 7)"),
        "env value": redact_env({"VLLM_NOTE": text})["VLLM_NOTE"],
        "argv token": " ".join(redact_argv(["--served-model-name", text])),
        "command line": redact_command_line(f"bash -c {text!r}"),
        "nested": str(redact_strings({"k": [text]})),
    }
    # the words of a command (a JSON text or a program's statement split at spaces is no command)
    if not text.startswith("{") and not any(op in text for op in ("=>", ":=", "] =")):
        outputs["argv"] = " ".join(redact_argv(text.split(" ")))
    left = {where: out for where, out in outputs.items() if secret in out or REDACTED not in out}
    assert not left, left


#: What the free-text rules must leave alone: an image pinned by digest, an scp-like git remote, a port option.
FREE_TEXT_LOOKALIKES = [
    "python:3.11-slim@sha256:4b1d5f0e2a7c9d3b6e8f1a2c4d6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e",
    "nvcr.io/nvidia/pytorch:24.01-py3@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "git@github.com:vllm-project/vllm.git", "mysql -h db -P 3306 -u root", "mysql -p", "ls -p /tmp",
    "AccountName%3Dacct%3BEndpointSuffix%3Dcore.windows.net", "q=a%3Db%26c%3Dd",
]


@pytest.mark.parametrize("value", FREE_TEXT_LOOKALIKES)
def test_free_text_lookalikes_come_through(value):
    assert redact_text(value) == value
    assert redact_env({"VLLM_X": value}) == {"VLLM_X": value}


#: The shapes issue 34 found verbatim in snapshots (gitleaks rules that need no context word and had no
#: TOKEN_FORMATS entry, or whose body TOKEN_FORMATS read too narrowly), each as gitleaks' regex spells it.
ISSUE_34_SHAPES = [
    ("clickhouse-cloud-api-secret-key", "4b1d" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC"),
    ("harness-api-key", "pat.aB3dE5fG7hJ9kL1mN3pQ5r.S7tU9vW1xY3zA5bC7dE9fG1h.J3kL5mN7pQ9rS1tU3vW5"),
    ("maxmind-license-key", "aB3dE5_" + "fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA" + "_mmk"),
    ("vault-service-token (legacy s.)", "s." + "aB3dE5fG7hJ9kL1mN3pQ5rS7"),
    ("facebook-access-token", "123456789012345|" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9"),
    ("sendgrid-api-token", "SG." + "aB3dE5fG7hJ9kL1mN3pQ5r.S7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3=="),
    ("age-secret-key", "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" + "QPZRY9X8GF2TVDW0S3JN54KHCE"),
]


@pytest.mark.parametrize(("rule_id", "token"), ISSUE_34_SHAPES, ids=[r for r, _t in ISSUE_34_SHAPES])
def test_the_shapes_issue_34_found_are_redacted(rule_id, token):
    context = {"facebook-access-token": "facebook "}.get(rule_id, "")
    for out in (redact_text(f"note {context}{token} end"), " ".join(redact_argv(["--x", context + token])),
                redact_env({"VLLM_NOTE": f"{context}{token}"})["VLLM_NOTE"],
                str(redact_value({"note": f"{context}{token}"}))):
        assert token not in out and REDACTED in out, (rule_id, out)


def test_a_secret_inside_an_escaped_literal_is_redacted_and_the_escapes_around_it_are_kept():
    token = "ghp_" + "b" * 36
    text = '--x={"a": "pre \\u00e9 adafruit = \\"' + "a" * 32 + '\\" mid \\\\ ' + token + ' end"}'
    assert redact_text(text) == '--x={"a": "pre \\u00e9 adafruit = \\"<redacted>\\" mid \\\\ <redacted> end"}'
    # a context word that a token format would take first (xoxe-...kucoin) is read in the decoded literal
    value = "xoxe-abcdefghijkuCoin\u2028'=>\r\"\f=E96E5da6-DF4a-187b-42A0-70ceeE1630d4"
    for dumped in (json.dumps({"a": value}), json.dumps({"a": value}, ensure_ascii=False)):
        assert "E96E5da6-DF4a-187b-42A0-70ceeE1630d4" not in redact_text(dumped), dumped


def test_a_secret_the_text_as_written_shows_goes_whole_where_a_decoded_literal_took_part_of_it():
    """The first '"' opens a literal that ends at the next one; decoded (it holds a backslash), its pair takes the
    value ``'sk_0000'`` and leaves the ``=>`` freemius' rule needs only to its quoted key as written: what the
    shapes find in the text as written goes too (scripts/gitleaks_hunt.py found it with two values in a label)."""
    secret = "sk_0000'" + "1" * 22 + "\\x"
    text = f"\"secret_key'=>'{secret}' and \"quoted\""
    assert redact_text(text) == f"\"secret_key'=>'{REDACTED}' and \"quoted\""


def test_program_names_inside_other_words_never_break_redaction():
    for text in ("c\U000eda72.\U00052c54curl\n --header'X-Token:\tabcdefgh'", "xmysql -pA", "mysql.cnf -pA",
                 "/opt/mysql -pA; mysql -pB\nmysql x -pC"):
        out = redact_text(text)
        assert out != REDACTED, text  # never the fail-closed answer of a rule that raised
    assert redact_text("/opt/mysql -pA; mysql -pB\nmysql x -pC").count(REDACTED) == 3


def test_a_context_that_shell_quoting_splits_is_read_in_the_word():
    """``shlex.join`` spells a ``'`` inside a word as ``'"'"'``: gitleaks' gocardless context (``gocardless=>'``)
    is only visible once the shell's quotes are removed, and a token format must not take its keyword first."""
    secret = "lIvE_gxL_RAsNz8dYSFhy00u_AVq=5DOGez02KLMpzzy5"
    value = "sk-or-abcdefghijklmnop-goCardLess=>\r'\u2002" + secret
    out = redact_command_line(shlex.join(["vllm", "serve", "--x", value]))
    assert secret not in out and REDACTED in out, out
