"""Environment variables rated by their effect on inference throughput, and values rated as their reader reads them.

Every case takes two real snapshots of the env collector (or of a server's environment, through --vllm-cmd
prefixes), each under an environment set here, written to TOML and read back, then diffs them with the shipped
policy: what a user's `hoststate snap` and `hoststate diff` would give.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from hoststate import capture
from hoststate.collectors import Context
from hoststate.collectors import env as env_collector
from hoststate.diff import compare
from hoststate.snapshot import to_toml, toml_loads
from tests.conftest import HOSTS

SERVER = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2"


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if env_collector.allowed(name):
            monkeypatch.delenv(name)


def snap_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> dict[str, Any]:
    """A snapshot of the env collector with exactly ``env`` among the variables it records, as written to disk."""
    with monkeypatch.context() as m:
        _clean(m)
        for name, value in env.items():
            m.setenv(name, value)
        return toml_loads(to_toml(capture.collect(Context(root="/nonexistent"), ("env",))))


def snap_server(monkeypatch: pytest.MonkeyPatch, prefix: str) -> dict[str, Any]:
    """A snapshot of a server started as ``prefix vllm serve ...`` (--vllm-cmd), as written to disk."""
    with monkeypatch.context() as m:
        _clean(m)
        ctx = Context(root=str(HOSTS / "seed-baseline"), vllm_cmd=f"{prefix} {SERVER}".strip(), vllm_version="0.11.0")
        return toml_loads(to_toml(capture.collect(ctx, ("vllm",))))


def rated(a: dict[str, Any], b: dict[str, Any], under: str = "env") -> dict[str, tuple[str, str]]:
    """path -> (severity, reason) of each finding under ``under``."""
    return {f.path: (f.severity, f.reason) for f in compare(a, b).findings if f.path.startswith(under)}


def severities(found: dict[str, tuple[str, str]]) -> set[str]:
    return {severity for severity, _ in found.values()}


# -- the rating table (hoststate/variables.toml) -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "value", "severity"), [
    ("PYTORCH_KERNEL_CACHE_PATH", "/scratch/torch-kernels", "info"),  # A: the jiterator's cache directory
    ("OMP_DISPLAY_AFFINITY", "true", "info"),  # B: display only
    ("OMP_AFFINITY_FORMAT", "%n %A", "info"),
    ("TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "0", "info"),  # C: shutdown logging, dump file and pipe
    ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/scratch/fr_", "info"),
    ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "/scratch/fr_pipe_", "info"),
    ("TORCH_NCCL_RETHROW_CUDA_ERRORS", "0", "warning"),  # error handling, as TORCH_NCCL_ASYNC_ERROR_HANDLING
    ("TORCH_FR_BUFFER_SIZE", "20000", "warning"),  # D: TORCH_NCCL_TRACE_BUFFER_SIZE's newer name
    ("TORCH_FR_DUMP_TEMP_FILE", "/scratch/fr_", "info"),
    ("TORCH_FR_DEBUG_INFO_PIPE_FILE", "/scratch/fr_pipe_", "info"),
    ("CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "1", "warning"),  # F: as CUDA_ENABLE_COREDUMP_ON_EXCEPTION
    ("CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION", "0", "warning"),
    ("CUDA_COREDUMP_SHOW_PROGRESS", "1", "info"),
    ("CUDA_COREDUMP_PIPE", "/tmp/cuda-dump-pipe", "info"),
    ("CUDA_COREDUMP_GENERATION_FLAGS", "skip_global_memory", "info"),
    ("NCCL_HOME", "/opt/nccl", "info"),  # G: libnccl never reads it
])
def test_a_variable_is_rated_by_what_it_does(monkeypatch, name, value, severity):
    found = rated(snap_env(monkeypatch, {}), snap_env(monkeypatch, {name: value}))
    assert {p: s for p, (s, _) in found.items()} == {f"env.{name}": severity}


@pytest.mark.parametrize("name", ["UCX_IB_PKEY", "NVSHMEM_IB_PKEY", "NVSHMEM_IB_PKEY_INDEX"])
def test_a_partition_key_is_not_a_secret_so_its_change_shows(monkeypatch, name):
    """H: the partition key picks the InfiniBand partition traffic goes over; redacted, a change left no finding."""
    a, b = snap_env(monkeypatch, {name: "0x8001"}), snap_env(monkeypatch, {name: "0x8002"})
    assert a["env"][name] == "0x8001"
    assert rated(a, b)[f"env.{name}"][0] == "invalidating"  # rated by its family (UCX_*, NVSHMEM_*)
    secret = snap_env(monkeypatch, {"UCX_IB_PASSWORD": "hunter2-hunter2"})  # a real secret next to it stays hidden
    assert secret["env"]["UCX_IB_PASSWORD"] == "<redacted>"


# -- values rated as their reader reads them (hoststate/collectors/env_reads.py) -----------------------------------


@pytest.mark.parametrize("spelling", ["0", "False", "off", "no", "n", ""])
def test_tokenizers_parallelism_spelled_otherwise_is_the_same_setting(monkeypatch, spelling):
    """tokenizers lower-cases the value and reads '', off, false, f, no, n and 0 as off (parallelism.rs)."""
    base = snap_env(monkeypatch, {"TOKENIZERS_PARALLELISM": "false"})
    given = snap_env(monkeypatch, {"TOKENIZERS_PARALLELISM": spelling})
    assert given["env"]["TOKENIZERS_PARALLELISM"] == "false"
    if spelling != "false":
        assert given["env"]["spelled"]["TOKENIZERS_PARALLELISM"]["value"] == spelling  # the value as given stays
        assert "parallelism.rs" in given["env"]["spelled"]["TOKENIZERS_PARALLELISM"]["because"]
    found = rated(base, given)
    assert severities(found) == {"info"} and "env.TOKENIZERS_PARALLELISM" not in found
    assert all("how it was written" in reason for _, reason in found.values())
    # a value read otherwise is still the change it was
    on = rated(given, snap_env(monkeypatch, {"TOKENIZERS_PARALLELISM": "1"}))
    assert on["env.TOKENIZERS_PARALLELISM"][0] == "invalidating"


@pytest.mark.parametrize(("name", "old", "new", "other", "severity"), [
    ("NCCL_ALGO", "Ring", "ring", "Tree", "invalidating"),
    ("NCCL_ALGO", "Ring,Tree", "RING,tree", "ring", "invalidating"),
    ("NCCL_ALGO", "allreduce:tree;broadcast:ring", "AllReduce:Tree;Broadcast:Ring", "allreduce:ring", "invalidating"),
    ("NCCL_PROTO", "^LL128", "^ll128", "LL128", "invalidating"), ("HF_HUB_OFFLINE", "1", "true", "0", "warning"),
    ("HF_HUB_OFFLINE", "1", "YES", "false", "warning"),
])
def test_a_value_spelled_as_its_reader_reads_it_alike_is_no_change(monkeypatch, name, old, new, other, severity):
    """NCCL compares names with strcasecmp (tuning.cc parseList); huggingface_hub upper-cases and reads 1, ON, YES
    and TRUE as on (constants.py _is_true). A value read otherwise stays the change it was."""
    given = snap_env(monkeypatch, {name: new})
    found = rated(snap_env(monkeypatch, {name: old}), given)
    assert found and severities(found) == {"info"} and f"env.{name}" not in found
    assert rated(given, snap_env(monkeypatch, {name: other}))[f"env.{name}"][0] == severity


@pytest.mark.parametrize(("name", "value", "why"), [
    ("CUDA_LAUNCH_BLOCKING", "0", "CUDA's default"),
    ("NCCL_DEBUG", "WARN", "on errors only"), ("NCCL_DEBUG", "warn", "strcasecmp"),
    ("NCCL_DEBUG", "INFO", "no line per collective"),
    ("TORCH_DISTRIBUTED_DEBUG", "OFF", "when it is unset"),
    ("TORCH_DISTRIBUTED_DEBUG", "info", "DistributedDataParallel"),
    ("TRANSFORMERS_OFFLINE", "0", "off is what huggingface_hub reads"),
])
def test_a_value_that_runs_as_unset_is_recorded_apart_and_rated_info(monkeypatch, name, value, why):
    unset, given = snap_env(monkeypatch, {}), snap_env(monkeypatch, {name: value})
    assert name not in given["env"] and given["env"]["same_as_unset"][name]["value"] == value
    assert why in given["env"]["same_as_unset"][name]["because"]
    found = rated(unset, given)
    assert severities(found) == {"info"} and f"env.{name}" not in found


def test_nccl_logging_is_rated_where_it_logs_every_call(monkeypatch):
    """E: TRACE prints replayable trace info on all calls (src/debug.cc); at INFO, COLL logs a line per collective
    (src/enqueue.cc). WARN, and INFO with the default subsystems, log at set-up only; the subsystems filter INFO
    lines, so without NCCL_DEBUG at INFO they change nothing."""
    warn, trace = snap_env(monkeypatch, {"NCCL_DEBUG": "WARN"}), snap_env(monkeypatch, {"NCCL_DEBUG": "TRACE"})
    found = rated(warn, trace)
    assert found["env.NCCL_DEBUG"][0] == "warning" and "replayable trace" in found["env.NCCL_DEBUG"][1]
    info = snap_env(monkeypatch, {"NCCL_DEBUG": "INFO"})
    assert severities(rated(warn, info)) == {"info"}
    coll = snap_env(monkeypatch, {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"})
    per_call = rated(info, coll)
    assert per_call["env.NCCL_DEBUG_SUBSYS"][0] == "warning" and per_call["env.NCCL_DEBUG"][0] == "warning"
    assert "every collective call" in per_call["env.NCCL_DEBUG_SUBSYS"][1]
    # a set-up subsystem at INFO, or COLL while NCCL does not log INFO, is logging only
    for quiet in ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH"}, {"NCCL_DEBUG_SUBSYS": "COLL"},
                  {"NCCL_DEBUG": "warn", "NCCL_DEBUG_SUBSYS": "coll"}):
        given = snap_env(monkeypatch, quiet)
        assert "NCCL_DEBUG_SUBSYS" in given["env"]["same_as_unset"], quiet
        assert severities(rated(info, given)) == {"info"}, quiet


def test_torch_distributed_debug_detail_invalidates_off_and_info_alike(monkeypatch):
    """G: only DETAIL wraps process groups (distributed_c10d.py); OFF and INFO run the same for vLLM."""
    off, info = snap_env(monkeypatch, {"TORCH_DISTRIBUTED_DEBUG": "OFF"}), snap_env(
        monkeypatch, {"TORCH_DISTRIBUTED_DEBUG": "INFO"})
    assert severities(rated(off, info)) == {"info"}
    detail = rated(info, snap_env(monkeypatch, {"TORCH_DISTRIBUTED_DEBUG": "detail"}))
    assert detail["env.TORCH_DISTRIBUTED_DEBUG"][0] == "invalidating"


def test_cuda_launch_blocking_set_to_its_default_or_turned_on(monkeypatch):
    zero = snap_env(monkeypatch, {"CUDA_LAUNCH_BLOCKING": "0"})
    assert severities(rated(snap_env(monkeypatch, {}), zero)) == {"info"}
    assert rated(zero, snap_env(monkeypatch, {"CUDA_LAUNCH_BLOCKING": "1"}))["env.CUDA_LAUNCH_BLOCKING"][0] == \
        "invalidating"


@pytest.mark.parametrize("name", ["NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE"])
def test_an_nccl_transport_set_to_0_is_still_compared(monkeypatch, name):
    """0 is NCCL's default, but /etc/nccl.conf or ~/.nccl.conf may disable the transport, and the environment wins
    over the files: 0 then turns it back on. Not settled, so a run given 0 is not comparable with one given none."""
    zero = snap_env(monkeypatch, {name: "0"})
    assert name in zero["env"] and name not in zero["env"].get("same_as_unset", {})
    assert rated(snap_env(monkeypatch, {}), zero)[f"env.{name}"][0] == "invalidating"


def test_a_secret_shaped_value_is_never_spelled_again(monkeypatch):
    """A value redaction replaced is left as it is: nothing is read out of it, and it is not recorded twice."""
    secret = "hf_abcdefghijklmnopqrstuvwxyz0123"
    given = snap_env(monkeypatch, {"NCCL_ALGO": f"ring,{secret}", "TOKENIZERS_PARALLELISM": "off"})
    assert secret not in to_toml(given)
    assert "NCCL_ALGO" not in given["env"].get("spelled", {})
    assert given["env"]["spelled"]["TOKENIZERS_PARALLELISM"]["value"] == "off"


def test_a_servers_environment_is_read_alike(monkeypatch):
    """The same readers apply to a server's environment (vllm.env), recorded where the snapshot is written."""
    base = snap_server(monkeypatch, "NCCL_ALGO=Ring TOKENIZERS_PARALLELISM=false")
    given = snap_server(monkeypatch, "NCCL_ALGO=ring TOKENIZERS_PARALLELISM=0 CUDA_LAUNCH_BLOCKING=0 NCCL_DEBUG=warn")
    env = given["vllm"]["env"]
    assert env["NCCL_ALGO"] == "Ring" and env["spelled"]["NCCL_ALGO"]["value"] == "ring"
    assert env["same_as_unset"]["CUDA_LAUNCH_BLOCKING"]["value"] == "0" and "NCCL_DEBUG" not in env
    found = rated(base, given, "vllm.")  # the command line as given (argv) is info too
    env_found = [p for p in found if ".env." in p]
    assert env_found and all(".env.spelled." in p or ".env.same_as_unset." in p for p in env_found)
    assert severities(found) == {"info"}
    trace = rated(given, snap_server(monkeypatch, "NCCL_ALGO=ring TOKENIZERS_PARALLELISM=0 NCCL_DEBUG=TRACE"), "vllm.")
    assert trace["vllm.env.NCCL_DEBUG"][0] == "warning"


def snap_env_for(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], version: str) -> dict[str, Any]:
    """snap_env for a command that runs vLLM ``version`` (--vllm-version)."""
    with monkeypatch.context() as m:
        _clean(m)
        for name, value in env.items():
            m.setenv(name, value)
        ctx = Context(root="/nonexistent", vllm_version=version)
        return toml_loads(to_toml(capture.collect(ctx, ("env",))))


# vllm/envs.py 0.12.0: VLLM_DISABLE_PYNCCL is os.getenv(..., "False").lower() in ("true", "1"); VLLM_USE_DEEP_GEMM
# is bool(int(os.getenv(..., "1"))); VLLM_ALLOW_LONG_MAX_MODEL_LEN os.environ.get(..., "0").strip().lower() in
# ("1", "true"). The same in 0.33.0 for the first two.
@pytest.mark.parametrize(("version", "name", "one", "other"), [
    ("0.12.0", "VLLM_DISABLE_PYNCCL", "1", "true"),
    ("0.12.0", "VLLM_DISABLE_PYNCCL", "1", "True"),
    ("0.33.0", "VLLM_DISABLE_PYNCCL", "TRUE", "1"),
    ("0.12.0", "VLLM_USE_DEEP_GEMM", "0", "00"),
    ("0.12.0", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1", " true"),
])
def test_a_vllm_switch_spelled_another_way_vllm_reads_alike_is_info(monkeypatch, version, name, one, other):
    """A VLLM_* switch is recorded as vLLM reads it (hoststate/data/vllm_env_forms.json): ``true`` and ``1`` are one
    setting where envs.py lower-cases the value and looks it up in ("true", "1"); the value as given is under
    ``spelled``, rated info."""
    base, given = snap_env_for(monkeypatch, {name: one}, version), snap_env_for(monkeypatch, {name: other}, version)
    assert base["env"][name] == given["env"][name]
    assert severities(rated(base, given)) == {"info"}


@pytest.mark.parametrize(("name", "value"), [("VLLM_DISABLE_PYNCCL", "false"), ("VLLM_DISABLE_PYNCCL", "0"),
                                             ("VLLM_DISABLE_PYNCCL", "no"), ("VLLM_USE_DEEP_GEMM", "01")])
def test_a_vllm_switch_read_as_its_default_runs_as_unset(monkeypatch, name, value):
    """``VLLM_DISABLE_PYNCCL=0`` reads as its default "False" (anything but true/1 is off): the server runs as without
    it, so the variable is set apart under same_as_unset, not rated against a baseline without it."""
    unset, given = snap_env_for(monkeypatch, {}, "0.12.0"), snap_env_for(monkeypatch, {name: value}, "0.12.0")
    assert given["env"]["same_as_unset"][name]["value"] == value
    assert severities(rated(unset, given)) == {"info"}


@pytest.mark.parametrize(("name", "one", "other"), [
    ("VLLM_DISABLE_PYNCCL", "1", "0"),
    ("VLLM_USE_DEEP_GEMM", "0", "1"),
    ("VLLM_USE_DEEP_GEMM", "0", "true"),  # int('true') fails: the server does not start as with 0
])
def test_a_vllm_switch_turned_the_other_way_still_refuses(monkeypatch, name, one, other):
    base, given = snap_env_for(monkeypatch, {name: one}, "0.12.0"), snap_env_for(monkeypatch, {name: other}, "0.12.0")
    assert rated(base, given)[f"env.{name}"][0] == "invalidating"


def test_a_servers_vllm_switch_is_read_alike(monkeypatch):
    """The server's own environment (vllm.env) reads its VLLM_* switches as its vLLM does too."""
    base = snap_server(monkeypatch, "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")  # 0.11.0: .strip().lower() in ("1", "true")
    given = snap_server(monkeypatch, "VLLM_ALLOW_LONG_MAX_MODEL_LEN=True")
    assert given["vllm"]["env"]["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    assert given["vllm"]["env"]["spelled"]["VLLM_ALLOW_LONG_MAX_MODEL_LEN"]["value"] == "True"
    assert severities(rated(base, given, "vllm.")) == {"info"}


def test_every_recorded_vllm_switch_form_is_one_hoststate_reads():
    """Each form in hoststate/data/vllm_env_forms.json (scripts/vllm_envs.py --forms) is one vllm_release reads."""
    from hoststate.collectors import vllm_release

    forms = {form for table in vllm_release._forms().values() for form in table.values()}
    assert forms and all(vllm_release._switch(f, "1") in (True, False) for f in forms)


@pytest.mark.parametrize(("name", "value"), [
    ("CUDA_DRIVER_VERSION", "580.95.05"), ("CUDA_ARCH_LIST", "8.0 8.6 9.0 10.0 11.0 12.0"),
    ("CUBLAS_VERSION", "13.1.0.3"), ("CUDNN_FRONTEND_VERSION", "1.14.1"), ("NVIDIA_PYTORCH_VERSION", "25.10"),
    ("PYTORCH_VERSION", "2.9.0a0+145a3a7"), ("PYTORCH_BUILD_VERSION", "2.9.0a0+145a3a7"),
    ("PYTORCH_BUILD_NUMBER", "0"), ("PYTORCH_HOME", "/opt/pytorch/pytorch"),
])
def test_an_nvidia_container_images_labels_are_info(monkeypatch, name, value):
    """The NGC PyTorch image's Dockerfile sets these ENV to describe the image (beside CUDA_VERSION, NCCL_VERSION,
    CUDNN_VERSION); no library reads them at run time, and what they describe is rated where it runs (packages,
    vllm.libraries, gpu.driver_version). Their families' globs (CUDA_*, PYTORCH_*, NVIDIA_*) refused them."""
    found = rated(snap_env(monkeypatch, {}), snap_env(monkeypatch, {name: value}))
    assert found[f"env.{name}"][0] == "info"


@pytest.mark.parametrize(("name", "value", "expect"), [
    ("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", "invalidating"),
    ("MALLOC_ARENA_MAX", "2", "invalidating"),
    ("MALLOC_TRIM_THRESHOLD_", "0", "invalidating"),
    ("MALLOC_PERTURB_", "165", "invalidating"),
    ("MALLOC_CHECK_", "3", "warning"),
])
def test_glibc_malloc_tuning_is_recorded_and_rated(monkeypatch, name, value, expect):
    """glibc malloc reads these (mallopt(3) ENVIRONMENT; tunables(7)) as jemalloc reads MALLOC_CONF: the host
    threads allocate differently. They were not recorded, so setting one passed the guard as clean."""
    found = rated(snap_env(monkeypatch, {}), snap_env(monkeypatch, {name: value}))
    assert found[f"env.{name}"][0] == expect
