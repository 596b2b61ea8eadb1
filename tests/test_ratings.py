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
from tests.vllm_lines import on_gpus as _on_gpus

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


LOGGING = ["NCCL_DEBUG_FILE", "TORCH_LOGS", "TORCH_LOGS_OUT",
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
    # transparent_hugepage= and numa_balancing= are rated by the runtime value they set (tests/test_effect_ratings.py)
    for name in ("isolcpus", "nohz_full", "intel_iommu", "iommu.passthrough", "intel_pstate",
                 "processor.max_cstate", "mitigations", "nosmt"):
        found = rate(base, with_value(base, ("system", "kernel", "params", name), "x"))
        (severity, _), = found.values()
        assert severity == "invalidating", name


IDLE_STATES = ("system", "cpuidle", "disabled")
NONE_OFF = {"POLL": 0, "C1": 0, "C1E": 0, "C6": 0}


@pytest.mark.parametrize("count", [224, 112])
def test_an_idle_state_disabled_at_run_time_is_invalidating_like_max_cstate(base, count):
    """cpupower idle-set -d 3 on every CPU (or on half of them) against none: the run-time form of
    intel_idle.max_cstate=2, which is invalidating; one finding, at the state."""
    before = with_value(base, IDLE_STATES, NONE_OFF)
    after = with_value(base, IDLE_STATES, {**NONE_OFF, "C6": count})
    found = rate(before, after)
    assert list(found) == ["system.cpuidle.disabled.C6"]
    severity, reason = found["system.cpuidle.disabled.C6"]
    assert severity == "invalidating" and "max_cstate" in reason
    boot = with_value(base, ("system", "kernel", "params", "intel_idle.max_cstate"), "2")
    (boot_line, _), = rate(base, boot).values()
    assert severity == boot_line


def test_identical_idle_states_give_no_finding(base):
    before = with_value(base, IDLE_STATES, {**NONE_OFF, "C6": 112})
    assert rate(before, copy.deepcopy(before)) == {}


def test_an_idle_state_listed_on_one_side_only_is_a_warning(base):
    """Another idle driver or CPU lists other states (rated at its own path); so does a snapshot taken before the
    states were recorded."""
    before = with_value(base, IDLE_STATES, NONE_OFF)
    after = with_value(base, IDLE_STATES, {"POLL": 0, "C1": 0, "C6": 0})
    assert rate(before, after) == {"system.cpuidle.disabled.C1E": ("warning", rate(before, after)[
        "system.cpuidle.disabled.C1E"][1])}


def test_idle_states_unreadable_on_one_side_are_invalidating(base):
    before = with_value(base, IDLE_STATES, {**NONE_OFF, "C6": 224})
    after = copy.deepcopy(base)
    after["system"]["cpuidle"] = {}
    after["collectors"]["system"] = {"status": "partial", "unreadable": {
        "cpuidle.disabled": "denied: EACCES [sys/devices/system/cpu/cpu5/cpuidle/state3/disable]"}}
    findings = compare(before, after).findings
    idle = [(f.path, f.change, f.severity) for f in findings if f.path.startswith("system.cpuidle")]
    assert {change for _path, change, _severity in idle} == {"unreadable"}
    assert {severity for _path, _change, severity in idle} == {"invalidating"}
    assert {path for path, _change, _severity in idle} >= {"system.cpuidle.disabled." + k for k in NONE_OFF}


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


PLUMBING = {"port": 8001, "host": "0.0.0.0", "api_key": "<redacted>", "uvicorn_log_level": "warning",
            "ssl_keyfile": "key.pem", "ssl_certfile": "cert.pem", "allowed_origins": ["*"], "allow_credentials": True,
            "enable_log_requests": True, "disable_uvicorn_access_log": True, "root_path": "/v1", "uds": "/run/v.sock"}


@pytest.mark.parametrize("prefix", [("vllm",), ("vllm", "servers", "8000")])
@pytest.mark.parametrize("name", sorted(PLUMBING))
def test_server_plumbing_arguments_are_info_for_one_server_and_several(base, prefix, name):
    """The issue's false refusals: the order of rules no longer lets vllm.args.** catch them."""
    path = (*prefix, "args", name)
    severity, reason = rate(base, with_value(base, path, PLUMBING[name]))[".".join(path)]
    assert severity == "info" and "not how the model runs" in reason


@pytest.mark.parametrize("prefix", [("vllm",), ("vllm", "servers", "8000")])
@pytest.mark.parametrize("name, value", [("max_num_seqs", 128), ("tensor_parallel_size", 4), ("kv_cache_dtype", "fp8"),
                                         ("enable_prefix_caching", False), ("gpu_memory_utilization", 0.8)])
def test_arguments_that_change_the_engine_stay_invalidating(base, prefix, name, value):
    path = (*prefix, "args", name)
    assert rate(base, with_value(base, path, value))[".".join(path)][0] == "invalidating"


@pytest.mark.parametrize("section", [("env",), ("vllm", "env"), ("vllm", "servers", "8000", "env")])
@pytest.mark.parametrize("name, value, severity", [
    ("TORCHDYNAMO_DISABLE", "1", "invalidating"), ("TORCHINDUCTOR_MAX_AUTOTUNE", "1", "invalidating"),
    ("TRITON_PTXAS_PATH", "/opt/ptxas", "invalidating"), ("FLASHINFER_CUDA_ARCH_LIST", "9.0a", "warning"),
    ("LD_LIBRARY_PATH", "/opt/nccl-2.27/lib", "invalidating"), ("LD_PRELOAD", "libjemalloc.so.2", "invalidating"),
    ("NVSHMEM_DISABLE_P2P", "1", "invalidating"), ("CUBLASLT_WORKSPACE_SIZE", "1024", "invalidating"),
    ("KMP_AFFINITY", "compact", "invalidating"), ("OPENBLAS_NUM_THREADS", "4", "invalidating"),
    ("HF_HUB_OFFLINE", "1", "warning"), ("TRANSFORMERS_OFFLINE", "1", "warning"), ("MAX_JOBS", "32", "info"),
    ("TRITON_CACHE_DIR", "/scratch", "info"), ("TORCHINDUCTOR_COMPILE_THREADS", "1", "info"),
    ("NCCL_DEBUG", "TRACE", "warning"), ("VLLM_API_KEY", "<redacted>", "info"),
])
def test_environment_families(base, section, name, value, severity):
    path = (*section, name)
    assert rate(base, with_value(base, path, value))[".".join(path)][0] == severity


@pytest.mark.parametrize("mode", ["ecc", "mig"])
def test_a_pending_mode_is_a_warning_the_current_one_invalidates(h200, mode):
    uuid = next(iter(h200["gpu"]["devices"]))
    bus = h200["gpu"]["devices"][uuid]["pci_bus_id"]
    current = h200["gpu"]["devices"][uuid][f"{mode}_mode_current"]
    pending = rate(h200, with_value(h200, ("gpu", "devices", uuid, f"{mode}_mode_pending"), not current))
    severity, reason = pending[f'gpu.devices."{bus}".{mode}_mode_pending']
    assert severity == "warning" and "next GPU reset" in reason
    now = rate(h200, with_value(h200, ("gpu", "devices", uuid, f"{mode}_mode_current"), not current))
    assert now[f'gpu.devices."{bus}".{mode}_mode_current'][0] == "invalidating"


def test_a_wrapper_is_rated_and_the_command_text_is_context(base):
    launcher = rate(base, with_value(base, ("vllm", "launcher"), ["numactl", "--cpunodebind=0"]))
    assert launcher["vllm.launcher"][0] == "invalidating"
    argv = rate(base, with_value(base, ("vllm", "argv"), ["vllm", "serve", "m", "--port", "9"]))
    assert argv["vllm.argv"][0] == "info"


@pytest.mark.parametrize(("cap", "severity"), [("read", "invalidating"), ("write", "invalidating"),
                                               ("nvlink", "invalidating"), ("atomics", "warning")])
@pytest.mark.parametrize("status", ["not_supported", "disabled_by_regkey", "chipset_not_supported"])
def test_peer_access_lost_between_two_gpus_refuses_but_atomics_alone(h200, cap, severity, status):
    """Without peer access vLLM's custom all-reduce turns itself off (custom_all_reduce.py checks it) and NCCL goes
    through host memory: on a PCIe host the topology may stay the same, so this leaf is the one that says so."""
    path = ("gpu", "p2p", cap, "00000000:1B:00.0", "00000000:43:00.0")
    found = rate(with_value(h200, path, "ok"), with_value(h200, path, status))
    assert [rated for where, (rated, _why) in found.items() if where.startswith(f"gpu.p2p.{cap}.")] == [severity]


def _served(command: str, version: str = "0.12.0") -> dict:
    from hoststate.capture import SnapOptions, snap
    from tests.conftest import REPO

    return snap(SnapOptions(root=str(REPO / "fixtures" / "hosts" / "seed-baseline"), only=("vllm",),
                            vllm_cmd=command, vllm_version=version))


@pytest.mark.parametrize("wrapper", ["nohup", "time -p", "/usr/bin/time -f %e -o t.txt", "stdbuf -oL -eL",
                                     "timeout -k 5 3600", "exec -a server", "nohup timeout 1h"])
def test_a_wrapper_that_changes_nothing_is_not_a_launcher(wrapper):
    """nohup, time, stdbuf, timeout and exec change neither where nor how the server runs: the command's text
    (vllm.argv, info) records them; the same wrapper around numactl is still rated as numactl."""
    plain = _served("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2")
    wrapped = _served(f"{wrapper} vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2")
    assert "launcher" not in wrapped["vllm"] and wrapped["vllm"]["argv"][0] != "vllm"
    assert {f.severity for f in compare(plain, wrapped).findings if f.path.startswith("vllm")} <= {"info"}
    placed = _served(f"{wrapper} numactl --cpunodebind=0 vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2")
    assert placed["vllm"]["launcher"] == ["numactl", "--cpunodebind=0"]
    assert rate(plain, placed)["vllm.launcher"][0] == "invalidating"


SERVER = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2"


@pytest.mark.parametrize("pinned", ["-cc.cudagraph_mode=FULL_AND_PIECEWISE", "-cc.mode=3", "-O2",
                                    "--optimization-level 2",
                                    """--compilation-config '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'"""])
def test_pinning_what_vllm_resolves_anyway_is_a_spelling(pinned):
    """0.12.0 runs this server at O2 with FULL_AND_PIECEWISE graphs under VLLM_COMPILE (cudagraph.declare): pinning
    the mode hoststate reports, as its own advice says, must not refuse the baseline it was pinned against."""
    plain, spelled = _served(SERVER), _served(f"{SERVER} {pinned}")
    assert spelled["vllm"]["cudagraph"]["declared"] == plain["vllm"]["cudagraph"]["declared"] == "FULL_AND_PIECEWISE"
    assert spelled["vllm"]["args_resolved"]["same_as_unset"]
    assert {f.severity for f in compare(plain, spelled).findings if f.path.startswith("vllm")} <= {"info"}


@pytest.mark.parametrize("changed", ["-cc.cudagraph_mode=PIECEWISE", "-O1", "-cc.mode=0",
                                     """--compilation-config '{"cudagraph_mode": "FULL_AND_PIECEWISE", """
                                     """"max_cudagraph_capture_size": 64}'"""])
def test_a_graph_setting_that_moves_what_vllm_resolves_still_refuses(changed):
    """-O1 and a compilation mode move what vLLM resolves (-O3 does not in 0.12.0: its table is -O2's, see
    test_what_the_engine_turns_on_by_itself_is_its_default); a compilation_config with other keys than the modes
    is compared key by key."""
    found = compare(_served(SERVER), _served(f"{SERVER} {changed}")).findings
    assert "invalidating" in {f.severity for f in found if f.path.startswith("vllm.args")}


def test_a_narrower_pcie_link_is_a_warning_its_idle_generation_is_not(h200):
    """nvidia-smi(1): the current generation and width "may be reduced when the GPU is not in use". The generation
    is a reading (ignored); a narrower width is reviewed, not refused: it may be an idle GPU's power saving or a link
    that trained narrower, which halves host-to-GPU bandwidth (the reason says how to tell them apart)."""
    gpu = next(iter(h200["gpu"]["devices"]))
    width = ("gpu", "devices", gpu, "observed", "pcie_link_width")
    gen = ("gpu", "devices", gpu, "observed", "pcie_link_gen")
    for path, before, after, severity in ((width, 16, 8, "warning"), (gen, 5, 1, "ignore")):
        found = rate(with_value(h200, path, before), with_value(h200, path, after))
        assert [rated for where, (rated, _why) in found.items() if where.endswith(path[-1])] == [severity]


@pytest.mark.parametrize("spelled", ["--tokenizer meta-llama/Llama-3.1-8B-Instruct", "--revision main"])
def test_the_models_own_tokenizer_and_the_default_branch_are_spellings(spelled):
    """ModelConfig takes the model's tokenizer when none is given, and the Hub its default branch ("main")."""
    plain, spelled_out = _served(SERVER), _served(f"{SERVER} {spelled}")
    assert {f.severity for f in compare(plain, spelled_out).findings if f.path.startswith("vllm")} <= {"info"}
    other = spelled.replace("meta-llama/Llama-3.1-8B-Instruct", "hf-internal/other").replace("main", "v2")
    assert "invalidating" in {f.severity for f in compare(plain, _served(f"{SERVER} {other}")).findings}


@pytest.mark.parametrize(("flag", "value"), [("--max-parallel-loading-workers", "4"),
                                             ("--safetensors-load-strategy", "eager")])
def test_how_weights_are_read_at_start_up_is_info(flag, value):
    """Loading workers and the safetensors read strategy change start-up time, not the weights the GPUs run."""
    found = compare(_served(SERVER), _served(f"{SERVER} {flag} {value}")).findings
    rated = {f.path: f.severity for f in found if f.path.startswith("vllm.args")}
    assert rated == {f"vllm.args.{flag[2:].replace('-', '_')}": "info"}


@pytest.mark.parametrize("command", ["nohup env VLLM_ATTENTION_BACKEND=FLASHINFER {server}",
                                     "VLLM_ATTENTION_BACKEND=FLASHINFER time -p {server}",
                                     "env VLLM_ATTENTION_BACKEND=FLASHINFER stdbuf -oL {server}"])
def test_the_servers_environment_is_read_through_a_wrapper(command):
    """An assignment after nohup's env is the server's environment as much as one before it: it is compared."""
    wrapped = _served(command.format(server=SERVER))
    assert wrapped["vllm"]["env"]["VLLM_ATTENTION_BACKEND"] == "FLASHINFER" and "launcher" not in wrapped["vllm"]
    assert rate(_served(SERVER), wrapped)["vllm.env.VLLM_ATTENTION_BACKEND"][0] == "invalidating"


@pytest.mark.parametrize(("one", "other"), [("half", "float16"), ("float", "float32")])
def test_two_names_of_one_torch_dtype_are_a_spelling(one, other):
    """vLLM maps --dtype half and float16 to one torch dtype (_STR_DTYPE_TO_TORCH_DTYPE): args hold the one name,
    args_resolved.spelled says why; a dtype that differs still refuses."""
    a, b = _served(f"{SERVER} --dtype {one}"), _served(f"{SERVER} --dtype {other}")
    assert a["vllm"]["args"]["dtype"] == b["vllm"]["args"]["dtype"] == other
    assert a["vllm"]["args_resolved"]["spelled"]["dtype"].startswith(f"{one} is {other}")
    assert {f.severity for f in compare(a, b).findings if f.path.startswith("vllm")} <= {"info"}
    assert rate(a, _served(f"{SERVER} --dtype bfloat16"))["vllm.args.dtype"][0] == "invalidating"


@pytest.mark.parametrize("flag", ["--trust-request-chat-template", "--exclude-tools-when-tool-choice-none"])
def test_what_shapes_requests_prompts_is_a_warning(flag):
    """Both decide what a request's prompt holds (its own chat template; the tool definitions under tool_choice
    none), as --chat-template does: token counts may differ, the kernels do not."""
    assert rate(_served(SERVER), _served(f"{SERVER} {flag}"))[f"vllm.args.{flag[2:].replace('-', '_')}"][0] == \
        "warning"


def test_a_variable_the_servers_version_no_longer_reads_changes_nothing():
    """VLLM_USE_V1 is in vllm/envs.py of 0.10.2 and 0.11.0 only: on 0.12.0 it is recorded apart, with why, and
    setting it is info; on 0.11.0, which reads it, it is rated by what it does."""
    plain, given = _served(SERVER), _served(f"VLLM_USE_V1=1 {SERVER}")
    assert "VLLM_USE_V1" not in given["vllm"].get("env", {})
    assert given["vllm"]["env_same_as_unset"]["VLLM_USE_V1"]["value"] == "1"
    assert "0.11.0 is the last recorded version" in given["vllm"]["env_same_as_unset"]["VLLM_USE_V1"]["because"]
    assert {f.severity for f in compare(plain, given).findings if f.path.startswith("vllm")} <= {"info"}
    read = _served(f"VLLM_USE_V1=0 {SERVER}", "0.11.0")
    assert read["vllm"]["env"]["VLLM_USE_V1"] == "0" and "env_same_as_unset" not in read["vllm"]
    assert rate(_served(SERVER, "0.11.0"), read)["vllm.env.VLLM_USE_V1"][0] == "invalidating"


@pytest.mark.parametrize(("version", "dropped"), [("0.12.0", True), ("0.11.2", True), ("0.11.1", True),
                                                  ("0.11.0", False), ("0.10.1", False), ("0.34.0", False),
                                                  ("nightly", False), (None, False)])
def test_a_name_counts_as_dropped_only_inside_the_recorded_versions(version, dropped):
    """Between two recorded versions both must lack the name; outside the recorded range, or for a version not
    understood, nothing is said to be unread. A VLLM_* name no recorded version reads (a plugin's) never is."""
    from hoststate.collectors.vllm_release import same_as_unset

    found = same_as_unset({"VLLM_USE_V1": "1", "VLLM_MY_PLUGIN_KNOB": "1", "NCCL_ALGO": "Ring"}, version)
    assert set(found) == ({"VLLM_USE_V1"} if dropped else set())


PLAIN = "vllm serve meta-llama/Llama-3.1-8B-Instruct"

#: Pairs vLLM builds one engine from (vllm/ of the 0.11.0 and 0.12.0 wheels), on both versions, and pairs it does
#: not: each spelling is rated info, each real change still refuses.
ALIKE = [
    (PLAIN, f"{PLAIN} --load-format AUTO"),  # LoadConfig lower-cases it: the parser default
    (f"{PLAIN} --load-format SAFETENSORS", f"{PLAIN} --load-format safetensors"),
    (f"{PLAIN} --cuda-graph-sizes 1 2 4 8", f"{PLAIN} --cuda-graph-sizes 8 4 2 1"),  # sorted before capture
    (f"{PLAIN} -tp 2", f"{PLAIN} -tp 2 --swap-space 8"),  # the V1 engine allocates no swap blocks
    (PLAIN, f"{PLAIN} --max-lora-rank 32 --max-loras 4"),  # no LoRAConfig without --enable-lora
    (PLAIN, f"{PLAIN} --no-enable-lora"),
    (PLAIN, f"{PLAIN} --distributed-executor-backend uni"),  # what a world size of 1 resolves to
    (PLAIN, f"{PLAIN} --disable-custom-all-reduce"),  # no tensor-parallel group to all-reduce in
    (f"{PLAIN} --enforce-eager", f"{PLAIN} --enforce-eager --cuda-graph-sizes 1 2 4"),  # no graphs to capture
]
APART = [
    (f"{PLAIN} --enable-lora", f"{PLAIN} --enable-lora --max-lora-rank 32"),
    (f"{PLAIN} -tp 2", f"{PLAIN} -tp 2 --distributed-executor-backend uni"),
    (f"{PLAIN} -tp 2", f"{PLAIN} -tp 2 --disable-custom-all-reduce"),
    (f"{PLAIN} --cuda-graph-sizes 1 2 4 8", f"{PLAIN} --cuda-graph-sizes 1 2 4 16"),
    (PLAIN, f"{PLAIN} --load-format dummy"),
    (PLAIN, f"{PLAIN} --cuda-graph-sizes 1 2 4"),
    (f"{PLAIN} -cc.cudagraph_mode=FULL", f"{PLAIN} -cc.cudagraph_mode=PIECEWISE"),
]


@pytest.mark.parametrize("version", ["0.11.0", "0.12.0"])
@pytest.mark.parametrize(("one", "other"), ALIKE)
def test_what_vllm_resolves_alike_is_one_setting(version, one, other):
    found = compare(_served(one, version), _served(other, version)).findings
    assert {f.severity for f in found if f.path.startswith("vllm")} <= {"info"}, [(f.path, f.severity) for f in found]


@pytest.mark.parametrize("version", ["0.11.0", "0.12.0"])
@pytest.mark.parametrize(("one", "other"), APART)
def test_what_vllm_resolves_apart_still_refuses(version, one, other):
    found = compare(_served(one, version), _served(other, version)).findings
    assert "invalidating" in {f.severity for f in found if f.path.startswith("vllm.args")}


@pytest.mark.parametrize(("one", "other", "version"), [
    ("-cc.cudagraph_mode=FULL", "-cc.cudagraph_mode=full", "0.12.0"),  # upper-cased by CompilationConfig
    ("-O.cudagraph_mode=FULL", "-O.cudagraph_mode=full", "0.11.0"),
    ("--cudagraph-capture-sizes 1 2 4 8", "--cudagraph-capture-sizes 8 4 2 1", "0.12.0"),
    ("""-O '{"cudagraph_capture_sizes": [1, 2, 4, 8]}'""", """-O '{"cudagraph_capture_sizes": [8, 4, 2, 1]}'""",
     "0.11.0"),
    ("", "--worker-cls vllm.v1.worker.gpu_worker.Worker", "0.12.0"),  # what auto resolves to on CUDA
    ("--cuda-graph-sizes 1 2 4 8", "--cudagraph-capture-sizes 8 4 2 1", "0.12.0"),  # both set the cc key
    ("--cudagraph-capture-sizes 1 2 4 8", "-cc.cudagraph_capture_sizes=[1,2,4,8]", "0.12.0"),
    ("--max-cudagraph-capture-size 256", "-cc.max_cudagraph_capture_size=256", "0.12.0"),
    ("-O.full_cuda_graph=true", "-O.cudagraph_mode=FULL", "0.11.0"),  # the legacy flag only sets the mode
    ("-O.use_cudagraph=false", "-O.cudagraph_mode=NONE", "0.11.0"),
    ("-cc.pass_config.enable_noop=true", "-cc.pass_config.eliminate_noops=true", "0.12.0"),  # renamed in 0.12
    ("""-cc '{"mode": 3, "cudagraph_capture_sizes": [1, 2]}'""",
     """-cc '{"mode": "VLLM_COMPILE", "cudagraph_capture_sizes": [1, 2]}'""", "0.12.0"),  # a mode by name
])
def test_a_spelling_of_one_version_is_one_setting(one, other, version):
    a, b = _served(f"{PLAIN} {one}", version), _served(f"{PLAIN} {other}", version)
    assert {f.severity for f in compare(a, b).findings if f.path.startswith("vllm")} <= {"info"}
    assert any(x["vllm"]["args_resolved"].get(k) for x in (a, b) for k in ("spelled", "same_as_unset"))


def test_the_swap_space_counts_where_a_v0_engine_remains():
    """0.10.2 may still run the V0 engine, which swaps to CPU blocks of that size."""
    assert rate(_served(PLAIN, "0.10.2"), _served(f"{PLAIN} --swap-space 8", "0.10.2"))["vllm.args.swap_space"][0] \
        == "invalidating"


@pytest.mark.parametrize(("env", "version", "alike"), [
    ("VLLM_USE_DEEP_GEMM=1", "0.12.0", True),  # os.getenv("VLLM_USE_DEEP_GEMM", "1")
    ("VLLM_USE_DEEP_GEMM=0", "0.12.0", False),
    ("VLLM_USE_DEEP_GEMM=1", "0.10.2", False),  # its default there is "0": turning it on
    ("VLLM_FUSED_MOE_CHUNK_SIZE=16384", "0.12.0", True),
    ("VLLM_FUSED_MOE_CHUNK_SIZE=16384", "0.11.0", False),  # 32768 there
    ("VLLM_LOG_BATCHSIZE_INTERVAL=-1", "0.12.0", True),
    ("VLLM_ENABLE_V1_MULTIPROCESSING=1", "0.12.0", False),  # another file of vLLM writes it: set is not unset
])
def test_a_variable_at_the_default_its_version_reads_changes_nothing(env, version, alike):
    """The default comes from the version's own vllm/envs.py (scripts/vllm_envs.py), and only where that entry
    reads the variable alone and no other file of vLLM names it."""
    name = env.split("=")[0]
    plain, given = _served(SERVER, version), _served(f"{env} {SERVER}", version)
    severities = {f.severity for f in compare(plain, given).findings if f.path.startswith("vllm")}
    if alike:
        assert severities <= {"info"} and name in given["vllm"]["env_same_as_unset"]
    else:
        assert "invalidating" in severities and name in given["vllm"]["env"]


def test_the_shipped_variable_table_is_what_the_script_reads_from_the_wheels():
    """Every recorded version has names and defaults; a default is a string (the variable's unset reading)."""
    import json

    from tests.conftest import PACKAGE

    table = json.loads((PACKAGE / "data" / "vllm_env_names.json").read_text())
    assert list(table) == ["0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0"]
    for names in table.values():
        assert all(n == n.upper() and (d is None or isinstance(d, str)) for n, d in names.items())
    assert table["0.12.0"]["VLLM_USE_DEEP_GEMM"] == "1" and table["0.10.2"]["VLLM_USE_DEEP_GEMM"] == "0"


def test_the_length_vllm_derives_from_the_model_is_the_length_it_takes_unset(tmp_path):
    """A --max-model-len equal to what _get_and_verify_max_len derives from config.json (here the llama3 RoPE
    type, whose factor is not applied) is the engine vLLM builds without it; any other length still refuses."""
    import json

    from hoststate.capture import SnapOptions, snap

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 131072,
        "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16",
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}))

    def served(extra: str) -> dict:
        return snap(SnapOptions(only=("vllm",), vllm_cmd=f"vllm serve {tmp_path} {extra}", vllm_version="0.12.0"))

    plain, same = served(""), served("--max-model-len 131072")
    assert "max_model_len" in same["vllm"]["args_resolved"]["same_as_unset"]
    assert {f.severity for f in compare(plain, same).findings if f.path.startswith("vllm")} <= {"info"}
    assert rate(plain, served("--max-model-len 65536"))["vllm.args.max_model_len"][0] == "invalidating"


@pytest.mark.parametrize("rope", [{"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]},
                                  {"full_attention": {"rope_type": "yarn", "factor": 4.0}}])
def test_a_model_whose_unset_length_is_not_the_derived_one_keeps_its_length(tmp_path, rope):
    """Given no length, vLLM takes a LongRoPE model's original_max_position_embeddings (4096 here), not the derived
    131072 (_get_and_verify_max_len, 0.12 and 0.33); a RoPE table nested per layer type is not read for its scaling.
    Neither length given can be said to be the unset one."""
    import json

    from hoststate.capture import SnapOptions, snap

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
        "torch_dtype": "bfloat16", "rope_scaling": rope}))

    def served(extra: str) -> dict:
        return snap(SnapOptions(only=("vllm",), vllm_cmd=f"vllm serve {tmp_path} {extra}", vllm_version="0.12.0"))

    assert rate(served(""), served("--max-model-len 131072"))["vllm.args.max_model_len"][0] == "invalidating"


def test_the_uni_executor_is_not_the_default_once_data_parallel_counts():
    """0.33 picks the backend when the world size across data parallel is above 1 (mp), so uni beside
    --data-parallel-size 2 is another executor there."""
    dp = f"{PLAIN} --data-parallel-size 2"
    assert rate(_served(dp, "0.33.0"), _served(f"{dp} --distributed-executor-backend uni", "0.33.0"))[
        "vllm.args.distributed_executor_backend"][0] == "invalidating"


def test_the_tokenizer_mode_is_lower_cased_where_vllm_takes_any_string():
    """0.12 types it TokenizerMode | str and lower-cases it (ModelConfig); 0.11.0's parser has the Literal's choices
    and refuses capitals, as vLLM itself does."""
    assert {f.severity for f in compare(_served(f"{PLAIN} --tokenizer-mode slow"),
                                        _served(f"{PLAIN} --tokenizer-mode SLOW")).findings
            if f.path.startswith("vllm")} <= {"info"}
    refused = _served(f"{PLAIN} --tokenizer-mode AUTO", "0.11.0")
    assert "--tokenizer-mode: invalid choice: 'AUTO'" in refused["vllm"]["cudagraph"]["refused"]


def _wq(snap: dict, name: str) -> dict:
    return snap["dsa"]["devices"]["dsa0"]["wqs"][name]


@pytest.mark.parametrize("field, value", [("priority", 5), ("mode", "dedicated"), ("size", 16), ("threshold", 8),
                                          ("max_transfer_size", 4096), ("block_on_fault", 0), ("ats_disable", 1)])
def test_a_setting_of_a_queue_disabled_on_both_sides_is_not_in_effect(base, field, value):
    """idxd takes a WQ's settings only while it is disabled and applies them when it is enabled
    (drivers/dma/idxd/sysfs.c: each store refuses an enabled WQ), so on a WQ disabled on both sides they are staged
    for the next enable, a warning to review; the same change on an enabled WQ, or with the WQ enabled on the other
    side, still refuses."""
    assert _wq(base, "wq0.0")["state"] == "disabled"
    path = ("dsa", "devices", "dsa0", "wqs", "wq0.0", field)
    shown = 'dsa.devices.dsa0.wqs."wq0.0".' + field
    severity, reason = rate(base, with_value(base, path, value))[shown]
    assert severity == "warning" and reason.startswith("Not in effect on either side (state is disabled on both)")
    enabled = with_value(base, ("dsa", "devices", "dsa0", "wqs", "wq0.0", "state"), "enabled")
    assert rate(enabled, with_value(enabled, path, value))[shown][0] == "invalidating"
    assert rate(base, with_value(enabled, path, value))[shown][0] == "invalidating"


def test_a_queue_whose_state_was_not_read_keeps_its_settings_rated(base):
    after = with_value(base, ("dsa", "devices", "dsa0", "wqs", "wq0.0", "priority"), 5)
    del after["dsa"]["devices"]["dsa0"]["wqs"]["wq0.0"]["state"]
    after["collectors"]["dsa"] = {**after["collectors"]["dsa"], "status": "partial",
                                  "unreadable": {"devices/dsa0/wqs/wq0.0/state": "EACCES"}}
    assert rate(base, after)['dsa.devices.dsa0.wqs."wq0.0".priority'][0] == "invalidating"


def test_a_malformed_inert_condition_is_refused():
    from hoststate.errors import PolicyError
    from hoststate.policy import parse_rules

    for bad in ("state", "=disabled", "state=", "state=a||b", "a.b=c", "state=a=b", 3):
        with pytest.raises(PolicyError, match="inert_if"):
            parse_rules({"rule": [{"path": "x.*.y", "severity": "warning", "inert_if": bad,
                                   "when_inert": "info"}]}, "p.toml")
    with pytest.raises(PolicyError, match="go together"):
        parse_rules({"rule": [{"path": "x.*.y", "severity": "warning", "inert_if": "state=off"}]}, "p.toml")


def _gpu(snap: dict) -> tuple[str, str]:
    uuid = next(iter(snap["gpu"]["devices"]))
    return uuid, f'gpu.devices."{snap["gpu"]["devices"][uuid]["pci_bus_id"]}".'


@pytest.mark.parametrize("field", ["power_default_limit_mw", "power_min_limit_mw", "power_max_limit_mw"])
def test_a_power_limit_bound_is_rated_by_the_limit_in_force(h200, field):
    """NVML's enforced limit is the one the driver applies after every limiter; the default applies after a
    reset and the constraints bound what may be set."""
    uuid, at = _gpu(h200)
    after = with_value(h200, ("gpu", "devices", uuid, field), 500000)
    severity, reason = rate(h200, after)[at + field]
    assert severity == "info" and "power_enforced_limit_mw" in reason
    both = with_value(after, ("gpu", "devices", uuid, "power_enforced_limit_mw"), 500000)
    found = rate(h200, both)
    assert found[at + field][0] == "warning" and found[at + "power_enforced_limit_mw"][0] == "invalidating"


def test_the_gsp_default_is_pending_what_runs_is_the_current_mode(h200):
    uuid, at = _gpu(h200)
    after = with_value(h200, ("gpu", "devices", uuid, "gsp_firmware_default_mode"), False)
    assert rate(h200, after)[at + "gsp_firmware_default_mode"][0] == "info"
    both = with_value(after, ("gpu", "devices", uuid, "gsp_firmware_mode"), False)
    found = rate(h200, both)
    assert found[at + "gsp_firmware_default_mode"][0] == "warning"
    assert found[at + "gsp_firmware_mode"][0] == "invalidating"


def test_a_clock_lock_shows_as_a_setting_not_as_a_volatile_reading(monkeypatch, tmp_path):
    """nvidia-smi -lgc has no NVML getter; the applications-clocks bit of the clock-event mask is how it shows.
    Collected from a replay whose mask has the bit, against the real H200's idle mask."""
    import json

    from hoststate.capture import gpu_section
    from hoststate.nvml import NVML_REPLAY_ENV

    real = json.loads((FIXTURES / "nvml" / "h200.json").read_text())

    def snap(mask: int) -> dict:
        doc = copy.deepcopy(real)
        for device in doc["devices"]:
            device["calls"]["nvmlDeviceGetCurrentClocksEventReasons"] = mask
        path = tmp_path / f"{mask}.json"
        path.write_text(json.dumps(doc))
        monkeypatch.setenv(NVML_REPLAY_ENV, str(path))
        section = gpu_section()
        return {"hoststate": {}, "collectors": {"gpu": {"status": section["status"]}}, "gpu": section["data"]}

    idle, locked = snap(0x1), snap(0x1 | 0x2)
    _uuid, at = _gpu(idle)
    assert all(d["clocks_held_by_setting"] == [] for d in idle["gpu"]["devices"].values())
    severity, reason = rate(idle, locked)[at + "clocks_held_by_setting"]
    assert severity == "warning" and "-lgc" in reason
    assert rate(idle, snap(0x1 | 0x4))[at + "observed.clocks_event_reasons"][0] == "ignore"  # a power cap: an event


def test_a_huge_page_pool_is_rated_alike_on_the_boot_line_and_at_run_time(base):
    """hugepages= allocates the same persistent pool as nr_hugepages (hugetlbpage.rst), which only hugetlbfs and
    MAP_HUGETLB users take: a warning either way; transparent huge pages, which every process gets, refuse."""
    params = ("system", "kernel", "params")
    boot = rate(base, with_value(base, (*params, "hugepages"), "1024"))
    pool = rate(base, with_value(base, ("system", "hugepages", "2048kB"), 1024))
    assert boot["system.kernel.params.hugepages"][0] == pool["system.hugepages.2048kB"][0] == "warning"
    always = with_value(with_value(base, (*params, "transparent_hugepage"), "always"), ("system", "thp", "enabled"),
                        "always")
    thp = rate(base, always)
    assert thp["system.kernel.params.transparent_hugepage"][0] == thp["system.thp.enabled"][0] == "invalidating"


def _system(root) -> dict:
    from hoststate.capture import collect
    from hoststate.collectors import Context

    return collect(Context(root=str(root)), ("system",))


def test_the_mitigations_in_force_are_read_and_a_change_refuses(tmp_path):
    """What mitigations= and the per-flaw parameters resolve to on this CPU and microcode is recorded from sysfs
    (vulnerabilities/*): a microcode update or boot line that changes a mitigation in force refuses, and the boot
    parameter itself is still rated on its own. A tree without the directory records nothing and misses nothing."""
    import shutil

    from tests.conftest import REPO

    def tree(name: str, cmdline_extra: str, spectre_v2: str):
        root = tmp_path / name
        shutil.copytree(REPO / "fixtures" / "hosts" / "seed-baseline", root, symlinks=True)
        cmdline = root / "proc" / "cmdline"
        cmdline.write_text(cmdline.read_text().strip() + cmdline_extra + "\n")
        vulns = root / "sys" / "devices" / "system" / "cpu" / "vulnerabilities"
        vulns.mkdir()
        (vulns / "mds").write_text("Not affected\n")
        (vulns / "spectre_v2").write_text(spectre_v2 + "\n")
        return _system(root)

    mitigated = "Mitigation: Enhanced / Automatic IBRS; IBPB: conditional; RSB filling"
    base = tree("base", "", mitigated)
    assert base["system"]["cpu"]["vulnerabilities"] == {"mds": "Not affected", "spectre_v2": mitigated}
    off = rate(base, tree("off", " mitigations=off", "Vulnerable; IBPB: disabled"))
    assert off["system.kernel.params.mitigations"][0] == "invalidating"
    assert off["system.cpu.vulnerabilities.spectre_v2"][0] == "invalidating"
    microcode = {k: v for k, v in rate(base, tree("microcode", "", "Mitigation: Retpolines")).items()
                 if k.startswith("system")}  # the other collectors are skipped on both sides (info)
    assert list(microcode) == ["system.cpu.vulnerabilities.spectre_v2"]
    assert microcode["system.cpu.vulnerabilities.spectre_v2"][0] == "invalidating"
    without = _system(REPO / "fixtures" / "hosts" / "seed-baseline")
    assert "vulnerabilities" not in without["system"]["cpu"]
    assert not without["collectors"]["system"].get("unreadable")


def _llama(tmp_path, **more) -> str:
    import json

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 131072,
              "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16", **more}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return f"vllm serve {tmp_path}"


def _resolved(command: str, version: str) -> dict:
    from hoststate.capture import SnapOptions, snap

    return snap(SnapOptions(only=("vllm",), vllm_cmd=command, vllm_version=version))


@pytest.mark.parametrize(("version", "extra", "alike"), [
    ("0.11.0", "--enable-chunked-prefill", True), ("0.12.0", "--enable-chunked-prefill", True),
    ("0.11.0", "--no-enable-chunked-prefill", True),  # 0.11.0 turns it back on for a generative model
    ("0.12.0", "--no-enable-chunked-prefill", False), ("0.11.1", "--no-enable-chunked-prefill", False),
    ("0.10.2", "--enable-chunked-prefill", True),  # _set_default_args_v1 turns it on whatever is given on V1
    ("0.10.2", "--no-enable-chunked-prefill", True),
    ("0.33.0", "--enable-chunked-prefill", True), ("0.33.0", "--no-enable-chunked-prefill", False),
    ("0.12.0", "-O3", True), ("0.11.0", "-O3", True), ("0.12.0", "-O1", False),
    ("0.33.0", "-O3", True), ("0.33.0", "-O1", False), ("0.33.0", "-O0", False),
])
def test_what_the_engine_turns_on_by_itself_is_its_default(tmp_path, version, extra, alike):
    """A generative decoder model gets chunked prefill when the flag is not given (EngineArgs of 0.11.0 and
    0.12.0; 0.11.0 whatever is given), and 0.12.0 and 0.33.0 build -O3 as -O2 (vllm/config/vllm.py:
    OPTIMIZATION_LEVEL_03 is OPTIMIZATION_LEVEL_02's table, and VllmConfig.__post_init__ reads the level otherwise
    only as ``> O0``), both checked against vLLM's own engine configuration built from the two command lines."""
    plain = _llama(tmp_path)
    one, other = _resolved(plain, version), _resolved(f"{plain} {extra}", version)
    severities = {f.severity for f in compare(one, other).findings if f.path.startswith("vllm")}
    assert (severities <= {"info"}) is alike, (severities, other["vllm"].get("args_resolved"))


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0"])
def test_prefix_caching_is_what_vllm_takes_unset_for_a_generative_model(tmp_path, version):
    """The parser default of --enable-prefix-caching is None and vLLM turns it on for a generative model that is
    neither hybrid nor attention-free (vllm/engine/arg_utils.py: 0.10.2 _set_default_args_v1 on the V1 engine,
    0.11.0 _set_default_args, 0.11.1 get_chunked_prefill_prefix_caching_defaults, 0.12.0 and 0.33.0
    _set_default_chunked_prefill_and_prefix_caching_args with ModelConfig.is_prefix_caching_supported): spelling it
    out is the same server, and --no-enable-prefix-caching, which turns it off, still refuses."""
    plain = _llama(tmp_path)
    one, on = _resolved(plain, version), _resolved(f"{plain} --enable-prefix-caching", version)
    assert "EngineArgs." in on["vllm"]["args_resolved"]["same_as_unset"]["enable_prefix_caching"]
    assert {f.severity for f in compare(one, on).findings if f.path.startswith("vllm")} <= {"info"}
    off = _resolved(f"{plain} --no-enable-prefix-caching", version)
    assert rate(one, off)["vllm.args.enable_prefix_caching"][0] == "invalidating"


@pytest.mark.parametrize(("version", "prefix", "config", "extra"), [
    ("0.12.0", "", {"architectures": ["JambaForCausalLM"], "model_type": "jamba"}, ""),  # hybrid: off by default
    ("0.11.1", "", {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next"}, ""),
    ("0.12.0", "", {"architectures": ["MambaForCausalLM"], "model_type": "mamba"}, ""),  # attention-free
    ("0.12.0", "", {"architectures": []}, ""),  # no architecture named: not known to be a decoder model
    ("0.12.0", "", {}, "--runner pooling"),
    ("0.10.1", "", {}, ""),  # a version whose code was not read
    ("0.10.2", "VLLM_USE_V1=0 ", {}, ""),  # the V0 engine keeps what is given (_set_default_args_v0)
    ("0.10.2", "", {}, "--enable-prompt-embeds"),  # V0 fallback (_is_v1_supported_oracle)
    ("0.10.2", "", {"architectures": ["MotifForCausalLM"], "model_type": "motif"}, ""),  # SupportsV0Only
    ("0.10.2", "", {}, "-pp 2 --distributed-executor-backend uni"),  # V0 fallback for pipeline parallelism
])
def test_prefix_and_chunked_prefill_are_compared_as_given_where_vllms_default_is_not_known(tmp_path, version, prefix,
                                                                                          config, extra):
    """A hybrid or attention-free model (is_prefix_caching_supported: attn_type "hybrid"/"attention_free"; 0.11.1:
    ``not is_hybrid``), a model not known to be a generative decoder, a version whose code was not read, or 0.10.2
    where the V0 engine may run (it sets neither default): --enable-prefix-caching is compared as given, and on
    0.10.2 chunked prefill too."""
    plain = f"{prefix}{_llama(tmp_path, **config)} {extra}".strip()
    one = _resolved(plain, version)
    for flag, dest in (("--enable-prefix-caching", "enable_prefix_caching"),
                       ("--enable-chunked-prefill", "enable_chunked_prefill")):
        if version != "0.10.2" and dest == "enable_chunked_prefill":
            continue  # chunked prefill's default does not depend on the model being hybrid
        other = _resolved(f"{plain} {flag}", version)
        assert other["vllm"]["args"][dest] is True, other["vllm"].get("args_resolved")
        assert rate(one, other)[f"vllm.args.{dest}"][0] == "invalidating"


@pytest.mark.parametrize(("version", "config", "extra", "alike"), [
    ("0.10.2", {}, "--block-size 16", True), ("0.11.0", {}, "--block-size 16", True),
    ("0.11.1", {}, "--block-size 16", True), ("0.12.0", {}, "--block-size 16", True),
    ("0.12.0", {}, "--block-size 32", False),
    ("0.33.0", {}, "--block-size 16", False),  # not read: 0.33 records whether it was given
    ("0.12.0", {"kv_lora_rank": 512, "model_type": "deepseek_v3"}, "--block-size 16", False),  # MLA sizes its own
    ("0.12.0", {"architectures": ["JambaForCausalLM"], "model_type": "jamba"}, "--block-size 16", False),  # hybrid
])
def test_the_block_size_cuda_takes_unset_is_its_default(tmp_path, version, config, extra, alike):
    """CudaPlatform.check_and_update_config turns an unset block size into 16 (vllm/platforms/cuda.py of 0.10.2-0.12.0)
    before MLA backends force theirs; HybridAttentionMambaModelConfig sizes a hybrid model's. So --block-size 16 is
    the unset server for a model known to have neither; another size, an MLA or hybrid model, or 0.33 (whose
    CacheConfig records user_specified_block_size) are compared as given."""
    plain = _llama(tmp_path, **config)
    one, other = _resolved(plain, version), _resolved(f"{plain} {extra}", version)
    severities = {f.severity for f in compare(one, other).findings if f.path.startswith("vllm")}
    assert (severities <= {"info"}) is alike, (severities, other["vllm"].get("args_resolved"))
    assert ("block_size" in other["vllm"]["args"]) is not alike


def test_the_block_size_of_a_model_not_read_is_compared_as_given():
    one, other = _served(PLAIN), _served(f"{PLAIN} --block-size 16")
    assert rate(one, other)["vllm.args.block_size"][0] == "invalidating"


@pytest.mark.parametrize(("version", "base", "extra", "alike"), [
    ("0.12.0", "-tp 2", "--distributed-executor-backend mp", True),
    ("0.11.1", "-tp 2", "--distributed-executor-backend mp", True),
    ("0.12.0", "-pp 2", "--distributed-executor-backend mp", True),
    ("0.12.0", "-tp 8", "--distributed-executor-backend mp", True),  # all 8 GPUs of the host
    ("0.12.0", "-tp 16", "--distributed-executor-backend mp", False),  # more than the host has: not mp unset
    ("0.12.0", "-tp 2", "--distributed-executor-backend ray", False),
    ("0.12.0", "", "--distributed-executor-backend mp", False),  # world size 1: uni
    ("0.12.0", "-tp 2 -dp 2 --data-parallel-backend ray", "--distributed-executor-backend mp", False),  # ray
    ("0.33.0", "-tp 2", "--distributed-executor-backend mp", False),  # not read
    ("0.11.0", "-tp 2", "--distributed-executor-backend mp", False),
])
def test_the_mp_executor_is_what_vllm_picks_for_several_gpus(tmp_path, monkeypatch, version, base, extra, alike):
    """ParallelConfig.__post_init__ (vllm/config/parallel.py of 0.11.1 and 0.12.0) takes mp for a world size above 1
    that fits the host's GPUs (8, the HGX replay) when no backend is given, unless data parallel uses Ray. The unset
    side alone may depend on the GPUs vLLM sees (declared_assumes, a warning): the arguments themselves are the same
    server. Without the host's GPUs read, mp is compared as given."""
    from hoststate.capture import SnapOptions, snap

    monkeypatch.setenv("HOSTSTATE_NVML_REPLAY", str(FIXTURES / "nvml" / "hgx-h100-8.json"))
    plain = f"{_llama(tmp_path)} {base}".strip()

    def on_gpus(command: str) -> dict:
        return snap(SnapOptions(only=("gpu", "vllm"), vllm_cmd=command, vllm_version=version))

    one, other = on_gpus(plain), on_gpus(f"{plain} {extra}")
    if alike:
        unknown = rate(_resolved(plain, version), _resolved(f"{plain} {extra}", version))
        assert unknown["vllm.args.distributed_executor_backend"][0] == "invalidating"
    found = rate(one, other)
    assert ("vllm.args.distributed_executor_backend" not in found) is alike, found
    if alike:
        assert "parallel.py" in other["vllm"]["args_resolved"]["same_as_unset"]["distributed_executor_backend"]
        assert all(severity != "invalidating" for severity, _why in found.values()), found
    else:
        assert found["vllm.args.distributed_executor_backend"][0] == "invalidating"


def test_the_checkpoints_own_fp8_is_what_vllm_takes_unset(tmp_path):
    """ModelConfig._verify_quantization takes the checkpoint's quant_method when none is given; fp8 has no
    override to another method (AWQ and GPTQ checkpoints get Marlin kernels unless one is named)."""
    plain = _llama(tmp_path, quantization_config={"quant_method": "fp8"})
    one, other = _resolved(plain, "0.12.0"), _resolved(f"{plain} --quantization fp8", "0.12.0")
    assert "quantization" in other["vllm"]["args_resolved"]["same_as_unset"]
    assert {f.severity for f in compare(one, other).findings if f.path.startswith("vllm")} <= {"info"}


@pytest.mark.parametrize(("option", "value", "read"), [("max_num_seqs", "1k", False), ("port", "8k", False),
                                                       ("max_num_batched_tokens", "8k", True),
                                                       ("max_num_batched_tokens", "1T", False)])
def test_only_vllms_human_readable_options_take_a_suffix(option, value, read):
    """EngineArgs.get_kwargs gives human_readable_int to max_num_batched_tokens and kv_cache_memory_bytes only
    (and it has no T); argparse refuses ``--max-num-seqs 1k``, and so does hoststate's reading of the line."""
    snap = _served(f"{PLAIN} --{option.replace('_', '-')} {value}")
    assert (option in snap["vllm"]["args"]) is read, snap["vllm"].get("args_error")


@pytest.mark.parametrize(("version", "gpu", "base", "extra", "alike"), [
    ("0.12.0", None, "", "--max-num-seqs 1024", True), ("0.12.0", None, "", "--max-num-batched-tokens 8192", True),
    ("0.12.0", None, "", "--max-num-seqs 1024 --max-num-batched-tokens 8K", True),  # K is 1024 (human_readable_int)
    ("0.12.0", None, "", "--max-num-batched-tokens 8k", False),  # k is 1000
    ("0.11.1", None, "", "--max-num-seqs 1024", True),
    ("0.11.0", None, "", "--max-num-batched-tokens 8192", False),  # its V0 engine sizes otherwise: not resolved
    ("0.12.0", None, "", "--max-num-seqs 256", False), ("0.12.0", None, "", "--max-num-batched-tokens 2048", False),
    ("0.12.0", "NVIDIA A100-SXM4-80GB", "", "--max-num-seqs 256", True),  # an A100 is never "large"
    ("0.12.0", "NVIDIA A100-SXM4-80GB", "", "--max-num-seqs 1024", False),
    ("0.12.0", None, "--max-num-batched-tokens 512", "--max-num-seqs 1024", False),  # unset: min(1024, 512)
    ("0.12.0", None, "--max-model-len 4", "--max-num-batched-tokens 8192", False),  # unset: min(1024 x 4, 8192)
    ("0.12.0", None, "--max-model-len 4", "--max-num-seqs 1024", True),  # 1024 either way, 4096 tokens either way
    ("0.12.0", None, "--no-enable-chunked-prefill", "--max-num-batched-tokens 8192", False),  # max(131072, 8192)
    ("0.10.2", None, "", "--max-num-seqs 1024", False),  # may fall back to V0: not read from its code here
    # 0.33.0 (get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args of its arg_utils.py): the same
    # sizes below 160 GiB, the unset ones doubled under --performance-mode throughput, batched DP MoE not read here
    ("0.33.0", None, "", "--max-num-seqs 1024", True), ("0.33.0", None, "", "--max-num-batched-tokens 8192", True),
    ("0.33.0", None, "", "--max-num-seqs 512", False),
    ("0.33.0", "NVIDIA A100-SXM4-80GB", "", "--max-num-seqs 256 --max-num-batched-tokens 2048", True),
    ("0.33.0", None, "--performance-mode throughput", "--max-num-seqs 2048 --max-num-batched-tokens 16384", True),
    ("0.33.0", None, "--performance-mode throughput", "--max-num-seqs 1024", False),
    ("0.33.0", None, "--no-enable-chunked-prefill", "--max-num-batched-tokens 8192", False),  # max(131072, 8192)
    ("0.33.0", None, "--enable-expert-parallel -dp 2", "--max-num-batched-tokens 8192", False),
])
def test_batch_sizes_at_what_the_server_takes_on_these_gpus_are_its_default(tmp_path, version, gpu, base, extra,
                                                                             alike):
    """vLLM's OpenAI server takes 1024 sequences and 8192 batched tokens on a GPU of 70 GiB or more that is not an
    A100, 256 and 2048 on any other, clamped by each other and the model length (vllm/engine/arg_utils.py:
    get_batch_defaults and _set_default_max_num_seqs_and_batched_tokens_args of 0.11.1-0.12.0 and 0.33.0, which adds
    a 160 GiB tier and doubles the unset sizes under --performance-mode throughput): spelling that out
    is the same server; another value, another GPU or a clamp that bites is not, and a version whose code was not
    read (or whose V0 engine sizes otherwise) is compared as given."""
    plain = f"{_llama(tmp_path)} {base}".strip()
    one, other = _on_gpus(plain, version, gpu), _on_gpus(f"{plain} {extra}", version, gpu)
    assert one["collectors"]["gpu"]["status"] == "ok" and one["gpu"]["count"] == 1
    assert [d["name"] for d in one["gpu"]["devices"].values()] == [gpu or "NVIDIA H200"]
    severities = {f.severity for f in compare(one, other).findings if f.path.startswith("vllm")}
    assert (severities <= {"info"}) is alike, (severities, other["vllm"].get("args_resolved"))
    if alike:
        why = other["vllm"]["args_resolved"]["same_as_unset"]
        assert all("get_batch_defaults" in why[d] for d in ("max_num_seqs", "max_num_batched_tokens") if d in why)


def test_batch_sizes_are_not_resolved_where_the_gpu_vllm_sees_is_not_known(tmp_path):
    """MIG (vLLM sees an instance), no GPU section, or a model not known to be a generative decoder: the size is
    compared as given."""
    plain = _llama(tmp_path)
    mig = _on_gpus(f"{plain} --max-num-seqs 1024", "0.12.0", mig=True)
    assert mig["vllm"]["args"]["max_num_seqs"] == 1024
    alone = _resolved(f"{plain} --max-num-seqs 1024", "0.12.0")  # the vllm section only: no GPUs read
    assert alone["vllm"]["args"]["max_num_seqs"] == 1024
    unknown = _on_gpus("vllm serve some-org/not-cached-model --max-num-seqs 1024", "0.12.0")
    assert unknown["vllm"]["args"]["max_num_seqs"] == 1024


@pytest.mark.parametrize("clock", ["sm", "graphics", "mem"])
def test_a_default_applications_clock_is_rated_by_the_clocks_in_force(h200, clock):
    """NVML: the default applications clock is the one used after a reboot or driver reload (constant per board),
    the applications clock is the one in force; like the default power limit, a changed default with the same
    clocks in force changes nothing that runs now."""
    uuid, at = _gpu(h200)
    field = f"clocks_default_applications_{clock}_mhz"
    after = with_value(h200, ("gpu", "devices", uuid, field), 1755)
    severity, reason = rate(h200, after)[at + field]
    assert severity == "info" and "clocks_applications_" in reason
    both = with_value(after, ("gpu", "devices", uuid, f"clocks_applications_{clock}_mhz"), 1755)
    found = rate(h200, both)
    assert found[at + field][0] == "warning"
    assert found[at + f"clocks_applications_{clock}_mhz"][0] == "invalidating"


def test_0330_sizes_batches_by_a_160_gib_tier():
    """0.33.0's get_batch_defaults: 160 GiB or more takes (1024, 16384) for the OpenAI server; a GB10 (capability
    12.1, not recorded here) is not sized; 0.12.0 has no such tier."""
    from hoststate.collectors.vllm.model import facts_from_config
    from hoststate.collectors.vllm.sizes import HUGE, batch_sizes, large_gpu
    from hoststate.collectors.vllm.versions import rules_for
    from tests.vllm_lines import CONFIG

    b200 = [("NVIDIA B200", 180 * 2**30)]
    assert large_gpu(b200, tiered=True) == HUGE and large_gpu(b200) is True
    assert large_gpu([("NVIDIA GB10", 120 * 2**30)], tiered=True) is None
    facts = facts_from_config(CONFIG)
    assert batch_sizes({}, facts, rules_for("0.33.0")[0], HUGE) == (1024, 16384)
    assert batch_sizes({}, facts, rules_for("0.12.0")[0], large_gpu(b200)) == (1024, 8192)
