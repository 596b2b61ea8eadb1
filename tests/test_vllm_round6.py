"""Round 6 of reading vLLM command lines as vLLM resolves them: every option with argparse ``choices``.

vLLM turns a config field typed with a ``Literal`` (without ``str``/``bool``) into argparse ``choices``
(vllm/engine/arg_utils.py literal_to_kwargs / _compute_kwargs: 0.10.2 ~113-130 and ~163-265, 0.33.0 ~220-234 and
~325-440). Where the field admits None its type is optional_type, which reads "None" and "" as None, and None is
appended to the choices: the string "None" up to 0.12.0 (0.10.2 ~264, 0.12.0 ~333), which that None never equals, so
argparse refuses both; the object None in 0.33.0 (~439), so there they are the default. hoststate/data/vllm_choices.json
is derived from each version's source by scripts/vllm_choices.py; the hand cases below were read from the sources
(tokenizer_mode: ModelConfig's TokenizerMode without str up to 0.11.1; task: ModelConfig.task Literal | None up to
0.12.0; kv_offloading_backend: CacheConfig Literal["native", "lmcache"] | None in 0.11.1-0.12.0, without None in
0.33.0; dcp_comm_backend: Literal["ag_rs", "a2a"] | None in 0.33.0) and the argparse behaviour checked with argparse
itself. ``--cuda-graph-sizes`` / ``--cudagraph-capture-sizes`` are argparse ``type=int, nargs="+"`` (optional_type(int)
where the field admits None) in every recorded version (fixtures/vllm/oracle/options), so "1k" and "1,2" are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hoststate.collectors.vllm.defaults import choices_for
from hoststate.collectors.vllm_release import data_path
from tests.vllm_lines import BASE, VERSIONS, model_root
from tests.vllm_lines import parsed as _parsed
from tests.vllm_lines import snap as _snap


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return model_root(tmp_path)


def _refused(cmd: str, version: str, option: str) -> bool:
    return any(r.startswith(f"{option}:") for r in _parsed(cmd, version).refusals)


def _cases() -> list[tuple[str, str, list]]:
    data = json.loads(Path(data_path("vllm_choices.json")).read_text())["versions"]  # the installed package's
    return [(version, dest, choices) for version, table in sorted(data.items())
            for dest, choices in sorted(table.items())]


def test_every_recorded_version_has_derived_choices():
    for version in VERSIONS:
        assert len(choices_for(version)) >= 12, version


@pytest.mark.parametrize(("version", "dest", "choices"), _cases())
def test_each_derived_choice_option(version, dest, choices):
    option = f"--{dest.replace('_', '-')}"
    valid = next(c for c in choices if c not in (None, "None"))
    assert not _refused(f"{BASE} {option} {valid}", version, option)
    assert _refused(f"{BASE} {option} not-a-choice-{dest}", version, option)
    optional = choices[-1] in (None, "None")
    if optional:
        for text in ("None", "''"):
            assert _refused(f"{BASE} {option} {text}", version, option) == (None not in choices), (text, choices)


@pytest.mark.parametrize(("version", "cmd", "refused"), [
    ("0.10.2", "--task None", True), ("0.12.0", "--task None", True), ("0.10.2", "--task generate", False),
    ("0.10.2", "--tokenizer-mode bogus", True), ("0.11.1", "--tokenizer-mode slow", False),
    ("0.12.0", "--kv-offloading-backend None", True), ("0.12.0", "--kv-offloading-backend lmcache", False),
    ("0.33.0", "--kv-offloading-backend None", True), ("0.33.0", "--kv-offloading-backend ''", True),
    ("0.33.0", "--dcp-comm-backend None", False), ("0.33.0", "--dcp-comm-backend a2a", False),
    ("0.33.0", "--dcp-comm-backend bogus", True),
    ("0.10.2", "--guided-decoding-backend bogus", True), ("0.10.2", "--guided-decoding-backend xgrammar", False),
    ("0.11.0", "--dtype HALF", True), ("0.33.0", "--scheduling-policy lifo", True),
    ("0.11.1", "--all2all-backend moonep", True), ("0.33.0", "--all2all-backend moonep", False),
])
def test_hand_checked_choices(version, cmd, refused):
    option = cmd.split()[0]
    assert _refused(f"{BASE} {cmd}", version, option) == refused


def test_a_refused_choice_is_recorded_as_refused(root):
    data = _snap(root, f"{BASE} --task None", "0.10.2")["vllm"]
    assert "--task" in data["cudagraph"]["refused"] and "declared" not in data["cudagraph"]


def test_none_where_0330_appends_none_is_the_default(root):
    data = _snap(root, f"{BASE} --dcp-comm-backend None", "0.33.0")["vllm"]
    assert "dcp_comm_backend" not in data["args"] and "refused" not in data["cudagraph"]


# -- capture-size lists: argparse int per token --------------------------------------------------------------------

_SIZES = {"0.10.2": "--cuda-graph-sizes", "0.11.0": "--cuda-graph-sizes", "0.11.1": "--cudagraph-capture-sizes",
          "0.12.0": "--cudagraph-capture-sizes", "0.33.0": "--cudagraph-capture-sizes"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("text", ["1k", "1,2", "8,16 32", "1.0"])
def test_capture_sizes_refuse_what_int_refuses(version, text):
    option = _SIZES[version]
    assert _refused(f"{BASE} {option} {text}", version, option)


@pytest.mark.parametrize("version", VERSIONS)
def test_capture_sizes_read_as_int_reads_them(version):
    option = _SIZES[version]
    parsed = _parsed(f"{BASE} {option} 8 1_6 ' 32 '", version)
    assert not [r for r in parsed.refusals if r.startswith(option)]
    dest = option[2:].replace("-", "_")
    assert parsed.args.get(dest, parsed.args.get("cudagraph_capture_sizes")) in ([8, 16, 32], [1, 2, 4, 8, 16, 24, 32])
