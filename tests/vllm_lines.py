"""What the tests of vLLM command lines share: a Llama checkpoint's config under a root, a server's section as the
collector writes it from a command line and a version, two of them compared, and the section on the real H200's
NVML replay (for what vLLM resolves by the GPU it runs on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hoststate.collectors import Context
from hoststate.collectors import vllm as vllm_collector
from hoststate.collectors.vllm.argv import Normalised, locate, normalise, split_command
from hoststate.diff import compare
from tests.conftest import FIXTURES

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 32,
          "num_key_value_heads": 8, "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
BASE = "vllm serve /models/llama"
VERSIONS = ("0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0")


def model_root(tmp_path: Path) -> Path:
    """A root whose /models/llama holds CONFIG (BASE serves it)."""
    (tmp_path / "models" / "llama").mkdir(parents=True)
    (tmp_path / "models" / "llama" / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


def parsed(cmd: str, version: str | None) -> Normalised:
    """``cmd`` split as a shell would and read as ``version``'s parser reads it (argv.normalise)."""
    command = locate(split_command(cmd))
    return normalise(command.args, version, program=command.program or "")


def snap(root: Path, cmd: str, version: str) -> dict[str, Any]:
    return {"vllm": vllm_collector.collect(Context(root=str(root), vllm_cmd=cmd, vllm_version=version)).data}


def verdict(root: Path, before: str, after: str, version: str) -> tuple[str, dict[str, str]]:
    result = compare(snap(root, before, version), snap(root, after, version))
    return result.verdict, {f.path: f.severity for f in result.findings}


def on_gpus(command: str, version: str, name: str | None = None, mig: bool = False) -> dict[str, Any]:
    """The gpu and vllm sections of ``command`` on the real H200's NVML replay, its GPU renamed (``name``) or put in
    MIG mode."""
    from hoststate import nvml_replay
    from hoststate.capture import collect

    data = json.loads((FIXTURES / "nvml" / "h200.json").read_text())
    for device in data["devices"]:
        if name is not None:
            device["calls"]["nvmlDeviceGetName"] = name
        if mig:
            device["calls"]["nvmlDeviceGetMigMode"] = [1, 1]
    return collect(Context(vllm_cmd=command, vllm_version=version, nvml=nvml_replay.load_data(data)), ("gpu", "vllm"))
