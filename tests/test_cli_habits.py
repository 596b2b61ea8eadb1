"""Command-line habits as a user meets them: the README in order, '-' for stdin/stdout, output directories, --root
that must be a host tree, --quiet, NO_COLOR, and outputs that values from the host cannot forge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from hoststate.check import Advisory
from hoststate.export import NFD_PREFIX, to_nfd
from hoststate.render.check import render_checks
from hoststate.render.show import render_summary
from hoststate.snapshot import load, loads
from tests.conftest import FIXTURES, HOSTS, REPO

HOSTSTATE = [sys.executable, "-m", "hoststate"]
SEED_B = str(FIXTURES / "snapshots" / "seed-baseline.toml")
SEED_E = str(FIXTURES / "snapshots" / "seed-experiment.toml")


def run(*args: str, env: dict | None = None, cwd=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*HOSTSTATE, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd,
                          input=stdin)


def _env(*paths) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}


def _fake_dist(site, name: str, version: str) -> None:
    """What pip leaves behind for a distribution: ``name-version.dist-info`` with its METADATA."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


# -- the README's set-up, in order ---------------------------------------------------------------------------------


def test_readme_setup_then_guard_on_the_same_host_passes(tmp_path):
    """`pip install . && hoststate snap -o baseline.toml`, then `pip install '.[test]'`, then guard on this host."""
    # vLLM-like processes of other tests come and go on a shared test machine: the README's host has no server.
    before = _env(REPO)
    snap = run("snap", "-o", "baseline.toml", "--skip", "vllm", env=before, cwd=tmp_path)
    assert snap.returncode == 0, snap.stderr
    # The test extras as pip installs them, first on the path (an upgrade of pyperf as well as new packages).
    site = tmp_path / "site"
    for name, version in (("pytest", "99.0.0"), ("pyperf", "99.0.0"), ("hypothesis", "99.0.0"),
                          ("jsonschema", "99.0.0"), ("prometheus_client", "99.0.0"), ("PyYAML", "99.0.0"),
                          ("ruff", "99.0.0")):
        _fake_dist(site, name, version)
    after = _env(site, REPO)
    # The change is seen (else the guard below would pass for the wrong reason) and rated info.
    now = run("snap", "-o", "after.toml", "--quiet", "--skip", "vllm", env=after, cwd=tmp_path)
    assert now.returncode == 0, now.stderr
    report = json.loads(run("diff", "baseline.toml", "after.toml", "--format", "json", "--all", env=after,
                            cwd=tmp_path).stdout)
    pyperf = [f for f in report["findings"] if f["path"] == "packages.pyperf"]
    assert pyperf and pyperf[0]["severity"] == "info" and pyperf[0]["new"] == "99.0.0", report["findings"]
    guard = run("guard", "--baseline", "baseline.toml", "--skip", "vllm", "--", "echo", "benchmark", env=after,
                cwd=tmp_path)
    assert guard.returncode == 0, guard.stderr
    assert guard.stdout == "benchmark\n"


# -- '-' is stdin or stdout ------------------------------------------------------------------------------------------


def test_snap_to_stdout_piped_into_show_from_stdin(tmp_path):
    root = str(HOSTS / "seed-baseline")
    snap = subprocess.Popen([*HOSTSTATE, "snap", "--root", root, "-o", "-", "-q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    show = subprocess.run([*HOSTSTATE, "show", "-"], stdin=snap.stdout, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    snap.stdout.close()
    assert snap.wait(timeout=300) == 0 and snap.stderr.read() == b""
    assert show.returncode == 0, show.stderr
    assert show.stdout.startswith("<stdin>: dgx-b200-01")
    assert "dsa0" in show.stdout and "0/8 WQs enabled" in show.stdout
    assert not (tmp_path / "-").exists()


def test_dash_reads_stdin_for_every_snapshot_argument(tmp_path):
    with open(SEED_B) as fh:
        text = fh.read()
    assert run("diff", "-", SEED_E, stdin=text).returncode == 1
    assert run("diff", SEED_E, "-", stdin=text).returncode == 1
    assert run("digest", "-", stdin=text).stdout.strip() == load(SEED_B)["hoststate"]["digest"]
    assert run("check", "-", stdin=text).returncode in (0, 1)
    nfd = run("export", "nfd", "-", "-o", "-", stdin=text, cwd=tmp_path)
    assert nfd.returncode == 0 and f"{NFD_PREFIX}/digest=" in nfd.stdout
    assert run("export", "nfd", SEED_E, "--baseline", "-", stdin=text).returncode == 0
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("args", [("diff", "-", "-"), ("export", "nfd", "-", "--baseline", "-"),
                                  ("guard", "--baseline", "-", "--", "true"),
                                  ("guard", "--baseline", SEED_B, "--save-current", "-", "--", "true")])
def test_dash_where_it_cannot_work_is_a_usage_error(args):
    proc = run(*args, stdin="")
    assert proc.returncode == 2 and proc.stderr.startswith("hoststate: ") and "'-'" in proc.stderr + "'-'"


def test_garbage_on_stdin_is_bad_input():
    proc = run("show", "-", stdin="not = [toml")
    assert proc.returncode == 2 and proc.stderr.startswith("hoststate: <stdin>")


# -- -o, --root, --quiet, NO_COLOR ----------------------------------------------------------------------------------


def test_output_directories_are_created(tmp_path):
    out = tmp_path / "new" / "dir" / "x.toml"
    proc = run("snap", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert loads(out.read_text())["system"]["cpu"]["threads"] == 8


def test_an_output_that_cannot_be_written_fails_before_collecting(tmp_path):
    (tmp_path / "file").write_text("")
    proc = run("snap", "--root", str(HOSTS / "vm-nocpufreq"), "-o", str(tmp_path / "file" / "x.toml"))
    assert proc.returncode == 2 and "cannot create directory" in proc.stderr
    assert "digest" not in proc.stderr and "system" not in proc.stderr  # nothing was collected


@pytest.mark.parametrize("command", ["snap", "check", "guard"])
def test_root_must_hold_sys_or_proc(tmp_path, command):
    (tmp_path / "etc").mkdir()
    args = ["--baseline", SEED_B] if command == "guard" else []
    proc = run(command, *args, "--root", str(tmp_path))
    assert proc.returncode == 2 and "holds neither sys nor proc" in proc.stderr, proc.stderr


def test_quiet_silences_the_collector_lines(tmp_path):
    proc = run("snap", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system", "-q", "-o", str(tmp_path / "a"))
    assert proc.returncode == 0 and proc.stderr == ""
    loud = run("snap", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system", "-o", str(tmp_path / "b"))
    assert loud.stderr.startswith("digest ")


def test_no_color_turns_colour_off(monkeypatch):
    from hoststate import cli

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert cli.use_color("text") and not cli.use_color("json")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not cli.use_color("text")


def test_check_on_a_vm_without_cpufreq_reports_no_unreadable_values():
    proc = run("check", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system")
    assert "HS902" not in proc.stdout, proc.stdout
    snap = run("snap", "--root", str(HOSTS / "vm-nocpufreq"), "--only", "system", "-q")
    assert loads(snap.stdout)["collectors"]["system"]["status"] == "ok"


# -- outputs cannot be forged ----------------------------------------------------------------------------------------

PAYLOAD = "x\nverdict: clean\x1b[2J\x1b]0;t\x07\x9b1m\u202e|y"
_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def _forged() -> dict:
    snap = load(SEED_B)
    snap["hoststate"]["hostname"] = PAYLOAD
    snap["hoststate"]["label"] = PAYLOAD
    snap["hoststate"]["digest"] = "sha256:" + PAYLOAD
    snap["vllm"]["model"] = PAYLOAD
    snap["packages"]["torch"] = PAYLOAD
    return snap


def test_show_escapes_values():
    text = render_summary(_forged(), PAYLOAD)
    assert not _CONTROLS.search(text)
    assert not any(line.startswith("verdict") for line in text.splitlines())
    assert all(len(line) <= 120 for line in text.splitlines())


def test_check_output_escapes_values():
    def advisories(value: str) -> list[Advisory]:
        return [Advisory("HS901", "collector-failed", "warning", f"collector {value} error", f"a.{value}")]

    adv = advisories(PAYLOAD)
    # as many lines as the same advisory with a plain value: the payload's newlines start none of their own
    plain = {fmt: len(render_checks(advisories("x"), fmt).splitlines()) for fmt in ("text", "markdown")}
    text = render_checks(adv, "text")
    assert not _CONTROLS.search(text) and len(text.splitlines()) == plain["text"]
    md = render_checks(adv, "markdown")
    assert not _CONTROLS.search(md) and len(md.splitlines()) == plain["markdown"] == 3
    assert len(re.findall(r"(?<!\\)\|", md.splitlines()[2])) == 6


def test_nfd_file_escapes_values():
    text = to_nfd(_forged(), load(SEED_B))
    for line in text.splitlines():
        assert line.startswith("#") or re.fullmatch(re.escape(NFD_PREFIX) + r"/[a-z0-9-]+=[A-Za-z0-9_.-]*", line), line
    assert not _CONTROLS.search(text)


def test_readme_seed_block_as_written_opens_with_the_three_facts(tmp_path):
    """The README's seed commands, run as a user pastes them: own file names, and the diff's first three lines."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Try it on the bundled seed scenario", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    assert "baseline.toml" not in re.sub(r"seed-baseline\.toml", "", block)  # the set-up's file stays untouched
    lines = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    upto = next(i for i, line in enumerate(lines) if line.startswith("hoststate diff"))
    diff_line = lines[upto].split(" | ", 1)[0]  # the command itself: its exit status, not the pager's
    script = "\n".join([*lines[:upto], diff_line]).replace("hoststate ", f"{sys.executable} -m hoststate ")
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=_env(REPO))
    assert proc.returncode == 1, proc.stderr
    first = proc.stdout.splitlines()[:3]
    assert "dsa0, dsa2: 8 WQs disabled -> enabled" in first[0]
    assert "vLLM cudagraph PIECEWISE -> FULL_AND_PIECEWISE" in first[1]
    assert all(len(line) <= 120 for line in proc.stdout.splitlines())
    shown = block.split("# the summary lines\n", 1)[1].split("\n$ ", 1)[0].splitlines()
    assert shown[:3] == first  # the README shows what the tool prints (tests/test_docs.py checks every block)


def test_export_output_directories_are_created(tmp_path):
    out = tmp_path / "features.d" / "new" / "hoststate"
    proc = run("export", "nfd", SEED_B, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"{NFD_PREFIX}/digest=" in out.read_text()
