"""No secret of tests/secrets_corpus.py reaches a snapshot, a report or stderr, through any input path.

The secrets are planted in a real vLLM-like child process (argv and environ, found by ``--vllm-pid``
and by discovery), in ``--vllm-cmd`` (also one shlex cannot split), in ``--vllm-url`` (a local HTTP
server whose ``/metrics`` labels carry secrets too, and a closed port), in the snapshotting process's own
environment, in a ``--vllm-log`` file, in ``--label``, in guard's command and ``--accept`` patterns, and in
arguments whose error ``--debug`` shows as a traceback. Every snapshot then goes through ``show``,
``diff`` (three formats), ``check``, ``export`` (two kinds), ``fleet`` and ``guard --save-current``, each
run as the real CLI; stdout, stderr and every written file are searched for any piece of any secret. What
reads the host (snap, guard, check and export on the live host, ``--debug``) runs in a subprocess with the
secret-bearing environment; what renders a saved file (show, diff, check, export and fleet on files) runs the
same entry point in this process (tests/inproc.py), with that environment too. The guarded command itself must
still get the real environment and arguments.
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest

from hoststate import snapshot
from hoststate.collectors import Context
from hoststate.collectors import vllm as vllm_collector
from hoststate.redact import REDACTED
from tests import secrets_corpus as corpus
from tests.conftest import PYTHONPATH, REPO
from tests.inproc import hoststate as _rendered

#: The subprocess's own timeout: a hang detector, never a timing assertion.
HANG = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Handler(http.server.BaseHTTPRequestHandler):
    """A vLLM-like server whose answers carry secrets of their own (server_info, a model root URL)."""

    seen_auth: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if self.headers.get("Authorization"):
            self.seen_auth.append(self.headers["Authorization"])
        routes: dict[str, Any] = {
            "/version": {"version": "0.11.1"},
            "/v1/models": {"object": "list", "data": [
                {"id": "Qwen/Qwen3-8B", "root": "https://hub:rootpwCORPUS40x@models.example/Qwen3-8B",
                 "max_model_len": 16384}]},
            "/server_info": {
                "vllm_config": {"model_config": {"model": "Qwen/Qwen3-8B", "hf_token": "hf_CORPUS41PoIuYtReWqLkJh"}},
                "vllm_env": {"VLLM_API_KEY": "vkeyCORPUS42x", "VLLM_DB_URL": "postgres://u:pgCORPUS43x@db/x",
                             "VLLM_USE_V1": "1"},
                "system_env": {"CUDA_AUTH_TOKEN": "ctokCORPUS44x"},
            },
        }
        if path == "/metrics":
            body, kind = corpus.metrics_text().encode(), "text/plain"
        elif path in routes:
            body, kind = json.dumps(routes[path]).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This test's environment plus every env shape (the snapshotting process's own environment)."""
    env = {k: v for k, v in os.environ.items() if corpus.MARKER not in v}
    env.update(corpus.env())
    env["PYTHONPATH"] = PYTHONPATH
    env.pop("HOSTSTATE_NVML_REPLAY", None)
    env.update(extra or {})
    return env


def _hoststate(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=HANG, check=False)


class Outputs:
    """Everything the CLI printed or wrote, by a name saying which command and input produced it."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.snapshots: dict[str, str] = {}
        self.command_run: dict[str, Any] = {}

    def add(self, name: str, proc: subprocess.CompletedProcess, codes: tuple[int, ...] = (0, 1)) -> None:
        assert proc.returncode in codes, f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}"
        self.texts[f"{name} stdout"] = proc.stdout
        self.texts[f"{name} stderr"] = proc.stderr


SOURCES = ("pid", "discovered", "cmd", "cmd-raw", "url-live", "url-closed", "log", "log-config-only", "label")

#: The guarded command: writes its environment and arguments to argv[1] (never to guard's stdout or stderr).
DUMP = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps({'env': dict(os.environ), 'argv': sys.argv}))"


#: Server options whose names hold a secret word and whose values are not secrets: kept in argv and args.
ORDINARY_ARGV = ("--long-prefill-token-threshold", "512", "--allow-credentials", "--tokenizer-mode", "auto")


def _not_secrets_env() -> dict[str, str]:
    return {f"VLLM_LOOKALIKE_{i}": value for i, (_name, value) in enumerate(corpus.NOT_SECRETS)}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> Outputs:
    tmp = tmp_path_factory.mktemp("secrets")
    out = Outputs()
    env = _env(_not_secrets_env())

    # A vLLM server stand-in: a real process with every argv and env shape.
    pkg = tmp / "fake" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (tmp / "fake" / "vllm", tmp / "fake" / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text("import time\nprint('ready', flush=True)\ntime.sleep(300)\n")
    server_port = _free_port()
    child_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(tmp / "fake"),
                 "VLLM_USE_V1": "1", **corpus.env()}
    child = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "Qwen/Qwen3-8B", "--port",
         str(server_port), *ORDINARY_ARGV, *corpus.argv()],
        env=child_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    live_port = http_server.server_address[1]
    closed_port = _free_port()
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        log = tmp / "server.log"
        log.write_text(corpus.log_text())
        config_log = tmp / "config-only.log"
        config_log.write_text(corpus.config_only_log_text())
        prefix = [f"{k}={v}" for k, v in corpus.env().items()]
        cmd = shlex.join([*prefix, "vllm", "serve", "Qwen/Qwen3-8B", *corpus.argv()])
        options: dict[str, list[list[str]]] = {
            "pid": [["--vllm-pid", str(child.pid), "--vllm-version", "0.11.1"]],
            "discovered": [[]],
            "cmd": [["--vllm-cmd", cmd, "--vllm-version", "0.11.1"]],
            "cmd-raw": [["--vllm-cmd", raw, "--vllm-version", "0.11.1"] for raw in corpus.raw_cmds()],
            "label": [["--skip", "vllm", "--label", label] for label in corpus.labels()],
            "url-live": [["--vllm-url", u] for u in corpus.urls(live_port)],
            "url-closed": [["--vllm-url", u] for u in corpus.urls(closed_port)],
            "log": [["--vllm-log", str(log)]],
            "log-config-only": [["--vllm-log", str(config_log)]],
        }
        snaps = tmp / "snaps"
        snaps.mkdir()
        for source in SOURCES:
            for i, opts in enumerate(options[source]):
                name = f"snap {source} #{i}"
                path = snaps / f"{source}-{i}.toml"
                out.add(name, _hoststate(["snap", "-o", str(path), "--label", f"{source}-{i}", *opts], env), (0,))
                out.snapshots[name] = path.read_text()
                out.texts[f"{name} file"] = out.snapshots[name]
        # The same host with no secret anywhere: what a diff, fleet and guard compare against.
        clean = tmp / "clean.toml"
        out.add("snap clean", _hoststate(["snap", "-o", str(clean), "--skip", "vllm"], _env({
            k: "" for k in corpus.env()})), (0,))
        # Every file is searched above and read by fleet below; each source's first file also goes through
        # every renderer (what a renderer prints comes from the file, so the others would only repeat it).
        for path in sorted(snaps.glob("*-0.toml")):
            tag = path.stem
            for fmt in ("text", "json"):
                out.add(f"show {fmt} {tag}", _rendered(["show", str(path), "--format", fmt], env), (0,))
            for fmt in ("text", "json", "markdown"):
                out.add(f"diff {fmt} clean {tag}", _rendered(["diff", str(clean), str(path), "--all", "--format",
                                                               fmt], env))
                out.add(f"diff {fmt} {tag} clean", _rendered(["diff", str(path), str(clean), "--all", "--format",
                                                               fmt], env))
            out.add(f"check {tag}", _rendered(["check", str(path)], env))
            out.add(f"check json {tag}", _rendered(["check", str(path), "--format", "json"], env))
            for kind in ("prometheus", "nfd"):
                out.add(f"export {kind} {tag}", _rendered(["export", kind, str(path), "--baseline", str(clean)], env),
                        (0,))
        (snaps / "clean.toml").write_text(clean.read_text())
        out.add("fleet json", _rendered(["fleet", "--format", "json", str(snaps)], env))
        out.add("fleet text", _rendered(["fleet", str(snaps)], env))
        # guard: a live snap with every source at once, saved with its [guard] table.
        for source in ("pid", "cmd", "url-closed", "log"):
            saved = tmp / f"guard-{source}.toml"
            proc = _hoststate(["guard", "--baseline", str(clean), "--accept", "**", "-v", "--save-current",
                               str(saved), *options[source][0]], env)
            # vLLM refuses the corpus command line (options it does not have): guard exits 2, saving nothing.
            refused = source == "cmd"
            out.add(f"guard {source}", proc, (2,) if refused else (0, 3))
            if not refused:
                out.texts[f"guard {source} file"] = saved.read_text()
        # guard running a command: its words and the --accept patterns are echoed and saved, redacted; the
        # command itself gets them, and the environment, as they are.
        saved, dump = tmp / "guard-command.toml", tmp / "command.json"
        accepts = [a for pattern in corpus.accepts() for a in ("--accept", pattern)]
        proc = _hoststate(["guard", "--baseline", str(clean), "--accept", "**", *accepts, "-v", "--save-current",
                           str(saved), "--label", corpus.labels()[0], "--vllm-cmd", corpus.raw_cmds()[0], "--",
                           sys.executable, "-c", DUMP, str(dump), *corpus.command()], env)
        out.add("guard command", proc, (0,))
        out.texts["guard command file"] = saved.read_text()
        out.command_run = json.loads(dump.read_text())
        # --debug: errors whose message quotes a secret, shown with their traceback
        for i, args in enumerate([["show", f"/nonexistent/{corpus.SHAPES[-1].accept}.toml"],
                                  ["guard", "--baseline", f"/nonexistent/{corpus.raw_cmds()[0]}", "--", "true"],
                                  ["guard", "--baseline", str(clean), "--accept", "a..sk_live_CORPUS06yAbCdEfGhIjKl",
                                   "--", "true"]]):
            proc = _hoststate(["--debug", *args], env)
            out.add(f"debug #{i}", proc, (2,))
            assert "Traceback (most recent call last)" in proc.stderr, proc.stderr
        # check and export on the live host read the secret-bearing environment and sources themselves
        out.add("check live", _hoststate(["check", "--vllm-pid", str(child.pid)], env))
        for kind in ("prometheus", "nfd"):
            out.add(f"export {kind} live", _hoststate(["export", kind, "--vllm-cmd", cmd], env), (0,))
    finally:
        child.kill()
        child.wait(timeout=30)
        http_server.shutdown()
        http_server.server_close()
    return out


def test_corpus_has_at_least_twenty_distinct_shapes():
    secrets = [s.secret for s in corpus.SHAPES]
    assert len(secrets) >= 20 and len(set(secrets)) == len(secrets)
    channels = {c for s in corpus.SHAPES for c in ("argv", "env", "url", "log") if getattr(s, c)}
    assert channels == {"argv", "env", "url", "log"}
    # every secret is findable by the leak pattern, so a leak cannot hide from it
    for s in corpus.SHAPES:
        assert corpus.leaks(f"x {s.secret} y"), s.name


def test_every_output_is_free_of_secrets(outputs):
    leaked = {name: corpus.leaks(text) for name, text in outputs.texts.items()}
    leaked = {name: pieces for name, pieces in leaked.items() if pieces}
    described = {name: [f"{p} ({corpus.shape_of(p)})" for p in pieces] for name, pieces in leaked.items()}
    assert not described, json.dumps(described, indent=1)


def test_the_sources_were_really_read(outputs):
    """The secret-free outputs above mean something only if each source put its data in the snapshot."""
    snaps = {name: snapshot.loads(text) for name, text in outputs.snapshots.items()}
    pid = snaps["snap pid #0"]["vllm"]
    assert pid["source"] == "pid" and pid["args"]["api_key"] == REDACTED
    assert pid["env"]["VLLM_API_KEY"] == REDACTED and pid["env"]["VLLM_DB_URL"].startswith("postgres://bench:")
    assert "AWS_SECRET_ACCESS_KEY" not in pid["env"] and "OPENAI_API_KEY" not in pid["env"]
    discovered = snaps["snap discovered #0"]["vllm"]
    servers = discovered.get("servers", {"one": discovered})
    assert any(s.get("source") == "discovered" and s.get("args", {}).get("api_key") == REDACTED
               for s in servers.values())
    cmd = snaps["snap cmd #0"]["vllm"]
    assert cmd["source"] == "cmd" and cmd["env"]["CUDA_AUTH_TOKEN"] == REDACTED
    assert cmd["args"]["hf_token"] == REDACTED
    # a URL nothing answers on and no local process owns leaves no [vllm] table, only its unreadable reason
    live = [s["vllm"] for n, s in snaps.items() if n.startswith("snap url-live") and "vllm" in s]
    assert len(live) >= 3 and all(v["url"]["url"] for v in live)
    log = snaps["snap log #0"]["vllm"]
    assert log["args"]["api_key"] == REDACTED and log["log"]["non_default_args"]["hf_token"] == REDACTED
    env = snaps["snap pid #0"]["env"]
    assert env["VLLM_SECRET_TOKEN"] == REDACTED and env["NCCL_IB_PASSWORD"] == REDACTED
    # nested JSON options: the secret keys are redacted, their neighbours are not
    args = pid["args"]
    spec = args["speculative_config"]
    assert spec["method"] == "eagle" and spec["draft_model_config"]["hf_token"] == REDACTED
    spec_json = json.loads(pid["argv"][pid["argv"].index("--speculative-config") + 1])
    assert spec_json["draft_model_config"] == {"hf_token": REDACTED}  # as given, in argv, redacted too
    # the dotted --kv-transfer-config comes last and replaces the JSON one, as in vLLM; the JSON one is in argv
    assert args["kv_transfer_config"]["kv_connector_extra_config"]["password"] == REDACTED
    kv_json = json.loads(pid["argv"][pid["argv"].index("--kv-transfer-config") + 1])
    assert kv_json["kv_connector"] == "LMCacheConnectorV1"
    assert kv_json["kv_connector_extra_config"]["s3"]["access_key"] == REDACTED
    assert kv_json["kv_connector_extra_config"]["s3"]["nested"] == [{"passphrase": REDACTED}]
    # /metrics labels were parsed (block_size) and the secret ones redacted
    metrics = [v["url"]["cache_config"] for v in live if "cache_config" in v["url"]]
    assert metrics and all(m["block_size"] == 16 and m["hf_token"] == REDACTED for m in metrics)
    # an unsplittable --vllm-cmd is recorded, redacted, as written
    raw = snaps["snap cmd-raw #0"]["vllm"]
    assert raw["argv_raw"].startswith("vllm serve Qwen/Qwen3-8B --api-key " + REDACTED), raw
    assert snaps["snap label #0"]["hoststate"]["label"] == f"run with {REDACTED}"


def test_values_that_only_look_like_secrets_are_kept(outputs):
    env = snapshot.loads(outputs.snapshots["snap pid #0"])["env"]
    for i, (name, value) in enumerate(corpus.NOT_SECRETS):
        assert env[f"VLLM_LOOKALIKE_{i}"] == value, name
    server = snapshot.loads(outputs.snapshots["snap pid #0"])["vllm"]
    assert server["argv"][server["argv"].index("--long-prefill-token-threshold") + 1] == "512"
    assert server["args"]["long_prefill_token_threshold"] == 512 and server["args"]["allow_credentials"] is True
    # ``--tokenizer-mode auto`` is the parser default: left out of args as vLLM leaves it, its name kept unredacted
    assert "tokenizer_mode" not in server["args"]
    assert server["args_resolved"]["same_as_unset"]["tokenizer_mode"] == "its parser default"


def test_round_three_shapes_were_read_and_redacted(outputs):
    """Issue 21's shapes reached the snapshot through each channel and were replaced, not dropped."""
    snaps = {name: snapshot.loads(text) for name, text in outputs.snapshots.items()}
    own_env = snaps["snap pid #0"]["env"]
    for name in ("VLLM_DB_CREDS", "VLLM_DB_PWD", "VLLM_SESSION_COOKIE", "VLLM_REQUEST_SIGNATURE",
                 "VLLM_TOKENIZER_HF_TOKEN", "VLLM_NGC_BACKEND", "VLLM_GCS_HEADER", "VLLM_PLUGIN_INDEX", "VLLM_VAULT",
                 "VLLM_FRONTEND_REGISTRY", "VLLM_FALLBACK_PROVIDER"):
        assert own_env[name] == REDACTED, name
    assert all(own_env[f"VLLM_SAMPLE_{i}"] == REDACTED for i in range(len(corpus.PROVIDER_SAMPLE)))
    assert own_env["VLLM_RESULTS_DB"] == "postgres://" + "u" * 300 + f":{REDACTED}@db:5432/r"
    for source in ("pid", "cmd"):
        server = snaps[f"snap {source} #0"]["vllm"]
        assert server["env"]["VLLM_DB_CREDS"] == REDACTED and server["env"]["VLLM_TOKENIZER_HF_TOKEN"] == REDACTED
        assert server["args"]["additional_config"] == {"plugin": {"api_key": REDACTED}, "n": 1}, source
        argv = server.get("argv") or []
        if argv:
            assert argv[argv.index("--api-ke") + 1] == REDACTED and f"--hf-tok={REDACTED}" in argv
    log = snaps["snap log #0"]["vllm"]["log"]["non_default_args"]
    assert log["served_model_name"] == [REDACTED]
    assert log["otlp_traces_endpoint"].endswith(f":{REDACTED}@collector:4317")


def test_the_guarded_command_gets_the_real_environment_and_arguments(outputs):
    """Redaction is for what hoststate records and prints: the command runs with every secret intact."""
    run = outputs.command_run
    for name, value in corpus.env().items():
        assert run["env"][name] == value, name
    assert run["argv"][2:] == corpus.command()
    assert run["env"]["HOSTSTATE_GUARD_VERDICT"] == "non-comparable"


def test_a_url_with_credentials_reaches_the_server_as_basic_auth(outputs):
    """``http://user:pass@host`` is how a user names a protected server: the credentials go in an
    Authorization header (urllib would otherwise try to resolve ``user:pass@host`` as a host name)."""
    snaps = {name: snapshot.loads(text) for name, text in outputs.snapshots.items()}
    with_userinfo = [s["vllm"]["url"] for s in snaps.values()
                     if s.get("vllm", {}).get("url", {}).get("url", "").startswith("http://bench:")]
    assert with_userinfo and any(u.get("reachable") and u.get("version") == "0.11.1" for u in with_userinfo)
    assert any(a.startswith("Basic ") for a in _Handler.seen_auth)


# -- in-process checks of the messages around a URL --------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://bench:pwCORPUS50x@127.0.0.1",  # no port: http.client reads 'pwCORPUS50x@127.0.0.1' as the port
        "bench:pwCORPUS51x@127.0.0.1:{port}",  # no scheme: urllib's "unknown url type" repeats the URL
        "http://bench:pwCORPUS52x@127.0.0.1:{port}/?token=qCORPUS53x",
        "ftp://bench:pwCORPUS54x@127.0.0.1:{port}/",
        "http://[::1:bad/?api_key=kCORPUS55x",  # not a URL at all
    ],
)
def test_url_errors_and_unreadable_reasons_carry_no_secret(url):
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_url=url.format(port=_free_port())))
    assert sec.status in ("partial", "ok"), sec.reason
    text = snapshot.to_toml({"vllm": sec.data}) + json.dumps(sec.unreadable) + str(sec.reason) + str(sec.notes)
    assert not corpus.leaks(text), text


def _guard_with_command(tmp_path, accept: bool) -> subprocess.CompletedProcess:
    baseline = tmp_path / "baseline.toml"
    env = _env()
    assert _hoststate(["snap", "-o", str(baseline), "--only", "vllm", "--vllm-cmd", "vllm serve M -tp 2"],
                      env).returncode == 0
    saved = tmp_path / "current.toml"
    args = ["guard", "--baseline", str(baseline), "--save-current", str(saved), "--only", "vllm", "--vllm-cmd",
            "vllm serve M -tp 4"] + (["--accept", "vllm.**"] if accept else [])
    proc = _hoststate([*args, "--", "true", "--api-key", "sk-CORPUS60abcdefghijkl", "--hf-token",
                       "hf_CORPUS61abcdefghijklmn"], env)
    assert proc.returncode == (0 if accept else 3), proc.stderr
    assert not corpus.leaks(saved.read_text())  # [guard].command is redacted
    return proc


def test_guard_command_secrets_stay_out_of_the_saved_snapshot_and_refusal(tmp_path):
    proc = _guard_with_command(tmp_path, accept=False)
    assert not corpus.leaks(proc.stdout + proc.stderr), proc.stderr


def test_guard_accepted_command_line_on_stderr_is_redacted(tmp_path):
    proc = _guard_with_command(tmp_path, accept=True)
    assert not corpus.leaks(proc.stdout + proc.stderr), proc.stderr
