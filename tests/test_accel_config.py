"""The accel_config collector: lenient saved configs, saved-vs-live, and the real accel-config as an oracle.

The oracle tests copy a fixture tree over a tmpfs /sys in a private mount namespace (root only), so
Debian's accel-config reads the fixture as if it were a host (reference/dsa-idxd.md).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from hoststate.collectors import Context, accel_config, dsa
from tests import dsatree
from tests.conftest import HOSTS, REPO, require

FIXTURE_NAMES = ("seed-baseline", "seed-experiment", "seed-experiment-saved", "iaa", "old-kernel", "dsa-unreadable")
SAVED = "etc/accel-config/accel-config.conf"


def copy_host(name: str, tmp_path) -> str:
    root = str(tmp_path / name)
    shutil.copytree(HOSTS / name, root, symlinks=True)
    return root


def collect_root(root: str):
    ctx = Context(root=root)
    ctx.sections["dsa"] = dsa.collect(ctx)
    return accel_config.collect(ctx)


def write_saved(root: str, text: str) -> None:
    os.makedirs(os.path.join(root, "etc/accel-config"), exist_ok=True)
    with open(os.path.join(root, SAVED), "w", encoding="utf-8") as fh:
        fh.write(text)


def wq_attr_path(root: str, dev: str, wq: str, attr: str) -> str:
    return os.path.join(root, "sys/bus/dsa/devices", dev, wq, attr)


# ---- lenient JSON ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('[1, 2,]', [1, 2]),
        ('{"a": [1,\n  ],\n}', {"a": [1]}),
        ('{"a": ",]", "b": "x,}",}', {"a": ",]", "b": "x,}"}),
        ('{"a": "quote \\" ,]",}', {"a": 'quote " ,]'}),
        ('{"a": "back\\\\", "b": 1 , }', {"a": "back\\", "b": 1}),
        ('[{"dev":"wq0.0"},\n\t]', [{"dev": "wq0.0"}]),
    ],
)
def test_trailing_commas_are_accepted_outside_strings(text, value):
    assert accel_config.loads_lenient(text) == value


@pytest.mark.parametrize("text", ['[1,,2]', '[,]', '[1,,]', '{,}', '{"a": 1', ""])
def test_lenient_json_still_rejects_broken_json(text):
    with pytest.raises(ValueError):
        accel_config.loads_lenient(text)


def test_real_sample_configs_parse():
    """The configs Debian's accel-config ships, trailing commas and all."""
    confs = sorted(glob.glob("/etc/accel-config/contrib/configs/*.conf"))
    require(bool(confs), "accel-config sample configs (/etc/accel-config/contrib/configs, Debian accel-config)")
    strict_failures = 0
    for path in confs:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        try:
            json.loads(text)
        except ValueError:
            strict_failures += 1
        flat, problems, error = accel_config.load_saved(text)
        assert error is None and problems == [], (path, error, problems)
        assert flat and all(entry["wqs"] for entry in flat.values()), path
    assert strict_failures >= 1  # net_profile.conf has trailing commas


# ---- saved vs live ----------------------------------------------------------------------------------------


def test_seed_experiment_is_the_lost_at_reboot_trap():
    sec = collect_root(str(HOSTS / "seed-experiment"))
    saved = sec.data["saved"]
    assert sec.status == "ok"
    assert (saved["present"], saved["matches_live"]) == (False, False)
    assert saved["path"] == "/etc/accel-config/accel-config.conf"
    for wq in ("dsa0/wq0.0", "dsa0/wq0.3", "dsa2/wq2.0", "dsa2/wq2.3"):
        assert f"{wq}: enabled live, not in saved config" in saved["differences"]
    assert "dsa0: enabled live, not in saved config" in saved["differences"]
    assert len(saved["differences"]) == 10  # 2 devices + 8 WQs


def test_seed_experiment_saved_matches():
    saved = collect_root(str(HOSTS / "seed-experiment-saved")).data["saved"]
    assert (saved["present"], saved["matches_live"], saved["differences"]) == (True, True, [])


def test_nothing_enabled_nothing_saved_matches():
    saved = collect_root(str(HOSTS / "seed-baseline")).data["saved"]
    assert (saved["present"], saved["matches_live"], saved["differences"]) == (False, True, [])


def test_one_changed_wq_attribute_is_named(tmp_path):
    root = copy_host("seed-experiment-saved", tmp_path)
    with open(wq_attr_path(root, "dsa2", "wq2.1", "priority"), "w") as fh:
        fh.write("12\n")
    saved = collect_root(root).data["saved"]
    assert saved["matches_live"] is False
    assert saved["differences"] == ["dsa2/wq2.1 priority: saved 10, live 12"]


def test_saved_wq_disabled_live_is_named(tmp_path):
    root = copy_host("seed-experiment-saved", tmp_path)
    with open(wq_attr_path(root, "dsa0", "wq0.2", "state"), "w") as fh:
        fh.write("disabled\n")
    saved = collect_root(root).data["saved"]
    assert saved["differences"] == ["dsa0/wq0.2: in saved config, live state disabled"]


def _saved_text(mutate) -> str:
    config = json.loads(dsatree.saved_config(dsatree.spr_devices(True)))
    mutate(config)
    return json.dumps(config, indent=2)


def _set_wq(config, dev_index, group_index, key, value):
    config[dev_index]["groups"][group_index]["grouped_workqueues"][0][key] = value


MALFORMED = {
    "truncated": (dsatree.saved_config(dsatree.spr_devices(True))[:700], "error", "not valid JSON"),
    "empty": ("", "error", "not valid JSON"),
    "not-utf8-garbage": ("\x00\x01{[", "error", "not valid JSON"),
    "not-a-list": ('{"dev": "dsa0"}', "differences", "top level is an object, expected a list of devices"),
    "wrong-type-size": (_saved_text(lambda c: _set_wq(c, 0, 1, "size", "32")), "differences",
                        "dsa0/wq0.1 size: saved a string '32', expected an integer"),
    "wrong-type-name": (_saved_text(lambda c: _set_wq(c, 1, 0, "name", 5)), "differences",
                        "dsa2/wq2.0 name: saved a number 5, expected a string"),
    "groups-not-a-list": (_saved_text(lambda c: c[0].__setitem__("groups", "all")), "differences",
                          "dsa0 groups: a string, expected a list"),
    "missing-wq": (_saved_text(lambda c: _set_wq(c, 0, 3, "dev", "wq0.9")), "differences",
                   "dsa0/wq0.9: in saved config, no such WQ live"),
    "missing-device": (_saved_text(lambda c: c.append({"dev": "dsa6", "groups": []})), "differences",
                       "dsa6: in saved config, no such device live"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_saved_config_is_reported_not_raised(case, tmp_path):
    text, where, needle = MALFORMED[case]
    root = copy_host("seed-experiment", tmp_path)
    write_saved(root, text)
    sec = collect_root(root)
    saved = sec.data["saved"]
    assert sec.status == "ok"
    assert saved["present"] is True and saved["matches_live"] is False
    if where == "error":
        assert saved["error"].startswith(needle)
    else:
        assert needle in saved["differences"], saved["differences"]


def test_trailing_commas_in_saved_config_still_match(tmp_path):
    root = copy_host("seed-experiment", tmp_path)
    text = dsatree.saved_config(dsatree.spr_devices(True))
    text = text.replace('"group_id": 0\n', '"group_id": 0,\n').replace("}\n    ]", "},\n    ]")
    with pytest.raises(ValueError):
        json.loads(text)
    write_saved(root, text)
    saved = collect_root(root).data["saved"]
    assert (saved["present"], saved["matches_live"], saved["differences"]) == (True, True, [])


def test_without_dsa_section_the_collector_reads_sysfs_itself():
    sec = accel_config.collect(Context(root=str(HOSTS / "seed-experiment")))
    assert sec.data["saved"]["matches_live"] is False and len(sec.data["saved"]["differences"]) == 10


def test_failed_dsa_section_leaves_matches_live_out():
    ctx = Context(root=str(HOSTS / "seed-experiment"))
    from hoststate.collectors import Section

    ctx.sections["dsa"] = Section(status="timeout", reason="did not finish within 20s")
    saved = accel_config.collect(ctx).data["saved"]
    assert "matches_live" not in saved
    assert saved["reason"] == "live configuration unknown: dsa section is timeout: did not finish within 20s"


# ---- --root never runs the binary; version ---------------------------------------------------------------


def test_root_never_runs_the_binary(tmp_path, monkeypatch):
    root = copy_host("seed-experiment", tmp_path)
    os.makedirs(os.path.join(root, "usr/bin"))
    with open(os.path.join(root, "usr/bin/accel-config"), "w") as fh:
        fh.write("#!/bin/sh\nexit 99\n")
    os.makedirs(os.path.join(root, "var/lib/dpkg"))
    with open(os.path.join(root, "var/lib/dpkg/status"), "w") as fh:
        fh.write("Package: libaccel-config1\nStatus: install ok installed\nVersion: 9\n\n"
                 "Package: accel-config\nStatus: install ok installed\nArchitecture: amd64\nVersion: 4.1.6-1\n"
                 "Description: utility\n multi-line\n")

    def no_run(*args, **kwargs):
        raise AssertionError(f"ran {args} under --root")

    monkeypatch.setattr(accel_config, "run", no_run)
    data = collect_root(root).data
    assert (data["available"], data["path"], data["version"]) == (True, "/usr/bin/accel-config", "4.1.6-1")
    assert data["list"] == {"ran": False, "reason": "not run under --root: accel-config reads the live /sys"}


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("Package: accel-config\nStatus: deinstall ok config-files\nVersion: 3.5.3-1\n", None),
        ("Package: accel-config-test\nStatus: install ok installed\nVersion: 1\n", None),
        ("Package: accel-config\nStatus: install ok installed\nVersion: 3.5.3-1\n", "3.5.3-1"),
    ],
)
def test_parse_dpkg_status(text, version):
    assert accel_config.parse_dpkg_status(text) == version


def test_absent_when_nothing_at_all(tmp_path):
    sec = collect_root(str(tmp_path))
    assert sec.status == "absent"
    assert sec.data["available"] is False


def test_live_on_this_host():
    """On the machine running the tests (no DSA here, usually): installed binary and version are found."""
    sec = accel_config.collect(Context())
    assert sec.data["available"] is (shutil.which("accel-config") is not None)
    if sec.data["available"] and not os.path.exists("/sys/module/idxd") and os.path.exists("/var/lib/dpkg/status"):
        # accel-config --version refuses without the idxd module: the version comes from dpkg
        with open("/var/lib/dpkg/status", encoding="utf-8", errors="replace") as fh:
            assert sec.data.get("version") == accel_config.parse_dpkg_status(fh.read())
    if not os.path.isdir("/sys/bus/dsa"):
        assert sec.data["list"] == {"ran": False, "reason": "no DSA/IAA device"}


FAKE = """#!/bin/sh
case "$1" in
  --version) echo 9.9.9 ;;
  list) {body} ;;
esac
"""


def live_with_fake_binary(tmp_path, monkeypatch, body: str, timeout: float = 5.0):
    """The live code path with a stand-in accel-config first on PATH and the dsa section of a fixture."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "accel-config").write_text(FAKE.format(body=body))
    (bindir / "accel-config").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    ctx = Context(command_timeout=timeout)
    ctx.sections["dsa"] = dsa.collect(Context(root=str(HOSTS / "seed-experiment")))
    return accel_config.collect(ctx)


def test_live_list_disagreement_is_named(tmp_path, monkeypatch):
    listing = tmp_path / "list.json"
    root = copy_host("seed-experiment", tmp_path)
    with open(wq_attr_path(root, "dsa0", "wq0.1", "size"), "w") as fh:
        fh.write("64\n")
    # what accel-config printed on that changed tree, played back against the unchanged fixture
    data = dsa.collect(Context(root=root)).data
    wq = {k: data["devices"]["dsa0"]["wqs"]["wq0.1"][k] for k in ("mode", "size", "priority", "threshold", "state")}
    listing.write_text(json.dumps([{"dev": "dsa0", "work_queue_size": 128, "groups": [
        {"dev": "group0.1", "grouped_workqueues": [{"dev": "wq0.1", **wq}]}]}]))
    sec = live_with_fake_binary(tmp_path, monkeypatch, f"cat {shlex.quote(str(listing))}")
    assert sec.data["version"] == "9.9.9"
    assert sec.data["list"]["ran"] is True and sec.data["list"]["agrees_with_sysfs"] is False
    diffs = sec.data["list"]["differences"]
    assert "dsa0/wq0.1 size: accel-config 64, sysfs 32" in diffs
    assert "dsa2: in sysfs, not listed by accel-config" in diffs


def test_live_list_timeout_is_recorded(tmp_path, monkeypatch):
    sec = live_with_fake_binary(tmp_path, monkeypatch, "sleep 30", timeout=0.5)
    assert sec.status == "partial"
    assert sec.data["list"] == {"ran": False, "reason": "accel-config list -i: timeout after 0.5s"}
    assert sec.data["saved"]["path"] == "/etc/accel-config/accel-config.conf"


def test_live_list_garbage_is_recorded(tmp_path, monkeypatch):
    sec = live_with_fake_binary(tmp_path, monkeypatch, "echo 'libaccfg: oops'")
    assert sec.status == "partial"
    assert sec.data["list"]["reason"].startswith("unparsable output:")


# ---- the real accel-config in a private mount namespace ------------------------------------------------------


def _namespace_ok() -> bool:
    if not shutil.which("accel-config") or os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs none /sys && true"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


NAMESPACE = None


def need_namespace() -> None:
    global NAMESPACE
    if NAMESPACE is None:
        NAMESPACE = _namespace_ok()
    require(NAMESPACE, "accel-config (Debian package), root and `unshare -m` (tmpfs over /sys)")


def in_namespace(root: str, command: str) -> subprocess.CompletedProcess:
    """Run ``command`` with ``root``/sys copied over a tmpfs /sys in a private mount namespace."""
    script = f"mount -t tmpfs none /sys && cp -a {shlex.quote(root)}/sys/. /sys/ && {command}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_real_accel_config_list_agrees_with_collector(name, tmp_path):
    need_namespace()
    root = copy_host(name, tmp_path)  # accel-config writes cmd_status: never let it touch the repo
    done = in_namespace(root, "accel-config list -i")
    assert done.returncode == 0, done.stderr
    listed = accel_config.parse_list_output(done.stdout)
    data = dsa.collect(Context(root=root)).data
    pairs = list(accel_config.common_fields(listed, data))
    mismatched = [p for p in pairs if not accel_config.same_value(p[1], p[2], p[3])]
    assert mismatched == []
    diffs = accel_config.compare_list_with_sysfs(listed, data)
    if name == "old-kernel" and not listed:
        # accel-config 3.5.x resets cmd_status on every device and skips devices without it (< 5.16 kernels).
        assert diffs == ["dsa0: in sysfs, not listed by accel-config", "iax1: in sysfs, not listed by accel-config"]
        return
    assert diffs == []
    assert sorted(listed) == sorted(data["devices"])
    keys = {(where, key) for where, key, _, _ in pairs}
    assert ("dsa0" if "dsa0" in listed else "iax1", "work_queue_size") in keys
    wq_keys = {key for where, key in keys if where.endswith("wq0.0") or where.endswith("wq1.0")}
    assert {"mode", "size", "priority", "threshold", "type", "name", "state", "clients", "max_transfer_size"} <= wq_keys
    assert len(pairs) > 200


def test_collector_live_inside_namespace_runs_and_cross_checks(tmp_path):
    need_namespace()
    root = copy_host("seed-experiment", tmp_path)
    code = ("import json; from hoststate.collectors import Context, dsa, accel_config;"
            "ctx = Context(); ctx.sections['dsa'] = dsa.collect(ctx); s = accel_config.collect(ctx);"
            "print(json.dumps({'status': s.status, 'data': s.data, 'dsa_unreadable': ctx.sections['dsa'].unreadable},"
            " default=str))")
    done = in_namespace(root, f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -c {shlex.quote(code)}")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    data = out["data"]
    assert data["available"] is True and data["version"]
    assert data["list"] == {"ran": True, "agrees_with_sysfs": True, "differences": []}
    # /dev is the real host's here: the enabled user WQs' nodes are missing and recorded as such
    assert set(out["dsa_unreadable"]) <= {f"dev/dsa/wq{d}.{i}" for d in (0, 2) for i in range(4)}
    if not os.path.exists("/" + SAVED):
        assert data["saved"]["present"] is False and data["saved"]["matches_live"] is False


def test_save_config_round_trip(tmp_path):
    need_namespace()
    root = copy_host("seed-experiment", tmp_path)
    conf = os.path.join(root, SAVED)
    os.makedirs(os.path.dirname(conf))
    done = in_namespace(root, f"accel-config save-config -s {shlex.quote(conf)}")
    assert done.returncode == 0, done.stderr
    with open(conf, encoding="utf-8") as fh:
        written = fh.read()
    # the committed seed-experiment-saved tree holds exactly what the real tool writes
    assert json.loads(written) == json.loads(dsatree.saved_config(dsatree.spr_devices(True)))
    saved = collect_root(root).data["saved"]
    assert (saved["present"], saved["matches_live"], saved["differences"]) == (True, True, [])
    with open(wq_attr_path(root, "dsa0", "wq0.3", "threshold"), "w") as fh:
        fh.write("16\n")
    saved = collect_root(root).data["saved"]
    assert saved["matches_live"] is False
    assert saved["differences"] == ["dsa0/wq0.3 threshold: saved 32, live 16"]
