"""The env and packages collectors: allow-list, redaction, importlib.metadata only."""

from __future__ import annotations

import sys

from hoststate import capture, snapshot
from hoststate.collectors import Context, packages
from hoststate.collectors import env as env_collector


def test_env_keeps_the_allow_list_and_redacts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("VLLM_API_KEY", "sk-abcdefghijklmnop1234")
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrst")
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("HOME_SOMETHING", "x")
    sec = env_collector.collect(Context(root="/nonexistent"))  # read from this process also under --root
    assert sec.data["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert sec.data["NCCL_P2P_DISABLE"] == "1"
    assert sec.data["TOKENIZERS_PARALLELISM"] == "false"
    assert sec.data["VLLM_API_KEY"] == "<redacted>"
    assert "HF_TOKEN" not in sec.data and "HOME_SOMETHING" not in sec.data
    text = snapshot.to_toml({"env": sec.data})
    assert "sk-abcdefghijklmnop1234" not in text and "hf_abcdef" not in text


def test_packages_reads_metadata_of_this_interpreter():
    sec = packages.collect(Context())
    # hoststate itself is installed in the test environment and is part of the recorded stack.
    from importlib import metadata

    assert sec.data.get("hoststate") == metadata.version("hoststate")
    assert all(isinstance(v, str) for v in sec.data.values())
    assert "torch" not in sys.modules  # never imported to learn its version


def test_scan_reads_names_versions_and_legacy_metadata(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    legacy = "Name: x\nVersion: 2.8.3\n\nV: 9"
    for d, entries in ((first, {"vllm-0.12.0.dist-info": "", "Flash_Attn.dist-info": legacy}),
                       (second, {"vllm-0.11.0.dist-info": "", "requests-2.0.dist-info": ""})):
        for name, meta in entries.items():
            (d / name).mkdir(parents=True)
            (d / name / "METADATA").write_text(meta)
    (second / "xformers.egg-info").write_text("Metadata-Version: 1.0\nVersion: 0.0.32\n")
    found = packages.scan([str(first), str(tmp_path / "missing"), str(second)],
                          packages._local_listdir, packages._local_read)
    # the first of a name on the path wins, as import would; unrelated distributions are left out
    assert found == {"flash-attn": "2.8.3", "vllm": "0.12.0", "xformers": "0.0.32"}


def test_packages_skipped_under_root():
    assert packages.collect(Context(root="/nonexistent")).status == "skipped"


FAMILIES = {
    "TORCHDYNAMO_DISABLE": "1", "TORCHINDUCTOR_MAX_AUTOTUNE": "1", "TRITON_PTXAS_PATH": "/opt/ptxas",
    "FLASHINFER_CUDA_ARCH_LIST": "9.0a", "NCCL_ALGO": "Ring", "NVSHMEM_DISABLE_P2P": "1", "CUBLAS_WORKSPACE_CONFIG":
    ":4096:8", "CUBLASLT_WORKSPACE_SIZE": "1024", "CUDNN_LOGINFO_DBG": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    "OMP_NUM_THREADS": "8", "KMP_AFFINITY": "compact", "MKL_NUM_THREADS": "8", "OPENBLAS_NUM_THREADS": "4",
    "LD_LIBRARY_PATH": "/opt/nccl-2.27/lib", "LD_PRELOAD": "libjemalloc.so.2", "HF_HUB_OFFLINE": "1", "MAX_JOBS": "32",
}


def test_env_records_every_family_torch_triton_flashinfer_nccl_and_cuda_read(monkeypatch):
    for name, value in FAMILIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FLASHINFER_API_TOKEN", "plain-value-but-a-secret-name")
    monkeypatch.setenv("TRITON_HOME_NOTE", "hf_abcdefghijklmnopqrstuvwxyz")  # a secret-shaped value
    monkeypatch.setenv("LD_BIND_NOW", "1")  # not a family hoststate rates
    sec = env_collector.collect(Context(root="/nonexistent"))
    assert {k: sec.data[k] for k in FAMILIES} == FAMILIES
    assert sec.data["FLASHINFER_API_TOKEN"] == "<redacted>"
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in sec.data["TRITON_HOME_NOTE"]
    assert "LD_BIND_NOW" not in sec.data


def test_a_command_prefix_reaches_the_servers_env(monkeypatch):
    """`TORCHDYNAMO_DISABLE=1 vllm serve ...` given to --vllm-cmd: recorded in vllm.env, not only in argv."""
    from tests.conftest import HOSTS

    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)
    cmd = "TORCHDYNAMO_DISABLE=1 LD_PRELOAD=libtcmalloc.so vllm serve m -tp 2"
    snap = capture.collect(Context(root=str(HOSTS / "seed-baseline"), vllm_cmd=cmd, vllm_version="0.11.0"),
                            ("vllm",))
    assert snap["vllm"]["env"]["TORCHDYNAMO_DISABLE"] == "1"
    assert snap["vllm"]["env"]["LD_PRELOAD"] == "libtcmalloc.so"


def _site_with_vllm(tmp_path, version: str):
    site = tmp_path / "site"
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return site


def test_vllm_variables_the_vllm_here_reads_as_unset_are_set_apart_as_the_servers_are(monkeypatch, tmp_path):
    """A VLLM_* variable this process passes on is rated as the server that inherits it reads it: a name the vLLM
    installed here (or given with --vllm-version) no longer reads, or a value equal to its default, moves to
    ``same_as_unset`` with why, as ``vllm.env_same_as_unset`` does for the server, so one diff never calls it both
    inert and invalidating. Without a version nothing is said."""
    from hoststate.diff import compare
    from tests.conftest import HOSTS

    monkeypatch.syspath_prepend(str(_site_with_vllm(tmp_path, "0.12.0")))
    for name in [n for n in __import__("os").environ if n.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("VLLM_USE_V1", "0")  # the V0 engine's switch: vllm/envs.py of 0.12.0 no longer lists it
    monkeypatch.setenv("VLLM_USE_DEEP_GEMM", "1")  # 0.12.0's default
    monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "FLASH_ATTN")  # read by 0.12.0: it selects kernels
    monkeypatch.setenv("VLLM_TOTALLY_MADE_UP", "1")  # no recorded version reads it: a plugin or a fork may
    live = capture.collect(Context(), ("env", "packages"))
    assert live["packages"]["vllm"] == "0.12.0"
    env = live["env"]
    assert set(env["same_as_unset"]) == {"VLLM_USE_V1", "VLLM_USE_DEEP_GEMM"}
    assert env["same_as_unset"]["VLLM_USE_V1"]["value"] == "0"
    assert "does not read it" in env["same_as_unset"]["VLLM_USE_V1"]["because"]
    assert "packages.vllm" in env["same_as_unset"]["VLLM_USE_DEEP_GEMM"]["because"]
    assert env["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN" and env["VLLM_TOTALLY_MADE_UP"] == "1"
    alone = capture.collect(Context(), ("env",))["env"]  # no packages section, no --vllm-version: nothing said
    assert alone["VLLM_USE_V1"] == "0" and "same_as_unset" not in alone

    tree, cmd = str(HOSTS / "seed-baseline"), "vllm serve m -tp 2"
    with_it = capture.collect(Context(root=tree, vllm_cmd=cmd, vllm_version="0.12.0"), ("env", "vllm"))
    monkeypatch.delenv("VLLM_USE_V1")
    without = capture.collect(Context(root=tree, vllm_cmd=cmd, vllm_version="0.12.0"), ("env", "vllm"))
    findings = compare(without, with_it).findings
    assert {f.path.split(".")[0] for f in findings if "VLLM_USE_V1" in f.path} == {"env", "vllm"}
    assert [f.path for f in findings if f.severity in ("invalidating", "warning")] == []


def test_an_unreadable_version_table_leaves_the_variables_as_they_are(monkeypatch, tmp_path):
    """Collectors never raise: a version table that cannot be read (a broken install) says nothing."""
    from hoststate.collectors import vllm_release

    monkeypatch.setattr(vllm_release, "_PATH", str(tmp_path / "missing.json"))
    vllm_release._table.cache_clear()
    monkeypatch.setenv("VLLM_USE_V1", "0")
    try:
        sec = env_collector.collect(Context(vllm_version="0.12.0"))
    finally:
        vllm_release._table.cache_clear()
    assert sec.status == "ok" and sec.data["VLLM_USE_V1"] == "0"
    assert "VLLM_USE_V1" not in sec.data.get("same_as_unset", {})
