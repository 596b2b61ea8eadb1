"""PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF compared by what PyTorch's caching allocator reads from them.

What is read alike was measured on the allocator config parser of each torch the recorded vLLM versions pin (2.8.0,
2.9.0, 2.14.0: libc10 and libc10_cuda of the released wheels, one process per value) and read in their headers
(c10/cuda/CUDAAllocatorConfig.h, c10/core/AllocatorConfig.h); env_reads.py cites them. Each case takes real snapshots
of the env collector, written to TOML and read back, and diffs them with the shipped policy.
"""

from __future__ import annotations

import pytest

from hoststate.collectors.env_reads import _alloc_conf
from tests.test_env_ratings import rated, severities, snap_env, snap_server

CUDA, ALLOC = "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"


@pytest.mark.parametrize("name", [CUDA, ALLOC])
@pytest.mark.parametrize("value", [
    "expandable_segments:False", "expandable_segments: False", " expandable_segments : False ",
    "expandable_segments:False,", "backend:native", "release_lock_on_cudamalloc:False",
    "pinned_use_cuda_host_register:False,pinned_num_register_threads:1,pinned_use_background_threads:False",
    "backend:native, expandable_segments:False", "",
])
def test_every_setting_at_the_allocators_default_runs_as_unset(monkeypatch, name, value):
    """torch 2.8, 2.9 and 2.14 start from these values, take them, and drop spaces: the variable changes nothing."""
    unset, given = snap_env(monkeypatch, {}), snap_env(monkeypatch, {name: value})
    assert name not in given["env"] and given["env"]["same_as_unset"][name]["value"] == value
    assert "caching allocator's default" in given["env"]["same_as_unset"][name]["because"]
    found = rated(unset, given)
    assert severities(found) == {"info"} and f"env.{name}" not in found


@pytest.mark.parametrize(("old", "new"), [
    ("expandable_segments:True", "expandable_segments:True,"),
    ("expandable_segments:True,max_split_size_mb:512", "max_split_size_mb:512, expandable_segments:True"),
    ("max_split_size_mb:512", "expandable_segments:False,max_split_size_mb:512"),
    ("max_split_size_mb:512", " max_split_size_mb : 512 ,backend:native"),
    ("garbage_collection_threshold:0.6,max_split_size_mb:256",
     "max_split_size_mb:256,garbage_collection_threshold:0.6"),
])
def test_two_spellings_of_the_same_settings_are_no_change(monkeypatch, old, new):
    a, b = snap_env(monkeypatch, {CUDA: old}), snap_env(monkeypatch, {CUDA: new})
    assert a["env"][CUDA] == b["env"][CUDA]
    found = rated(a, b)
    assert severities(found) <= {"info"} and f"env.{CUDA}" not in found


@pytest.mark.parametrize(("old", "new"), [
    ("", "expandable_segments:True"),
    ("expandable_segments:False", "expandable_segments:True"),
    ("expandable_segments:False", "max_split_size_mb:512"),
    ("max_split_size_mb:512", "max_split_size_mb:256"),
    ("backend:native", "backend:cudaMallocAsync"),
    ("expandable_segments:True", "expandable_segments:True,release_lock_on_cudamalloc:True"),
    # what torch refuses, or reads another way, is compared as given: lower-case values are an error in every torch
    ("expandable_segments:False", "expandable_segments:false"),
    # 20 is 2.14's default but 2.8 and 2.9 refuse it (must be > 20); a key newer than 2.8 is an error there
    ("", "max_non_split_rounding_mb:20"), ("", "graph_capture_record_stream_reuse:False"),
    # torch reads True both ways, vLLM's look for "expandable_segments:True" in the text finds only one
    ("expandable_segments:True", "expandable_segments: True"),
    # torch takes the last, vLLM finds expandable_segments:True in the text
    ("", "expandable_segments:True,expandable_segments:False"),
])
def test_a_different_setting_stays_invalidating(monkeypatch, old, new):
    a, b = snap_env(monkeypatch, {CUDA: old}), snap_env(monkeypatch, {CUDA: new})
    assert rated(a, b)[f"env.{CUDA}"][0] == "invalidating"


def test_what_is_not_read_alike_everywhere_is_kept_as_given():
    for value in ("expandable_segments:false", "Expandable_Segments:True", "expandable_segments:True\t", "foo:1",
                  ",expandable_segments:False", "expandable_segments:False,,", "roundup_power2_divisions:[>:0]",
                  "max_split_size_mb:5 12", "expandable _segments:True",
                  "expandable_segments:True,expandable_segments:True"):
        assert _alloc_conf(value) == value, value
    assert _alloc_conf("max_split_size_mb:512, expandable_segments:True,") == \
        "expandable_segments:True,max_split_size_mb:512"


def test_with_both_names_set_neither_runs_as_unset(monkeypatch):
    """torch 2.14 reads PYTORCH_CUDA_ALLOC_CONF, even empty or at its defaults, before PYTORCH_ALLOC_CONF; torch 2.9's
    accelerator config and vLLM 0.33 read PYTORCH_ALLOC_CONF first: a default-valued one still hides the other."""
    on = snap_env(monkeypatch, {ALLOC: "expandable_segments:True"})
    hidden = snap_env(monkeypatch, {ALLOC: "expandable_segments:True", CUDA: "expandable_segments:False"})
    assert hidden["env"][CUDA] == "" and CUDA not in hidden["env"].get("same_as_unset", {})
    assert rated(on, hidden)[f"env.{CUDA}"][0] == "invalidating"
    cuda_on = snap_env(monkeypatch, {CUDA: "expandable_segments:True"})
    both = snap_env(monkeypatch, {CUDA: "expandable_segments:True", ALLOC: " expandable_segments:False"})
    assert both["env"][ALLOC] == "" and ALLOC not in both["env"].get("same_as_unset", {})
    assert rated(cuda_on, both)[f"env.{ALLOC}"][0] == "invalidating"
    # the same settings spelled otherwise under both names are still no change
    again = snap_env(monkeypatch, {CUDA: "expandable_segments:True,", ALLOC: "expandable_segments:False"})
    assert f"env.{CUDA}" not in rated(both, again) and f"env.{ALLOC}" not in rated(both, again)


def test_a_servers_allocator_setting_is_read_alike(monkeypatch):
    base = snap_server(monkeypatch, "")
    given = snap_server(monkeypatch, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False")
    assert given["vllm"]["env"]["same_as_unset"][CUDA]["value"] == "expandable_segments:False"
    assert severities(rated(base, given, "vllm.")) <= {"info"}
    on = snap_server(monkeypatch, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert rated(given, on, "vllm.")[f"vllm.env.{CUDA}"][0] == "invalidating"
