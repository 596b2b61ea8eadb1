"""`hoststate check`: each advisory code fires on its bad state and stays quiet otherwise; docs/codes.md covers all."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest

from hoststate.check import CHECKS, CODES, run_checks
from hoststate.render.check import render_checks
from hoststate.snapshot import load
from tests.conftest import FIXTURES, REPO

SEED_B, SEED_E = (str(FIXTURES / "snapshots" / n) for n in ("seed-baseline.toml", "seed-experiment.toml"))
DOC = (REPO / "docs" / "codes.md").read_text()


def codes(snap) -> list[str]:
    return [a.code for a in run_checks(snap)]


def test_codes_table_is_well_formed_and_matches_checks():
    seen = set()
    for code, name, area, summary in CODES:
        assert re.fullmatch(r"HS[1-49]\d\d", code) and code not in seen
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) and summary
        assert {"1": "cpu", "2": "dsa", "3": "gpu", "4": "vllm", "9": "snapshot"}[code[2]] == area
        seen.add(code)
    assert set(CHECKS) == seen


@pytest.mark.parametrize("code, name", [(c, n) for c, n, _, _ in CODES])
def test_every_code_has_a_docs_section(code, name):
    m = re.search(rf"^## {code} {name}\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert m, f"docs/codes.md lacks '## {code} {name}'"
    for heading in ("What it checks", "Why it matters", "Example", "Fix"):
        assert f"**{heading}**" in m.group(1), f"{code}: missing '{heading}'"


def test_seed_experiment_names_unsaved_config_and_zero_clients():
    advisories = run_checks(load(SEED_E))
    assert [a.code for a in advisories if a.code == "HS201"] == ["HS201"]
    zero = [a for a in advisories if a.code == "HS202"]
    assert len(zero) == 8 and all(a.severity == "warning" and a.path.endswith(".clients") for a in zero)
    assert "lost at reboot" in next(a.message for a in advisories if a.code == "HS201")


def test_seed_baseline_has_no_dsa_advisories():
    assert not [c for c in codes(load(SEED_B)) if c.startswith("HS2")]


def test_saved_and_used_wqs_are_quiet():
    snap = load(SEED_E)
    snap["accel_config"]["saved"] = {"path": "/etc/accel-config/accel-config.conf", "present": True,
                                     "matches_live": True}
    for wq in snap["dsa"]["devices"]["dsa0"]["wqs"].values():
        wq["clients"] = 1
    found = codes(snap)
    assert "HS201" not in found and found.count("HS202") == 4  # dsa1 still unused
    snap["accel_config"]["saved"]["matches_live"] = False
    assert "HS201" in codes(snap)


def _gpu_snap(**dev) -> dict:
    base = {"index": 0, "ecc_mode_current": True, "ecc_mode_pending": True, "mig_mode_current": False,
            "mig_mode_pending": False, "nvlink": {"links_active": 18, "links_total": 18},
            "observed": {"clocks_event_reasons": 1, "processes": []}}
    base.update(dev)
    return {"hoststate": {}, "collectors": {"gpu": {"status": "ok"}}, "gpu": {"devices": {"GPU-1": base}}}


def test_gpu_healthy_is_quiet():
    assert codes(_gpu_snap()) == []


@pytest.mark.parametrize("change, code", [
    ({"observed": {"clocks_event_reasons": 0x4 | 0x1}}, "HS301"),
    ({"observed": {"clocks_event_reasons_active": ["gpu_idle", "hw_slowdown"]}}, "HS301"),
    ({"observed": {"processes": [{"pid": 4242, "name": "python3 train.py"}]}}, "HS302"),
    ({"ecc_mode_pending": False}, "HS303"),
    ({"mig_mode_pending": True}, "HS304"),
    ({"nvlink": {"links_active": 16, "links_total": 18}}, "HS305"),
    ({"nvlink": {"links": {"0": {"state": "active"}, "5": {"state": "inactive"}}}}, "HS305"),
])
def test_gpu_codes(change, code):
    assert codes(_gpu_snap(**change)) == [code]


def test_vllm_own_processes_are_not_foreign():
    """The described server's pid is the benchmark's; a worker named as vLLM's is where the snapshot's occupancy,
    decided when it was taken (the owner checked), does not list it as foreign; a name alone never is."""
    procs = {"processes": [{"pid": 100, "name": "VLLM::Worker_TP0"}, {"pid": 7, "name": "x"}]}
    snap = _gpu_snap(observed=procs, occupancy={"memory_used_bytes": 1})
    snap["vllm"] = {"pid": 7, "model": "m"}
    assert codes(snap) == []
    named_only = _gpu_snap(observed=procs)
    named_only["vllm"] = {"pid": 7, "model": "m"}
    assert codes(named_only) == ["HS302"]  # an older snapshot without occupancy: the name is not believed
    another_users = _gpu_snap(observed=procs, occupancy={"foreign_compute_processes": 1,
                                                         "foreign_process_names": ["VLLM::Worker_TP0"]})
    another_users["vllm"] = {"pid": 7, "model": "m"}
    assert codes(another_users) == ["HS302"]


def _vllm_snap(model: str, spec: bool = True, gmu: float | None = 0.85, **extra) -> dict:
    args = {"model": model, **extra}
    if gmu is not None:
        args["gpu_memory_utilization"] = gmu
    if spec:
        args["speculative_config"] = {"method": "suffix", "num_speculative_tokens": 32}
    return {"hoststate": {}, "collectors": {}, "vllm": {"model": model, "version": "0.12.0", "args": args}}


@pytest.mark.parametrize("snap, expected", [
    (_vllm_snap("deepseek-ai/DeepSeek-R1"), ["HS402"]),
    (_vllm_snap("Qwen/Qwen3-30B-A3B"), ["HS402"]),
    (_vllm_snap("some/dense-70b", enable_expert_parallel=True), ["HS402"]),
    (_vllm_snap("deepseek-ai/DeepSeek-R1", spec=False), []),
    (_vllm_snap("meta-llama/Llama-3.1-8B-Instruct"), []),
    (_vllm_snap("meta-llama/Llama-3.1-405B-Instruct-FP8", gmu=0.85), ["HS403"]),
    (_vllm_snap("meta-llama/Llama-3.1-405B-Instruct-FP8", gmu=None), ["HS403"]),  # default 0.9
    (_vllm_snap("meta-llama/Llama-3.1-405B-Instruct-FP8", gmu=0.80), []),
    (_vllm_snap("meta-llama/Llama-3.1-405B-Instruct", gmu=0.9), []),
    (_vllm_snap("meta-llama/Llama-3.1-405B-Instruct", gmu=0.9, quantization="fp8"), ["HS403"]),
])
def test_suffix_decoding_boundaries(snap, expected):
    assert codes(snap) == expected


def test_cudagraph_declared_vs_observed():
    snap = {"vllm": {"model": "m", "version": "0.12.0",
                     "cudagraph": {"declared": "FULL_AND_PIECEWISE", "observed": "PIECEWISE", "observed_from": "log"}}}
    assert codes(snap) == ["HS401"]
    snap["vllm"]["cudagraph"]["observed"] = "full_and_piecewise"
    assert codes(snap) == []
    servers = {"vllm": {"servers": {"8000": {"model": "m", "version": "0.12.0",
                                             "cudagraph": {"declared": "FULL", "observed": "NONE"}}}}}
    assert [a.path for a in run_checks(servers)] == ["vllm.servers.8000.cudagraph.observed"]


def test_cpu_and_collector_codes():
    snap = {"collectors": {"gpu": {"status": "timeout", "reason": "20s"}, "dsa": {"status": "partial",
                                                                             "unreadable": {"x": "EACCES"}}},
            "system": {"cpufreq": {"governor": {"0-3": "performance", "4-7": "powersave"}}, "numa": {"balancing": 1}}}
    assert codes(snap) == ["HS101", "HS102", "HS901", "HS902"]


def test_malformed_sections_do_not_crash():
    assert run_checks({"dsa": {"devices": {"dsa0": {"wqs": "oops"}}}, "gpu": {"devices": [1]}, "vllm": 3}) == []


def test_render_formats():
    adv = run_checks(load(SEED_E))
    text = render_checks(adv, "text")
    assert text.splitlines()[0].startswith("HS201 wq-config-not-saved [warning]") and "9 warning(s)" in text
    assert '"code": "HS202"' in render_checks(adv, "json")
    assert render_checks([], "text") == "no advisories\n"
    assert "\x1b[33m" in render_checks(adv, "text", color=True)


def test_cli_check_exit_codes(tmp_path):
    run = [sys.executable, "-m", "hoststate", "check"]
    assert subprocess.run([*run, SEED_E], capture_output=True, timeout=60).returncode == 1
    quiet = load(SEED_B)
    from hoststate.snapshot import to_toml

    quiet["system"]["numa"]["balancing"] = 0
    (tmp_path / "q.toml").write_text(to_toml(quiet))
    assert subprocess.run([*run, str(tmp_path / "q.toml")], capture_output=True, timeout=60).returncode == 0
    bad = subprocess.run([*run, str(tmp_path / "none.toml")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_cli_check_live_host_runs():
    proc = subprocess.run([sys.executable, "-m", "hoststate", "check", "--skip", "vllm,gpu", "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1) and '"advisories"' in proc.stdout


def test_copy_does_not_mutate_input():
    snap = load(SEED_E)
    before = copy.deepcopy(snap)
    run_checks(snap)
    assert snap == before


def test_gpu_advisories_on_the_real_h200_snapshot_shape() -> None:
    """HS301/HS302 read the keys the gpu collector really writes (the snapshot taken on a real H200)."""
    snap = load(str(FIXTURES / "real" / "h200-snapshot.toml"))
    assert not {a.code for a in run_checks(snap)} & {"HS301", "HS302", "HS303", "HS304", "HS305"}
    (dev,) = snap["gpu"]["devices"].values()
    dev["observed"]["clocks_event_reasons"] = ["gpu_idle", "sw_power_cap"]
    dev["observed"]["processes"] = [{"pid": 4242, "name": "python3 other_job.py"}]
    codes = {a.code for a in run_checks(snap)}
    assert {"HS301", "HS302"} <= codes


# -- views agree: a lost GPU, an unknown vLLM version, lines within 120 columns --------------------------------------


def _lost_gpu_snapshot(tmp_path):
    """The 8-GPU HGX replay with GPU 5 lost (GpuIsLost), snapped through the real collector."""
    import os
    import subprocess
    import sys

    from tests.conftest import FIXTURES, PYTHONPATH

    out = tmp_path / "lost.toml"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(FIXTURES / "nvml" /
                                                                                  "hgx-h100-8-gpu-lost.json")}
    proc = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--only", "gpu", "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return load(str(out))


def test_a_lost_gpu_is_a_warning_not_info(tmp_path):
    snap = _lost_gpu_snapshot(tmp_path)
    lost = [a for a in run_checks(snap) if a.code == "HS306"]
    assert len(lost) == 1 and lost[0].severity == "warning" and lost[0].path == "gpu.count"
    assert "1 of 8 GPUs not described" in lost[0].message and "GpuIsLost" in lost[0].message
    from hoststate.render.show import render_summary

    shown = render_summary(snap, "lost.toml")
    assert "MISSING" in shown and "1 of 8 GPUs not described" in shown
    assert all(len(line) <= 120 for line in shown.splitlines())


def test_all_gpus_described_is_quiet():
    snap = {"gpu": {"count": 2, "devices": {"GPU-a": {"index": 0}, "GPU-b": {"index": 1}}}}
    assert "HS306" not in codes(snap)


def test_an_unknown_vllm_version_is_said():
    snap = {"vllm": {"source": "cmd", "model": "m", "cudagraph": {"declared": "FULL_AND_PIECEWISE",
                                                                   "rules_version": "0.33.0"}}}
    [adv] = [a for a in run_checks(snap) if a.code == "HS404"]
    assert adv.severity == "warning" and "0.33.0" in adv.message and adv.path == "vllm.version"
    snap["vllm"]["version"] = "0.12.0"
    assert "HS404" not in codes(snap)


def test_check_text_keeps_every_line_within_120_columns_and_cuts_nothing():
    advisories = run_checks(load(SEED_E))
    text = render_checks(advisories, "text")
    lines = text.splitlines()
    assert all(len(line) <= 120 for line in lines), text
    assert lines[0] == "HS201 wq-config-not-saved [warning]" and "HS202 wq-enabled-no-clients [warning] x 8" in lines
    flat = " ".join(text.split())
    for a in advisories:  # every message is there whole, only wrapped
        assert " ".join(a.message.split()) in flat
