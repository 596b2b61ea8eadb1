"""The env and packages collectors: allow-list, redaction, importlib.metadata only."""

from __future__ import annotations

import sys

from hoststate import snapshot
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
