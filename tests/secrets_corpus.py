"""Secret shapes that must never reach a snapshot, a report or stderr (issue 8, "Hardening").

Every secret carries the marker ``CORPUS`` and a two-digit number, so a test can grep any output for
``CORPUS`` and name the shape that leaked. Nothing outside a secret carries the marker (user names,
hosts and option names do not), so a redaction that keeps a prefix (``Bearer <redacted>``,
``postgres://bench:<redacted>@db``) still leaves no marker behind.

A shape reaches hoststate through one or more channels:

- ``argv``: tokens in a vLLM server's command line (a real child process, and ``--vllm-cmd``);
- ``env``: a variable in a vLLM server's environment, in ``--vllm-cmd``'s ``VAR=value`` prefix, and in
  the snapshotting process's own environment (the ``env`` collector);
- ``url``: a ``--vllm-url`` value;
- ``log``: a ``'key': value`` item of a server log's ``non-default args:`` line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MARKER = "CORPUS"
#: Finds any surviving piece of a corpus secret in an output.
LEAK = re.compile(r"[\w.~+/-]*" + MARKER + r"\d\d[\w.~+/=-]*")


@dataclass(frozen=True)
class Shape:
    """One secret shape. ``secret`` is the sensitive part; the channels say where it is planted."""

    name: str
    secret: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    log: str | None = None

    def __post_init__(self) -> None:
        assert MARKER in self.secret, self.name


def _shapes() -> tuple[Shape, ...]:
    return (
        Shape("openai project key after --api-key", "sk-proj-CORPUS01aB3dE5fG7hJ9kL1mN3pQ5rS7",
              argv=("--api-key", "sk-proj-CORPUS01aB3dE5fG7hJ9kL1mN3pQ5rS7")),
        Shape("plain key in --api-key=VALUE", "plainkeyCORPUS02zz", argv=("--api-key=plainkeyCORPUS02zz",)),
        Shape("hugging face token after --hf-token", "hf_CORPUS03AbCdEfGhIjKlMnOpQrStUv",
              argv=("--hf-token", "hf_CORPUS03AbCdEfGhIjKlMnOpQrStUv")),
        Shape("curl-style -H 'Authorization: Bearer'", "CORPUS04bearerTok.en-value_0123",
              argv=("-H", "Authorization: Bearer CORPUS04bearerTok.en-value_0123")),
        Shape("--header 'Authorization: Basic'", "Q09SUFVTMDU6CORPUS05cGFzc3dvcmQ=",
              argv=("--header", "Authorization: Basic Q09SUFVTMDU6CORPUS05cGFzc3dvcmQ=")),
        Shape("scheme://user:pass@host in an argument", "otelpwCORPUS06x",
              argv=("--otlp-traces-endpoint", "http://otel:otelpwCORPUS06x@collector:4317")),
        Shape("postgres URL password in an env value", "pgpwCORPUS07x",
              env={"VLLM_DB_URL": "postgres://bench:pgpwCORPUS07x@db:5432/results"}),
        Shape("redis URL with password and no user", "redispwCORPUS08x",
              env={"VLLM_CACHE_URL": "redis://:redispwCORPUS08x@cache:6379/0"}),
        Shape("query ?token=&api_key= in an env value", "qtokCORPUS09x",
              env={"VLLM_REMOTE_CONFIG": "https://cfg.example/x?token=qtokCORPUS09x&api_key=qkeyCORPUS09y&v=1"}),
        Shape("JWT under a harmless name", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDT1JQVVMxMCJ9.CORPUS10sigABCDEFGH",
              env={"VLLM_PLUGIN_CONFIG": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDT1JQVVMxMCJ9.CORPUS10sigABCDEFGH"}),
        Shape("VLLM_API_KEY", "vkeyCORPUS11x", env={"VLLM_API_KEY": "vkeyCORPUS11x"}),
        Shape("allow-listed prefix, secret name VLLM_SECRET_TOKEN", "vtokCORPUS12x",
              env={"VLLM_SECRET_TOKEN": "vtokCORPUS12x"}),
        Shape("allow-listed prefix, secret name CUDA_AUTH_TOKEN", "ctokCORPUS13x",
              env={"CUDA_AUTH_TOKEN": "ctokCORPUS13x"}),
        Shape("allow-listed prefix, NCCL_IB_PASSWORD", "ncclpwCORPUS14x", env={"NCCL_IB_PASSWORD": "ncclpwCORPUS14x"}),
        Shape("OPENAI_API_KEY", "sk-CORPUS15abcdefghijklmnopqrstuv", env={"OPENAI_API_KEY":
                                                                           "sk-CORPUS15abcdefghijklmnopqrstuv"}),
        Shape("ANTHROPIC_API_KEY", "sk-ant-api03-CORPUS16abcdefghijklmnop",
              env={"ANTHROPIC_API_KEY": "sk-ant-api03-CORPUS16abcdefghijklmnop"}),
        Shape("WANDB_API_KEY", "0123456789CORPUS17abcdef0123456789abcd", env={"WANDB_API_KEY":
                                                                              "0123456789CORPUS17abcdef0123456789abcd"}),
        Shape("HUGGING_FACE_HUB_TOKEN", "hf_CORPUS18ZyXwVuTsRqPoNmLkJiHg",
              env={"HUGGING_FACE_HUB_TOKEN": "hf_CORPUS18ZyXwVuTsRqPoNmLkJiHg"}),
        Shape("AWS access key id in env and argv", "AKIACORPUS19ABCDEFGH",
              env={"AWS_ACCESS_KEY_ID": "AKIACORPUS19ABCDEFGH"}, argv=("--aws-access-key-id", "AKIACORPUS19ABCDEFGH")),
        Shape("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/CORPUS20bPxRfiCYEXAMPLEKEY",
              env={"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/CORPUS20bPxRfiCYEXAMPLEKEY"}),
        Shape("AZURE_CLIENT_SECRET", "azCORPUS21~secret.value_x",
              env={"AZURE_CLIENT_SECRET": "azCORPUS21~secret.value_x"}),
        Shape("GOOGLE_APPLICATION_CREDENTIALS path", "/run/secrets/CORPUS22-sa.json",
              env={"GOOGLE_APPLICATION_CREDENTIALS": "/run/secrets/CORPUS22-sa.json"}),
        Shape("GitHub token as URL user in an allow-listed env value", "ghp_CORPUS23abcdefghijklmnopqrstuvwx",
              env={"VLLM_PLUGIN_REPO": "https://ghp_CORPUS23abcdefghijklmnopqrstuvwx@github.com/org/plugin.git"}),
        Shape("--vllm-url http://user:pass@127.0.0.1:PORT", "urlpwCORPUS24x",
              url="http://bench:urlpwCORPUS24x@127.0.0.1:{port}"),
        Shape("--vllm-url ?api_key= query", "urlkeyCORPUS25x", url="http://127.0.0.1:{port}/?api_key=urlkeyCORPUS25x"),
        Shape("--vllm-url with user:pass and no port", "urlpwCORPUS36x", url="http://bench:urlpwCORPUS36x@127.0.0.1"),
        Shape("--vllm-url with user:pass and no scheme", "urlpwCORPUS37x",
              url="bench:urlpwCORPUS37x@127.0.0.1:{port}"),
        Shape("HF_TOKEN as a VAR=value prefix and in env", "hf_CORPUS26QwErTyUiOpAsDfGhJkL",
              env={"HF_TOKEN": "hf_CORPUS26QwErTyUiOpAsDfGhJkL"}),
        Shape("--api-key with two keys (vLLM takes several)", "second-keyCORPUS27x",
              argv=("--api-key", "first-keyCORPUS27w", "second-keyCORPUS27x")),
        Shape("--db-password style option", "dbpwCORPUS28x", argv=("--db-password", "dbpwCORPUS28x")),
        Shape("slack webhook token in argv", "xoxb-CORPUS29-0123456789-abcdef",
              argv=("--served-model-name", "m", "xoxb-CORPUS29-0123456789-abcdef")),
        Shape("Cookie header in an env value", "sessCORPUS30x",
              env={"VLLM_EXTRA_HEADERS": "Cookie: session=sessCORPUS30x"}),
        Shape("api_key in the log's non-default args", "sk-live-CORPUS31abcdefghijklmnop",
              log="'api_key': ['sk-live-CORPUS31abcdefghijklmnop']"),
        Shape("hf_token in the log's non-default args", "hf_CORPUS32MnBvCxZlKjHgFdSaPo",
              log="'hf_token': 'hf_CORPUS32MnBvCxZlKjHgFdSaPo'"),
        Shape("URL password in the log's non-default args", "logpwCORPUS33x",
              log="'otlp_traces_endpoint': 'http://otel:logpwCORPUS33x@collector:4317'"),
    )


SHAPES: tuple[Shape, ...] = _shapes()


def argv() -> list[str]:
    """Every argv shape, in order: append to a server command line."""
    return [tok for s in SHAPES for tok in s.argv]


def env() -> dict[str, str]:
    """Every env shape as one environment."""
    out: dict[str, str] = {}
    for s in SHAPES:
        out.update(s.env)
    return out


def urls(port: int) -> list[str]:
    return [s.url.format(port=port) for s in SHAPES if s.url]


def log_text(version: str = "0.11.1") -> str:
    """A server log with every log shape in its ``non-default args:`` line, and an engine config line
    whose model is a URL with a password (a path vLLM would print as given)."""
    items = ", ".join(s.log for s in SHAPES if s.log)
    return (
        f"(APIServer pid=1) INFO 11-19 14:02:10 [api_server.py:1] vLLM API server version {version}\n"
        f"(APIServer pid=1) INFO 11-19 14:02:11 [utils.py:253] non-default args: {{'model_tag': 'Qwen/Qwen3-8B', "
        f"'model': 'Qwen/Qwen3-8B', {items}, 'max_model_len': 16384}}\n"
        f"(EngineCore_DP0 pid=2) INFO 11-19 14:02:19 [core.py:93] Initializing a V1 LLM engine (v{version}) with "
        f"config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='https://tok:logpwCORPUS34x@hub/t', "
        f"dtype=torch.bfloat16, max_seq_len=16384, tensor_parallel_size=1, enforce_eager=False, "
        f"compilation_config={{\"cudagraph_mode\": [2, 1]}}\n"
    )


def config_only_log_text(version: str = "0.11.1") -> str:
    """A log with no ``non-default args:`` line: the model comes from the engine config line."""
    return (
        f"(EngineCore_DP0 pid=2) INFO 11-19 14:02:19 [core.py:93] Initializing a V1 LLM engine (v{version}) with "
        f"config: model='https://hub:modelpwCORPUS35x@models.example/Qwen3-8B', speculative_config=None, "
        f"dtype=torch.bfloat16, max_seq_len=16384, tensor_parallel_size=1, enforce_eager=False\n"
    )


def leaks(text: str) -> list[str]:
    """Pieces of corpus secrets found in ``text`` (empty when nothing leaked)."""
    return sorted(set(LEAK.findall(text)))


def shape_of(piece: str) -> str:
    """The shape a leaked piece comes from, for a readable failure."""
    m = re.search(MARKER + r"(\d\d)", piece)
    if not m:
        return "?"
    number = m.group(1)
    for s in SHAPES:
        if MARKER + number in s.secret or (s.url and MARKER + number in s.url) or any(
            MARKER + number in v for v in s.env.values()
        ):
            return s.name
    return f"log engine-config shape {number}"
