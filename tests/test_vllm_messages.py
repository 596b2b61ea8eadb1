"""hoststate's own messages about a vLLM command line are never redacted; the values they quote always are.

Through the whole snapshot (hoststate.capture.collect, whose last pass redacts every string by shape): a refusal
worded "--api-key: expected one argument" was printed "--api-key: <redacted>", its wording taken for a
``key: value`` secret. The messages are now built from the redacted command line (collectors/vllm/messages.py), so
the wording stays and a secret the user typed into a value that vLLM refuses is still replaced.
"""

from __future__ import annotations

import pytest

from hoststate import capture
from hoststate.collectors import Context
from hoststate.collectors.vllm.messages import Replay, own
from hoststate.redact import REDACTED, Own, redact_strings

TOKEN = "hf_" + "Qw3rTy8UiOp2AsDfGhJkLzXcVbNm41"  # a Hugging Face token's shape


def _vllm(cmd: str, version: str = "0.12.0") -> dict:
    snap = capture.collect(Context(root="/nonexistent", vllm_cmd=cmd, vllm_version=version), names=("vllm",))
    return snap["vllm"]


@pytest.mark.parametrize(("cmd", "wording"), [
    ("vllm serve M --api-key", "--api-key: expected at least one argument"),
    ("vllm serve M --hf-token", "--hf-token: expected one argument"),
    ("vllm serve M --config c.json", "--config: Config file must be of a yaml/yml type. json supplied"),
])
def test_hoststates_wording_survives_the_last_redaction_pass(cmd, wording):
    data = _vllm(cmd)
    said = f"{data.get('args_error', '')} {data.get('cudagraph', {}).get('refused')}"
    assert wording in said, said


def test_a_secret_quoted_by_a_refusal_is_still_redacted():
    data = _vllm(f"vllm serve M --seed {TOKEN} --hf-token {TOKEN}")
    text = repr(data)
    assert TOKEN not in text
    assert "--seed: invalid int value" in data["args_error"] and REDACTED in data["args_error"]


def test_a_secret_in_a_config_value_is_redacted_in_what_is_said(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(f"model: M\nmax-num-seqs: {TOKEN}\n")
    data = _vllm(f"vllm serve --config {cfg}")
    assert TOKEN not in repr(data) and "--max-num-seqs: invalid int value" in data["args_error"]


def test_the_reasons_of_a_declared_mode_are_kept_as_worded():
    """declared_because is hoststate's own account of vLLM's rules: kept verbatim through the last pass."""
    data = _vllm("vllm serve M --enforce-eager")
    assert data["cudagraph"]["declared_because"].endswith("--enforce-eager: no CUDA graphs (optimization level O0)")


def test_own_strings_pass_the_last_pass_and_plain_ones_do_not():
    assert redact_strings({"a": Own("--api-key: expected one argument")}) == {"a": "--api-key: expected one argument"}
    assert redact_strings({"a": "--api-key: expected one argument"}) == {"a": f"--api-key: {REDACTED}"}


def test_readings_that_disagree_show_no_message():
    assert own(["a", "b"], ["a"], "problem") == ["2 problem(s) not shown: the command line reads differently once "
                                                 "its secrets are redacted (see vllm.argv)"]


def test_the_config_file_is_read_once_and_replayed_redacted():
    calls: list[str] = []

    def loader(path: str) -> dict:
        calls.append(path)
        return {"api-key": "sk-live-value", "port": 8001}

    replay = Replay(loader)
    assert replay.load("a.yaml")["api-key"] == "sk-live-value"
    assert replay.again("a.yaml") == {"api-key": REDACTED, "port": 8001} and calls == ["a.yaml"]
