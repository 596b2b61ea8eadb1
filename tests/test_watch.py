"""guard --watch: traces recorded on a real H200 replayed through the sampler, real child processes as the
benchmark, the run verdict attached to a real `vllm bench serve --save-result` layout."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from hoststate.errors import InputError
from hoststate.run.record import content_digest, identity
from hoststate.watch import (
    FAIL_ON_EXIT,
    RULES,
    Sampler,
    TraceSource,
    attach,
    judge,
    load_rules,
    load_trace,
    parse_vllm_counters,
    sidecar_path,
)
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, REPO, require

WATCH = FIXTURES / "watch"
SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384 -O1"
HOST = ["--only", "system,dsa,vllm", "--vllm-cmd", SERVE, "--vllm-version", "0.12.0"]
#: A benchmark client writing its result as `vllm bench serve --save-result` does (vllm serve.py main_async:
#: one object, json.dump without indent, each --metadata KEY=VALUE a top-level string), metadata from guard's env.
BENCH = r"""
import json, os, sys
result = {"date": "20261203-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
          "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
          "num_prompts": 100, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "duration": 12.5,
          "completed": 100, "failed": 0, "total_input_tokens": 102400, "total_output_tokens": 12800,
          "request_throughput": 8.0, "output_throughput": 1024.0, "total_token_throughput": 9216.0,
          "mean_ttft_ms": 80.1, "median_ttft_ms": 75.0, "std_ttft_ms": 9.2, "p99_ttft_ms": 120.4,
          "mean_tpot_ms": 11.0, "median_tpot_ms": 10.8, "std_tpot_ms": 1.1, "p99_tpot_ms": 14.9,
          "latencies": [1.1, 1.2], "queue_times": [0.0, 0.01]}
for item in os.environ["HOSTSTATE_METADATA"].split():
    key, value = item.split("=", 1)
    result[key] = value
with open(sys.argv[1], "w") as fh:
    json.dump(result, fh)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


def replay(name: str, own: set[int] | None = None) -> dict:
    """A recorded H200 trace through the sampler, as guard --watch runs it."""
    # root: a folder without proc/, so that this machine's own cgroup is not read into a recorded run
    sampler = Sampler(load_trace(str(WATCH / f"h200-{name}.json")), interval=30.0, root=str(WATCH),
                      own_pids=(lambda: own) if own is not None else None)
    sampler.start()
    sampler.stop()
    return sampler.summary()


def hs(*args: str, cwd: pathlib.Path, trace: str | None = None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    env.pop("HOSTSTATE_WATCH_REPLAY", None)
    if trace:
        env["HOSTSTATE_WATCH_REPLAY"] = str(WATCH / f"h200-{trace}.json")
    return subprocess.run([sys.executable, "-m", "hoststate", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, **kw)


@pytest.fixture
def host(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the seed host before its DSA change, and a baseline snapshot of it."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "seed-baseline", root, symlinks=True)
    proc = hs("snap", "-q", "--root", str(root), *HOST, "-o", "base.toml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return root


def guard_watch(tmp_path: pathlib.Path, root: pathlib.Path, baseline: str, trace: str | None, *extra: str,
                cmd: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return hs("guard", "--baseline", baseline, "--allow-unreadable", "--root", str(root), *HOST, "--watch",
              *extra, "--", *cmd, cwd=tmp_path, trace=trace)


# -- the recorded traces -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["idle", "dense-a", "dense-b", "foreign"])
def test_replay_reproduces_what_the_live_sampler_computed(name: str) -> None:
    """Each fixture carries the summary the sampler computed live on the H200; replaying it gives the same."""
    recorded = json.loads((WATCH / f"h200-{name}.json").read_text())["summary"]
    got = replay(name, own={481})  # 481: the matmul load the recording started (its own process)
    # every metric the live sampler computed (metrics added since are computed from the same trace)
    assert {k: got["metrics"].get(k) for k in recorded["metrics"]} == recorded["metrics"]
    assert got["seconds"] == recorded["seconds"]
    assert got["gpus"][0]["counters"] == recorded["gpus"][0]["counters"]


def test_traces_are_real_h200_readings() -> None:
    idle, dense = replay("idle"), replay("dense-a")
    assert idle["gpus"][0]["name"] == dense["gpus"][0]["name"] == "NVIDIA H200"
    assert idle["gpus"][0]["share"]["gpu_idle"] == 1.0 and idle["metrics"]["share.sw_power_cap"] == 0.0
    # under the matmul loop the power cap held the clocks the whole run: the violation counter grew ~30 s in 30 s
    assert dense["metrics"]["share.sw_power_cap"] > 0.99
    assert dense["gpus"][0]["counters"]["violation_power_ns"] > 29e9
    assert dense["gpus"][0]["power_w"]["mean"] > 600 > 100 > idle["gpus"][0]["power_w"]["mean"]
    # NVLink counters do not exist on this passthrough GPU: recorded as unreadable, not as zero
    assert "nvlink_errors" not in dense["metrics"]
    assert dense["unreadable"]["0/nvlink_crc_flit_errors"] == "NVML return 3"


def test_clean_power_capped_all_the_time_as_in_the_baseline() -> None:
    verdict, reasons = judge(replay("dense-b")["metrics"], replay("dense-a")["metrics"])
    assert (verdict, reasons) == ("clean", [])


def test_degraded_power_capped_where_the_baseline_was_not() -> None:
    verdict, reasons = judge(replay("dense-a")["metrics"], replay("idle")["metrics"])
    assert verdict == "degraded"
    assert [r["metric"] for r in reasons] == ["share.sw_power_cap"]
    assert reasons[0]["text"].endswith("99.6 %, baseline 0.0 %")


def test_power_cap_alone_is_not_judged_without_a_baseline_run() -> None:
    assert judge(replay("dense-a")["metrics"]) == ("clean", [])


def test_invalid_another_process_computing_on_the_gpu() -> None:
    """The recorded second process (pid 538) started on the GPU mid-run; the load (481) was there from the start."""
    summary = replay("foreign", own={481})
    assert summary["foreign_processes"] == [{"pid": 538, "gpus": [0]}]
    verdict, reasons = judge(summary["metrics"], replay("dense-a")["metrics"])
    assert verdict == "invalid" and reasons[0]["metric"] == "foreign_processes"
    assert replay("foreign", own={481, 538})["metrics"]["foreign_processes"] == 0  # the run's own processes


def test_a_process_already_on_the_gpu_at_the_first_sample_is_foreign_from_the_start() -> None:
    """Not the run's and there before it began (a leftover server, another user's job): it shared the GPU for the
    whole run, so it counts, marked ``from_start``."""
    data = json.loads((WATCH / "h200-foreign.json").read_text())
    del data["own_pids"]  # as if the recording had not named its own load (481)
    sampler = Sampler(TraceSource(data), interval=30.0, root=str(WATCH), own_pids=lambda: {538}).start()
    summary = sampler.stop().summary()
    assert summary["foreign_processes"] == [{"pid": 481, "gpus": [0], "from_start": True}]
    assert judge(summary["metrics"])[0] == "invalid"


def test_a_pid_of_the_run_given_to_another_process_is_judged_again(monkeypatch) -> None:
    """A pid names one process only until it exits: one judged the run's own is judged again when the same number
    comes back with another start time (another user's process won the pid), and stays own when it is merely
    gone (NVML may list an exited worker for a sample)."""
    from hoststate.collectors.vllm import discovery

    sampler = Sampler(None, root=str(WATCH), own_pids=lambda: own)
    own, starts = {30000}, {30000: 111}
    monkeypatch.setattr(discovery, "start_time", lambda pid: starts.get(pid))
    rows = [[0.0, 0, 0, 0, 0, [30000]]]
    sampler._note_foreign(rows)
    assert sampler._own_seen == {30000: 111} and not sampler._foreign
    own, starts = set(), {}  # the worker exited: no start time to read
    sampler._note_foreign(rows)
    assert sampler._own_seen == {30000: 111} and not sampler._foreign
    starts = {30000: 222}  # the number given to another process, not the run's
    sampler._note_foreign(rows)
    assert 30000 in sampler._foreign and 30000 not in sampler._own_seen


def test_invalid_on_an_xid_and_thermal_slowdown_is_degraded() -> None:
    metrics = dict(replay("dense-b")["metrics"], xid_events=1, **{"share.hw_thermal_slowdown": 0.12})
    verdict, reasons = judge(metrics, replay("dense-a")["metrics"])
    assert verdict == "invalid"
    assert [r["verdict"] for r in reasons] == ["invalid", "degraded"]
    assert reasons[1]["text"] == "clocks held down by hardware thermal slowdown: 12.0 %, baseline 0.0 %"


def test_trace_events_are_judged(tmp_path: pathlib.Path) -> None:
    """An XID event in a trace (type 0x8, data 79: fallen off the bus) invalidates; 13 (an application's own
    fault) is listed but not judged."""
    data = json.loads((WATCH / "h200-dense-b.json").read_text())
    t = data["samples"][5][0]
    data["events"] = [[t, 0, 8, 13], [t, 0, 8, 79]]
    sampler = Sampler(TraceSource(data), interval=30.0, root=str(WATCH)).start()
    sampler.stop()
    summary = sampler.summary()
    assert [e["data"] for e in summary["events"]] == [13, 79]
    assert summary["metrics"]["xid_events"] == 1
    assert judge(summary["metrics"])[0] == "invalid"


def test_rules_are_data(tmp_path: pathlib.Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nmetric = "share.sw_power_cap"\nverdict = "degraded"\nlimit = 1.0\nbaseline = true\n')
    assert judge(replay("dense-a")["metrics"], replay("idle")["metrics"], load_rules(str(rules)))[0] == "clean"
    assert len(load_rules(str(rules))) == len(RULES)
    rules.write_text('[[rule]]\nmetric = "x"\nverdict = "bad"\nlimit = 1\n')
    with pytest.raises(InputError, match="verdict must be one of"):
        load_rules(str(rules))


def test_a_trace_that_is_not_one_is_refused(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(InputError, match="not a watch trace"):
        load_trace(str(bad))


# -- host side: cgroup throttling and vLLM's counters -------------------------------------------------------------


def test_cgroup_throttling_read_through_the_root(tmp_path: pathlib.Path) -> None:
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "cgroup").write_text("0::/system.slice/vllm.service\n")
    stat = tmp_path / "sys" / "fs" / "cgroup" / "system.slice" / "vllm.service" / "cpu.stat"
    stat.parent.mkdir(parents=True)
    stat.write_text("usage_usec 100\nnr_periods 10\nnr_throttled 0\nthrottled_usec 0\n")
    sampler = Sampler(None, root=str(tmp_path), cgroup_pid=4242).start()
    stat.write_text("usage_usec 900100\nnr_periods 20\nnr_throttled 7\nthrottled_usec 400000\n")
    time.sleep(0.05)
    summary = sampler.stop().summary()
    assert summary["cgroup"]["path"] == "/system.slice/vllm.service"
    assert summary["cgroup"]["nr_throttled"] == 7 and summary["cgroup"]["throttled_usec"] == 400000
    assert summary["metrics"]["cpu_throttled_share"] > 0.01
    assert judge(summary["metrics"])[0] == "degraded"
    from hoststate.collectors.vllm.placement import parse_kv

    assert parse_kv("nr_bursts 0\nburst_usec x\n") == {"nr_bursts": 0}


METRICS_BEFORE = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 1.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 50.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 0.0
"""


def _metrics_server(state: dict[str, str]) -> http.server.ThreadingHTTPServer:
    """A loopback server answering /metrics with ``state["text"]`` (changed by the test between reads)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = state["text"].encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_vllm_metrics_scraped_at_both_ends() -> None:
    state = {"text": METRICS_BEFORE}
    server = _metrics_server(state)
    try:
        sampler = Sampler(None, root=str(WATCH), vllm_url=f"http://127.0.0.1:{server.server_port}",
                          server_pid=os.getpid()).start()
        state["text"] = METRICS_BEFORE.replace("} 2.0", "} 6.0").replace('"abort",model_name="m"} 0.0',
                                                                         '"abort",model_name="m"} 3.0')
        summary = sampler.stop().summary()
    finally:
        server.shutdown()
    assert summary["vllm"] == {"preemptions": 4, "aborted_requests": 3}
    verdict, reasons = judge(summary["metrics"])
    assert verdict == "degraded"
    # no GPU was sampled (source None): said as a reason of its own, below the degraded ones
    assert {r["metric"] for r in reasons} == {"vllm_preemptions", "vllm_aborted_requests", "gpus_unwatched"}
    assert reasons[-1]["verdict"] == "unwatched"
    assert parse_vllm_counters(METRICS_BEFORE) == {"preemptions": 3.0, "aborted_requests": 0.0}


# -- guard --watch with a real child process ----------------------------------------------------------------------


def test_guard_watch_attaches_to_a_vllm_bench_serve_result(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    result = tmp_path / "vllm-infqps-Llama-3.1-8B-Instruct-20261203-120000.json"
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", result.name,
                       cmd=(sys.executable, "-c", BENCH, result.name))
    assert proc.returncode == 0, proc.stderr
    assert "run clean" in proc.stderr
    text = result.read_text()
    data = json.loads(text)
    assert "\n" not in text.strip()  # still one line, as vLLM's json.dump wrote it
    assert data["completed"] == 100 and data["latencies"] == [1.1, 1.2] and data["request_rate"] == "inf"
    # the command got the digests in its environment and passed them as --metadata would
    record = data["hoststate"]
    assert data["hoststate_current_digest"] == record["host"]["digest"].strip()
    assert record["verdict"] == "clean" and record["command_status"] == 0
    assert record["watch"]["gpus"][0]["name"] == "NVIDIA H200"
    assert record["sidecar"] == result.name.replace(".json", ".hoststate.json")
    sidecar = json.loads((tmp_path / record["sidecar"]).read_text())
    assert sidecar["verdict"] == "clean" and sidecar["host"] == record["host"]
    from hoststate.snapshot import loads

    assert loads(sidecar["snapshot"])["hoststate"]["digest"] == record["host"]["digest"]


def test_guard_watch_judges_against_a_watched_baseline(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    """A baseline run taken with --watch carries its own shares: the same power cap is clean, a new one degraded,
    and --fail-on gives 4 after the command finished (its result is still attached)."""
    for name, trace in (("idle-run.toml", "idle"), ("dense-run.toml", "dense-a")):
        proc = guard_watch(tmp_path, host, "base.toml", trace, "--save-current", name, cmd=("true",))
        assert proc.returncode == 0, proc.stderr
    result = tmp_path / "run=0.json"
    proc = guard_watch(tmp_path, host, "idle-run.toml", "dense-b", "--attach", result.name, "--fail-on", "degraded",
                       cmd=(sys.executable, "-c", BENCH, result.name))
    assert proc.returncode == FAIL_ON_EXIT, proc.stderr
    assert "DEGRADED  clocks held down by the power cap more than in the baseline: 99.6 %, baseline 0.0 %" \
        in proc.stderr
    assert json.loads(result.read_text())["hoststate"]["verdict"] == "degraded"
    proc = guard_watch(tmp_path, host, "dense-run.toml", "dense-b", "--fail-on", "degraded", cmd=("true",))
    assert proc.returncode == 0, proc.stderr
    assert "run clean" in proc.stderr


def test_command_status_comes_through(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    proc = guard_watch(tmp_path, host, "base.toml", "dense-a", "--attach", "r.json", "--fail-on", "invalid",
                       cmd=(sys.executable, "-c", BENCH, "r.json", "7"))
    assert proc.returncode == 7, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["hoststate"]["command_status"] == 7


def test_host_change_during_the_run_is_invalid(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    wq = next(host.glob("sys/devices/*/*/dsa0/wq0.0/state"))
    (tmp_path / "bench.py").write_text(BENCH)
    script = f"open({str(wq)!r}, 'w').write('enabled\\n'); import runpy, sys; sys.argv = ['bench', 'r.json']; " \
             "runpy.run_path('bench.py', run_name='__main__')"
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "r.json", "--fail-on", "invalid",
                       cmd=(sys.executable, "-c", script))
    assert proc.returncode == FAIL_ON_EXIT, proc.stderr
    record = json.loads((tmp_path / "r.json").read_text())["hoststate"]
    assert record["verdict"] == "invalid"
    assert record["reasons"][0]["metric"] == "host_invalidating"
    assert any(f["path"].startswith("dsa.devices.dsa0.wqs") and f["severity"] == "invalidating"
               for f in record["drift"])
    assert record["host"]["digest"] != record["host"]["digest_after"]


def test_watch_options_need_watch_and_a_command(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    proc = hs("guard", "--baseline", "base.toml", "--root", str(host), *HOST, "--attach", "r.json", "--", "true",
              cwd=tmp_path)
    assert proc.returncode == 2 and "--attach needs --watch" in proc.stderr
    proc = hs("guard", "--baseline", "base.toml", "--root", str(host), *HOST, "--watch", cwd=tmp_path)
    assert proc.returncode == 2 and "--watch needs a command" in proc.stderr


# -- attaching ---------------------------------------------------------------------------------------------------


def test_attach_keeps_a_sweep_files_indent_and_appended_results(tmp_path: pathlib.Path) -> None:
    """`vllm bench sweep` rewrites run=N.json with indent 4; --append-result adds one object a line."""
    swept = tmp_path / "run=0.json"
    swept.write_text(json.dumps({"completed": 5, "run_number": 0}, indent=4))
    attach(str(swept), {"verdict": "clean"})
    assert swept.read_text().startswith('{\n    "completed": 5')
    assert json.loads(swept.read_text())["hoststate"] == {
        "verdict": "clean", "result_keys": ["completed", "run_number"],
        "result_sha256": content_digest({"completed": 5, "run_number": 0})}
    appended = tmp_path / "appended.json"
    appended.write_text(json.dumps({"completed": 1}) + "\n" + json.dumps({"completed": 2}))
    attach(str(appended), {"verdict": "degraded"})
    first, second = (json.loads(line) for line in appended.read_text().splitlines())
    assert "hoststate" not in first
    assert second["hoststate"] == {"verdict": "degraded", "result_keys": ["completed"],
                                   "result_sha256": content_digest({"completed": 2})}
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="no JSON object"):
        attach(str(bad), {})
    assert sidecar_path("d/run=3.json") == "d/run=3.hoststate.json"


def test_a_missing_result_still_gets_its_sidecar(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "never-written.json", cmd=("true",))
    assert proc.returncode == 0, proc.stderr
    sidecar = json.loads((tmp_path / "never-written.hoststate.json").read_text())
    assert "never-written.json" in sidecar["attach_error"]
    assert not (tmp_path / "never-written.json").exists()


def test_library_call(tmp_path: pathlib.Path, host: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same watched run from Python: guard.evaluate, then watch.run_watched around a real child process."""
    from hoststate.guard import check_baseline
    from hoststate.watch import run_watched

    monkeypatch.setenv("HOSTSTATE_WATCH_REPLAY", str(WATCH / "h200-foreign.json"))
    opts = {"only": ["system", "dsa", "vllm"], "vllm_cmd": SERVE, "vllm_version": "0.12.0"}
    result = check_baseline(tmp_path / "base.toml", root=str(host), allow_unreadable=True, **opts)
    run = run_watched(result, [sys.executable, "-c", "import os; print(os.environ['HOSTSTATE_METADATA'])"],
                      root=str(host), snap_options=opts, attach_to=str(tmp_path / "r.json"))
    assert run.returncode == 0
    assert run.verdict == "invalid" and run.reasons[0]["metric"] == "foreign_processes"
    assert run.exit_status("degraded") == FAIL_ON_EXIT == run.exit_status("invalid")
    assert (tmp_path / "r.hoststate.json").exists()


def test_module_imports_nothing_heavy() -> None:
    code = "import sys, hoststate.watch; print(sorted(m for m in ('pynvml', 'deepdiff', 'click', 'tomli_w') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": PYTHONPATH}, check=True).stdout
    assert out.strip() == "[]"


def test_cgroup_v1_cpu_controller(tmp_path: pathlib.Path) -> None:
    """A cgroup v1 host (or hybrid, whose v2 root has no cpu.stat): the cpu controller's directory."""
    (tmp_path / "proc" / "7").mkdir(parents=True)
    (tmp_path / "proc" / "7" / "cgroup").write_text("4:cpu,cpuacct:/slurm/job1\n2:memory:/slurm/job1\n0::/\n")
    stat = tmp_path / "sys" / "fs" / "cgroup" / "cpu,cpuacct" / "slurm" / "job1" / "cpu.stat"
    stat.parent.mkdir(parents=True)
    stat.write_text("nr_periods 1\nnr_throttled 0\nthrottled_time 0\n")
    sampler = Sampler(None, root=str(tmp_path), cgroup_pid=7).start()
    stat.write_text("nr_periods 9\nnr_throttled 3\nthrottled_time 2500000\n")
    summary = sampler.stop().summary()
    assert summary["cgroup"] == {"path": "/cpu,cpuacct/slurm/job1", "nr_periods": 8, "nr_throttled": 3,
                                 "throttled_usec": 2500}


class _Stuck(TraceSource):
    """A trace whose third read never returns, as an NVML call wedged in the driver would."""

    def __init__(self, data: dict):
        super().__init__(data)
        self.calls = 0
        self.release = threading.Event()

    def cheap(self):
        self.calls += 1
        if self.calls >= 3:
            self.release.wait()
        return super().cheap()


def test_a_hung_read_never_hangs_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import hoststate.run.sampler as watch

    monkeypatch.setattr(watch, "STOP_TIMEOUT", 0.5)
    source = _Stuck(json.loads((WATCH / "h200-dense-b.json").read_text()))
    sampler = Sampler(source, interval=0.01, root=str(WATCH)).start()
    while source.calls < 3:
        time.sleep(0.01)
    sampler.stop()
    source.release.set()
    summary = sampler.summary()
    assert "an NVML call hung" in summary["errors"][0]
    assert judge(summary["metrics"])[0] == "degraded"


def test_watch_trace_is_replayable_and_never_replaced_silently(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    proc = guard_watch(tmp_path, host, "base.toml", "foreign", "--watch-trace", "t.json", cmd=("true",))
    assert proc.returncode == 0, proc.stderr
    again = replay_file(tmp_path / "t.json")
    assert again["metrics"]["share.sw_power_cap"] == replay("foreign")["metrics"]["share.sw_power_cap"]
    assert again["gpus"][0]["counters"] == replay("foreign")["gpus"][0]["counters"]
    marker = tmp_path / "ran"
    proc = guard_watch(tmp_path, host, "base.toml", "foreign", "--watch-trace", "t.json",
                       cmd=("touch", str(marker)))
    assert proc.returncode == 2 and "exists" in proc.stderr
    assert not marker.exists()  # refused before the command started
    proc = guard_watch(tmp_path, host, "base.toml", "foreign", "--watch-trace", "t.json", "--force",
                       cmd=("touch", str(marker)))
    assert proc.returncode == 0 and marker.exists()


def replay_file(path: pathlib.Path) -> dict:
    sampler = Sampler(load_trace(str(path)), interval=30.0, root=str(WATCH)).start()
    return sampler.stop().summary()


def test_a_live_guard_watch_run_on_the_h200_replays_to_the_same_verdict() -> None:
    """fixtures/watch/h200-guard-live.*: `hoststate guard --watch` itself on the H200 (benchmarks/
    bench_watch_live.sh, run B): its trace, its log, and the watched idle baseline run it was judged against."""
    from hoststate.snapshot import load
    from hoststate.watch import baseline_metrics

    log = (WATCH / "h200-guard-live.log").read_text()
    summary = replay_file(WATCH / "h200-guard-live.json")
    baseline = baseline_metrics(load(str(WATCH / "h200-base-run.toml")))
    assert baseline is not None and baseline["share.sw_power_cap"] == 0.0
    verdict, reasons = judge(summary["metrics"], baseline)
    assert verdict == "degraded"
    assert f"  DEGRADED  {reasons[0]['text']}\n" in log
    assert "B exit 4" in log and "C exit 0" in log
    assert "  DEGRADED  another process used a watched GPU during the run: 1" in log  # run C: not guard's child


def test_a_result_that_is_a_link_is_never_written_through(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    """Another user's symlink where the result should be: not followed; the sidecar still records the run."""
    target = tmp_path / "elsewhere.json"
    target.write_text('{"completed": 1}')
    (tmp_path / "r.json").symlink_to(target)
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "r.json", cmd=("true",))
    assert proc.returncode == 0, proc.stderr
    assert "not attached: r.json: is a symbolic link" in proc.stderr
    assert target.read_text() == '{"completed": 1}'
    assert "symbolic link" in json.loads((tmp_path / "r.hoststate.json").read_text())["attach_error"]


def test_a_gpu_lost_during_the_run_is_invalid() -> None:
    data = json.loads((WATCH / "h200-dense-b.json").read_text())
    data["unreadable"] = {"0/clocks_sm_mhz": "GpuIsLost", "0/power_draw_mw": "GpuIsLost"}
    sampler = Sampler(TraceSource(data), interval=30.0, root=str(WATCH)).start()
    summary = sampler.stop().summary()
    assert summary["metrics"]["gpus_lost"] == 1
    assert judge(summary["metrics"], replay("dense-a")["metrics"]) == ("invalid", [
        {"verdict": "invalid", "metric": "gpus_lost", "value": 1,
         "text": "a GPU fell off the bus during the run (NVML: GpuIsLost): 1"}])


def test_live_source_reads_nvml_as_the_gpu_collector_does() -> None:
    """LiveSource over the gpu collector's NVML replay of a real H200 (fixtures/nvml/h200.json): the same calls
    the sampler makes on a live host; a call the recording lacks is recorded as unreadable, never raised."""
    from hoststate.nvml_replay import load
    from hoststate.watch import LiveSource

    nvml = load(str(FIXTURES / "nvml" / "h200.json"))
    source = LiveSource(nvml)
    _, rows = source.cheap()
    calls = json.loads((FIXTURES / "nvml" / "h200.json").read_text())["devices"][0]["calls"]
    assert rows == [[calls["nvmlDeviceGetCurrentClocksEventReasons"], calls["nvmlDeviceGetClockInfo"]["by_arg"]["1"],
                     calls["nvmlDeviceGetPowerUsage"], calls["nvmlDeviceGetTemperature"]["by_arg"]["0"],
                     calls["nvmlDeviceGetPerformanceState"], []]]
    _, counters = source.counters()
    assert counters == [{}] and source.unreadable["0/counters"] == "NotSupported"
    assert source.gpus == [{"index": 0, "uuid": calls["nvmlDeviceGetUUID"], "name": "NVIDIA H200"}]
    source.close()
    assert nvml.init_calls == nvml.shutdown_calls == 1


def test_nvml_that_hung_for_the_snapshot_is_not_opened_again(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    """A wedged driver (the gpu collector timed out) must not hold the command back: the run is watched without
    the GPU, and says so."""
    from hoststate.guard import evaluate
    from hoststate.watch import run_watched

    opts = {"only": ["system", "dsa", "vllm"], "vllm_cmd": SERVE, "vllm_version": "0.12.0"}
    result = evaluate(tmp_path / "base.toml", root=str(host), allow_unreadable=True, **opts)
    result.current.setdefault("collectors", {})["gpu"] = {"status": "timeout"}
    run = run_watched(result, ["true"], root="/", snap_options={"skip": ["gpu", "vllm", "packages"]})
    assert run.summary["gpu_status"] == "skipped: NVML timed out in the snapshot before the run"
    assert run.returncode == 0


def test_a_run_with_no_gpu_watched_is_unwatched_not_clean() -> None:
    """0 samples of 0 GPUs: nothing went wrong that could be seen, which is not the same as clean."""
    sampler = Sampler(None, root=str(WATCH)).start()
    summary = sampler.stop().summary()
    assert summary["metrics"]["gpus_unwatched"] == 1
    verdict, reasons = judge(summary["metrics"])
    assert verdict == "unwatched"
    assert reasons == [{"verdict": "unwatched", "metric": "gpus_unwatched", "value": 1,
                        "text": "no GPU was watched: the verdict covers the host side only: 1"}]
    assert judge(replay("idle")["metrics"]) == ("clean", [])


def test_clocks_below_base_with_no_reason_set_are_degraded() -> None:
    """NVML's TOTAL_BASE_CLOCKS violation time grew while no clock-event reason (idle included) was ever sampled:
    the clocks were held down by something NVML does not name."""
    data = json.loads((WATCH / "h200-dense-b.json").read_text())
    for _t, rows in data["samples"]:
        for row in rows:
            row[0] = 0  # no reason bit in any sample
    summary = Sampler(TraceSource(data), interval=30.0, root=str(WATCH)).start().stop().summary()
    assert summary["metrics"]["share.below_base_clock_unexplained"] > 0.5
    verdict, reasons = judge(summary["metrics"])
    assert verdict == "degraded" and "below the base clock" in reasons[0]["text"]
    # the same counter under the power cap, whose reason bit is sampled, is the power cap's rule's to judge
    assert replay("dense-b")["metrics"]["share.below_base_clock_unexplained"] == 0.0


def test_a_handful_of_retried_nvlink_crc_errors_is_within_tolerance() -> None:
    """DCGM's limit (dcgm_gpu_hardware_limits.h): CRC errors matter at 100+ per second; replay/recovery above 1."""
    few = {"nvlink_crc_errors_per_s": 0.2, "nvlink_link_errors": 0, "gpus_unwatched": 0}
    assert judge(few) == ("clean", [])
    many = dict(few, nvlink_crc_errors_per_s=250.0)
    assert judge(many)[0] == "degraded"
    assert judge(dict(few, nvlink_link_errors=3))[0] == "degraded"


def test_every_shipped_run_rule_names_its_source() -> None:
    assert all(rule.source for rule in RULES), [r.metric for r in RULES if not r.source]
    table = (REPO / "docs" / "watch.md").read_text()
    for rule in RULES:
        assert f"| `{rule.metric}` | {rule.verdict} |" in table and rule.source in table, rule.metric


# -- a stamp bound to what it stamps, on the command's own file only --------------------------------------------


def test_the_stamp_carries_the_digest_of_the_numbers_it_stamps(tmp_path: pathlib.Path) -> None:
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"output_throughput": 1005.0, "completed": 100}))
    attach(str(result), {"verdict": "clean"})
    stamped = json.loads(result.read_text())
    keys = stamped["hoststate"]["result_keys"]
    assert keys == ["completed", "output_throughput"]
    assert stamped["hoststate"]["result_sha256"] == content_digest(stamped, keys)
    # what vllm bench sweep serve adds after the run (run_number, an override spelled 100 for 100.0) stays covered
    swept = dict(stamped, run_number=0, completed=100.0)
    assert stamped["hoststate"]["result_sha256"] == content_digest(swept, keys)
    stamped["output_throughput"] = 1355.0  # numbers edited after the stamp no longer match it
    assert stamped["hoststate"]["result_sha256"] != content_digest(stamped, keys)
    del swept["completed"]  # nor does a stamped key taken away
    assert stamped["hoststate"]["result_sha256"] != content_digest(swept, keys)


def _as_nobody(path: pathlib.Path) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)


def test_attach_never_stamps_another_users_result(tmp_path: pathlib.Path) -> None:
    """As root, a result owned by another user (their numbers, or a file they planted at the path) is refused."""
    require(os.geteuid() == 0, "chown to another user needs root (CI runs as root)")
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"completed": 1}))
    _as_nobody(result)
    with pytest.raises(InputError, match=r"owned by uid \d+, not by the user the command ran as \(uid 0\)"):
        attach(str(result), {"verdict": "clean"})
    assert "hoststate" not in json.loads(result.read_text())


@pytest.mark.parametrize("mode", [0o666, 0o646])
def test_attach_refuses_a_result_other_users_can_write(tmp_path: pathlib.Path, mode: int) -> None:
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"completed": 1}))
    result.chmod(mode)
    with pytest.raises(InputError, match="can be written by other users; not stamped"):
        attach(str(result), {"verdict": "clean"})


def test_attach_refuses_a_hard_link_and_a_file_replaced_after_the_command(tmp_path: pathlib.Path) -> None:
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"completed": 1}))
    os.link(result, tmp_path / "other-name.json")
    with pytest.raises(InputError, match="has 2 hard links"):
        attach(str(result), {"verdict": "clean"})
    (tmp_path / "other-name.json").unlink()
    seen = identity(str(result))
    replacement = tmp_path / "new.json"
    replacement.write_text(json.dumps({"completed": 999}))
    replacement.replace(result)  # another file put at the path between the command's exit and the attach
    with pytest.raises(InputError, match="was replaced after the command exited"):
        attach(str(result), {"verdict": "clean"}, expect=seen)
    with pytest.raises(InputError, match="was put there after the command exited"):
        attach(str(result), {"verdict": "clean"}, expect=None)


def test_a_deeply_nested_result_keeps_the_commands_status_and_the_sidecar(tmp_path: pathlib.Path,
                                                                          host: pathlib.Path) -> None:
    """A result nested 100,000 levels deep: a clear attach_error, the command's own status, the sidecar written."""
    writer = "open('r.json', 'w').write('{\"x\": ' + '[' * 100_000 + ']' * 100_000 + '}')"
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "r.json",
                       cmd=(sys.executable, "-c", writer))
    assert proc.returncode == 0, proc.stderr
    assert "not attached: r.json: JSON nested deeper than 100 levels" in proc.stderr
    sidecar = json.loads((tmp_path / "r.hoststate.json").read_text())
    assert sidecar["attach_error"] == "r.json: JSON nested deeper than 100 levels"
    assert sidecar["command_status"] == 0


def test_a_trickling_metrics_server_never_holds_the_start_past_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that sends a byte a second: the scrape is cut off at one deadline for the whole answer, recorded as
    a sampler error (the run is then not clean), and the sampler starts."""
    import hoststate.run.sampler as sampler_mod

    monkeypatch.setattr(sampler_mod, "SCRAPE_DEADLINE", 0.5)
    stop = threading.Event()

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's own name
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            while not stop.is_set():
                try:
                    self.wfile.write(b"#")
                    self.wfile.flush()
                except OSError:
                    return
                stop.wait(0.2)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sampler = Sampler(None, root=str(WATCH), vllm_url=f"http://127.0.0.1:{server.server_port}",
                          server_pid=os.getpid()).start()
        assert len(sampler.errors) == 1
        assert sampler.errors[0].startswith("vllm /metrics at start: timeout: no whole response before the deadline")
        summary = sampler.stop().summary()
    finally:
        stop.set()
        server.shutdown()
    assert judge(summary["metrics"])[0] == "degraded"  # sampler_errors: the counters were not read


def test_metrics_are_read_only_from_the_described_servers_socket() -> None:
    """The counters come from the process the snapshot described (``server_pid``); a listener held by another
    process on the URL's port is never read: the scrape fails closed, recorded as a sampler error."""
    server = _metrics_server({"text": METRICS_BEFORE})
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        other = Sampler(None, root=str(WATCH), vllm_url=url, server_pid=1).start()  # pid 1 holds no such socket
        ours = Sampler(None, root=str(WATCH), vllm_url=url, server_pid=os.getpid()).start()
    finally:
        server.shutdown()
    assert other.host["vllm_start"] is None and other.errors[0].startswith("vllm /metrics at start: ")
    assert ours.host["vllm_start"] == {"preemptions": 3.0, "aborted_requests": 0.0} and not ours.errors


def _server_with_worker(tmp_path: pathlib.Path) -> tuple[int, int]:
    """A stand-in vLLM server the guard did not start and that is not its ancestor's child either (``vllm bench
    sweep serve`` starts the server beside the guarded bench command: started here through a parent that exits),
    and its worker child, the process that holds the GPU context (vLLM V1's EngineCore): (server, worker) pids."""
    pids = tmp_path / "pids"
    worker = "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])"
    worker += f"; open({str(pids)!r}, 'w').write(f'{{__import__(\"os\").getpid()}} {{c.pid}}'); time.sleep(60)"
    launcher = (f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {worker!r}], "
                "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")
    subprocess.run([sys.executable, "-c", launcher], check=True, timeout=30)
    deadline = time.monotonic() + 30
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    server, child = (int(p) for p in pids.read_text().split())
    return server, child


@pytest.mark.parametrize("whose", ["invoker", "another user"])
def test_the_described_servers_gpu_work_is_the_runs_own(tmp_path: pathlib.Path, host: pathlib.Path,
                                                        monkeypatch, whose: str) -> None:
    """The server the snapshot described (the one the benchmark loads; its arguments were compared) is not the
    guard's child in a sweep: its worker on the GPU is the run's own load, never foreign. Another user's look-alike
    (``run_by_invoker = false``) stays foreign: invalid."""
    from hoststate.guard import evaluate
    from hoststate.watch import run_watched

    server, worker = _server_with_worker(tmp_path)
    try:
        trace = json.loads((WATCH / "h200-idle.json").read_text())
        trace["samples"] = [[t, [row[:5] + [[worker]] for row in rows]] for t, rows in trace["samples"]]
        (tmp_path / "trace.json").write_text(json.dumps(trace))
        monkeypatch.setenv("HOSTSTATE_WATCH_REPLAY", str(tmp_path / "trace.json"))
        result = evaluate(tmp_path / "base.toml", root=str(host), allow_unreadable=True, only=["system"])
        result.current["vllm"] = {"pid": server, "program": "vllm", **(
            {"run_by_invoker": False} if whose != "invoker" else {})}
        run = run_watched(result, ["true"], root=str(host), snap_options={"only": ["system"]})
    finally:
        for pid in (worker, server):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert run.summary["metrics"]["foreign_processes"] == (0 if whose == "invoker" else 1)
    assert ("foreign_processes" in {r["metric"] for r in run.reasons}) == (whose != "invoker")


@pytest.mark.parametrize("status", [0, 1])
def test_an_earlier_runs_result_the_command_did_not_write_is_never_stamped(tmp_path: pathlib.Path,
                                                                            host: pathlib.Path, status: int) -> None:
    """The bench failed before writing (or wrote elsewhere): the file at --attach is an earlier run's, measured
    on whatever host that was. Stamping it would give those numbers this run's host state and verdict, and
    hoststate results would take them for this host's. It is left as it was, and so is the earlier run's
    sidecar; without one, the sidecar written says why."""
    earlier = '{"completed": 100, "output_throughput": 1234.0}'
    (tmp_path / "r.json").write_text(earlier)
    cmd = (sys.executable, "-c", f"import sys; sys.exit({status})")
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "r.json", cmd=cmd)
    assert proc.returncode == status, proc.stderr
    assert (tmp_path / "r.json").read_text() == earlier
    assert "the command did not write it" in json.loads((tmp_path / "r.hoststate.json").read_text())["attach_error"]
    sidecar = (tmp_path / "r.hoststate.json").read_bytes()
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "r.json", cmd=cmd)
    assert (tmp_path / "r.json").read_text() == earlier and (tmp_path / "r.hoststate.json").read_bytes() == sidecar
    assert "kept r.hoststate.json" in proc.stderr


def test_a_result_the_command_rewrote_in_place_is_stamped(tmp_path: pathlib.Path, host: pathlib.Path) -> None:
    """vllm bench serve opens its --result-filename with "w" (the same inode, new content): this run's numbers."""
    (tmp_path / "r.json").write_text('{"completed": 1}')
    code = "import json; json.dump({'completed': 100}, open('r.json', 'w'))"
    proc = guard_watch(tmp_path, host, "base.toml", "dense-b", "--attach", "r.json", cmd=(sys.executable, "-c", code))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["hoststate"]["format"] == "hoststate-run/1"
