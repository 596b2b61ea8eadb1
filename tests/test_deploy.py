"""deploy/: the Kubernetes DaemonSet and NodeFeatureRule validated against the Kubernetes and NFD schemas
(tests/schemas/, made by scripts/vendor_schemas.py), the commands they and the systemd units run executed against a
captured host, and the metrics joined with dcgm-exporter's labels."""

from __future__ import annotations

import configparser
import copy
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hoststate import slurm
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, REPO

DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
TREE = HOSTS / "seed-experiment"
H200 = FIXTURES / "nvml" / "h200.json"
PREFIX = "hoststate.feature.node.kubernetes.io"


def _closed(schema: Any) -> Any:
    """An OpenAPI structural schema with unknown fields refused (kubectl --validate=strict; the API server would
    prune them silently, so a misspelt key would be lost without a word)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def _validator(name: str, closed: bool = False) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / name).read_text())
    schema = _closed(schema) if closed else schema
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d]


def test_the_daemonset_is_a_valid_apps_v1_daemonset() -> None:
    (ds,) = _docs("hoststate-daemonset.yaml")
    validator = _validator("k8s-daemonset-apps-v1.json")
    assert not list(validator.iter_errors(ds))
    broken = copy.deepcopy(ds)
    broken["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    broken["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # misspelt: the strict schema refuses
    assert len(list(validator.iter_errors(broken))) >= 2


def privileges(ds: dict[str, Any]) -> set[str]:
    """Every privilege a DaemonSet's pod holds, written as docs/fleets-engines.md lists them."""
    pod = ds["spec"]["template"]["spec"]
    held = {key for key in ("hostPID", "hostNetwork", "hostIPC", "hostUsers") if pod.get(key) is True}
    if "runtimeClassName" in pod:
        held.add(f"runtimeClassName: {pod['runtimeClassName']}")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        ctx = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        if ctx.get("privileged"):
            held.add("privileged")
        if not ctx.get("runAsNonRoot") and ctx.get("runAsUser", 0) == 0:
            held.add("runAsUser: 0")
        if ctx.get("allowPrivilegeEscalation", True):
            held.add("allowPrivilegeEscalation")
        if not ctx.get("readOnlyRootFilesystem"):
            held.add("writable root file system")
        caps = ctx.get("capabilities", {})
        if caps.get("drop") != ["ALL"]:
            held.add("the runtime's default capabilities")
        held |= {f"capabilities.add: {c}" for c in caps.get("add", [])}
        for mount in container.get("volumeMounts", []):
            host = volumes[mount["name"]].get("hostPath")
            if host:
                held.add(f"hostPath: {host['path']} ({'read-only' if mount.get('readOnly') else 'read-write'})")
    return held


def documented_privileges() -> dict[str, str]:
    """The privileges table of docs/fleets-engines.md: privilege -> why."""
    doc = (REPO / "docs" / "fleets-engines.md").read_text()
    block = doc[doc.index("<!-- privileges: begin -->"):doc.index("<!-- privileges: end -->")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[3:] if line.startswith("|")]
    return {row[0].strip("`"): row[2] for row in rows}


def test_every_privilege_of_the_daemonset_is_documented_with_its_reason() -> None:
    (ds,) = _docs("hoststate-daemonset.yaml")
    documented = documented_privileges()
    assert privileges(ds) == set(documented)
    assert all(len(why) > 30 for why in documented.values())  # a reason, not a word
    assert not {"hostPID", "hostNetwork", "hostIPC", "privileged"} & set(documented)
    # the check is real: each privilege added to the manifest is caught
    for key, value in (("hostPID", True), ("hostNetwork", True)):
        more = copy.deepcopy(ds)
        more["spec"]["template"]["spec"][key] = value
        assert privileges(more) - set(documented) == {key}
    more = copy.deepcopy(ds)
    more["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"].append(
        "DAC_READ_SEARCH")
    assert privileges(more) - set(documented) == {"capabilities.add: DAC_READ_SEARCH"}
    more = copy.deepcopy(ds)
    more["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = False
    assert privileges(more) - set(documented) == {"hostPath: /etc/os-release (read-write)"}


def test_the_daemonset_reads_the_node_not_the_container() -> None:
    (ds,) = _docs("hoststate-daemonset.yaml")
    pod = ds["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia" and "hostPID" not in pod and "hostNetwork" not in pod
    (env,) = [e for e in pod["containers"][0]["env"] if e["name"] == "HOSTSTATE_HOSTNAME"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}  # what dcgm-exporter's NODE_NAME holds
    (container,) = pod["containers"]
    assert "resources" in container and "nvidia.com/gpu" not in json.dumps(container["resources"])  # takes no GPU
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/os-release"]["name"]]["hostPath"]["path"] == "/etc/os-release"
    assert volumes[mounts["/etc/accel-config"]["name"]]["hostPath"]["path"] == "/etc/accel-config"
    assert mounts["/etc/os-release"]["readOnly"] is True


def _script_commands(ds: dict[str, Any]) -> list[list[str]]:
    script = ds["spec"]["template"]["spec"]["containers"][0]["args"][0]
    return [shlex.split(line) for line in script.splitlines() if line.strip().startswith("hoststate ")]


def _run(argv: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(H200)}
    return subprocess.run([sys.executable, "-m", "hoststate", *argv[1:]], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp)


def _relocate(argv: list[str], tmp: Path) -> list[str]:
    """The command with the pod's paths moved under ``tmp`` and the snapshot read from a captured host (NVML from
    the H200's replay), everything else as written."""
    out = []
    for arg in argv:
        for pod_path in ("/state", "/features.d", "/textfile", "/etc/hoststate", "/var/lib/node_exporter/textfile"):
            if arg.startswith(pod_path + "/"):
                arg = str(tmp / pod_path.strip("/").replace("/", "_")) + arg[len(pod_path):]
        out.append(arg)
    if out[1] == "snap":
        out[2:2] = ["--root", str(TREE)]
    return out


@pytest.fixture
def pod_dirs(tmp_path: Path) -> Path:
    for d in ("state", "features.d", "textfile", "etc_hoststate", "var_lib_node_exporter_textfile"):
        (tmp_path / d).mkdir()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(H200)}
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", str(TREE), "--skip",
                    "vllm,env,packages", "-o", str(tmp_path / "etc_hoststate" / "baseline.toml")],
                   check=True, env=env, timeout=120)
    return tmp_path


def test_the_daemonsets_commands_run_and_publish_labels_the_rule_reads(pod_dirs: Path) -> None:
    (ds,) = _docs("hoststate-daemonset.yaml")
    commands = _script_commands(ds)
    assert [c[:2] for c in commands] == [["hoststate", "snap"], ["hoststate", "export"], ["hoststate", "export"]]
    for argv in commands:
        done = _run(_relocate(argv, pod_dirs), pod_dirs)
        assert done.returncode == 0, (argv, done.stderr)
    features = dict(line.split("=", 1) for line in (pod_dirs / "features.d" / "hoststate").read_text().splitlines()
                    if not line.startswith("#"))
    assert features[f"{PREFIX}/baseline-match"] == "true" and features[f"{PREFIX}/gpu-health-ok"] == "true"
    assert features[f"{PREFIX}/gpu-cc"] == "false"
    # every label the NodeFeatureRule matches on is one the feature file carries, with a value its op can read
    (rule,) = _docs("nodefeaturerule.yaml")
    for r in rule["spec"]["rules"]:
        blocks = r.get("matchFeatures", []) + [m for a in r.get("matchAny", []) for m in a["matchFeatures"]]
        for block in blocks:
            assert block["feature"] == "local.label"
            for key, expr in block["matchExpressions"].items():
                assert key in features, key
                assert expr["op"] in ("IsTrue", "IsFalse") and features[key] in ("true", "false")
    prom = (pod_dirs / "textfile" / "hoststate.prom").read_text()
    metrics = {f.name: f for f in text_string_to_metric_families(prom)}
    assert metrics["hoststate_baseline_match"].samples[0].value == 1


def test_the_node_feature_rule_is_valid_against_nfds_crd() -> None:
    (rule,) = _docs("nodefeaturerule.yaml")
    assert (rule["apiVersion"], rule["kind"]) == ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule")
    validator = _validator("nfd-nodefeaturerule-v1alpha1.json", closed=True)
    assert not list(validator.iter_errors(rule))
    broken = copy.deepcopy(rule)
    broken["spec"]["rules"][0]["matchFeature"] = broken["spec"]["rules"][0].pop("matchFeatures")
    broken["spec"]["rules"][1]["matchAny"][0]["matchFeatures"][0]["matchExpressions"][
        f"{PREFIX}/baseline-match"]["op"] = "IsFalsy"
    assert len(list(validator.iter_errors(broken))) == 2


def _dcgm_sample(labels: dict[str, str]) -> str:
    """A sample as dcgm-exporter writes it (its default counters: gpu, UUID, pci_bus_id, device, modelName,
    Hostname)."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" \
           f"DCGM_FI_DEV_GPU_TEMP{{{inner}}} 36\n"


def test_gpu_metrics_join_dcgm_exporters_on_its_labels(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(H200)}
    snap = tmp_path / "node.toml"
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", str(TREE), "--only", "system,gpu",
                    "-o", str(snap)], check=True, env=env, timeout=120)
    text = subprocess.run([sys.executable, "-m", "hoststate", "export", "prometheus", str(snap)], check=True,
                          env=env, capture_output=True, text=True, timeout=60).stdout
    ours = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name.startswith("hoststate_gpu")]
    assert {s.name for s in ours} >= {"hoststate_gpu_power_limit_watts", "hoststate_gpu_remapped_rows_pending",
                                      "hoststate_gpu_ecc_errors_uncorrected_volatile"}
    host = re.search(r'hostname="([^"]*)"', text)
    assert host
    dcgm = _dcgm_sample({"gpu": "0", "UUID": "GPU-bfeb625c-90a3-3bdc-4357-0cfe0a730e11", "pci_bus_id":
                         "00000000:00:06.0", "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": host[1]})
    (theirs,) = [s for f in text_string_to_metric_families(dcgm) for s in f.samples]
    for keys in (("UUID",), ("Hostname", "gpu"), ("Hostname", "pci_bus_id", "modelName")):
        joined = [s for s in ours if all(s.labels.get(k) == theirs.labels[k] for k in keys)]
        assert len(joined) == len(ours), keys  # every GPU sample of ours finds dcgm-exporter's


def test_the_systemd_timer_and_service(tmp_path: Path) -> None:
    service = configparser.ConfigParser(strict=False, interpolation=None)
    service.read(DEPLOY / "systemd" / "hoststate-textfile.service")
    timer = configparser.ConfigParser(strict=False, interpolation=None)
    timer.read(DEPLOY / "systemd" / "hoststate-textfile.timer")
    assert service["Service"]["Type"] == "oneshot" and timer["Install"]["WantedBy"] == "timers.target"
    assert timer["Timer"]["OnUnitActiveSec"] == "5min"
    argv = shlex.split(service["Service"]["ExecStart"])
    out = argv[argv.index("-o") + 1]
    assert out.startswith(service["Service"]["ReadWritePaths"] + "/")  # the only path the unit may write
    (tmp_path / "var_lib_node_exporter_textfile").mkdir()
    (tmp_path / "etc_hoststate").mkdir()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(H200)}
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", str(TREE), "-o",
                    str(tmp_path / "etc_hoststate" / "baseline.toml")], check=True, env=env, timeout=120)
    run = _relocate(["hoststate", *argv[1:]], tmp_path)
    run[3:3] = ["--root", str(TREE)]  # export's live snapshot, of the captured host
    done = _run(run, tmp_path)
    assert done.returncode == 0, done.stderr
    prom = (tmp_path / "var_lib_node_exporter_textfile" / "hoststate.prom").read_text()
    assert any(f.name == "hoststate_baseline_match" for f in text_string_to_metric_families(prom))
    verify = subprocess.run(["systemd-analyze", "verify", "--help"], capture_output=True) \
        if os.path.exists("/usr/bin/systemd-analyze") else None
    assert verify is None or verify.returncode == 0


def test_the_slurm_files_are_what_hoststate_slurm_reads() -> None:
    config = slurm.load_config(str(DEPLOY / "slurm" / "hoststate-slurm.toml"))
    assert config.baseline == "/etc/hoststate/baseline.toml" and config.kmsg == "/dev/kmsg"
    lines = dict(line.split("=", 1) for line in (DEPLOY / "slurm" / "slurm.conf.hoststate").read_text().splitlines()
                 if line and not line.startswith("#"))
    assert lines["PrologFlags"] == "Alloc"
    for key, role in (("Prolog", "prolog"), ("TaskProlog", "task-prolog"), ("Epilog", "epilog")):
        script = DEPLOY / "slurm" / Path(lines[key]).name
        assert os.access(script, os.X_OK)
        text = script.read_text()
        assert f'exec "$venv/bin/python" -I -m hoststate.slurm {role} --config "$config"' in text  # isolated
        assert "venv=/opt/hoststate\nconfig=/etc/hoststate/slurm.toml\n" in text
        assert "/usr/bin/python3" not in text  # the system Python has no hoststate after the README's install
    env = (DEPLOY / "slurm" / "hoststate-slurm.env").read_text()
    assert [line for line in env.splitlines() if not line.startswith("#")] == ["HOSTSTATE_VENV=/opt/hoststate"]


def test_the_pods_host_name_is_the_nodes_name_from_the_downward_api(tmp_path: Path) -> None:
    """Without hostNetwork the pod's own host name is the pod's; the DaemonSet's HOSTSTATE_HOSTNAME (spec.nodeName)
    names the node in the snapshot and in the Hostname label that joins dcgm-exporter's NODE_NAME."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(H200),
           "HOSTSTATE_HOSTNAME": "gpu-node-7"}
    snap = tmp_path / "node.toml"
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--only", "system,gpu", "-o", str(snap)],
                   check=True, env=env, timeout=120)
    text = subprocess.run([sys.executable, "-m", "hoststate", "export", "prometheus", str(snap)], check=True,
                          env=env, capture_output=True, text=True, timeout=60).stdout
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name.startswith("hoststate_gpu")]
    assert samples and {s.labels["Hostname"] for s in samples} == {"gpu-node-7"}
