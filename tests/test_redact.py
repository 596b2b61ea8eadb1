"""The shared redaction module: names, options, value shapes, URLs, nested values."""

from __future__ import annotations

import pytest

from hoststate.redact import (
    REDACTED,
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
        "url-userinfo": "http://u:pw@h", "url-token-user": "https://abcdefghijklmnopqrstuvwxyz@h",
        "slack-webhook": "hooks.slack.com/services/T/B/x", "discord-webhook": "discord.com/api/webhooks/1/x",
        "openai-key": "sk-abcdefghijk", "stripe-key": "pk_test_abcdefghij", "stripe-webhook": "whsec_abcdefghijklmnopq",
        "hf-token": "hf_abcdefghijklmnopqrstuv", "aws-access-key": "ASIAABCDEFGHIJKLMNOP",
        "github-token": "ghs_abcdefghijklmnopqrst", "gitlab-token": "glrt-abcdefghijklmnopqr",
        "google-api-key": "AIza" + "b" * 35, "slack-token": "xoxp-1234567890ab", "slack-app-token": "xapp-1-abcdefghij",
        "jwt": "eyJabcdefghij.eyJabcdefghij.abcdefghijk",
    }
    assert set(examples) == {rule.name for rule in VALUE_RULES}
    for rule in VALUE_RULES:
        out = redact_text(examples[rule.name])
        assert REDACTED in out and out != examples[rule.name], rule.name


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
