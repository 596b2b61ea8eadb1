"""``--vllm-url``: what a running server's HTTP endpoints say (/version, /v1/models, /metrics, /server_info).

Every request has a deadline and a size cap; an unreachable server is recorded, never raised, and no
error message repeats a secret of the URL.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from dataclasses import dataclass
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


#: vLLM /metrics counters summed over label sets: name -> (metric, label filter).
VLLM_COUNTERS = {
    "preemptions": ("vllm:num_preemptions", None),
    "aborted_requests": ("vllm:request_success", ("finished_reason", "abort")),
    "failed_requests": ("vllm:request_success", ("finished_reason", "error")),
}


def parse_vllm_counters(text: str) -> dict[str, float]:
    """:data:`VLLM_COUNTERS` from Prometheus text: each summed over its label sets (engines, models)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = None if line.startswith("#") else _METRIC.match(line)
        if not m:
            continue
        name = m.group(1).removesuffix("_total")
        labels = dict(_LABEL.findall(m.group(2) or ""))
        for key, (metric, want) in VLLM_COUNTERS.items():
            if name == metric and (want is None or labels.get(want[0]) == want[1]):
                with contextlib.suppress(ValueError):
                    out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def scrape_vllm(url: str, *, expect_pid: int | None = None, expect_start: int | None = None,
                timeout: float = HTTP_TIMEOUT) -> tuple[dict[str, float] | None, str | None]:
    """(counters, error) from ``URL/metrics``, read from the server's own socket only (:func:`get_from_owner`:
    ``expect_pid`` the server the snapshot described, one deadline for the whole exchange); never raises."""
    got = get_from_owner(url, "/metrics", expect_pid=expect_pid, expect_start=expect_start, timeout=timeout)
    if got.error or got.status != 200:
        return None, got.error or f"HTTP {got.status}"
    return parse_vllm_counters(got.body or ""), None


def _number(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _getter(owner: tuple[int, int | None] | None) -> Any:
    """``_get``, or, for a server identified behind the URL (pid, start time), ``get_from_owner`` bound to it: the
    endpoints are then read from that process's socket only, as identified (a request it does not own is an error)."""
    if owner is None:
        return _get

    def owned(base: str, path: str) -> tuple[int | None, str | None, str | None]:
        got = get_from_owner(base, path, expect_pid=owner[0], expect_start=owner[1])
        return got.status, got.body if got.ok else None, got.error

    return owned


def query_url(url: str, owner: tuple[int, int | None] | None = None) -> dict[str, Any]:
    """What the server's endpoints say; an unreachable server is recorded, not raised. ``owner`` (pid, start
    time): read only from that process's socket."""
    data: dict[str, Any] = {"url": redact_url(url)}
    _get = _getter(owner)
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


# --------------------------------------------------------------------------------------------
# One request to the process that owns the socket


@dataclass
class Owned:
    """What :func:`get_from_owner` got: the HTTP status and body, or the error; the process that holds the
    listening socket the connection reached (None for another host's URL) and where the connection went."""

    status: int | None = None
    body: str | None = None
    error: str | None = None
    owner_pid: int | None = None
    endpoint: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200


class _Replay:
    """The bytes of a response, for http.client.HTTPResponse to parse (status line, headers, chunked bodies)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, *_: Any, **__: Any) -> Any:
        import io

        return io.BytesIO(self.data)


def _exchange(sock: Any, host: str, path: str, auth: str | None, deadline: float, max_bytes: int) -> Owned:
    """Send one GET on the connected ``sock`` and read the whole response before ``deadline`` (monotonic)."""
    import http.client
    import time

    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Accept: */*", "Connection: close", "User-Agent: hoststate"]
    if auth:
        lines.append(f"Authorization: {auth}")
    data = bytearray()
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        while len(data) <= max_bytes:
            left = deadline - time.monotonic()
            if left <= 0:
                return Owned(error="timeout: no whole response before the deadline")
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        return Owned(error="timeout: no whole response before the deadline")
    except OSError as err:
        return Owned(error=f"{type(err).__name__}: {err.strerror or err}"[:200])
    if len(data) > max_bytes:
        return Owned(error=f"response larger than {max_bytes} bytes")
    try:
        resp = http.client.HTTPResponse(_Replay(bytes(data)))  # type: ignore[arg-type]
        resp.begin()
        body = resp.read()
    except (http.client.HTTPException, ValueError, OSError) as err:
        return Owned(error=f"not an HTTP response: {type(err).__name__}")
    return Owned(status=resp.status, body=body.decode("utf-8", "replace"),
                 error=None if resp.status == 200 else f"HTTP {resp.status}")


def get_from_owner(url: str, path: str, *, expect_pid: int | None = None, expect_start: int | None = None,
                   timeout: float = HTTP_TIMEOUT, max_bytes: int = HTTP_MAX_BYTES) -> Owned:
    """GET ``url`` + ``path`` from the process that owns the socket the connection reaches, or nothing (fail closed).

    The contract, for readers of a server's ``/metrics`` during a watched run:

    - One TCP connection, made as urllib makes it (``socket.create_connection``: getaddrinfo's order, the first
      address that accepts), and the request goes over that same connection: what is identified is what is read.
    - For a loopback URL (discovery.is_local), the listening socket that accepted the connection is found from the
      connection's own family, server address and port (getpeername) in /proc/net/tcp{,6}, ranked as the kernel's
      listener lookup ranks them (discovery.accepting), and the processes holding it. The request is sent only
      when ``expect_pid`` holds that socket (when given; with ``expect_start``, discovery.start_time of the server
      taken when it was identified, only while that pid is still the same process, not a pid given to another
      after the server exited), or when one vLLM server command line does (when not);
      otherwise nothing is sent and ``error`` says whose socket it was. A socket that cannot be identified (several
      users' sockets at the same rank, /proc unreadable) is an error too.
    - For another host's URL: with ``expect_pid`` refused (a remote socket has no local owner to check); without
      it, read as is (``owner_pid`` None).
    - ``timeout`` is one deadline for the whole exchange (connect, identification, request, the whole response),
      not per read: a server that sends a byte a second cannot hold the caller longer. Bodies over ``max_bytes``
      are an error.
    - Never raises; ``error`` never repeats a secret of the URL (user:password in it is sent as Basic auth).
    """
    import time

    from hoststate.collectors.vllm import discovery

    deadline = time.monotonic() + timeout
    target, auth = _credentials(url)
    host, port, err = discovery.url_host_port(target)
    if err or host is None or port is None:
        return Owned(error=err or "no host in the URL")
    local = discovery.is_local(host)
    if not local and expect_pid is not None:
        return Owned(error=f"{redact_url(target)} is not this host's loopback: the server's process cannot be checked")
    sock, err = discovery.connect(host, port, deadline - time.monotonic())
    if sock is None:
        return Owned(error=redact_mentions(err or "could not connect", url))
    try:
        owner, where, err = _owner_check(sock, local, expect_pid, expect_start)
        if err:
            return Owned(error=err, owner_pid=owner, endpoint=where)
        if time.monotonic() >= deadline:  # /proc walked longer than the whole exchange may take
            return Owned(error="timeout: the server's socket was identified after the deadline", owner_pid=owner)
        if urlsplit(target).scheme == "https":
            import ssl

            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        base = urlsplit(target).path.rstrip("/")
        hostport = (f"[{host}]" if ":" in host else host) + f":{port}"
        got = _exchange(sock, hostport, base + path, auth, deadline, max_bytes)
        got.owner_pid, got.endpoint = owner, where
        if got.error:
            got.error = redact_mentions(got.error, url)
        return got
    except OSError as err:  # the TLS handshake
        return Owned(error=redact_mentions(f"{type(err).__name__}: {err}"[:200], url))
    finally:
        sock.close()


def _owner_check(sock: Any, local: bool, expect_pid: int | None,
                 expect_start: int | None = None) -> tuple[int | None, str | None, str | None]:
    """(the owner's pid, where the connection went, None) or (..., why the request must not be sent)."""
    from hoststate.collectors.vllm import discovery
    from hoststate.filetrust import run_by_invoker

    if not local:
        return None, None, None
    end, err = discovery.endpoint_of(sock)
    if end is None:
        return None, None, f"the server's socket could not be identified: {err}"
    where = end.describe()
    if expect_pid is not None:
        if expect_pid in end.holders:
            if expect_start is not None and discovery.start_time(expect_pid) != expect_start:
                return None, where, f"pid {expect_pid} is no longer the server that was identified: not read"
            return expect_pid, where, None
        named = "; ".join(discovery.inspect_label(pid) for pid in end.holders[:4])
        return None, where, f"{where}, held by {named}, not by the server (pid {expect_pid}): not read"
    proc, err = discovery.owner_of(end, {})
    if proc is None:
        return None, where, f"{err}: not read"
    if not run_by_invoker((proc.uid, proc.euid)):  # no server was named: a look-alike of another user on the port
        me = discovery.invoking_uid()[0]
        return None, where, (f"{where}, held by {proc.who()}, not a server of {discovery.user_label(me)} or root, "
                             "and no server was named (--vllm-pid): not read")
    return proc.pid, where, None
