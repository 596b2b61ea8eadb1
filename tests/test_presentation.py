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
