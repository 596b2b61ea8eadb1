"""The vllm collector on real processes, a real local HTTP server and bad inputs; no secret in the file."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading

import pytest

from hoststate import capture, snapshot
from hoststate.collectors import Context, settle_coverage
from hoststate.collectors import vllm as vllm_collector
from tests.conftest import FIXTURES

API_KEY = "sk-test-0123456789abcdefXYZ"
HF_TOKEN = "hf_TestTokenAbCdEfGhIjKlMn0123"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SECRETS = (API_KEY, HF_TOKEN, AWS_SECRET, "hunter2")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_vllm(tmp_path):
    """A package tree whose ``vllm.entrypoints.openai.api_server`` module prints 'ready' and sleeps."""
    pkg = tmp_path / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text("import sys, time\nprint('ready', flush=True)\ntime.sleep(120)\n")
    children: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(tmp_path),
            "HF_TOKEN": HF_TOKEN,
            "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            "VLLM_API_KEY": API_KEY,
            "VLLM_USE_V1": "1",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
            "VLLM_DB_URL": "postgres://bench:hunter2@db:5432/x",
        }
        argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args]
        child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        children.append(child)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        return child

    try:
        yield start
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=10)


def test_child_process_is_discovered_with_args_and_env_and_no_secret_reaches_the_file(fake_vllm):
    port = _free_port()
    child = fake_vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--api-key", API_KEY, "--port", str(port),
                      "-tp", "2", "--max-model-len", "16k", "-O1")
    found = {p.pid: p for p in vllm_collector.discover({})}
    assert child.pid in found
    assert found[child.pid].env["HF_TOKEN"] == HF_TOKEN  # read for real from /proc/<pid>/environ

    snap = capture.collect(Context(vllm_pid=child.pid, vllm_version="0.12.0"), names=("vllm", "env"))
    vllm = snap["vllm"]
    assert snap["collectors"]["vllm"]["status"] == "ok"
    assert vllm["source"] == "pid" and vllm["pid"] == child.pid and vllm["port"] == port
    assert vllm["program"] == "api_server"
    assert vllm["args"]["tensor_parallel_size"] == 2
    assert vllm["args"]["max_model_len"] == 16000
    assert vllm["args"]["api_key"] == "<redacted>"
    assert vllm["cudagraph"]["declared"] == "PIECEWISE"
    assert vllm["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert vllm["env"]["VLLM_API_KEY"] == "<redacted>"
    assert vllm["env"]["VLLM_DB_URL"] == "postgres://bench:<redacted>@db:5432/x"
    assert "HF_TOKEN" not in vllm["env"] and "AWS_SECRET_ACCESS_KEY" not in vllm["env"]
    assert vllm["packages_from"].startswith("server interpreter")
    text = snapshot.to_toml(snap)
    for secret in SECRETS:
        assert secret not in text
    assert snapshot.loads(text)["vllm"]["args"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_discovery_without_options_and_several_servers(fake_vllm):
    ports = [_free_port(), _free_port()]
    first = fake_vllm("--model", "a", "--port", str(ports[0]))
    sec = vllm_collector.collect(Context())
    if "servers" not in sec.data:  # only our child runs here
        assert sec.data["source"] == "discovered" and sec.data["pid"] == first.pid
    fake_vllm("--model", "b", "--port", str(ports[1]), "--api-key", API_KEY)
    sec = vllm_collector.collect(Context())
    assert {str(p) for p in ports} <= set(sec.data["servers"])
    assert sec.notes and "none named" in sec.notes[0]
    assert API_KEY not in snapshot.to_toml({"vllm": sec.data})


class _Handler(http.server.BaseHTTPRequestHandler):
    METRICS = textwrap.dedent("""\
        # HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
        # TYPE vllm:cache_config_info gauge
        vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.85",\
        num_gpu_blocks="53437",prefix_caching_hash_algo="sha256"} 1.0
        # TYPE vllm:spec_decode_num_drafts_total counter
        vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 120.0
        vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 3840.0
        vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 901.0
        """)

    def do_GET(self):  # noqa: N802 - http.server's name
        routes = {
            "/version": ("application/json", json.dumps({"version": "0.12.0"})),
            "/v1/models": ("application/json", json.dumps(
                {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 16384, "root": "m"}]})),
            "/metrics": ("text/plain", self.METRICS),
        }
        if self.path not in routes:
            self.send_error(404)
            return
        kind, body = routes[self.path]
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_url_endpoints(http_server):
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_url=http_server))
    url = sec.data["url"]
    assert sec.data["source"] == "url"
    assert sec.data["version"] == "0.12.0" and sec.data["version_from"] == "url /version"
    assert url["reachable"] is True
    assert url["models"] == [{"id": "m", "max_model_len": 16384, "root": "m"}]
    assert url["cache_config"]["gpu_memory_utilization"] == 0.85
    assert url["cache_config"]["num_gpu_blocks"] == 53437
    assert url["spec_decode"] == {"spec_decode_num_drafts": 120, "spec_decode_num_draft_tokens": 3840,
                                  "spec_decode_num_accepted_tokens": 901}
    assert url["server_info_available"] is False
    assert sec.data["model"] == "m"


def test_unreachable_url_is_recorded_not_fatal():
    port = _free_port()  # bound and released: nothing listens there now
    url = f"http://bench:hunter2@127.0.0.1:{port}"
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_url=url))
    assert sec.status == "partial"
    assert sec.data["url"]["reachable"] is False and "error" in sec.data["url"]
    assert "hunter2" not in snapshot.to_toml({"vllm": sec.data}) and "hunter2" not in str(sec.unreadable)


@pytest.mark.parametrize(
    ("cmd", "needle"),
    [
        ("vllm serve M --speculative-config '{\"method\": \"suffix\"", "cannot split"),
        ("vllm serve M --speculative-config '{\"method\": suffix}'", "--speculative-config: invalid JSON"),
        ("vllm serve M --enforce-eager=true", "ignored explicit argument 'true'"),
        ("python train.py --lr 1", "not a vLLM server command"),
    ],
)
def test_bad_arguments_are_recorded_with_raw_argv(cmd, needle):
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_cmd=f"{cmd} --api-key {API_KEY}",
                                         vllm_version="0.12.0"))
    assert sec.status == "partial"
    assert needle in sec.data["args_error"]
    raw = sec.data.get("argv_raw") or " ".join(sec.data["argv"])
    assert cmd.split()[0] in raw
    text = snapshot.to_toml({"vllm": sec.data})
    assert API_KEY not in text


@pytest.mark.parametrize(("cmd", "needle"), [("vllm serve M -O7", "optimization_level '7'"),
                                             ("vllm serve M -Ofast", "optimization_level 'fast'")])
def test_values_vllm_refuses_at_config_time_are_recorded_as_refused(cmd, needle):
    """0.12 parses any -O value and refuses all but 0-3 when it builds its config: refused, no declared mode."""
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_cmd=f"{cmd} --api-key {API_KEY}",
                                         vllm_version="0.12.0"))
    assert needle in sec.data["cudagraph"]["refused"] and "declared" not in sec.data["cudagraph"]
    assert API_KEY not in snapshot.to_toml({"vllm": sec.data})


def test_cmd_under_root_gives_declared_mode_and_log_gives_observed():
    log = FIXTURES / "vllm" / "logs" / "v0.12.0-flashinfer-spec.log"
    cmd = ("VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 "
           "--speculative-config '{\"method\":\"suffix\",\"num_speculative_tokens\":32}'")
    sec = vllm_collector.collect(Context(root=str(FIXTURES), vllm_cmd=cmd, vllm_log=str(log)))
    cg = sec.data["cudagraph"]
    assert sec.data["source"] == "cmd" and sec.data["version_from"] == "log"
    assert cg["declared"] == "FULL_AND_PIECEWISE" and cg["observed"] == "PIECEWISE"
    assert cg["mismatch"] is True and "PIECEWISE" in cg["mismatch_note"]
    assert sec.data["env_same_as_unset"]["VLLM_USE_V1"]["value"] == "1"  # 0.12.0 no longer reads it (envs.py)
    assert "VLLM_USE_V1" not in sec.data["env"]


def test_log_alone_gives_args_and_redacts_them():
    log = FIXTURES / "vllm" / "logs" / "v0.11.1-full-spec-downgrade.log"
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_log=str(log)))
    assert sec.data["source"] == "log" and sec.data["args_from"] == "log non-default args"
    assert sec.data["cudagraph"]["declared"] == "FULL" and sec.data["cudagraph"]["observed"] == "PIECEWISE"
    assert "sk-live" not in snapshot.to_toml({"vllm": sec.data})


def test_missing_log_is_unreadable_not_fatal(tmp_path):
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_log=str(tmp_path / "none.log")))
    assert sec.status == "partial" and sec.unreadable[f"--vllm-log {tmp_path / 'none.log'}"] == "ENOENT"


def test_no_source_under_root_is_skipped_and_absent_when_nothing_runs(monkeypatch):
    assert vllm_collector.collect(Context(root="/nonexistent")).status == "skipped"
    monkeypatch.setattr(vllm_collector, "discover", lambda unreadable: [])
    sec = vllm_collector.collect(Context())
    assert (sec.status, sec.reason) == ("absent", "no vLLM server running")


def test_unknown_pid_is_an_error_with_reason():
    sec = vllm_collector.collect(Context(vllm_pid=2**22 + 12345))
    assert sec.status == "error" and sec.unreadable


def test_what_ran_is_recorded_under_observed_from_the_log():
    log = FIXTURES / "vllm" / "logs" / "v0.12.0-moe-tp8.log"
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_log=str(log)))
    observed = sec.data["observed"]
    assert observed["attention_backend"] == "FLASH_ATTN" and observed["nccl_version"] == "2.27.3"
    assert observed["kv_cache_tokens"] == 10565248 and observed["graphs_captured"] == 86
    assert observed["moe_default_config"] == [
        "E=128,N=96,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"]
    assert sec.data["cudagraph"]["observed"] == "FULL_AND_PIECEWISE" and sec.data["version"] == "0.12.0"


def test_a_fifo_or_device_as_vllm_log_is_refused_not_read(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        sec = vllm_collector.collect(Context(root="/nonexistent", vllm_log=path))  # would block or fill memory
        assert sec.unreadable[f"--vllm-log {path}"] == "not a regular file" and sec.status == "partial"
        settled = settle_coverage(sec, vllm_collector.SOURCES).unreadable  # what the log would have told
        assert settled["observed.**"] == f"error: not a regular file [--vllm-log {path}]"
        assert settled["cudagraph.observed.**"] == settled["observed.**"]


def _observed_snapshot(tmp_path, text: str | None, name: str) -> dict:
    ctx = {"root": "/nonexistent", "vllm_cmd": "vllm serve Qwen/Qwen3-30B-A3B-FP8 -tp 8", "vllm_version": "0.12.0"}
    if text is not None:
        log = tmp_path / f"{name}.log"
        log.write_text(text, encoding="utf-8")
        ctx["vllm_log"] = str(log)
    sec = vllm_collector.collect(Context(**ctx))
    return {"vllm": sec.data, "collectors": {"vllm": {"status": sec.status}}}


MOE_LOG = FIXTURES / "vllm" / "logs" / "v0.12.0-moe-tp8.log"


@pytest.mark.parametrize(
    ("old", "new", "path", "severity"),
    [
        ("GPU KV cache size: 10,565,248 tokens", "GPU KV cache size: 10,000,000 tokens",
         "vllm.observed.kv_cache_tokens", "invalidating"),  # -5.3 %
        ("GPU KV cache size: 10,565,248 tokens", "GPU KV cache size: 10,400,000 tokens",
         "vllm.observed.kv_cache_tokens", "ignore"),  # -1.6 %: within the 2 % tolerance
        ("Using FLASH_ATTN attention backend", "Using FLASHINFER attention backend",
         "vllm.observed.attention_backend", "invalidating"),
        ("(decode, FULL): 100%|██████████| 35/35", "(decode, FULL): 100%|██████████| 19/19",
         "vllm.observed.graphs_captured", "invalidating"),
        ("Capturing CUDA graphs (decode, FULL)", "Capturing CUDA graphs (decode, PIECEWISE)",
         "vllm.cudagraph.observed", "invalidating"),
        ("vLLM is using nccl==2.27.3", "vLLM is using nccl==2.26.2", "vllm.observed.nccl_version", "invalidating"),
        ("Using DeepGEMM backend for FP8 MoE", "Using Triton backend for FP8 MoE", "vllm.observed.moe_backends",
         "invalidating"),
        ("Using default MoE config.", "Ignoring default MoE config.", "vllm.observed.moe_default_config",
         "invalidating"),
        ("Custom allreduce is disabled", "Custom allreduce was fine", "vllm.observed.custom_all_reduce",
         "invalidating"),
        ("Graph capturing finished in 8 secs", "Graph capturing finished in 11 secs",
         "vllm.observed.graph_capture_secs", "ignore"),
    ],
)
def test_what_ran_is_rated_when_both_sides_have_a_log(tmp_path, old, new, path, severity):
    from hoststate import diff

    text = MOE_LOG.read_text(encoding="utf-8")
    assert old in text
    base = _observed_snapshot(tmp_path, text, "base")
    cur = _observed_snapshot(tmp_path, text.replace(old, new), "cur")
    found = {f.path: f.severity for f in diff.compare(base, cur, include_ignored=True).findings}
    assert found[path] == severity


def test_what_ran_on_one_side_only_is_a_warning(tmp_path):
    from hoststate import diff

    with_log = _observed_snapshot(tmp_path, MOE_LOG.read_text(encoding="utf-8"), "base")
    without = _observed_snapshot(tmp_path, None, "cur")
    for base, cur in ((with_log, without), (without, with_log)):
        found = {f.path: f.severity for f in diff.compare(base, cur).findings if ".observed" in f.path}
        for path in ("vllm.observed.kv_cache_tokens", "vllm.observed.attention_backend", "vllm.cudagraph.observed",
                     "vllm.observed.graphs_captured", "vllm.observed.nccl_version", "vllm.observed.custom_all_reduce"):
            assert found[path] == "warning", path


def test_a_vllm_cmd_config_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yml"
    zero.symlink_to("/dev/zero")
    good = tmp_path / "ok.yaml"
    good.write_text("tensor-parallel-size: 4\n")
    for path, reason in ((fifo, "not a regular file"), (zero, "not a regular file"), (good, None)):
        sec = vllm_collector.collect(Context(root="/nonexistent", vllm_cmd=f"vllm serve m --config {path}",
                                             vllm_version="0.12.0"))
        read = {k: v for k, v in sec.unreadable.items() if k != vllm_collector.SKIPPED_PACKAGES}  # under --root
        if reason is None:
            assert sec.data["args"]["tensor_parallel_size"] == 4 and not read
        else:
            assert read == {f"--config {path}": reason} and "not read" in sec.data["args_error"]
    # a path vLLM would not read (not .yaml/.yml) is vLLM's refusal, and hoststate does not open it either
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_cmd="vllm serve m --config /dev/zero",
                                         vllm_version="0.12.0"))
    assert set(sec.unreadable) <= {vllm_collector.SKIPPED_PACKAGES}
    assert "must be of a yaml/yml type" in sec.data["cudagraph"]["refused"]


def test_an_unreadable_log_leaves_what_ran_unreadable_not_removed(tmp_path):
    from hoststate import diff

    base = _observed_snapshot(tmp_path, MOE_LOG.read_text(encoding="utf-8"), "base")
    sec = vllm_collector.collect(Context(root="/nonexistent", vllm_cmd="vllm serve Qwen/Qwen3-30B-A3B-FP8 -tp 8",
                                         vllm_version="0.12.0", vllm_log=str(tmp_path / "missing.log")))
    sec = settle_coverage(sec, vllm_collector.SOURCES)  # as a snapshot records it
    cur = {"vllm": sec.data, "collectors": {"vllm": {"status": sec.status, "unreadable": sec.unreadable}}}
    found = {f.path: (f.change, f.severity) for f in diff.compare(base, cur).findings}
    assert found["vllm.observed.kv_cache_tokens"] == ("unreadable", "invalidating")
    assert found["vllm.cudagraph.observed"] == ("unreadable", "invalidating")
