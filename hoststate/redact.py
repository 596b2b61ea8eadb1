"""The one place that keeps secrets out of a snapshot: environment values, argv, URLs, nested values.

Everything is table-driven so a new secret shape is one row: ``SECRET_NAME_WORDS`` and
``CREDENTIAL_NAMES`` decide which variable/key names are secret, ``SECRET_FLAGS`` which command-line
options take a secret, and ``VALUE_RULES`` which value shapes are secrets wherever they appear
(an ``sk-...`` key given as a positional argument is redacted as surely as one under ``--api-key``).
A redacted value is replaced by ``REDACTED``; redaction never raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

#: A variable or key whose upper-cased name contains one of these is secret (design.md).
SECRET_NAME_WORDS: tuple[str, ...] = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")

#: Credentials named outright (HF_/OPENAI_/AWS_ and friends), also caught when the words above miss them.
CREDENTIAL_NAMES: frozenset[str] = frozenset(
    {
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HUGGINGFACE_TOKEN",
        "HF_API_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_ORGANIZATION",
        "OPENAI_ORG_ID",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "VLLM_API_KEY",
        "WANDB_API_KEY",
        "GITHUB_TOKEN",
        "NGC_API_KEY",
    }
)

#: Names that contain a secret word but hold no secret (counts of tokens, tokenizer switches).
NOT_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"^TOKENIZERS_PARALLELISM$"),
    re.compile(r"^VLLM_\w*_TOKENS(_\w+)?$"),
    re.compile(r"^VLLM_\w*TOKENIZER\w*$"),
)

#: Command-line options whose value is a secret (compared after ``_`` -> ``-``, case-insensitive).
SECRET_FLAGS: frozenset[str] = frozenset(
    {
        "--api-key",
        "--hf-token",
        "--token",
        "--password",
        "--passwd",
        "--secret",
        "--auth",
        "--auth-token",
        "--access-token",
        "--openai-api-key",
        "--aws-secret-access-key",
        "--aws-access-key-id",
    }
)
#: Any option whose name ends like these also takes a secret (``--foo-api-key``, ``--db-password``).
SECRET_FLAG_SUFFIXES: tuple[str, ...] = ("-api-key", "-token", "-password", "-passwd", "-secret", "-credentials")


@dataclass(frozen=True)
class ValueRule:
    """One secret shape: ``pattern`` is replaced by ``replacement`` (which may keep a prefix group)."""

    name: str
    pattern: re.Pattern[str]
    replacement: str


#: Secret shapes found inside any string value. Order matters only for readability of the output.
VALUE_RULES: tuple[ValueRule, ...] = (
    ValueRule(
        "header",
        re.compile(
            r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie|set-cookie)(\s*[:=]\s*)[^\r\n]+"
        ),
        r"\1\2" + REDACTED,
    ),
    ValueRule("bearer", re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1\2" + REDACTED),
    ValueRule(
        "url-userinfo", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+(@)"), r"\1" + REDACTED + r"\2"
    ),
    ValueRule("openai-key", re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), REDACTED),
    ValueRule("hf-token", re.compile(r"\bhf_[A-Za-z0-9]{8,}"), REDACTED),
    ValueRule("aws-access-key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    ValueRule("github-token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{16,}"), REDACTED),
    ValueRule("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), REDACTED),
    ValueRule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
    ValueRule(
        "query-secret",
        re.compile(r"(?i)([?&](?:api[_-]?key|access[_-]?token|token|key|secret|password|passwd|auth|sig)=)[^&#\s]+"),
        r"\1" + REDACTED,
    ),
)


def is_secret_name(name: str) -> bool:
    """True when an environment variable or mapping key of this name holds a secret."""
    upper = name.upper().replace("-", "_")
    if upper in CREDENTIAL_NAMES:
        return True
    if any(p.match(upper) for p in NOT_SECRET_PATTERNS):
        return False
    return any(word in upper for word in SECRET_NAME_WORDS)


def is_secret_flag(flag: str) -> bool:
    """True when a command-line option (``--api-key``, ``--hf_token``) takes a secret value."""
    name = flag.split("=", 1)[0].lower().replace("_", "-")
    if not name.startswith("--"):
        return False
    return name in SECRET_FLAGS or name.endswith(SECRET_FLAG_SUFFIXES)


def is_secret_key(key: str) -> bool:
    """True when a configuration key (``api_key``, ``hf_token``, ``db_password``) holds a secret.

    Keys follow the option rules, not the broader environment-name rule: ``max_num_batched_tokens``
    and ``tokenizer`` are vLLM settings, not secrets.
    """
    name = key.lower().replace("_", "-").lstrip("-")
    return is_secret_flag("--" + name) or key.upper() in CREDENTIAL_NAMES


def redact_text(text: str) -> str:
    """A string with every secret shape of VALUE_RULES replaced."""
    for rule in VALUE_RULES:
        text = rule.pattern.sub(rule.replacement, text)
    return text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment mapping with secret names' values and secret-shaped values replaced."""
    return {k: (REDACTED if is_secret_name(k) else redact_text(str(v))) for k, v in env.items()}


_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def redact_argv(argv: list[str]) -> list[str]:
    """argv with secret option values, secret ``VAR=value`` assignments and secret shapes replaced.

    After a secret option every following token that is not an option is redacted too (``--api-key``
    takes several keys in recent vLLM); ``--api-key=VALUE`` keeps the option name.
    """
    out: list[str] = []
    taking = False
    for token in argv:
        if taking and not token.startswith("-"):
            out.append(REDACTED)
            continue
        taking = False
        if token.startswith("--") and is_secret_flag(token):
            if "=" in token:
                out.append(token.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(token)
                taking = True
            continue
        m = _ASSIGN.match(token)
        if m and is_secret_name(m.group(1)):
            out.append(f"{m.group(1)}={REDACTED}")
            continue
        out.append(redact_text(token))
    return out


#: ``user:pass@host...`` written without a scheme (urlsplit would read ``user`` as the scheme).
_BARE_USERINFO = re.compile(r"^([^/\s:@?#]*):([^/\s@?#]+)@(?=[^\s@]*$)")


def url_secrets(url: str) -> list[str]:
    """The secret parts of a URL as written: the password of ``user:pass@`` (or a bare token as user
    name) and the values of secret query parameters, so that a message repeating any part of the URL
    can be cleaned with redact_mentions."""
    found: list[str] = []
    m = _BARE_USERINFO.match(url)
    if m:
        found.append(m.group(2))
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is not None and "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        found.append(userinfo.split(":", 1)[1] if ":" in userinfo else userinfo)
    query = parts.query if parts is not None else url.partition("?")[2]
    for key, value in parse_qsl(query, keep_blank_values=True):
        if is_secret_name(key) and value:
            found.append(value)
    for piece in list(found):
        unquoted = unquote(piece)
        if unquoted != piece:
            found.append(unquoted)
    return sorted({p for p in found if p}, key=len, reverse=True)


def redact_mentions(text: str, url: str) -> str:
    """A message about ``url`` (an error that may repeat the URL or a piece of it, such as the
    ``nonnumeric port: 'pass@host'`` of http.client) with every secret part of the URL replaced."""
    for piece in url_secrets(url):
        text = text.replace(piece, REDACTED)
    return redact_text(text)


def redact_url(url: str) -> str:
    """A URL with the password of ``user:pass@`` and secret query parameters replaced."""
    m = _BARE_USERINFO.match(url)
    if m:
        url = f"{m.group(1)}:{REDACTED}@{url[m.end():]}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_mentions(url, url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + REDACTED
        elif userinfo:
            userinfo = REDACTED  # a bare token as user name (https://TOKEN@host)
        netloc = f"{userinfo}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_name(k) else redact_text(v)) for k, v in pairs], safe="<>")
    return redact_text(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def redact_value(value: Any, key: str | None = None) -> Any:
    """Any nested value (dicts, lists, strings) with secrets replaced; keys are tested by is_secret_key."""
    if key is not None and is_secret_key(key) and value not in (None, "", [], {}):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
