"""JSON output against its schema: snapshot (show --format json), check and fleet (docs/*.schema.json).

diff's report has its own test (tests/test_report.py). Each schema is also checked against the code's tables, so a
new collector status or an advisory code outside the pattern fails here, not in a user's validator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest

from tests.conftest import FIXTURES, HOSTS, PYTHONPATH, REPO

SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384"


def schema(name: str) -> dict:
    data = json.loads((REPO / "docs" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(data)
    return data


def validate(instance: object, name: str) -> None:
    jsonschema.Draft202012Validator(schema(name), format_checker=jsonschema.FormatChecker()).validate(instance)


def hs(*args: str, cwd=None, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def snaps(tmp_path_factory):
    d = tmp_path_factory.mktemp("schemas")
    assert hs("snap", "-q", "--root", str(HOSTS / "seed-baseline"), "--vllm-cmd", SERVE + " -O1", "--vllm-version",
              "0.12.0", "-o", "base.toml", cwd=d).returncode == 0
    assert hs("guard", "--baseline", "base.toml", "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd", SERVE,
              "--vllm-version", "0.12.0", "--save-current", "now.toml", cwd=d).returncode == 3
    assert hs("rebaseline", "base.toml", "now.toml", "--accept", "**", "-o", "new.toml", cwd=d).returncode == 0
    lost = hs("snap", "-q", "--only", "gpu", "-o", "lost.toml", cwd=d,
              env_extra={"HOSTSTATE_NVML_REPLAY": str(FIXTURES / "nvml" / "hgx-h100-8-gpu-lost.json")})
    assert lost.returncode == 0, lost.stderr
    return d


@pytest.mark.parametrize("name", ["base.toml", "now.toml", "new.toml", "lost.toml"])
def test_snapshot_json_validates(snaps, name):
    proc = hs("show", name, "--format", "json", cwd=snaps)
    assert proc.returncode == 0, proc.stderr
    validate(json.loads(proc.stdout), "snapshot")


def test_the_snapshot_schema_rejects_what_validate_rejects(snaps):
    data = json.loads(hs("show", "base.toml", "--format", "json", cwd=snaps).stdout)
    data["collectors"]["dsa"]["status"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        validate(data, "snapshot")


def test_snapshot_schema_knows_every_collector_status():
    from hoststate.collectors import STATUSES

    enum = schema("snapshot")["properties"]["collectors"]["additionalProperties"]["properties"]["status"]["enum"]
    assert set(enum) == set(STATUSES)


@pytest.mark.parametrize("name", ["base.toml", "now.toml", "lost.toml"])
def test_check_json_validates(snaps, name):
    proc = hs("check", name, "--format", "json", cwd=snaps)
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    validate(data, "check")
    if name == "lost.toml":
        assert "HS306" in {a["code"] for a in data["advisories"]}


def test_check_schema_admits_every_code():
    from hoststate.check import CODES

    code = schema("check")["properties"]["advisories"]["items"]["properties"]
    for c, name, _, _ in CODES:
        validate({"advisories": [{"code": c, "name": name, "severity": "info", "message": "", "path": None}],
                  "counts": {"warning": 0, "info": 1}}, "check")
    assert code["severity"]["enum"] == ["warning", "info"]


def test_fleet_json_validates(snaps, tmp_path):
    import shutil

    for i in range(3):
        shutil.copy(snaps / "base.toml", tmp_path / f"node{i}.toml")
    shutil.copy(snaps / "new.toml", tmp_path / "node3.toml")
    (tmp_path / "node4.toml").write_bytes(b"")  # a node whose snap failed
    proc = hs("fleet", str(tmp_path), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    validate(data, "fleet")
    assert [o["snapshot"] for o in data["outliers"]] == [str(tmp_path / "node3.toml")]
    assert data["skipped"] == [{"file": str(tmp_path / "node4.toml"), "error": "empty file"}]
    data["groups"][0]["digest"] = "md5:x"
    with pytest.raises(jsonschema.ValidationError):
        validate(data, "fleet")
