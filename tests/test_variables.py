"""hoststate/variables.toml rates environment variables by what they do, one rating wherever a variable is read.

hoststate/data/vllm_env_names.json lists the names in ``environment_variables`` of each recorded version's
``vllm/envs.py`` (read from the released wheels): each one needs its own entry naming those versions as its source.
The expected ratings below are written by hand from what each variable does.
"""

from __future__ import annotations

import json

import pytest

from hoststate.diff import compare
from hoststate.policy import DEFAULT_VARIABLES, VARIABLE_PLACES, default_policy, default_rules
from hoststate.snapshot import toml_loads
from tests.conftest import PACKAGE

NAMES = json.loads((PACKAGE / "data" / "vllm_env_names.json").read_text())
TABLE = toml_loads((PACKAGE / DEFAULT_VARIABLES).read_text())["variable"]


def test_every_name_vllm_reads_has_its_own_entry_with_the_versions_as_source():
    entries = {e["name"]: e for e in TABLE}
    for name in sorted(set().union(*NAMES.values())):
        if name == "LD_LIBRARY_PATH":
            continue  # rated by the libraries the server mapped: default_policy.toml
        assert name in entries, name
        versions = [v for v in NAMES if name in NAMES[v]]
        assert f"vLLM {', '.join(versions)}" in entries[name]["source"], (name, entries[name]["source"])


def test_every_entry_has_a_reason_and_a_source_and_one_name():
    assert len({e["name"] for e in TABLE}) == len(TABLE)
    for e in TABLE:
        assert len(e["reason"]) >= 30 and len(e["source"]) >= 10, e


def test_no_family_is_refused_wholesale_without_its_harmless_members():
    """Each family that holds performance switches also rates its logging, cache and label members apart."""
    rules = {r.path[4:]: r.severity for r in default_rules() if r.origin == DEFAULT_VARIABLES
             and r.path.startswith("env.")}
    for family in ("VLLM", "NCCL", "TORCH", "TORCHINDUCTOR", "TRITON", "FLASHINFER", "CUDA", "CUBLAS", "CUDNN"):
        members = [n for n in rules if n.startswith(family + "_")]  # its glob too
        assert {"info", "invalidating"} <= {rules[n] for n in members}, family


EXPECTED = [
    # performance: kernels, graphs, compilation, collectives, allocator, preloads
    ("VLLM_ATTENTION_BACKEND", "FLASHINFER", "invalidating"), ("TORCHDYNAMO_DISABLE", "1", "invalidating"),
    ("TORCH_COMPILE_DISABLE", "1", "invalidating"), ("VLLM_USE_DEEP_GEMM", "0", "invalidating"),
    ("VLLM_ENABLE_V1_MULTIPROCESSING", "0", "invalidating"), ("NCCL_ALGO", "Ring", "invalidating"),
    ("NCCL_PROTO", "LL128", "invalidating"), ("NCCL_P2P_DISABLE", "1", "invalidating"),
    ("NCCL_SHM_DISABLE", "1", "invalidating"), ("NCCL_IB_HCA", "mlx5_0", "invalidating"),
    ("NCCL_NVLS_ENABLE", "0", "invalidating"), ("NCCL_MIN_NCHANNELS", "32", "invalidating"),
    ("LD_PRELOAD", "libtcmalloc.so.4", "invalidating"), ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True",
                                                         "invalidating"),
    ("CUDA_LAUNCH_BLOCKING", "1", "invalidating"), ("VLLM_TRACE_FUNCTION", "1", "invalidating"),
    ("NVIDIA_TF32_OVERRIDE", "0", "invalidating"), ("OMP_NUM_THREADS", "4", "invalidating"),
    ("VLLM_LHC_DSA", "1", "invalidating"),  # not stock vLLM: what reads it is not known
    ("VLLM_LOG_BATCHSIZE_INTERVAL", "1", "invalidating"),  # a device-wide synchronize after every forward pass
    # start-up, logging, debugging output, caches, build targets, telemetry, plumbing
    ("VLLM_LOGGING_LEVEL", "DEBUG", "info"), ("NCCL_DEBUG_FILE", "/tmp/nccl.%h.%p", "info"),
    ("TORCH_LOGS", "+dynamo", "info"), ("VLLM_CACHE_ROOT", "/scratch/vllm", "info"),
    ("TRITON_CACHE_DIR", "/scratch/triton", "info"), ("TORCHINDUCTOR_CACHE_DIR", "/scratch/ind", "info"),
    ("VLLM_RPC_TIMEOUT", "100000", "info"), ("VLLM_ENGINE_ITERATION_TIMEOUT_S", "120", "info"),
    ("VLLM_NO_USAGE_STATS", "1", "info"), ("MAX_JOBS", "16", "info"), ("VLLM_USE_PRECOMPILED", "1", "info"),
    ("VLLM_HOST_IP", "10.0.0.2", "info"), ("VLLM_PORT", "51000", "info"), ("NCCL_VERSION", "2.27.3", "info"),
    ("TORCH_CUDA_ARCH_LIST", "9.0", "warning"), ("FLASHINFER_CUDA_ARCH_LIST", "9.0a", "warning"),
    ("VLLM_TORCH_PROFILER_DIR", "/tmp/prof", "warning"), ("VLLM_ROCM_USE_AITER", "1", "warning"),
    ("HF_HUB_OFFLINE", "1", "warning"),
    # a line per collective call: TRACE (INFO, WARN and VERSION are recorded under same_as_unset by the collector)
    ("NCCL_DEBUG", "TRACE", "warning"), ("NCCL_DEBUG_SUBSYS", "COLL", "warning"),
]


@pytest.mark.parametrize("name, value, severity", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_a_setting_gets_the_same_rating_wherever_it_is_read(name, value, severity):
    """The environment, a server's environment (one and several servers) and an NCCL config file."""
    policy = default_policy()
    places = [p.format(name=name) for p in VARIABLE_PLACES]
    concrete = [p.replace("**", "servers.8000").replace("*", "user") for p in places] + [
        p.replace("vllm.**.", "vllm.").replace("*", "system") for p in places if p.startswith("vllm.")]
    for path in concrete:
        parts = tuple(path.split("."))
        before: dict = {"hoststate": {}, "collectors": {parts[0]: {"status": "ok"}}}
        after: dict = {"hoststate": {}, "collectors": {parts[0]: {"status": "ok"}}}
        node = after
        for key in parts[:-1]:
            node = node.setdefault(key, {})
        node[parts[-1]] = value
        found = {f.path: f.severity for f in compare(before, after, policy, include_ignored=True).findings}
        assert found == {path: severity}, path
