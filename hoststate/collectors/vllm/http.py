"""``--vllm-url``: what a running server's HTTP endpoints say (/version, /v1/models, /metrics, /server_info).

Every request has a deadline and a size cap; an unreachable server is recorded, never raised, and no
error message repeats a secret of the URL.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from hoststate.collectors import env as env_collector
from hoststate.redact import redact_env, redact_mentions, redact_url, redact_value

#: Seconds one HTTP request to ``--vllm-url`` may take.
HTTP_TIMEOUT = 3.0
#: Largest response body read from an endpoint.
HTTP_MAX_BYTES = 4 << 20
#: Deepest JSON nesting parsed from an endpoint (vLLM's answers nest five or six levels): a deeper answer is an
#: error of that endpoint, found before json.loads, whose recursion a 100,000-level answer would exhaust.
MAX_JSON_DEPTH = 64

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """How deep a JSON text nests (brackets outside strings), in one linear scan."""
    depth = deepest = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


class NestedTooDeeply(ValueError):
    """A JSON answer nested deeper than MAX_JSON_DEPTH."""


def load_json(text: str | None) -> Any:
    """json.loads with nesting bounded by MAX_JSON_DEPTH; every failure is ValueError (NestedTooDeeply for
    nesting)."""
    text = text or ""
    too_deep = NestedTooDeeply(f"nested deeper than {MAX_JSON_DEPTH} levels")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise too_deep
    try:
        return json.loads(text)
    except RecursionError:
        raise too_deep from None


def _credentials(url: str) -> tuple[str, str | None]:
    """(the URL without ``user:pass@``, the Authorization value for them or None). urllib does not
    read credentials from a URL: it would look up ``user:pass@host`` as a host name."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


def _get(base: str, path: str) -> tuple[int | None, str | None, str | None]:
    """(status, body, error) of one GET; never raises. The error never repeats a secret of ``base``."""
    import urllib.error  # lazy: urllib.request costs ~30 ms of import, and only --vllm-url needs it
    import urllib.request

    target, auth = _credentials(base)
    url = target.rstrip("/") + path
    try:
        request = urllib.request.Request(url)
        if auth:
            request.add_unredirected_header("Authorization", auth)  # not sent on to a redirect's host
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as resp:  # noqa: S310
            return resp.status, resp.read(HTTP_MAX_BYTES).decode("utf-8", "replace"), None
    except urllib.error.HTTPError as err:
        return err.code, None, f"HTTP {err.code}"
    except Exception as err:  # URLError, OSError, ValueError, http.client.InvalidURL, BadStatusLine, ...
        reason = getattr(err, "reason", err)
        message = str(reason)[:200] or type(err).__name__
        return None, None, redact_mentions(message, base)


_METRIC = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SPEC_METRICS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")


def parse_metrics(text: str) -> dict[str, Any]:
    """``vllm:cache_config_info`` labels and spec-decode counter totals from Prometheus text."""
    out: dict[str, Any] = {}
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _METRIC.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if name == "vllm:cache_config_info":
            info = {k: _number(v) for k, v in _LABEL.findall(labels)}
            out["cache_config"] = redact_value({k: v for k, v in info.items() if v not in ("", "None")})
        base = name.removesuffix("_total")
        if base in _SPEC_METRICS:
            short = base.split(":", 1)[1]
            with contextlib.suppress(ValueError):
                totals[short] = totals.get(short, 0.0) + float(value)
    if totals:
        out["spec_decode"] = {k: int(v) if v.is_integer() else v for k, v in totals.items()}
    return out


def _number(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def query_url(url: str) -> dict[str, Any]:
    """What the server's endpoints say; an unreachable server is recorded, not raised."""
    data: dict[str, Any] = {"url": redact_url(url)}
    status, body, err = _get(url, "/version")
    if err:
        data["reachable"] = status is not None
        data["error"] = f"/version: {err}"
        if status is None:
            return data
    else:
        data["reachable"] = True
        try:
            data["version"] = str(load_json(body)["version"])
        except (ValueError, KeyError, TypeError):
            data["version_error"] = "/version: not a JSON object with 'version'"
    status, body, err = _get(url, "/v1/models")
    if err:
        data["models_error"] = f"/v1/models: {err}"
    else:
        try:
            models = load_json(body).get("data", [])
            data["models"] = [
                redact_value({k: m[k] for k in ("id", "max_model_len", "root") if k in m and m[k] is not None})
                for m in models if isinstance(m, dict)
            ]
        except NestedTooDeeply as err:
            data["models_error"] = f"/v1/models: JSON {err}"
        except (ValueError, AttributeError):
            data["models_error"] = "/v1/models: not JSON"
    status, body, err = _get(url, "/metrics")
    if err:
        data["metrics_error"] = f"/metrics: {err}"
    else:
        data.update(parse_metrics(body or ""))
    status, body, err = _get(url, "/server_info?config_format=json")
    if not err:
        try:
            info = load_json(body)
        except ValueError:
            info = None
        if isinstance(info, dict):
            data["server_info"] = _server_info(info)
    else:
        data["server_info_available"] = False  # needs VLLM_SERVER_DEV_MODE=1
    return data


def _server_info(info: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key in ("vllm_env", "system_env") and isinstance(value, dict):
            out[key] = redact_env({k: str(v) for k, v in value.items() if env_collector.allowed(k)})
        elif key == "vllm_config":
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    value = load_json(value)
            out[key] = redact_value(value)
        else:
            out[key] = redact_value(value)
    return out
