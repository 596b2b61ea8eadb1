"""The one place that keeps secrets out of what hoststate records and prints.

Secrets are found two ways, in every input (argv, environment, ``--vllm-cmd``, ``--vllm-url``, logs,
``/metrics``, labels, guard's command):

- by name: ``is_secret_name`` for environment variables (design.md's words TOKEN, KEY, SECRET, PASSWORD,
  PASSWD, CREDENTIAL, AUTH, plus PASS, PWD, CRED, COOKIE, SIGNATURE), ``is_secret_key`` for option and
  configuration keys (``--api-key``, ``hf_token``, ``kv_transfer_config.x.password``, ``X-Amz-Credential``,
  argparse abbreviations such as ``--api-ke``), and ``SHORT_SECRET_OPTIONS`` for programs whose short options
  take one (``mysql -pPASS``);
- by shape: gitleaks' own rules, compiled from their published regexes (hoststate/gitleaks.py, the table
  hoststate/gitleaks_rules.toml), ``TOKEN_FORMATS`` (provider token formats with floors, some gitleaks lacks),
  ``VALUE_RULES`` (PEM blocks, URL passwords, ``user:pw@host`` without a scheme, headers, webhooks, JWTs) and
  ``key = value`` pairs in any text (JSON, Python literals, queries and fragments, ``NAME=value``, ``=>`` and
  ``:=``, ``cfg['key'] =``; keys of any length, escapes decoded), so an ``sk-...`` key given as a positional
  argument, or a password nested in a JSON option, is redacted as surely as one under ``--api-key``;
- in any text, also what only decoding shows: a quoted literal with backslash escapes (JSON in a JSON string)
  and a URL-encoded word (``AccountKey%3D...``) are decoded, redacted, and written again, and what the shapes
  find in the text as written is redacted too (each reading can take away a context the other needs); and a
  program's secret short option after its name (``mysql -pSECRET`` in a log line or an environment value).

A redacted value is replaced by ``REDACTED``; nothing here raises, and every scan is linear in its input
(no repetition can restart inside its own match or backtrack over another), because the text comes from
other users' processes.
Redaction is for what hoststate records and prints; what it passes on (guard's command and its
environment) is never changed.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from hoststate import gitleaks
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

#: Whole names that contain a secret word and hold no secret: the shell's working directories and the InfiniBand
#: partition key (or its index) NCCL, UCX and NVSHMEM use, a fabric setting readable by any process on the node
#: (/sys/class/infiniband/*/ports/*/pkeys) that picks the partition traffic goes over. NVSHMEM documents
#: NVSHMEM_IB_PKEY_INDEX; NVSHMEM_IB_PKEY is kept too, the name users write by analogy with NCCL's.
NOT_SECRET_NAMES: frozenset[str] = frozenset(
    {"PWD", "OLDPWD", "NCCL_IB_PKEY", "UCX_IB_PKEY", "NVSHMEM_IB_PKEY", "NVSHMEM_IB_PKEY_INDEX"})

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


class ValueRule(NamedTuple):
    """One secret shape: ``pattern`` is replaced by ``replacement`` (which may keep a prefix group)."""

    name: str
    #: The regular expression, compiled (value_pattern) the first time a text holds one of the hints.
    pattern: str
    replacement: str | Callable[[re.Match[str]], str]
    #: Lower-case literals one of which every match contains: a text without any is not scanned (speed).
    hints: tuple[str, ...] = ()


def _rule(name: str, pattern: str, replacement: str, hints: str) -> ValueRule:
    default = _bare_userinfo if name == "userinfo-no-scheme" else _to_last_at
    return ValueRule(name, pattern, replacement or default, tuple(hints.split()))


@functools.cache
def value_pattern(pattern: str) -> re.Pattern[str]:
    """A VALUE_RULES pattern, compiled at its first use: compiling all of them at import took 3 ms of each snap,
    whose texts meet the hints of a few."""
    return re.compile(pattern)


#: What follows the '@' of ``user:password@host``: a host name, then a port, a path or the end of the word.
_HOST_AFTER_AT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::\d{1,5})?(?:[/?#,;)\]}']|$)")


def _bare_userinfo(m: re.Match[str]) -> str:
    """``user:`` kept and the password up to the word's last '@' redacted, when a host follows that '@'."""
    word = m.group()
    colon, at = word.index(":"), word.rfind("@")
    if at <= colon + 1 or not _HOST_AFTER_AT.match(word, at + 1) or word.startswith(REDACTED, colon + 1):
        return word
    return word[:colon + 1] + REDACTED + word[at:]


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
    # A user name of any length: it stops at '/', which every later '://' holds, so scans never overlap. The
    # password may hold a "'" (RFC 3986 allows it unencoded), not its first character.
    _rule("url-userinfo", r"(?i:(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}://[^/\s:@\"'<>]*:[^\s\"'<>][^\s\"<>]*)", "",
          "://"),
    # user:PASSWORD@host without a scheme (a DSN, an scp-like target): from where a word starts, the password
    # to the word's last '@', when a host name follows it (not ``image:tag@sha256:...``); a "'" in it as above.
    _rule("userinfo-no-scheme", r"(?<![^\s\"'=,;(\[{])[\w.~%!$&*+-]{1,128}:(?!//)[^\s\"'<>][^\s\"<>]*", "", "@"),
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


_PREPARING = threading.Lock()


_TOKEN_PATTERN: list[re.Pattern[str]] = []


def _tokens() -> re.Pattern[str]:
    """TOKEN_FORMATS' pattern, compiled at first use (3 ms on the VM; importing this module stays cheap), once,
    though two sections' threads may ask at the same moment."""
    if not _TOKEN_PATTERN:
        with _PREPARING:
            if not _TOKEN_PATTERN:
                _TOKEN_PATTERN.append(_token_pattern(TOKEN_FORMATS))
    return _TOKEN_PATTERN[0]


@functools.cache
def _token_literals() -> tuple[str, ...]:
    """The lower-cased prefixes of TOKEN_FORMATS, none starting with another (where a longer one starts, so does
    the shorter)."""
    return shortest_prefixes(prefix.removesuffix("(?i)").lower() for _rule_id, prefix, _body, _least in TOKEN_FORMATS)


def shortest_prefixes(words: Iterable[str]) -> tuple[str, ...]:
    """The sorted words none of which starts with another. In sorted order every word that starts with ``w``
    follows ``w`` directly, before any that does not, so one pass against the last word kept finds them all
    (comparing every pair cost 5 ms on the project's VM, in the first redaction of every snap)."""
    kept: list[str] = []
    for word in sorted(set(words)):
        if not (kept and word.startswith(kept[-1])):
            kept.append(word)
    return tuple(kept)


def may_hold_token(text: str) -> bool:
    r"""False only when ``_tokens()`` cannot match ``text``: no TOKEN_FORMATS prefix starts in it where the pattern
    lets a token start, not after a word character (``(?<!\w)``: a UUID's ``e8a3-`` does not start ``a3-``).
    Non-ASCII text always may: its ``\w`` and case folding reach past ASCII (the long s matches ``s`` without
    case)."""
    if not text.isascii():
        return True
    lower = text.lower()
    for lit in _token_literals():
        at = lower.find(lit)
        while at >= 0:
            if at == 0 or not (lower[at - 1].isalnum() or lower[at - 1] == "_"):
                return True
            at = lower.find(lit, at + 1)
    return False


#: Texts checked for a token prefix (may_hold_token: 5 us a text on the VM) before every text goes to the pattern.
_token_checks = 0


def _sub_tokens(text: str) -> str:
    """``text`` with every TOKEN_FORMATS match redacted. The first gitleaks.SCAN_AFTER texts go to the pattern only
    when they may hold a token, so a snapshot of a few hundred texts without one never compiles it."""
    global _token_checks
    if _token_checks < gitleaks.SCAN_AFTER:
        _token_checks += 1  # a race only moves the switch: both ways redact the same
        if not may_hold_token(text):
            return text
    return _tokens().sub(REDACTED, text)


def prepare() -> None:
    """Build what redaction needs before its first text (the gitleaks rule table and its keywords: the compiled
    scans wait for a text that needs them) once: a thread that comes while another builds them waits for that
    build instead of making its own (hoststate.capture builds them in its warm thread while the collectors run,
    and redacts each section)."""
    from hoststate.gitleaks import prepare as prepare_gitleaks

    with _PREPARING:
        prepare_gitleaks()


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
#: closing quote (and a subscript's ``]``: ``cfg['db_password'] = ``) and separator (``:``, ``=``, also ``=>`` of
#: a Ruby or PHP hash and Go's ``:=``, which would otherwise leave the value to the scan as ``>``); a value after
#: white space only follows an option (``--api-key KEY``), not any word.
_KEYED = re.compile(
    rf"(?<![\w.\\%-])(?:(--)|-?)((?:[A-Za-z_]|{_KEY_ESCAPE})(?:[\w.-]|{_KEY_ESCAPE})*)(\\?[\"']?\]?)"
    r"(\s{0,8}(?:=>|:=|[:=])\s{0,8}|(?(1)[ \t]{1,8}(?=[^\s-])|(?!)))"
)
_ESCAPED_CHAR = re.compile(r"\\+(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|x([0-9a-fA-F]{2}))|%([0-9a-fA-F]{2})")


def _unescaped_key(key: str) -> str:
    """A key as a parser reads it: ``api\\u005fkey`` is ``api_key``."""
    if "\\" not in key and "%" not in key:
        return key
    return _ESCAPED_CHAR.sub(lambda m: chr(min(int(next(g for g in m.groups() if g), 16), 0x10FFFF)), key)


#: A bare value: up to white space, a separator, a quote or a closing bracket that ends it (one followed by white
#: space, a separator, a quote, another closing bracket or the end: ``dict(password=x)``); a closing bracket
#: followed by anything else is the value's own (``password=)x]y``, as a connection string's parser reads it).
_BARE = re.compile(r"(?:[^\s,;&#}\])\"']|[}\])]+(?=[^\s,;&#}\])\"']))*")


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
    """A string with every secret shape (gitleaks' rules, TOKEN_FORMATS, VALUE_RULES), every secret
    ``key = value`` pair and every secret short option of a program named in it replaced; also inside escaped
    string literals (JSON in JSON, a repr in a log line) and URL-encoded words (``AccountKey%3D...``). Fails
    closed: should a rule ever raise on a text, the whole text is REDACTED."""
    try:
        return _redact(text, 0)
    except Exception:  # noqa: BLE001 - a text redaction cannot vouch for is not kept
        return REDACTED


#: How many times an escaped literal or an encoded word is decoded inside another (JSON in JSON in a log line).
DECODE_DEPTH = 4


def _redact(text: str, depth: int) -> str:
    if not isinstance(text, str) or not text:
        return text
    shaped = _redact_shapes(text)
    if depth < DECODE_DEPTH and ("\\" in text or _ENCODED_SEPARATOR.search(text)):
        # first what only decoding shows (a shape may hold a literal's escapes), then the shapes. Each reading
        # can take away the context another needs (a pair's value redacted inside a decoded literal is the ``=>``
        # of freemius' ``"secret_key" => "sk_..."`` outside it; a token read as written takes the word ``kucoin``
        # a rule reads inside the literal), so what the shapes find in the text as written goes too.
        decoded = _redact_escaped_literals(_redact_encoded(text, depth), depth)
        if decoded != text:
            shaped = _union(text, shaped, _redact_shapes(decoded))
    text = shaped
    lower = text.lower()
    if _program_hint().search(lower):
        text = _redact_program_options(text)
        lower = text.lower()
    return _redact_keyed(text) if any(hint in lower for hint in KEY_HINTS) else text


def _union(text: str, first: str, second: str) -> str:
    """``text`` with what either of two redactions of it replaced (each is ``text`` with pieces replaced by
    REDACTED). Where one of them also respelled the text (an encoded word written again), ``second`` with every
    piece ``first`` replaced."""
    a, b = _replaced_spans(text, first), _replaced_spans(text, second)
    if a is None or b is None:
        for piece in sorted(_removed(text, first), key=len, reverse=True):
            second = second.replace(piece, REDACTED)
        return second
    merged: list[tuple[int, int]] = []
    for start, end in sorted(a + b):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    out, pos = [], 0
    for start, end in merged:
        out += [text[pos:start], REDACTED]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _replaced_spans(before: str, after: str) -> list[tuple[int, int]] | None:
    """The (start, end) spans of ``before`` that became REDACTED in ``after``, else None (``after`` is not
    ``before`` with spans replaced). Where a kept piece could stand at several places, each span runs from the
    earliest end of the piece before it to the latest start of the piece after it: never less than was replaced."""
    pieces = after.split(REDACTED)
    if len(pieces) == 1:
        return [] if before == after else None
    earliest, latest = _embed(before, pieces), _embed_from_right(before, pieces)
    if earliest is None or latest is None:
        return None
    return [(earliest[k - 1] + len(pieces[k - 1]), latest[k]) for k in range(1, len(pieces))]


def _embed(text: str, pieces: list[str]) -> list[int] | None:
    """Where each of ``pieces`` starts in ``text``, in order, the first at 0 and the last at the end, each as
    early as it can (None when they do not fit)."""
    if not text.startswith(pieces[0]):
        return None
    starts, pos = [0], len(pieces[0])
    for piece in pieces[1:-1]:
        at = text.find(piece, pos)
        if at < 0:
            return None
        starts.append(at)
        pos = at + len(piece)
    last = len(text) - len(pieces[-1])
    if last < pos or not text.endswith(pieces[-1]):
        return None
    return [*starts, last]


def _embed_from_right(text: str, pieces: list[str]) -> list[int] | None:
    """As _embed, each piece as late as it can."""
    if not text.endswith(pieces[-1]):
        return None
    end = len(text) - len(pieces[-1])
    starts = [end]
    for piece in reversed(pieces[1:-1]):
        at = text.rfind(piece, len(pieces[0]), end)
        if at < 0:
            return None
        starts.append(at)
        end = at
    if end < len(pieces[0]) or not text.startswith(pieces[0]):
        return None
    return [0, *reversed(starts)]


def _redact_shapes(text: str) -> str:
    """gitleaks' rules, TOKEN_FORMATS and VALUE_RULES, again over what a rule kept (a key as a URL's user
    name) until nothing changes."""
    for _ in range(3):
        lower = text.lower()
        done = gitleaks.redact(text, REDACTED)
        done = _sub_tokens(done)
        for rule in VALUE_RULES:
            if any(hint in lower for hint in rule.hints):
                done = value_pattern(rule.pattern).sub(rule.replacement, done)
        if done == text:
            break
        text = done
    return text


#: A word with a URL-encoded '=' or ':' (also encoded twice, ``%253D``).
_ENCODED_SEPARATOR = re.compile(r"%(?:25)?3[aAdD]")
_WORD = re.compile(r"[^\s\"'<>]+")


def _redact_encoded(text: str, depth: int) -> str:
    """Each word holding ``%3D`` or ``%3A`` (a connection string or a JSON text URL-encoded into a query)
    decoded, redacted as text, and encoded again when a secret was found in it."""
    if not _ENCODED_SEPARATOR.search(text):
        return text
    from urllib.parse import quote, unquote  # here: most texts hold no encoded word, and its import is 1-2 ms

    def one(m: re.Match[str]) -> str:
        word = m.group()
        if not _ENCODED_SEPARATOR.search(word):
            return word
        decoded, times = word, 0
        while "%" in decoded and times < 2 and (plain := unquote(decoded)) != decoded:
            decoded, times = plain, times + 1
        redacted = _redact(decoded, depth + 1)
        if redacted == decoded:
            return word
        for _ in range(times):
            redacted = quote(redacted, safe="<>", errors="surrogatepass")
        return redacted
    return _WORD.sub(one, text)


#: A quoted string literal, JSON's or Python's (only one with a backslash escape in it is decoded). It starts at
#: a quote no backslash escapes (nor, for ``'``, a letter: ``don't``), so a failed literal is scanned once.
_ESCAPED_LITERAL = re.compile(r'(?<!\\)"((?:[^"\\\n]|\\.)*)"|(?<![\\\w])\'((?:[^\'\\\n]|\\.)*)\'')
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|U([0-9a-fA-F]{8})|(.))", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0"}


def _unescape(body: str) -> str:
    """A literal's body as JSON or Python reads it (an unknown escape keeps its character; ``\\ud83d\\ude00``, a
    surrogate pair as JSON writes a character beyond the BMP, is that character)."""
    return _unescape_map(body)[0]


def _unescape_map(body: str) -> tuple[str, list[int]]:
    """(the body decoded, where in the body each decoded character starts, and the body's length last)."""
    chars: list[str] = []
    starts: list[int] = []
    i, n = 0, len(body)
    while i < n:
        m = _ESCAPE.match(body, i) if body[i] == "\\" else None
        if m is None:
            chars.append(body[i])
            starts.append(i)
            i += 1
            continue
        code = m.group(1) or m.group(2) or m.group(3)
        char = chr(min(int(code, 16), 0x10FFFF)) if code else _SIMPLE_ESCAPES.get(m.group(4), m.group(4))
        if chars and "\ud800" <= chars[-1] <= "\udbff" and "\udc00" <= char <= "\udfff":
            chars[-1] = chr(0x10000 + ((ord(chars[-1]) - 0xD800) << 10) + ord(char) - 0xDC00)
        else:
            chars.append(char)
            starts.append(i)
        i = m.end()
    starts.append(n)
    return "".join(chars), starts


def _respell(body: str, plain: str, starts: list[int], redacted: str) -> str | None:
    """The literal's body with only what redaction replaced in ``plain`` replaced, every other character spelled
    as it was (escapes kept), so the text around a secret keeps the context other rules read; None when the
    replacements cannot be placed (then the literal is written anew)."""
    pieces = redacted.split(REDACTED)
    if not plain.startswith(pieces[0]) or not plain.endswith(pieces[-1]):
        return None
    out, pos = [body[:starts[len(pieces[0])]]], len(pieces[0])
    for k, piece in enumerate(pieces[1:], 1):
        at = len(plain) - len(piece) if k == len(pieces) - 1 else plain.find(piece, pos)
        if at < pos:
            return None
        out += [REDACTED, body[starts[at]:starts[at + len(piece)]]]
        pos = at + len(piece)
    new = "".join(out)
    return new if _unescape(new) == redacted else None


def _redact_escaped_literals(text: str, depth: int) -> str:
    """Each quoted literal with escapes in it (``{\"note\": \"adafruit = \\\"KEY\\\"\"}``) read as its
    parser reads it, redacted as text, and written again (JSON's way or Python's) when a secret was found."""
    if "\\" not in text:
        return text
    def one(m: re.Match[str]) -> str:
        double = m.group(1) is not None
        body = m.group(1) if double else m.group(2)
        if "\\" not in body:
            return m.group()
        plain, starts = _unescape_map(body)
        redacted = _redact(plain, depth + 1)
        if redacted == plain:
            return m.group()
        quote_char = '"' if double else "'"
        respelled = _respell(body, plain, starts, redacted)
        if respelled is not None:
            return quote_char + respelled + quote_char
        if double:
            return json.dumps(redacted, ensure_ascii=False)
        return "'" + redacted.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return _ESCAPED_LITERAL.sub(one, text)


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
        if any(c.isspace() for c in token) and value.lstrip()[:1] not in ("{", "[") and token[:1] not in "{[":
            out.append(redact_command_line(token))  # a JSON value is no command line: its quotes are JSON's
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
    words and every secret shape replaced; words with nothing secret keep their original spelling, and so do
    words whose secret a shape rule removes from the spelling itself (``{"note": "KEY"}`` keeps its quotes)."""
    if not isinstance(text, str) or not text:
        return text
    # Shapes are read in two spellings, each before anything else can break a context: in each word as the
    # shell reads it (quotes removed), and in the text as written (a context across words); what the first
    # finds is removed from the second wherever it stands as written.
    found = {piece for _s, _e, word in split_lenient(text) for piece in _removed(word, redact_text(word))}
    text = _redact_shapes(text)
    for piece in sorted(found, key=len, reverse=True):
        text = text.replace(piece, REDACTED)
    words = split_lenient(text)
    redacted = redact_argv([w for _s, _e, w in words])
    out, pos = [], 0
    for (start, end, word), new in zip(words, redacted, strict=True):
        if new != word:
            spelled = redact_text(text[start:end])
            if [w for _s, _e, w in split_lenient(spelled)] == [new]:
                out += [text[pos:start], spelled]
            else:
                out += [text[pos:start], shlex.quote(new) if any(c.isspace() for c in new) else new]
            pos = end
    out.append(text[pos:])
    return redact_text("".join(out))


def _removed(before: str, after: str) -> list[str]:
    """The pieces of ``before`` that redaction replaced to give ``after`` (at least 4 characters each: a
    shorter one would be replaced wherever it occurs)."""
    if before == after:
        return []
    pieces = after.split(REDACTED)
    if not before.startswith(pieces[0]) or not before.endswith(pieces[-1]):
        return [before] if len(before) >= 4 else []
    removed, pos = [], len(pieces[0])
    for k, piece in enumerate(pieces[1:], 1):
        at = len(before) - len(piece) if k == len(pieces) - 1 else before.find(piece, pos)
        if at < pos:
            return [before] if len(before) >= 4 else []
        removed.append(before[pos:at])
        pos = at + len(piece)
    return [r for r in removed if len(r) >= 4 and r != REDACTED]


@functools.cache
def _program_hint() -> re.Pattern[str]:
    """Any program name of SHORT_SECRET_OPTIONS, anywhere (the cheap test before _programs)."""
    return re.compile("|".join(re.escape(p) for p in sorted(SHORT_SECRET_OPTIONS, key=len, reverse=True)))


@functools.cache
def _programs() -> re.Pattern[str]:
    """A word naming a program of SHORT_SECRET_OPTIONS (also as a path: ``/usr/bin/mysql``)."""
    names = "|".join(re.escape(p) for p in sorted(SHORT_SECRET_OPTIONS, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:[\w./-]*/)?(?:{names})(?![\w.-])")


def _redact_program_options(text: str) -> str:
    """``mysql -uroot -pSECRET db``, ``redis-cli -a SECRET``, ``curl -u user:SECRET`` in any text (a log line,
    an environment value, a message): the words after a program's name, to the next program or the end of the
    line, read as its options (each word is read once, so a line of program names costs its length)."""
    marks = list(_programs().finditer(text))
    if not marks:
        return text
    out, pos = [], 0
    for n, mark in enumerate(marks):
        start = mark.end()
        line_end = text.find("\n", start)
        end = min(marks[n + 1].start() if n + 1 < len(marks) else len(text), line_end if line_end >= 0 else len(text))
        program = SHORT_SECRET_OPTIONS[os.path.basename(mark.group())]
        pending: Callable[[str], str] | None = None
        for s, e, word in split_lenient(text[start:end]):
            new = word
            if pending is not None:
                new, pending = pending(word), None
            else:
                found = _program_option(word, program)
                if found is not None:
                    new, pending = found
            if new != word:
                out += [text[pos:start + s], new]
                pos = start + e
    out.append(text[pos:])
    return "".join(out)


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
    from urllib.parse import unquote

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


class Own(str):
    """Words hoststate wrote itself, with every value they quote already redacted where it was taken in (a
    collector's message built from the redacted command line): the last pass leaves them as written, so
    hoststate's own wording ("key: value", "--api-key: expected one argument") is never taken for a secret."""

    __slots__ = ()


def redact_strings(value: Any, depth: int = 0) -> Any:
    """Any nested value with every string passed through redact_text (shapes and ``key = value`` pairs in
    text), keys left alone: the last pass over a whole snapshot, whatever collector produced it. An ``Own`` string
    is hoststate's own message over redacted values and is kept."""
    if isinstance(value, Own):
        return value
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
