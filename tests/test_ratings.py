"""The default policy rates each change by what it does to a benchmark: one pair of snapshots per rating.

The expected severities are written here by hand from what each setting does (the oracle); the policy file is only
what is being checked.
"""

from __future__ import annotations

import copy
import re

import pytest

from hoststate.diff import compare
from hoststate.policy import default_rules
from hoststate.snapshot import load
from tests.conftest import FIXTURES

SEED_B = FIXTURES / "snapshots" / "seed-baseline.toml"
H200 = FIXTURES / "real" / "h200-snapshot.toml"


@pytest.fixture(scope="module")
def base() -> dict:
    return load(str(SEED_B))


@pytest.fixture(scope="module")
def h200() -> dict:
    return load(str(H200))


def rate(before: dict, after: dict) -> dict[str, tuple[str, str]]:
    """path -> (severity, reason) of every finding between two snapshots."""
    return {f.path: (f.severity, f.reason) for f in compare(before, after, include_ignored=True).findings}


def with_value(snap: dict, path: tuple[str, ...], value) -> dict:
    out = copy.deepcopy(snap)
    node = out
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return out


LOGGING = ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_LOGS", "TORCH_LOGS_OUT",
           "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_LOG_STATS_INTERVAL"]
IMAGE_LABELS = ["NVIDIA_REQUIRE_CUDA", "NVIDIA_PRODUCT_NAME", "CUDA_VERSION", "NCCL_VERSION", "CUDNN_VERSION",
                "NV_LIBNCCL_VERSION", "NV_CUDA_LIB_VERSION", "NVIDIA_CUDA_END_OF_LIFE"]


@pytest.mark.parametrize("section", ["env", "vllm.env"])
@pytest.mark.parametrize("name", LOGGING + IMAGE_LABELS)
def test_logging_variables_and_image_labels_are_info(base, section, name):
    path = (*section.split("."), name)
    found = rate(base, with_value(base, path, "INFO"))
    assert found == {".".join(path): (found[".".join(path)][0], found[".".join(path)][1])}
    assert found[".".join(path)][0] == "info", found


@pytest.mark.parametrize("section", ["env", "vllm.env"])
def test_cuda_launch_blocking_is_not_just_logging(base, section):
    path = (*section.split("."), "CUDA_LAUNCH_BLOCKING")
    severity, reason = rate(base, with_value(base, path, "1"))[".".join(path)]
    assert severity == "invalidating" and "serialises" in reason


@pytest.mark.parametrize("section", ["env", "vllm.env"])
def test_a_performance_variable_stays_invalidating(base, section):
    path = (*section.split("."), "NCCL_ALGO")
    assert rate(base, with_value(base, path, "Ring"))[".".join(path)][0] == "invalidating"


SERVER_STACK = ["torch", "triton", "flashinfer-python", "nvidia-nccl-cu12", "nvidia-cublas-cu12", "nvidia-cudnn-cu12",
                "xformers", "flash-attn", "transformers", "tokenizers", "vllm", "vllm-flash-attn"]


@pytest.mark.parametrize("name", SERVER_STACK)
def test_the_servers_inference_stack_is_invalidating(base, name):
    before = with_value(base, ("vllm", "packages", name), "1.0.0")
    after = with_value(base, ("vllm", "packages", name), "1.0.1")
    severity, reason = rate(before, after)[f"vllm.packages.{name}"]
    assert severity == "invalidating" and "server" in reason


@pytest.mark.parametrize("name", ["numpy", "ray", "huggingface-hub"])
def test_other_server_packages_are_a_warning(base, name):
    before = with_value(base, ("vllm", "packages", name), "1.0.0")
    assert rate(before, with_value(base, ("vllm", "packages", name), "2.0.0"))[f"vllm.packages.{name}"][0] == "warning"


TOOLING = ["pytest", "pytest-xdist", "hypothesis", "pyperf", "ruff", "jsonschema", "prometheus-client", "pyyaml",
           "hoststate", "nvidia-ml-py"]


@pytest.mark.parametrize("name", TOOLING)
def test_hoststates_own_tooling_packages_are_never_invalidating(base, name):
    found = rate(base, with_value(base, ("packages", name), "9.9.9"))  # installing the test extras adds them
    assert found[f"packages.{name}"][0] == "info"
    removed = rate(with_value(base, ("packages", name), "9.9.9"), base)
    assert removed[f"packages.{name}"][0] == "info"


def test_hoststates_interpreter_stack_and_other_packages(base):
    assert rate(base, with_value(base, ("packages", "torch"), "9.9"))["packages.torch"][0] == "invalidating"
    assert rate(base, with_value(base, ("packages", "numpy"), "9.9"))["packages.numpy"][0] == "warning"


def test_capability_lists_are_info(h200):
    uuid = next(iter(h200["gpu"]["devices"]))
    bus = h200["gpu"]["devices"][uuid]["pci_bus_id"]  # findings name GPUs by position (PCI bus id)
    path = ("gpu", "devices", uuid, "clocks_event_reasons_supported")
    after = with_value(h200, path, ["gpu_idle"])
    severity, reason = rate(h200, after)[f'gpu.devices."{bus}".clocks_event_reasons_supported']
    assert severity == "info" and "Application or max clocks" not in reason


def test_a_clock_setting_stays_invalidating(h200):
    uuid = next(iter(h200["gpu"]["devices"]))
    bus = h200["gpu"]["devices"][uuid]["pci_bus_id"]  # findings name GPUs by position (PCI bus id)
    after = with_value(h200, ("gpu", "devices", uuid, "clocks_applications_sm_mhz"), 1000)
    assert rate(h200, after)[f'gpu.devices."{bus}".clocks_applications_sm_mhz'][0] == "invalidating"


def test_served_model_name_is_a_label(base):
    after = with_value(base, ("vllm", "args", "served_model_name"), ["llama"])
    assert rate(base, after)["vllm.args.served_model_name"][0] == "info"
    assert rate(base, with_value(base, ("vllm", "model"), "other/model"))["vllm.model"][0] == "invalidating"


def test_dsa_device_driver_says_what_a_driver_binding_means(base):
    after = with_value(base, ("dsa", "devices", "dsa0", "driver"), "vfio-pci")
    severity, reason = rate(base, after)["dsa.devices.dsa0.driver"]
    assert severity == "invalidating"
    assert "different device or firmware" not in reason and "driver" in reason.lower()


def test_every_dsa_driver_rule_talks_about_drivers():
    for rule in default_rules():
        if rule.path.startswith("dsa.") and "driver" in rule.path:
            assert "driver" in rule.reason.lower() and "firmware" not in rule.reason, rule.path


def test_unclassified_boot_parameter_is_a_warning_classified_ones_invalidate(base):
    path = ("system", "kernel", "params", "some_new_param")
    assert rate(base, with_value(base, path, "1"))["system.kernel.params.some_new_param"][0] == "warning"
    for name in ("isolcpus", "nohz_full", "intel_iommu", "iommu.passthrough", "intel_pstate",
                 "transparent_hugepage", "hugepages", "processor.max_cstate", "mitigations", "nosmt"):
        found = rate(base, with_value(base, ("system", "kernel", "params", name), "x"))
        (severity, _), = found.values()
        assert severity == "invalidating", name


def test_absent_cpufreq_against_present_is_invalidating(base):
    after = with_value(base, ("system", "cpufreq"), {"absent": True})
    found = rate(base, after)
    assert found["system.cpufreq.absent"][0] == "invalidating"


def test_reasons_speak_of_the_tools_users_and_cite_only_this_repository():
    for rule in default_rules():
        words = rule.reason.lower()
        assert not re.search(r"\bseed\b|design\.md|reference/", words), rule.path
        for cited in re.findall(r"[\w/.-]+\.md\b", rule.reason):
            assert (FIXTURES.parent / cited).exists(), (rule.path, cited)
