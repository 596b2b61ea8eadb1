"""`hoststate export`: node_exporter textfile metrics (parsed by prometheus_client) and NFD feature files (checked
against NFD's documented rules by a validator written from its docs).

The snapshot comes from the collectors themselves: the xeon-2s tree with an enabled SPR DSA layout (system, dsa),
an 8-GPU HGX replay with GPU 1's NVLink 3 down (gpu), so the exporters read the key names the collectors write.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import parser as prometheus_parser

from hoststate import export
from hoststate.digest import digest
from hoststate.snapshot import to_toml
from tests.test_fleet import base_snapshot

HOSTSTATE = [sys.executable, "-m", "hoststate"]


@pytest.fixture(scope="module")
def snap(tmp_path_factory) -> dict[str, Any]:
    from hoststate import nvml_replay
    from hoststate.capture import collect
    from hoststate.collectors import Context

    base = base_snapshot(str(tmp_path_factory.mktemp("export")))
    gpu = collect(Context(nvml=nvml_replay.load_data(nvml_replay.synthetic_hgx(gpus=8, link_down=(1, 3)))),
                  ("gpu",))
    assert gpu["collectors"]["gpu"]["status"] == "ok", gpu["collectors"]["gpu"]
    base["gpu"] = gpu["gpu"]
    base["collectors"]["gpu"] = gpu["collectors"]["gpu"]
    base["vllm"] = {"version": "0.11.0", "cudagraph": {"declared": "FULL_AND_PIECEWISE"}}
    base["hoststate"]["digest"] = digest(base)
    return base


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample by metric name, parsed by prometheus_client's text parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    matches = [v for lab, v in found[name] if all(lab.get(k) == w for k, w in labels.items())]
    assert len(matches) == 1, (name, labels, found.get(name))
    return matches[0]


# -- Prometheus ----------------------------------------------------------------------------------------------------

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def check_textfile(text: str) -> None:
    """What node_exporter's textfile collector needs: one HELP and TYPE per family before its samples, samples of a
    family together, no timestamps, a final newline."""
    assert text.endswith("\n")
    seen: list[str] = []
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert _METRIC_NAME.match(name) and name.startswith("hoststate_") and name not in seen, name
            seen.append(name)
            current = name
        elif line.startswith("# TYPE "):
            assert line.split()[2:] == [current, "gauge"], line
        else:
            name = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)", line).group(1)
            assert name == current, f"sample of {name} outside its family: {line}"
            tail = line.rsplit("}", 1)[-1] if "}" in line else line[len(name):]
            assert len(tail.split()) == 1, f"a timestamp or junk after the value: {line}"


def test_prometheus_parses_with_values(snap) -> None:
    text = export.to_prometheus(snap)
    check_textfile(text)
    found = samples(text)
    info = found["hoststate_info"]
    assert len(info) == 1 and info[0][1] == 1
    assert info[0][0]["digest"] == snap["hoststate"]["digest"]
    assert info[0][0]["hostname"] == "dgx-b200-01" and info[0][0]["label"] == "sweep-42"
    assert info[0][0]["version"] == "0.1.0" and info[0][0]["schema"] == "1"
    assert value(found, "hoststate_snapshot_timestamp_seconds") == snap["hoststate"]["taken_at"].timestamp()
    assert value(found, "hoststate_dsa_wqs_enabled", device="dsa0") == 4
    assert value(found, "hoststate_dsa_wqs_enabled", device="dsa2") == 4
    assert value(found, "hoststate_dsa_wqs_enabled", device="iax1") == 0
    assert value(found, "hoststate_dsa_wqs", device="dsa0") == 8
    assert value(found, "hoststate_collector_ok", collector="system") == 1
    assert value(found, "hoststate_collector_ok", collector="gpu") == 1
    assert len(found["hoststate_gpu_power_limit_watts"]) == 8
    uuids = sorted(snap["gpu"]["devices"], key=lambda u: snap["gpu"]["devices"][u]["index"])
    for i, uuid in enumerate(uuids):
        gpu = snap["gpu"]["devices"][uuid]
        assert value(found, "hoststate_gpu_power_limit_watts", uuid=uuid, index=str(i)) == \
            gpu["power_enforced_limit_mw"] / 1000
        assert value(found, "hoststate_gpu_applications_clock_hertz", uuid=uuid, clock="sm") == \
            gpu["clocks_applications_sm_mhz"] * 1e6
        assert value(found, "hoststate_gpu_applications_clock_hertz", uuid=uuid, clock="memory") == \
            gpu["clocks_applications_mem_mhz"] * 1e6
        assert value(found, "hoststate_gpu_nvlink_links_active", uuid=uuid) == (17 if i == 1 else 18)
    assert "hoststate_drift_findings" not in found and "hoststate_baseline_match" not in found


def test_prometheus_drift_against_baseline(snap) -> None:
    same = samples(export.to_prometheus(snap, snap))
    assert value(same, "hoststate_baseline_match", baseline_digest=snap["hoststate"]["digest"]) == 1
    assert value(same, "hoststate_drift_findings", severity="invalidating") == 0
    current = copy.deepcopy(snap)
    current["system"]["kernel"]["release"] = "6.8.0-45-generic"
    current["dsa"]["devices"]["dsa0"]["wqs"]["wq0.1"]["state"] = "disabled"
    current["hoststate"]["digest"] = digest(current)
    text = export.to_prometheus(current, snap)
    check_textfile(text)
    drift = samples(text)
    assert value(drift, "hoststate_baseline_match") == 0
    assert value(drift, "hoststate_drift_findings", severity="invalidating") == 2
    assert {lab["severity"] for lab, _ in drift["hoststate_drift_findings"]} == {
        "invalidating", "warning", "info", "ignore"}
    assert value(drift, "hoststate_dsa_wqs_enabled", device="dsa0") == 3


def test_prometheus_label_escaping_round_trips(snap) -> None:
    odd = copy.deepcopy(snap)
    odd["hoststate"]["label"] = 'run "A"\\B\nline two'
    found = samples(export.to_prometheus(odd))
    assert found["hoststate_info"][0][0]["label"] == 'run "A"\\B\nline two'


def test_prometheus_missing_tables_give_no_metrics() -> None:
    bare = {"hoststate": {"schema": 1, "version": "0.1.0", "digest": "sha256:" + "a" * 64},
            "collectors": {"dsa": {"status": "absent"}}, "gpu": {"devices": {"GPU-x": {"name": "odd"}}},
            "dsa": {"devices": "not a table"}}
    text = export.to_prometheus(bare)
    check_textfile(text)
    found = samples(text)
    assert set(found) == {"hoststate_info", "hoststate_collector_ok"}
    assert value(found, "hoststate_collector_ok", collector="dsa") == 0


# -- NFD -----------------------------------------------------------------------------------------------------------
# The rules, from NFD's docs (usage/customization-guide.md: "Feature files", "Input format", "Node labels") and the
# Kubernetes label syntax NFD applies to feature labels (IsQualifiedName / IsValidLabelValue).

_NFD_NAME = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def check_nfd(text: str) -> dict[str, str]:
    """Validate a feature file against NFD's rules; return its features (key -> value)."""
    assert len(text.encode("utf-8")) <= 65536, "NFD ignores feature files over 64 kB"
    features: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                directive, _, arg = line[3:].partition("=")
                assert directive in ("expiry-time", "no-label", "no-feature"), line
                if directive == "expiry-time":
                    assert re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$", arg), arg
                    dt.datetime.fromisoformat(arg.replace("Z", "+00:00"))
            continue
        key, eq, val = line.partition("=")
        assert eq, f"expected key=value: {line!r}"
        prefix, slash, name = key.rpartition("/")
        assert slash, f"unprefixed names are deprecated in NFD (auto-prefix goes away): {key}"
        assert len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix), prefix
        assert prefix == "feature.node.kubernetes.io" or prefix.endswith(".feature.node.kubernetes.io") or not (
            prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io")), f"denied namespace {prefix}"
        assert len(name) <= 63 and _NFD_NAME.match(name), name
        assert len(val) <= 63 and _LABEL_VALUE.match(val), f"{key}={val!r}"
        assert key not in features, f"duplicate {key}"
        features[key] = val
    return features


def test_nfd_file_meets_nfd_rules(snap) -> None:
    text = export.to_nfd(snap)
    features = check_nfd(text)
    p = export.NFD_PREFIX + "/"
    got = {k[len(p):]: v for k, v in features.items()}
    assert got["digest"] == snap["hoststate"]["digest"][len("sha256:"):][:40]
    assert got["kernel"] == "5.15.0-131-generic"
    assert got["cpu-governor"] == "performance" and got["cpu-smt"] == "true"
    assert got["dsa-devices"] == "4" and got["dsa-wqs-enabled"] == "8"
    assert got["gpu-count"] == "8" and got["gpu-name"] == "NVIDIA-H100-80GB-HBM3"
    assert got["gpu-power-limit-watts"] == "700"
    assert got["vllm-cudagraph"] == "FULL_AND_PIECEWISE" and got["vllm-version"] == "0.11.0"
    assert got["label"] == "sweep-42"
    assert "baseline-match" not in got


def test_nfd_expiry_and_baseline(snap) -> None:
    current = copy.deepcopy(snap)
    current["system"]["kernel"]["release"] = "6.8.0-45-generic"
    current["hoststate"]["digest"] = digest(current)
    expires = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    text = export.to_nfd(current, snap, expires=expires)
    assert "# +expiry-time=2030-01-02T03:04:05Z\n" in text
    got = check_nfd(text)
    p = export.NFD_PREFIX + "/"
    assert got[p + "baseline-match"] == "false" and got[p + "drift-invalidating"] == "1"
    assert got[p + "baseline-digest"] == snap["hoststate"]["digest"][7:47] != got[p + "digest"]
    assert check_nfd(export.to_nfd(snap, snap))[p + "baseline-match"] == "true"


def test_nfd_values_are_sanitised(snap) -> None:
    odd = copy.deepcopy(snap)
    odd["hoststate"]["label"] = "  sweep 42 / nightly:" + "x" * 80 + "-"
    odd["system"]["kernel"]["release"] = "-6.8.0+rt~1_"
    features = check_nfd(export.to_nfd(odd))
    p = export.NFD_PREFIX + "/"
    assert features[p + "label"].startswith("sweep-42-nightly-xxx") and len(features[p + "label"]) <= 63
    assert features[p + "kernel"] == "6.8.0-rt-1"


@given(st.one_of(st.text(), st.integers(), st.booleans(), st.floats(allow_nan=True)))
def test_nfd_value_is_always_a_label_value(raw: Any) -> None:
    assert _LABEL_VALUE.match(export.nfd_value(raw))
    assert len(export.nfd_value(raw)) <= 63


def test_nfd_missing_tables_give_no_features() -> None:
    bare = {"hoststate": {"schema": 1, "version": "0.1.0", "digest": "sha256:" + "b" * 64}}
    got = check_nfd(export.to_nfd(bare))
    assert sorted(k.split("/")[1] for k in got) == ["digest", "schema", "version"]


# -- CLI -----------------------------------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=120)


def test_cli_export_file_and_baseline(snap, tmp_path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(to_toml(snap), encoding="utf-8")
    prom = run("export", "prometheus", str(path), "--baseline", str(path))
    assert prom.returncode == 0, prom.stderr
    check_textfile(prom.stdout)
    assert value(samples(prom.stdout), "hoststate_baseline_match") == 1

    out = tmp_path / "features.d" / "hoststate"
    out.parent.mkdir()
    nfd = run("export", "nfd", str(path), "--expires-in", "3600", "-o", str(out))
    assert nfd.returncode == 0 and nfd.stdout == "", nfd.stderr
    text = out.read_text(encoding="utf-8")
    assert "# +expiry-time=" in text and check_nfd(text)
    kept = run("export", "nfd", str(path), "-o", str(out))  # an existing file is replaced only with --force
    assert kept.returncode == 2 and "exists; use --force" in kept.stderr and "# +expiry-time=" in out.read_text()
    again = run("export", "nfd", str(path), "-o", str(out), "--force")  # a refresh replaces the file
    assert again.returncode == 0, again.stderr
    assert "# +expiry-time=" not in out.read_text(encoding="utf-8")
    assert [p.name for p in out.parent.iterdir()] == ["hoststate"]  # no temp file left behind


def test_cli_export_bad_input(snap, tmp_path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(to_toml(snap), encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text("[hoststate\n")
    for args in (("prometheus", str(bad)), ("nfd", str(path), "--baseline", str(bad)),
                 ("prometheus", str(path), "--root", str(tmp_path)), ("yaml", str(path))):
        proc = run("export", *args)
        assert proc.returncode == 2, (args, proc.stdout)
        assert proc.stderr.startswith("hoststate: ") and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_cli_export_live_host() -> None:
    proc = run("export", "prometheus", "--only", "system")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # the collector summary stays off: stdout is the metrics, stderr is for errors
    check_textfile(proc.stdout)
    info = samples(proc.stdout)["hoststate_info"][0][0]
    assert info["digest"].startswith("sha256:")
    nfd = run("export", "nfd", "--only", "system")
    assert nfd.returncode == 0, nfd.stderr
    assert check_nfd(nfd.stdout)[export.NFD_PREFIX + "/digest"] == info["digest"][7:47]
