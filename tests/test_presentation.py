"""One presentation layer: colour table, eliding inside values, 120 columns, explicit cases hypothesis once found."""

from __future__ import annotations

import pytest

from hoststate.errors import PolicyError
from hoststate.policy import parse_rules
from tests.conftest import IN_CI


@pytest.mark.parametrize("path", ["a\n", "\n", "a.\n", '"a\nb"', "*\n*", "a\x1b[2J"])
def test_a_policy_path_with_a_control_character_gives_a_one_line_error(path):
    """Found by hypothesis (test_bad_inputs.test_fuzz_policy_rules) on a clean clone: a rule path holding a
    newline made a two-line error. Kept as explicit cases."""
    with pytest.raises(PolicyError) as err:
        parse_rules({"rule": [{"path": path}]}, "fuzz.toml")
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)
    assert "rule 1 (" in str(err.value)


def test_hypothesis_is_derandomised_under_ci():
    from hypothesis import settings

    assert settings.get_profile("ci").derandomize is True
    assert settings.get_profile("ci").database is None
    if IN_CI:
        assert settings.default.derandomize is True


# -- the seed guard refusal fits one screen -------------------------------------------------------------------------

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from tests.conftest import HOSTS, PYTHONPATH, REPO  # noqa: E402

SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384"


def hs(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    env.pop("NO_COLOR", None)
    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def seed_baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("seed") / "seed-baseline.toml"
    proc = hs("snap", "-q", "--root", str(HOSTS / "seed-baseline"), "--vllm-cmd", SERVE + " -O1", "--vllm-version",
              "0.12.0", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_the_seed_guard_refusal_fits_one_screen(seed_baseline):
    proc = hs("guard", "--baseline", seed_baseline.name, "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd",
              SERVE, "--vllm-version", "0.12.0", "--", "echo", "benchmark", cwd=seed_baseline.parent)
    assert proc.returncode == 3 and proc.stdout == "", proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) < 30, proc.stderr
    assert max(map(len, lines)) <= 120, proc.stderr
    # diff's summary first, the refused findings by rule, then what to do
    assert lines[1].startswith("INVALIDATING  dsa0, dsa2: 8 WQs disabled -> enabled"), proc.stderr
    assert '  8 x dsa.devices.*.wqs.*.state: "disabled" -> "enabled"' in lines
    nxt = "\n".join(lines[lines.index(next(line for line in lines if line.startswith("next: "))):])
    assert "--accept 'dsa.**'" in nxt and "--accept 'vllm.**'" in nxt
    assert "hoststate rebaseline seed-baseline.toml NOW.toml -o NEW.toml" in nxt
    assert lines[-1].startswith("hoststate: refused (") and "not started" in lines[-1]


# -- git habits: path filters, --name-only, --color ----------------------------------------------------------------


@pytest.fixture(scope="module")
def seed_pair(seed_baseline):
    d = seed_baseline.parent
    proc = hs("snap", "-q", "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd", SERVE, "--vllm-version", "0.12.0",
              "-o", "seed-experiment.toml", cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d


def test_diff_path_filter_keeps_the_findings_under_it_and_sets_the_exit(seed_pair):
    names = hs("diff", "seed-baseline.toml", "seed-experiment.toml", "--name-only", cwd=seed_pair)
    assert names.returncode == 1
    every = names.stdout.splitlines()
    assert 'dsa.devices.dsa0.wqs."wq0.0".state' in every and "vllm.cudagraph.declared" in every
    dsa = hs("diff", "seed-baseline.toml", "seed-experiment.toml", "--name-only", "--", "dsa", cwd=seed_pair)
    assert dsa.returncode == 1 and dsa.stdout.splitlines() == [p for p in every if p.startswith("dsa.")]
    saved = hs("diff", "seed-baseline.toml", "seed-experiment.toml", "--", "accel_config.saved.*", cwd=seed_pair)
    assert saved.returncode == 0, saved.stdout  # only a warning under that path
    assert saved.stdout.startswith("WARNING       accel-config: live configuration not saved")
    assert "verdict: warning" in saved.stdout
    bad = hs("diff", "seed-baseline.toml", "seed-experiment.toml", "--", 'a."b', cwd=seed_pair)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1


@pytest.mark.parametrize(("when", "env", "coloured"), [("always", {}, True), ("never", {}, False),
                                                        ("auto", {}, False), ("always", {"NO_COLOR": "1"}, True)])
def test_color_option(seed_pair, when, env, coloured):
    for args in (["diff", "seed-baseline.toml", "seed-experiment.toml"], ["check", "seed-experiment.toml"]):
        proc = subprocess.run([sys.executable, "-m", "hoststate", *args, f"--color={when}"], capture_output=True,
                              text=True, cwd=seed_pair, env={**os.environ, "PYTHONPATH": PYTHONPATH, **env})
        assert ("\x1b[" in proc.stdout) is coloured, (args, proc.stdout[:200])


# -- vLLM described differently: the first line, with the fix -----------------------------------------------------


def test_guard_says_first_when_vllm_is_described_differently(seed_pair):
    proc = hs("guard", "--baseline", "seed-baseline.toml", "--root", str(HOSTS / "seed-baseline"), cwd=seed_pair)
    assert proc.returncode == 3
    first = " ".join(proc.stderr.split("hoststate guard:")[0].split())
    assert first.startswith("vLLM described differently: baseline by --vllm-cmd, now by nothing"), proc.stderr
    assert "fix: describe both sides the same way" in first


def test_a_dead_url_is_named_with_its_error_first(seed_pair):
    proc = hs("guard", "--baseline", "seed-baseline.toml", "--root", str(HOSTS / "seed-baseline"),
              "--vllm-url", "http://127.0.0.1:9", cwd=seed_pair)
    assert proc.returncode == 3
    lines = proc.stderr.splitlines()
    first = " ".join(proc.stderr.split("hoststate guard:")[0].split())
    assert first.startswith("vLLM: now --vllm-url http://127.0.0.1:9 did not answer ("), proc.stderr
    assert "Connection refused" in first and "start the server or correct the URL" in first
    assert max(map(len, lines)) <= 120


def test_diff_opens_with_the_note_and_says_nothing_when_sides_agree(seed_pair):
    same = hs("diff", "seed-baseline.toml", "seed-experiment.toml", cwd=seed_pair)
    assert not same.stdout.startswith("vLLM")
    other = hs("snap", "-q", "--root", str(HOSTS / "seed-experiment"), "--vllm-version", "0.12.0", "-o",
               "no-vllm.toml", cwd=seed_pair)
    assert other.returncode == 0
    proc = hs("diff", "seed-baseline.toml", "no-vllm.toml", cwd=seed_pair)
    assert proc.stdout.startswith("vLLM described differently: baseline by --vllm-cmd"), proc.stdout[:300]


def test_fit_elides_values_only_and_wraps_names():
    from hoststate.render.text import Elide, Name, fit

    line = fit(["path.to.key: ", Elide("v" * 300), " -> ", Elide("w" * 10)], 120)
    assert len(line) == 1 and len(line[0]) == 120 and line[0].startswith("path.to.key: vvv") and "..." in line[0]
    assert line[0].endswith(" -> wwwwwwwwww")
    names = fit(["  ", Name("node1.toml (a host)"), ", ", Name("node2.toml (b host)"), ", ", Name("n" * 100)], 60)
    assert all(len(x) <= 60 for x in names) and "..." not in "".join(names)
    assert any("node2.toml (b host)" in x for x in names)
    long = fit(["key word " * 20, Elide("x" * 40)], 80)  # eliding cannot make it fit: wrapped whole
    assert "x" * 40 in " ".join(long) and all(len(x) <= 80 for x in long)


def test_the_advised_accept_options_are_exact_and_let_the_run_go_ahead(seed_pair):
    import shlex

    args = ["--baseline", "seed-baseline.toml", "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd", SERVE,
            "--vllm-version", "0.12.0"]
    refused = hs("guard", *args, cwd=seed_pair)
    text = refused.stderr
    advice = " ".join(text[text.index("next: "):text.index("  or make this the baseline")].split())
    words = shlex.split(advice)
    accepts = [w for i, w in enumerate(words) if i and words[i - 1] == "--accept"]
    assert accepts, text
    ran = hs("guard", *args, *[a for p in accepts for a in ("--accept", p)], "-v", "--", "echo", "benchmark",
             cwd=seed_pair)
    assert ran.returncode == 0 and ran.stdout == "benchmark\n", ran.stderr
    assert "non-comparable" in ran.stderr and "REFUSED" not in ran.stderr
    assert "note: --accept" not in ran.stderr  # every advised pattern accepted something
    assert max(map(len, ran.stderr.splitlines())) <= 120  # -v lists every finding, still within 120 columns


@pytest.mark.parametrize("name", ["big-a.toml", "big-b.toml", "seed-baseline.toml", "seed-experiment.toml"])
def test_show_and_check_keep_to_120_columns(name):
    from tests.conftest import FIXTURES

    for cmd in ("show", "check"):
        proc = hs(cmd, str(FIXTURES / "snapshots" / name))
        assert proc.returncode in (0, 1), proc.stderr
        assert proc.stdout and max(map(len, proc.stdout.splitlines())) <= 120, proc.stdout
