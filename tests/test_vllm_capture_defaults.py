"""Capture sizes spelled at what vLLM captures without them are the server without them.

Each expectation is read from vLLM's released source:

- 0.11.1 and 0.12.0: VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py, 0.11.1 lines 850-855, 0.12.0 lines
  1037-1042) takes ``max_cudagraph_capture_size = min(max_num_seqs * 2, 512)`` when none is given, clamps either by
  max_num_batched_tokens, and with no list given captures 1, 2, 4, the multiples of 8 below 256 and then of 16 up to
  it. So ``--max-cudagraph-capture-size 512`` (or the compilation_config key) is no option where max_num_seqs is 256 or
  more: 1024 on a GPU of 70 GiB or more that is not an A100, 256 on any other (get_batch_defaults), or as given.
- 0.10.2 and 0.11.0: SchedulerConfig.__post_init__ (vllm/config/scheduler.py, 0.10.2 lines 243-244, 0.11.0 lines
  226-227) fills an empty cuda_graph_sizes with ``[min(max_num_seqs * 2, 512)]``, and _set_cudagraph_sizes (0.10.2
  vllm/config/__init__.py lines 3652-3656, 0.11.0 lines 593-597) expands one value N to ``[1, 2, 4] + range(8, N + 1,
  8)``; several are sorted. So ``--cuda-graph-sizes 8`` is ``--cuda-graph-sizes 1 2 4 8``, and ``--cuda-graph-sizes
  512`` is no option where max_num_seqs (as given: hoststate does not resolve it on these versions) is 256 or more.
- GptOssForCausalLM sizes its own captures (vllm/model_executor/models/config.py: 0.10.2/0.11.0 replace one value
  below 1024/992 by a ladder up to it, 0.11.1/0.12.0 take 1024 where nothing is given): compared as given.
- 0.33.0 adds uniform-decode sizes and 1024 on compute capability 10.0 (vllm/config/vllm.py, _set_cudagraph_sizes):
  left as given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hoststate.diff import compare
from tests.vllm_lines import on_gpus as _on_gpus

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 131072,
         "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}
GPT_OSS = {**LLAMA, "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"}
A100 = "NVIDIA A100-SXM4-80GB"
#: What 0.11.1/0.12.0 capture up to 512 where nothing is given; what 0.10.2/0.11.0 expand 512 to.
LADDER_512 = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
EXPANDED_512 = [1, 2, 4, *range(8, 513, 8)]


def _model(tmp_path: Path, config: dict = LLAMA) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return f"vllm serve {tmp_path}"


def _alone(command: str, version: str) -> dict:
    """The vllm section only: no GPUs read, so a max_num_seqs not given is not known."""
    from hoststate.capture import SnapOptions, snap

    return snap(SnapOptions(only=("vllm",), vllm_cmd=command, vllm_version=version))


def _alike(one: dict, other: dict) -> bool:
    found = compare(one, other).findings
    severities = {f.severity for f in found if f.path.startswith("vllm")}
    assert severities <= {"info"} or "invalidating" in {f.severity for f in found if f.path.startswith("vllm.args")}
    return severities <= {"info"}


CC_512 = """--compilation-config '{"max_cudagraph_capture_size": 512}'"""


@pytest.mark.parametrize(("version", "gpu", "base", "extra", "alike"), [
    # the largest default size is min(1024 x 2, 512) on an H200, min(256 x 2, 512) on an A100
    ("0.12.0", None, "", "--max-cudagraph-capture-size 512", True),
    ("0.12.0", None, "", "-cc.max_cudagraph_capture_size=512", True),
    ("0.12.0", None, "", CC_512, True),
    ("0.12.0", A100, "", "--max-cudagraph-capture-size 512", True),
    ("0.12.0", None, "", f"--cudagraph-capture-sizes {' '.join(map(str, LADDER_512))}", True),
    ("0.12.0", None, "", f"--cudagraph-capture-sizes {' '.join(map(str, reversed(LADDER_512)))}", True),
    ("0.12.0", None, "-cc.cudagraph_mode=FULL", "-cc.max_cudagraph_capture_size=512", True),
    ("0.12.0", None, "--max-num-seqs 128", "--max-cudagraph-capture-size 256", True),  # min(128 x 2, 512)
    ("0.11.1", None, "", "--max-cudagraph-capture-size 512", True),
    ("0.11.1", None, "", "-O.max_cudagraph_capture_size=512", True),
    ("0.11.1", None, "", CC_512, True),
    ("0.11.1", A100, "", "--max-cudagraph-capture-size 512", True),
    # another size is another set of graphs
    ("0.12.0", None, "", "--max-cudagraph-capture-size 256", False),
    ("0.12.0", None, "", "--max-cudagraph-capture-size 1024", False),
    ("0.12.0", None, "--max-num-seqs 128", "--max-cudagraph-capture-size 512", False),
    ("0.12.0", None, "--max-num-seqs 64", "--max-cudagraph-capture-size 512", False),
    ("0.12.0", None, "", f"--cudagraph-capture-sizes {' '.join(map(str, LADDER_512[:-1]))}", False),
    ("0.12.0", None, "", "--cuda-graph-sizes 512", False),  # one size from 0.11.1 on: 512 alone
    ("0.12.0", None, "", "--cudagraph-capture-sizes 512 --max-cudagraph-capture-size 512", False),
    ("0.11.1", None, "", "--max-cudagraph-capture-size 128", False),
    ("0.11.1", A100, "--max-num-seqs 64", "--max-cudagraph-capture-size 512", False),
    # 0.33.0 sizes its default from more than max_num_seqs: left as given
    ("0.33.0", None, "", "--max-cudagraph-capture-size 512", False),
    ("0.33.0", None, "--max-num-seqs 256", "--max-cudagraph-capture-size 512", False),
    ("0.33.0", None, "", "-cc.max_cudagraph_capture_size=512", False),
])
def test_a_maximum_capture_size_at_vllms_default_is_no_option(tmp_path, version, gpu, base, extra, alike):
    plain = f"{_model(tmp_path)} {base}".strip()
    one, other = _on_gpus(plain, version, gpu), _on_gpus(f"{plain} {extra}", version, gpu)
    assert one["gpu"]["count"] == 1 and other["vllm"]["cudagraph"].get("declared"), other["vllm"]["cudagraph"]
    assert _alike(one, other) is alike, other["vllm"]["args"]
    if alike:
        why = other["vllm"]["args_resolved"]["same_as_unset"]
        assert any("_set_cudagraph_sizes" in str(w) for w in why.values()), why


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0"])
@pytest.mark.parametrize(("one", "other", "alike"), [
    ("--max-num-seqs 256", "--max-num-seqs 256 --cuda-graph-sizes 512", True),
    ("--max-num-seqs 1024", "--max-num-seqs 1024 --cuda-graph-sizes 512", True),
    ("--max-num-seqs 128", "--max-num-seqs 128 --cuda-graph-sizes 256", True),
    ("--max-num-seqs 256", f"--max-num-seqs 256 --cuda-graph-sizes {' '.join(map(str, EXPANDED_512))}", True),
    ("--cuda-graph-sizes 8", "--cuda-graph-sizes 1 2 4 8", True),  # one value is expanded
    ("--cuda-graph-sizes 8", "--cuda-graph-sizes 15", True),  # range(8, 16, 8) is [8]
    ("--cuda-graph-sizes 512", f"--cuda-graph-sizes {' '.join(map(str, reversed(EXPANDED_512)))}", True),
    ("--max-num-seqs 256", "--max-num-seqs 256 --cuda-graph-sizes 256", False),
    ("--max-num-seqs 128", "--max-num-seqs 128 --cuda-graph-sizes 512", False),
    ("--max-num-seqs 256", "--max-num-seqs 256 --cuda-graph-sizes 1 2 4 8", False),
    ("--cuda-graph-sizes 8", "--cuda-graph-sizes 16", False),
    ("--cuda-graph-sizes 8", "--cuda-graph-sizes 1 2 4 8 16", False),
    ("", "--cuda-graph-sizes 512", False),  # max_num_seqs not given: not resolved on these versions
])
def test_cuda_graph_sizes_are_the_sizes_vllm_expands_them_to(tmp_path, version, one, other, alike):
    plain = _model(tmp_path)
    a, b = _on_gpus(f"{plain} {one}".strip(), version), _on_gpus(f"{plain} {other}", version)
    assert _alike(a, b) is alike, (a["vllm"]["args"], b["vllm"]["args"])


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0"])
def test_one_cuda_graph_size_is_written_as_the_list_vllm_captures(tmp_path, version):
    snap = _alone(f"{_model(tmp_path)} --cuda-graph-sizes 16", version)
    assert snap["vllm"]["args"]["cuda_graph_sizes"] == [1, 2, 4, 8, 16]
    assert "range(8, N + 1, 8)" in snap["vllm"]["args_resolved"]["spelled"]["cuda_graph_sizes"]
    several = _alone(f"{_model(tmp_path)} --cuda-graph-sizes 16 2", version)
    assert several["vllm"]["args"]["cuda_graph_sizes"] == [2, 16]  # several are only sorted


@pytest.mark.parametrize(("version", "extra", "dest"), [
    ("0.12.0", "--max-cudagraph-capture-size 512", ("compilation_config", "max_cudagraph_capture_size")),
    ("0.11.1", CC_512, ("compilation_config", "max_cudagraph_capture_size")),
    ("0.11.0", "--cuda-graph-sizes 512", ("cuda_graph_sizes",)),
    ("0.10.2", "--cuda-graph-sizes 512", ("cuda_graph_sizes",)),
])
def test_capture_sizes_are_kept_where_max_num_seqs_is_not_known(tmp_path, version, extra, dest):
    """No GPU section, a GPU running MIG (vLLM sees an instance) or a model not read: the default max_num_seqs is not
    known, so the size is compared as given."""
    plain = _model(tmp_path)

    def kept(snap: dict) -> bool:
        node = snap["vllm"]["args"]
        for key in dest:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        return node in (512, [512], EXPANDED_512)

    assert kept(_alone(f"{plain} {extra}", version))
    assert kept(_on_gpus(f"{plain} {extra}", version, mig=True))
    assert kept(_on_gpus(f"vllm serve some-org/not-cached-model {extra}", version))
    assert not _alike(_alone(plain, version), _alone(f"{plain} {extra}", version))


@pytest.mark.parametrize(("version", "one", "other"), [
    ("0.12.0", "", "--max-cudagraph-capture-size 512"),  # gpt-oss takes 1024 where nothing is given
    ("0.11.1", "", "--max-cudagraph-capture-size 512"),
    ("0.11.0", "--cuda-graph-sizes 8", "--cuda-graph-sizes 1 2 4 8"),  # one value below 992 becomes its ladder
    ("0.10.2", "--max-num-seqs 256", "--max-num-seqs 256 --cuda-graph-sizes 512"),  # ... its own default too
])
def test_a_model_that_sizes_its_own_captures_keeps_the_sizes_as_given(tmp_path, version, one, other):
    plain = _model(tmp_path, GPT_OSS)
    assert not _alike(_on_gpus(f"{plain} {one}".strip(), version), _on_gpus(f"{plain} {other}", version))


def test_capture_sizes_under_enforce_eager_are_left_out_for_the_eager_mode(tmp_path):
    """No graphs at all: the reason is the eager mode, not the default size."""
    plain = _model(tmp_path)
    snap = _on_gpus(f"{plain} --enforce-eager --max-num-seqs 256 --cuda-graph-sizes 512", "0.11.0")
    assert "--enforce-eager" in snap["vllm"]["args_resolved"]["same_as_unset"]["cuda_graph_sizes"]
