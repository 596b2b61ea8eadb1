"""The one place that keeps secrets out of what hoststate records and prints.

Secrets are found two ways, in every input (argv, environment, ``--vllm-cmd``, ``--vllm-url``, logs,
``/metrics``, labels, guard's command):

- by name: ``is_secret_name`` for environment variables (design.md's words TOKEN, KEY, SECRET, PASSWORD,
  PASSWD, CREDENTIAL, AUTH, plus PASS, PWD, CRED, COOKIE, SIGNATURE), ``is_secret_key`` for option and
  configuration keys (``--api-key``, ``hf_token``, ``kv_transfer_config.x.password``, ``X-Amz-Credential``,
  argparse abbreviations such as ``--api-ke``), and ``SHORT_SECRET_OPTIONS`` for programs whose short options
  take one (``mysql -pPASS``);
- by shape: ``TOKEN_FORMATS`` (provider token formats, anchored on gitleaks' rule set), ``VALUE_RULES``
  (PEM blocks, URL passwords, headers, webhooks, JWTs) and ``key = value`` pairs in any text (JSON, Python
  literals, queries and fragments, ``NAME=value``; keys of any length, escapes decoded), so an ``sk-...`` key
  given as a positional argument, or a password nested in a JSON option, is redacted as surely as one
  under ``--api-key``.

A redacted value is replaced by ``REDACTED``; nothing here raises, and every scan is linear in its input
(no repetition can restart inside its own match or backtrack over another), because the text comes from
other users' processes.
Redaction is for what hoststate records and prints; what it passes on (guard's command and its
environment) is never changed.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from hoststate.text import MAX_NESTING, NESTED_TOO_DEEPLY

REDACTED = "<redacted>"

#: An environment variable is secret when a word of its upper-cased name (words split at ``_``) contains one of
#: these: design.md's words, PASS, and the short forms PWD, CRED (``_CREDS``), COOKIE and SIGNATURE. A prefix
#: does not hide one (``VLLM_TOKENIZER_HF_TOKEN`` is secret).
SECRET_NAME_WORDS: tuple[str, ...] = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASS", "PWD", "CREDENTIAL",
                                      "CRED", "AUTH", "COOKIE", "SIGNATURE")

#: Words that contain a secret word but are not about secrets; removed from a word of a name before the test
#: above. ``TOKENS`` as a whole word is a count (``VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE``).
HARMLESS_NAME_WORDS: tuple[str, ...] = ("BYPASS", "PASSTHROUGH", "COMPASS", "AUTHOR", "TOKENIZER")
COUNT_WORDS: frozenset[str] = frozenset({"TOKENS"})

#: Whole names that contain a secret word and hold no secret: the shell's working directories and the
#: InfiniBand partition key index NCCL uses.
NOT_SECRET_NAMES: frozenset[str] = frozenset({"PWD", "OLDPWD", "NCCL_IB_PKEY"})

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
        "MYSQL_PWD",
        "PGPASSWORD",
        "REDISCLI_AUTH",
    }
)

#: A key (option, configuration key, query parameter) holding a secret has one of these words
#: (words are split at ``_``, ``-``, ``.`` and lower-to-upper case changes) ...
SECRET_KEY_WORDS: frozenset[str] = frozenset(
    {
        "password", "passwd", "passphrase", "passcode", "secret", "secrets", "credential", "credentials", "creds",
        "token", "auth", "authorization", "apikey", "accesskey", "secretkey", "privatekey", "signature", "sig",
        "cookie", "bearer",
    }
)
#: ... or a word ending like these (``hftoken``, ``dbpassword``) ...
SECRET_KEY_ENDINGS: tuple[str, ...] = ("token", "password", "passwd", "secret", "apikey")
#: ... or ends in one of these words (``db_pass``, ``redis_pwd``, ``key``; ``pass_config`` is not a secret) ...
SECRET_LAST_WORDS: frozenset[str] = frozenset({"pass", "pwd", "key", "keys"})
#: A secret word names a quantity or a switch, not a secret, right before one of these words or right after one
#: of these first words (vLLM's ``long_prefill_token_threshold``, ``return_tokens_as_token_ids``,
#: ``allow_credentials``) ...
QUANTITY_WORDS: frozenset[str] = frozenset({"threshold", "thresholds", "ids", "count", "budget", "limit"})
SWITCH_WORDS: frozenset[str] = frozenset({"allow", "enable", "disable", "require"})
#: ... or ends in an abbreviation of one of these (argparse takes ``--passw`` for ``--password``) ...
ABBREVIATED_WORDS: tuple[str, ...] = ("password", "passphrase", "secret", "token", "credential", "credentials")
#: ... of at least this many letters ...
ABBREVIATION_LEAST = 4
#: ... or is an abbreviation of a secret option of vLLM's server that reaches into its last word (argparse takes
#: ``--api-ke`` and ``--hf-t``; ``--api`` and ``--hf`` are ambiguous, and refused); tests/test_redact.py checks
#: this list against the option table, hoststate/collectors/vllm/options.py ...
SERVER_SECRET_OPTIONS: tuple[str, ...] = ("api_key", "hf_token")
#: ... or has ``key`` (or its abbreviation ``k``, ``ke``) right after one of these (``access_key_id``,
#: ``private_key_path``, ``--api-ke``).
KEY_QUALIFIERS: frozenset[str] = frozenset(
    {"api", "access", "secret", "private", "signing", "encryption", "master", "client", "auth", "ssh", "account",
     "service", "session", "license"}
)


@dataclass(frozen=True)
class ValueRule:
    """One secret shape: ``pattern`` is replaced by ``replacement`` (which may keep a prefix group)."""

    name: str
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]
    #: Lower-case literals one of which every match contains: a text without any is not scanned (speed).
    hints: tuple[str, ...] = ()


def _rule(name: str, pattern: str, replacement: str, hints: str) -> ValueRule:
    return ValueRule(name, re.compile(pattern), replacement or _to_last_at, tuple(hints.split()))


def _to_last_at(m: re.Match[str]) -> str:
    """``scheme://user:`` kept, everything up to the word's last '@' redacted (nothing when there is none)."""
    word = m.group()
    at = word.rfind("@")
    if at < 0:
        return word
    colon = word.index(":", word.index("://") + 3)
    return word[:colon + 1] + REDACTED + word[at:]


_KEEP1, _KEEP2 = r"\1" + REDACTED, r"\1\2" + REDACTED
#: Secret shapes found inside any string value, each with its hints (space-separated). Flags are scoped
#: (``(?i:...)``); every repetition either stops at a character its match cannot hold or cannot restart inside
#: its own match, so a long line costs linear time.
VALUE_RULES: tuple[ValueRule, ...] = (
    _rule("pem-block", r"(?s:-----BEGIN [A-Z0-9 ]{1,64}-----.*?(?:-----END [A-Z0-9 ]{1,64}-----|\Z))", REDACTED,
          "-----begin"),
    _rule("header", r"(?i:\b((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|cookie|set-cookie)"
          r"(\s*[:=]\s*)[^\r\n]+)", _KEEP2, "authorization api-key auth-token cookie"),
    _rule("bearer", r"(?i:\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,})", _KEEP2, "bearer basic token"),
    # scheme://user:PASSWORD@host: the password may hold '@' and '/', so it runs to the last '@' of the word
    # (the replacement is a function: the pattern takes the whole word once instead of backtracking in it).
    # A user name of any length: it stops at '/', which every later '://' holds, so scans never overlap.
    _rule("url-userinfo", r"(?i:(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}://[^/\s:@\"'<>]*:[^\s\"'<>]+)", "", "://"),
    # scheme://TOKEN@host: a bare token as the user name (git remotes).
    _rule("url-token-user", r"(?i:(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://)[a-z0-9_-]{20,}(@))",
          r"\1" + REDACTED + r"\2", "://"),
    _rule("slack-webhook", r"(?i:\b(hooks\.slack\.com/(?:services|workflows|triggers)/)[\w/-]+)", _KEEP1,
          "hooks.slack.com/"),
    _rule("discord-webhook", r"(?i:\b(discord(?:app)?\.com/api/webhooks/\d+/)[\w-]+)", _KEEP1, "/api/webhooks/"),
    _rule("teams-webhook", r"(?i:\b(webhook\.office\.com/webhookb2/)[\w@/-]+)", _KEEP1, "webhookb2/"),
    _rule("aws-access-key", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", REDACTED,
          "a3t akia asia abia acca"),
    _rule("azure-ad-client-secret", r"(?<![\w~.])[\w~.]{3}\dQ~[\w~.-]{31,}", REDACTED, "q~"),
    _rule("terraform-cloud-token", r"(?i:\b[a-z0-9]{14}\.atlasv1\.[\w=-]{60,})", REDACTED, "atlasv1"),
    _rule("twilio-api-key", r"\bSK[0-9a-fA-F]{32}\b", REDACTED, "sk"),
    _rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", REDACTED, "eyj"),
)

#: Alphabets of token bodies: word characters and '-', plus '.', plus base64's '+/='.
W, D, B = r"[\w-]", r"[\w.-]", r"[\w+/=-]"
#: Provider token formats, each a fixed prefix and a body: (rule id, prefix, body alphabet, fewest body
#: characters). Anchored on gitleaks' default rule set (config/gitleaks.toml of gitleaks v8.30, MIT): the rule
#: ids are gitleaks' own, the prefixes theirs, the bodies widened to the token alphabet and their lengths taken
#: as a floor (a token one character shorter or with a '-' more is still redacted). Rules marked ``*`` are not
#: in gitleaks (documented by the provider or by trufflehog's detectors). A prefix written in lower case with a
#: trailing ``(?i)`` mark is matched in any case. gitleaks rules that need a context word (``adafruit ... =``)
#: are covered by the key rules below (a secret key, or a secret environment name, hides its value); its
#: catch-all generic-api-key is the ``key = value`` scan.
TOKEN_FORMATS: tuple[tuple[str, str, str, int], ...] = (
    ("1password-secret-key", "A3-", r"[A-Z0-9-]", 30),
    ("1password-service-account-token", "ops_eyJ", B, 64),
    ("adobe-client-secret", "p8e-", W, 32),
    ("age-secret-key", "AGE-SECRET-KEY-1", r"[A-Z0-9]", 58),
    ("alibaba-access-key-id", "LTAI", W, 20),
    ("anthropic-api-key", "sk-ant-", W, 20),
    ("anthropic-admin-api-key", "sk-ant-admin01-", W, 20),
    ("artifactory-api-key", "AKCp", W, 60),
    ("artifactory-reference-token", "cmVmd", W, 59),
    ("atlassian-api-token", "ATATT3", B, 60),
    ("aws-amazon-bedrock-api-key-long-lived", "ABSK", B, 100),
    ("aws-amazon-bedrock-api-key-short-lived", "bedrock-api-key-", B, 20),
    ("cloudflare-origin-ca-key", "v1.0-", W, 100),
    ("clojars-api-token", "clojars_(?i)", W, 60),
    ("databricks-api-token", "dapi", W, 32),
    ("digitalocean-access-token", "doo_v1_", W, 64),
    ("digitalocean-pat", "dop_v1_", W, 64),
    ("digitalocean-refresh-token", "dor_v1_", W, 64),
    ("docker-hub-pat *", "dckr_pat_", W, 20),
    ("doppler-api-token", "dp.pt.", W, 40),
    ("duffel-api-token", "duffel_live_", B, 40),
    ("duffel-api-token", "duffel_test_", B, 40),
    ("dynatrace-api-token", "dt0c01.", D, 60),
    ("easypost-api-token", "EZAK", W, 54),
    ("easypost-test-api-token", "EZTK", W, 54),
    ("facebook-page-access-token", "EAAM", W, 100),
    ("facebook-page-access-token", "EAAC", W, 100),
    ("flutterwave-secret-key", "FLWSECK_TEST-", W, 12),
    ("flutterwave-public-key", "FLWPUBK_TEST-", W, 32),
    ("flyio-access-token", "fo1_", W, 40),
    ("flyio-access-token", "fm1a_", B, 100),
    ("flyio-access-token", "fm1r_", B, 100),
    ("flyio-access-token", "fm2_", B, 100),
    ("frameio-api-token", "fio-u-", W, 64),
    ("gcp-api-key", "AIza", W, 30),
    ("gcp-oauth-access-token *", "ya29.", D, 20),
    ("gcp-oauth-client-secret *", "GOCSPX-", W, 24),
    ("github-pat", "ghp_", W, 16),
    ("github-oauth", "gho_", W, 16),
    ("github-app-token", "ghu_", W, 16),
    ("github-app-token", "ghs_", W, 16),
    ("github-refresh-token", "ghr_", W, 16),
    ("github-fine-grained-pat", "github_pat_", W, 16),
    ("gitlab-pat", "glpat-", W, 16),
    ("gitlab-deploy-token", "gldt-", W, 16),
    ("gitlab-ptt", "glptt-", W, 16),
    ("gitlab-runner-authentication-token", "glrt-", W, 16),
    ("gitlab-cicd-job-token", "glcbt-", W, 16),
    ("gitlab-feature-flag-client-token", "glffct-", W, 16),
    ("gitlab-feed-token", "glft-", W, 16),
    ("gitlab-incoming-mail-token", "glimt-", W, 16),
    ("gitlab-kubernetes-agent-token", "glagent-", W, 16),
    ("gitlab-oauth-app-secret", "gloas-", W, 16),
    ("gitlab-scim-token", "glsoat-", W, 16),
    ("gitlab-rrt", "GR1348941", W, 20),
    ("gitlab-session-cookie", "_gitlab_session=", W, 32),
    ("grafana-api-key", "eyJrIjoi", B, 70),
    ("grafana-cloud-api-token", "glc_(?i)", B, 32),
    ("grafana-service-account-token", "glsa_(?i)", W, 32),
    ("groq-api-key *", "gsk_", W, 32),
    ("hashicorp-vault-batch-token", "hvb.", W, 24),
    ("hashicorp-vault-service-token", "hvs.", W, 24),
    ("heroku-api-key-v2", "HRKU-AA", W, 58),
    ("huggingface-access-token", "hf_", r"[A-Za-z0-9]", 20),
    ("huggingface-organization-api-token", "api_org_", r"[A-Za-z0-9]", 20),
    ("infracost-api-token", "ico-", W, 32),
    ("intra42-client-secret", "s-s4t2ud-", W, 64),
    ("intra42-client-secret", "s-s4t2af-", W, 64),
    ("langsmith-api-key *", "lsv2_pt_", W, 32),
    ("langsmith-api-key *", "lsv2_sk_", W, 32),
    ("linear-api-key", "lin_api_(?i)", W, 40),
    ("new-relic-user-api-key", "NRAK-", W, 27),
    ("new-relic-insert-key", "NRII-", W, 32),
    ("notion-api-token", "ntn_", W, 46),
    ("npm-access-token", "npm_(?i)", W, 36),
    ("nvidia-api-key *", "nvapi-", W, 32),
    ("octopus-deploy-api-key", "API-", r"[A-Z0-9]", 26),
    ("openai-api-key", "sk-proj-", W, 8),
    ("openai-api-key", "sk-svcacct-", W, 8),
    ("openai-api-key", "sk-admin-", W, 8),
    ("openai-api-key", "sk-", r"[A-Za-z0-9]", 16),
    ("openrouter-api-key *", "sk-or-", W, 16),
    ("openshift-user-token", "sha256~", W, 43),
    ("perplexity-api-key", "pplx-", W, 40),
    ("planetscale-api-token", "pscale_tkn_", D, 32),
    ("planetscale-oauth-token", "pscale_oauth_", D, 32),
    ("planetscale-password", "pscale_pw_", D, 32),
    ("postman-api-token", "PMAK-", W, 59),
    ("prefect-api-token", "pnu_", W, 36),
    ("pulumi-api-token", "pul-", W, 40),
    ("pypi-upload-token", "pypi-", W, 50),
    ("readme-api-token", "rdme_", W, 70),
    ("replicate-api-token *", "r8_", W, 37),
    ("rubygems-api-token", "rubygems_", W, 48),
    ("scalingo-api-token", "tk-us-", W, 48),
    ("sendgrid-api-token", "SG.", D, 66),
    ("sendinblue-api-token", "xkeysib-", W, 64),
    ("sentry-org-token", "sntrys_", B, 64),
    ("sentry-user-token", "sntryu_", W, 64),
    ("settlemint-application-access-token", "sm_aat_", W, 16),
    ("settlemint-personal-access-token", "sm_pat_", W, 16),
    ("settlemint-service-access-token", "sm_sat_", W, 16),
    ("shippo-api-token", "shippo_live_", W, 40),
    ("shippo-api-token", "shippo_test_", W, 40),
    ("shopify-access-token", "shpat_", W, 32),
    ("shopify-custom-access-token", "shpca_", W, 32),
    ("shopify-private-app-access-token", "shppa_", W, 32),
    ("shopify-shared-secret", "shpss_", W, 32),
    ("slack-app-token", "xapp-", W, 10),
    ("slack-bot-token", "xoxb-", W, 10),
    ("slack-user-token", "xoxp-", W, 10),
    ("slack-user-token", "xoxe-", W, 10),
    ("slack-legacy-token", "xoxo-", W, 10),
    ("slack-legacy-token", "xoxs-", W, 10),
    ("slack-legacy-workspace-token", "xoxa-", W, 10),
    ("slack-legacy-workspace-token", "xoxr-", W, 10),
    ("slack-config-access-token", "xoxe.xox", W, 20),
    ("sourcegraph-access-token", "sgp_", W, 40),
    ("square-access-token", "sq0atp-", W, 22),
    ("square-oauth-secret *", "sq0csp-", W, 40),
    ("square-access-token", "EAAA", W, 40),
    ("stripe-access-token", "sk_live_", W, 8),
    ("stripe-access-token", "sk_test_", W, 8),
    ("stripe-access-token", "sk_prod_", W, 8),
    ("stripe-access-token", "rk_live_", W, 8),
    ("stripe-access-token", "rk_test_", W, 8),
    ("stripe-access-token", "rk_prod_", W, 8),
    ("stripe-publishable-key *", "pk_live_", W, 8),
    ("stripe-webhook-secret *", "whsec_", W, 16),
    ("tailscale-key *", "tskey-", W, 20),
    ("tavily-api-key *", "tvly-", W, 24),
    ("typeform-api-token", "tfp_", D, 59),
    ("xai-api-key *", "xai-", W, 40),
)


def _token_pattern(formats: tuple[tuple[str, str, str, int], ...]) -> re.Pattern[str]:
    """One scan for every format: longest prefix first (``sk-ant-`` before ``sk-``), never inside
    a word. A body is one greedy class with a floor and nothing after it, so a match costs its own length and a
    miss at most its floor."""
    branches = []
    for _rule_id, prefix, body, least in sorted(formats, key=lambda f: -len(f[1].removesuffix("(?i)"))):
        literal = prefix.removesuffix("(?i)")
        head = f"(?i:{re.escape(literal)})" if prefix.endswith("(?i)") else re.escape(literal)
        branches.append(f"{head}{body}{{{least},}}")
    return re.compile(r"(?<!\w)(?:" + "|".join(branches) + ")")


@functools.cache
def _tokens() -> re.Pattern[str]:
    """TOKEN_FORMATS' pattern, compiled at first use (importing this module stays cheap)."""
    return _token_pattern(TOKEN_FORMATS)


@functools.cache
def _token_literals() -> tuple[str, ...]:
    """The lower-cased prefixes of TOKEN_FORMATS, none starting with another (where a longer one starts, so does
    the shorter): an ASCII text with none of them where a token may start cannot match ``_tokens()``, whose
    compile (about 10 ms) most snapshots then never pay."""
    found = {prefix.removesuffix("(?i)").lower() for _rule_id, prefix, _body, _least in TOKEN_FORMATS}
    return tuple(sorted(lit for lit in found if not any(other != lit and lit.startswith(other) for other in found)))


def _may_hold_token(text: str, lower: str) -> bool:
    r"""False only when no TOKEN_FORMATS prefix starts in ``text`` where the pattern lets a token start: not after
    a word character (``(?<!\w)``; a UUID's ``e8a3-`` does not start ``a3-``). Non-ASCII text always goes to the
    pattern: its ``\w`` and case folding reach past ASCII (the long s matches ``s`` without case)."""
    if not text.isascii():
        return True
    for lit in _token_literals():
        at = lower.find(lit)
        while at >= 0:
            if at == 0 or not (lower[at - 1].isalnum() or lower[at - 1] == "_"):
                return True
            at = lower.find(lit, at + 1)
    return False


#: Lower-case literals one of which every secret key contains (SECRET_KEY_WORDS and friends, CREDENTIAL_NAMES).
KEY_HINTS: tuple[str, ...] = ("pass", "pwd", "secret", "credential", "creds", "token", "auth", "key", "sig",
                              "cookie", "bearer", "openai_org")


@functools.lru_cache(maxsize=4096)
def _words(name: str) -> tuple[str, ...]:
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name))
    return tuple(w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w)


def is_secret_name(name: str) -> bool:
    """True when an environment variable of this name holds a secret."""
    upper = name.upper().replace("-", "_")
    if upper in CREDENTIAL_NAMES:
        return True
    if upper in NOT_SECRET_NAMES:
        return False
    for word in upper.split("_"):
        if word in COUNT_WORDS:
            continue
        for harmless in HARMLESS_NAME_WORDS:
            word = word.replace(harmless, " ")
        if any(secret in word for secret in SECRET_NAME_WORDS):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _secret_part(part: str) -> bool:
    if part.upper().replace("-", "_") in CREDENTIAL_NAMES:
        return True
    words = _words(part)
    if not words:
        return False
    if words[-1] in SECRET_LAST_WORDS or _abbreviates_secret(words):
        return True
    for i, word in enumerate(words):
        if word in SECRET_KEY_WORDS or word.endswith(SECRET_KEY_ENDINGS):
            quantity = i + 1 < len(words) and words[i + 1] in QUANTITY_WORDS
            if not quantity and words[0] not in SWITCH_WORDS:
                return True
        if word in ("key", "keys") and i > 0 and words[i - 1] in KEY_QUALIFIERS:
            return True
    return False


def _abbreviates_secret(words: tuple[str, ...]) -> bool:
    """True when a key's words are an abbreviation argparse would expand to a secret option."""
    last = words[-1]
    if last in SECRET_KEY_WORDS:
        return False  # a whole word, decided with its neighbours
    if len(last) >= ABBREVIATION_LEAST and any(w.startswith(last) for w in ABBREVIATED_WORDS):
        return True
    if len(words) > 1 and "key".startswith(last) and words[-2] in KEY_QUALIFIERS:
        return True
    joined = "_".join(words)
    return any(option.startswith(joined) and len(joined) > option.rfind("_") + 1 for option in SERVER_SECRET_OPTIONS)


def is_secret_key(key: str) -> bool:
    """True when an option or configuration key holds a secret: ``api_key``, ``hf_token``, ``--db-password``,
    ``secret_key``, ``passphrase``, dotted ``kv_transfer_config.x.password`` (any part), ``X-Amz-Credential``.

    Words, not substrings: ``max_num_batched_tokens``, ``tokenizer``, ``num_key_value_heads`` and
    ``pass_config`` are vLLM settings, not secrets.
    """
    return any(_secret_part(part) for part in key.strip("-").split(".") if part)


def is_secret_flag(flag: str) -> bool:
    """True when a command-line option (``--api-key``, ``--hf_token``, ``--x.password``) takes a secret value."""
    name = flag.split("=", 1)[0]
    if not name.startswith("-") or name == "-" or name == "--":
        return False
    if not name.startswith("--") and "." not in name:
        return False  # short options: only the per-program table knows them
    return is_secret_key(name)


# -- key = value pairs in any text --------------------------------------------------------------------------------

#: One character of a key as written in an escaped form: ``\u005f`` (JSON, also escaped twice), ``\x5f``,
#: ``%5F``.
_KEY_ESCAPE = r"\\+u[0-9a-fA-F]{4}|\\+U[0-9a-fA-F]{8}|\\+x[0-9a-fA-F]{2}|%[0-9a-fA-F]{2}"
#: A key where a word starts (so a scan never restarts inside one; a key of any length is scanned once), its
#: closing quote and separator; a value after white space only follows an option (``--api-key KEY``), not any
#: word.
_KEYED = re.compile(
    rf"(?<![\w.\\%-])(?:(--)|-?)((?:[A-Za-z_]|{_KEY_ESCAPE})(?:[\w.-]|{_KEY_ESCAPE})*)(\\?[\"']?)"
    r"(\s{0,8}[:=]\s{0,8}|(?(1)[ \t]{1,8}(?=[^\s-])|(?!)))"
)
_ESCAPED_CHAR = re.compile(r"\\+(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|x([0-9a-fA-F]{2}))|%([0-9a-fA-F]{2})")


def _unescaped_key(key: str) -> str:
    """A key as a parser reads it: ``api\\u005fkey`` is ``api_key``."""
    if "\\" not in key and "%" not in key:
        return key
    return _ESCAPED_CHAR.sub(lambda m: chr(min(int(next(g for g in m.groups() if g), 16), 0x10FFFF)), key)


_BARE = re.compile(r"[^\s,;&#}\])\"']*")


def bracket_depths(text: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """(index, bracket depth after it) of every character of ``text`` from ``start`` that is outside a quoted
    string (``'`` or ``"``, backslash escapes inside): how Python-literal and JSON values nest, in one pass."""
    depth, quote, i, n = 0, "", start, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        else:
            depth += (c in "[{(") - (c in "]})")
            yield i, depth
        i += 1


def _value_end(text: str, start: int) -> int:
    """Where the value starting at ``start`` ends: a quoted string, a bracketed list or table, or a bare word."""
    n = len(text)
    if start >= n:
        return start
    escaped_quote = text.startswith('\\"', start) or text.startswith("\\'", start)
    if escaped_quote or text[start] in "\"'":
        closer = text[start:start + 2] if escaped_quote else text[start]
        i = start + len(closer)
        while True:
            i = text.find(closer, i)
            if i < 0:
                return n
            if escaped_quote or text[i - 1] != "\\":
                return i + len(closer)
            i += 1
    if text[start] in "[{(":
        return next((i + 1 for i, depth in bracket_depths(text, start) if depth == 0 and text[i] in "]})"), n)
    m = _BARE.match(text, start)
    return m.end() if m else start


def _redact_keyed(text: str) -> str:
    """``secret_key = value`` pairs in any text redacted: JSON and Python literals (nested at any depth:
    every pair is found where it stands), ``k=v`` queries and fragments, ``NAME=value``, dotted options,
    and ``--secret-option VALUE`` (a command line quoted in a message)."""
    out: list[str] = []
    pos = 0
    for m in _KEYED.finditer(text):
        if m.start() < pos or not is_secret_key(_unescaped_key(m.group(2))):
            continue
        start = m.end()
        end = _value_end(text, start)
        value = text[start:end]
        if value.strip("\\\"'") in ("", "None", "null", REDACTED):
            continue
        quoted = value[:1] in "\"'" or value.startswith("\\")
        if quoted:
            quote = value[:2] if value.startswith("\\") else value[:1]
            closed = len(value) >= 2 * len(quote) and value.endswith(quote)
            replacement = quote + REDACTED + (quote if closed else "")
        else:
            replacement = REDACTED
        out.append(text[pos:start])
        out.append(replacement)
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str) -> str:
    """A string with every secret shape of VALUE_RULES and every secret ``key = value`` pair replaced."""
    if not isinstance(text, str) or not text:
        return text
    for _ in range(3):  # again over what a rule kept (a key as a URL's user name), until nothing changes
        lower = text.lower()
        done = _tokens().sub(REDACTED, text) if _may_hold_token(text, lower) else text
        for rule in VALUE_RULES:
            if any(hint in lower for hint in rule.hints):
                done = rule.pattern.sub(rule.replacement, done)
        if done == text:
            break
        text = done
    lower = text.lower()
    return _redact_keyed(text) if any(hint in lower for hint in KEY_HINTS) else text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment mapping with secret names' values and secret-shaped values replaced."""
    return {k: (REDACTED if is_secret_name(k) else redact_text(str(v))) for k, v in env.items()}


# -- argv and command lines ---------------------------------------------------------------------------------------

#: How a program's short option takes its secret: only glued on (``mysql -pPASS``; a lone ``-p`` prompts and
#: the next word is a database), glued or as the next word (``redis-cli -a PASS``), or ``user:PASS``.
ATTACHED, VALUE, USERINFO = "attached", "value", "userinfo"
_MYSQL = {"-p": ATTACHED}
SHORT_SECRET_OPTIONS: dict[str, dict[str, str]] = {
    "mysql": _MYSQL, "mysqldump": _MYSQL, "mysqladmin": _MYSQL, "mysqlimport": _MYSQL, "mysqlcheck": _MYSQL,
    "mariadb": _MYSQL, "mariadb-dump": _MYSQL, "mariadb-admin": _MYSQL,
    "redis-cli": {"-a": VALUE}, "valkey-cli": {"-a": VALUE}, "keydb-cli": {"-a": VALUE},
    "sshpass": {"-p": VALUE},
    "curl": {"-u": USERINFO, "-U": USERINFO, "--user": USERINFO, "--proxy-user": USERINFO},
    "smbclient": {"-U": USERINFO},
}
#: Options whose value is ``NAME=value`` (``docker run -e``, ``--env``, ``--build-arg``, ``helm --set``).
ASSIGN_OPTIONS: frozenset[str] = frozenset({"-e", "--env", "--build-arg", "--set", "--set-string", "--setenv"})

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.S)
#: An option's name (``--api-key``, ``-cc.foo.token``): not any word that starts with '-' (a PEM block does).
_OPTION = re.compile(r"^--?[A-Za-z_][\w.-]*$")


def _userinfo(value: str) -> str:
    user, sep, _password = value.partition(":")
    return f"{user}:{REDACTED}" if sep else redact_text(value)


def _assignment(token: str) -> str | None:
    """``NAME=value`` with the value redacted when NAME is secret, else None."""
    m = _ASSIGN.match(token)
    if m is None:
        return None
    name = m.group(1)
    # An upper-case name is an environment variable (design.md's substring rule); others are keys (word rule).
    if is_secret_key(name) or (name.isupper() and is_secret_name(name)):
        return f"{name}={REDACTED}"
    return None


def redact_argv(argv: list[str]) -> list[str]:
    """argv with secret option values, secret ``VAR=value`` assignments and secret shapes replaced.

    After a secret long option every following token that is not an option is redacted too (``--api-key``
    takes several keys in recent vLLM); ``--api-key=VALUE`` keeps the option name. Short options of the
    programs in SHORT_SECRET_OPTIONS are read after that program's name (``sudo mysql -pX``). A token with
    white space in it (``bash -c "mysql -pX db"``) is read as a command line of its own.
    """
    out: list[str] = []
    taking = False  # every following non-option token is secret
    pending: Callable[[str], str] | None = None  # the next token only, through this function
    program: dict[str, str] = {}
    for token in argv:
        token = str(token)
        if pending is not None:
            out.append(pending(token))
            pending = None
            continue
        if taking and not token.startswith("-"):
            out.append(REDACTED)
            continue
        taking = False
        name, eq, value = token.partition("=")
        base = os.path.basename(token)
        if base in SHORT_SECRET_OPTIONS and not token.startswith("-"):
            program = SHORT_SECRET_OPTIONS[base]
            out.append(token)
            continue
        short = _program_option(token, program)
        if short is not None:
            out.append(short[0])
            pending = short[1]
            continue
        option = _OPTION.match(name) is not None
        if option and is_secret_flag(name):
            if eq:
                out.append(name + "=" + REDACTED)
            else:
                out.append(token)
                taking = True
            continue
        if option and name in ASSIGN_OPTIONS:
            if eq:
                out.append(name + "=" + (_assignment(value) or redact_text(value)))
            else:
                out.append(token)
                pending = lambda t: _assignment(t) or redact_text(t)  # noqa: E731 - a one-token rule
            continue
        assigned = _assignment(token)
        if assigned is not None:
            out.append(assigned)
            continue
        if any(c.isspace() for c in token):
            out.append(redact_command_line(token))
            continue
        out.append(redact_text(token))
    return out


def _program_option(token: str, program: Mapping[str, str]) -> tuple[str, Callable[[str], str] | None] | None:
    """(the token as recorded, what to do with the next token) for a program's secret short option, else None."""
    for option, how in program.items():
        if option.startswith("--"):
            name, eq, value = token.partition("=")
            if name != option:
                continue
            if eq:
                return f"{name}={_userinfo(value) if how == USERINFO else REDACTED}", None
            return token, (_userinfo if how == USERINFO else lambda _t: REDACTED)
        if token == option:
            if how == ATTACHED:
                return None
            return token, (_userinfo if how == USERINFO else lambda _t: REDACTED)
        if token.startswith(option) and len(token) > len(option):
            rest = token[len(option):]
            return option + (_userinfo(rest) if how == USERINFO else REDACTED), None
    return None


def split_lenient(text: str) -> list[tuple[int, int, str]]:
    """Shell words of ``text`` as (start, end, word), never failing: an unclosed quote runs to the end.

    shlex refuses such text; a command that cannot be split must still be redacted before it is shown.
    """
    words: list[tuple[int, int, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        start, word = i, []
        while i < n and not text[i].isspace():
            c = text[i]
            if c == "'":
                end = text.find("'", i + 1)
                end = n if end < 0 else end
                word.append(text[i + 1:end])
                i = end + 1
            elif c == '"':
                i += 1
                while i < n and text[i] != '"':
                    if text[i] == "\\" and i + 1 < n:
                        i += 1
                    word.append(text[i])
                    i += 1
                i += 1
            elif c == "\\" and i + 1 < n:
                word.append(text[i + 1])
                i += 2
            else:
                word.append(c)
                i += 1
        words.append((start, min(i, n), "".join(word)))
    return words


def redact_command_line(text: str) -> str:
    """A command line as written (also one shlex cannot split), with the secrets redact_argv finds in its
    words and every secret shape replaced; words with nothing secret keep their original spelling."""
    if not isinstance(text, str) or not text:
        return text
    words = split_lenient(text)
    redacted = redact_argv([w for _s, _e, w in words])
    out, pos = [], 0
    for (start, end, word), new in zip(words, redacted, strict=True):
        if new != word:
            out += [text[pos:start], shlex.quote(new) if any(c.isspace() for c in new) else new]
            pos = end
    out.append(text[pos:])
    return redact_text("".join(out))


# -- URLs ---------------------------------------------------------------------------------------------------------

_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]{0,31}://")
_TOKEN_USER = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]{0,31}://)([^/\s:@?#]+)@")


def _userinfo_at(url: str) -> tuple[int, int, int] | None:
    """Where ``user:PASSWORD@`` of a URL (with or without a scheme) is: (user start, password start, index of
    the '@' that ends it), else None. The password runs to the last '@' (it may hold '@' and '/'); a user name
    or password of any length is found in one pass (no pattern backtracks over them)."""
    m = _SCHEME.match(url)
    start = m.end() if m else 0
    at = url.rfind("@", start)
    colon = url.find(":", start, at if at > 0 else 0)
    if at < 0 or colon < 0 or url.startswith("//", colon + 1) or colon + 1 == at:
        return None
    if any(c in "/?#@" or c.isspace() for c in url[start:colon]) or any(c.isspace() for c in url[colon:]):
        return None
    return start, colon + 1, at


def url_secrets(url: str) -> list[str]:
    """The secret parts of a URL as written: the password of ``user:pass@`` (or a bare token as user name)
    and the values of secret query and fragment parameters, so that a message repeating any part of the URL
    can be cleaned with redact_mentions."""
    found: list[str] = []
    where = _userinfo_at(url)
    if where:
        found.append(url[where[1]:where[2]])
    else:
        t = _TOKEN_USER.match(url)
        if t:
            found.append(t.group(2))
    for pair in re.split(r"[?&#;]", url)[1:]:
        key, eq, value = pair.partition("=")
        if eq and value and is_secret_key(unquote(key)):
            found.append(value)
    for piece in list(found):
        unquoted = unquote(piece)
        if unquoted != piece:
            found.append(unquoted)
        found.extend(p for p in re.split(r"[@/:]", piece) if len(p) >= 4)  # pieces an error may quote alone
    return sorted({p for p in found if p and p != REDACTED}, key=len, reverse=True)


def redact_mentions(text: str, url: str) -> str:
    """A message about ``url`` (an error that may repeat the URL or a piece of it, such as the
    ``nonnumeric port: 'pass@host'`` of http.client) with every secret part of the URL replaced."""
    for piece in url_secrets(url):
        text = text.replace(piece, REDACTED)
    return redact_text(text)


def redact_url(url: str) -> str:
    """A URL with the password of ``user:pass@`` (which may hold '@' and '/'), a bare token user name and
    secret query and fragment parameters replaced."""
    if not isinstance(url, str):
        return url
    where = _userinfo_at(url)
    if where:
        url = f"{url[:where[1]]}{REDACTED}{url[where[2]:]}"
    else:
        t = _TOKEN_USER.match(url)
        if t and not t.group(2).startswith(REDACTED):
            url = f"{t.group(1)}{REDACTED}@{url[t.end():]}"
    return redact_text(url)


# -- nested values ------------------------------------------------------------------------------------------------


def redact_value(value: Any, key: str | None = None, depth: int = 0) -> Any:
    """Any nested value (dicts, lists, strings) with secrets replaced; keys are tested by is_secret_key. Nesting
    deeper than a snapshot keeps (hoststate.text.MAX_NESTING) is cut here, before it can exhaust the stack."""
    if key is not None and is_secret_key(key) and value not in (None, "", [], {}):
        return REDACTED
    if isinstance(value, Mapping | list | tuple) and depth > MAX_NESTING:
        return NESTED_TOO_DEEPLY
    if isinstance(value, Mapping):
        return {k: redact_value(v, str(k), depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, None, depth + 1) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_strings(value: Any, depth: int = 0) -> Any:
    """Any nested value with every string passed through redact_text (shapes and ``key = value`` pairs in
    text), keys left alone: the last pass over a whole snapshot, whatever collector produced it."""
    if isinstance(value, Mapping | list | tuple) and depth > MAX_NESTING:
        return NESTED_TOO_DEEPLY
    if isinstance(value, Mapping):
        return {k: redact_strings(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_strings(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_strings(v, depth + 1) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value
