"""One value that could not be read is rated by its own rule, not by every rule that names a key beside it; a
region that could hold anything below it still fails closed; and the report says a GPU is lost only where the
device as a whole could not be read. Snapshots from the real H200's replay, and its replay with calls the driver
lacks (fixtures/nvml/h200-call-errors.json)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoststate.diff import compare
from hoststate.policy import default_policy
from hoststate.render.summary import summarize
from hoststate.snapshot import load
from tests.conftest import FIXTURES, PYTHONPATH

NVML = FIXTURES / "nvml"


def _snap(tmp_path: Path, replay: str) -> dict:
    out = tmp_path / f"{replay}.toml"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "HOSTSTATE_NVML_REPLAY": str(NVML / f"{replay}.json")}
    subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--only", "gpu", "-o", str(out)], env=env,
                   timeout=120, check=True)
    return load(str(out))


@pytest.fixture(scope="module")
def snaps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("replays")
    return {name: _snap(tmp, name) for name in ("h200", "h200-call-errors", "hgx-h100-8", "hgx-h100-8-gpu-lost")}


def _by_path(result) -> dict:
    return {f.path: f for f in result.findings}


def test_a_value_the_driver_could_not_give_is_rated_by_its_own_rule(snaps: dict) -> None:
    """gsp_firmware_default_mode (FunctionNotFound) has a rule of its own, warning; gpu.devices.*.* (invalidating,
    for any key of a device no other rule names) can rate no path at or below it and is not its rating."""
    result = compare(snaps["h200"], snaps["h200-call-errors"], include_ignored=True)
    found = _by_path(result)['gpu.devices."00000000:00:06.0".gsp_firmware_default_mode']
    assert found.change == "unreadable"
    assert (found.severity, found.rule) == ("warning", "gpu.devices.*.gsp_firmware_default_mode")
    # what has an invalidating rule of its own still refuses when it cannot be read
    assert _by_path(result)['gpu.devices."00000000:00:06.0".power_limit_mw'].severity == "invalidating"


def test_the_report_says_a_gpu_is_lost_only_where_the_device_could_not_be_read(snaps: dict) -> None:
    some = "\n".join(line.text for line in summarize(compare(snaps["h200"], snaps["h200-call-errors"]).findings))
    assert "lost" not in some and "removed (was" in some  # its values, not the GPU
    whole = "\n".join(line.text for line in summarize(compare(snaps["hgx-h100-8"],
                                                                snaps["hgx-h100-8-gpu-lost"]).findings))
    assert "1 GPU lost (GPU5)" in whole


def _without(snap: dict, key: str) -> dict:
    """``snap`` with ``key`` of its first GPU unread, as the collector records a failed call."""
    out = copy.deepcopy(snap)
    uuid, device = next(iter(out["gpu"]["devices"].items()))
    device.pop(key)
    out["collectors"]["gpu"]["status"] = "partial"
    out["collectors"]["gpu"].setdefault("unreadable", {})[f"devices.{uuid}.{key}"] = f"error: Unknown [{key}]"
    return out


@pytest.mark.parametrize(("key", "worst"), [("serial", "warning"), ("uuid", "warning"),
                                            ("persistence_mode", "warning"), ("name", "invalidating"),
                                            ("compute_mode", "invalidating")])
def test_a_snapshot_compared_with_itself_refuses_only_where_the_unread_value_would(snaps: dict, key: str,
                                                                                   worst: str) -> None:
    """The same value unread on both sides: not known to be equal, so it is reported at its own rule's rating
    or, since it cannot be told that nothing is below it, at the catch-all's (warning): a serial number that
    cannot be read no longer refuses a host compared with itself, a compute mode still does."""
    snap = _without(snaps["h200"], key)
    result = compare(snap, snap)
    assert result.verdict == worst
    policy = default_policy()
    own = policy.rule_for(("gpu", "devices", "00000000:00:06.0", key))
    assert own is not None and own.severity in (worst, "info", "ignore")


def test_a_region_that_may_hold_anything_below_is_rated_by_the_most_severe_rule_inside() -> None:
    policy = default_policy()
    device = policy.region_rule(("gpu", "devices", "00000000:00:06.0"))
    assert device is not None and device.severity == "invalidating"
    links = policy.region_rule(("gpu", "devices", "00000000:00:06.0", "nvlink"))
    assert links is not None and links.severity == "invalidating"
    serial = policy.region_rule(("gpu", "devices", "00000000:00:06.0", "serial"))
    assert serial is not None and serial.severity == "warning"  # its own rule is info; what is below, unknown
