"""The system collector on captured-style host trees, through the root prefix, and on this machine."""

from __future__ import annotations

import errno
import os

import pytest

from hoststate.collectors import Context
from hoststate.collectors.system import (
    bracketed,
    collect,
    format_cpulist,
    group_by_value,
    parse_cmdline,
    parse_cpuinfo,
    parse_cpulist,
    parse_meminfo,
    parse_os_release,
)
from tests.conftest import HOSTS
from tests.faults import inject

EXPECTED = {
    "xeon-2s": {
        ("kernel", "release"): "5.15.0-131-generic",
        ("kernel", "params", "intel_iommu"): "on,sm_on",
        ("os", "id"): "ubuntu",
        ("os", "version_id"): "22.04",
        ("cpu", "vendor"): "GenuineIntel",
        ("cpu", "model_name"): "INTEL(R) XEON(R) PLATINUM 8570",
        ("cpu", "family"): 6,
        ("cpu", "model"): 207,
        ("cpu", "stepping"): 2,
        ("cpu", "microcode"): "0x21000283",
        ("cpu", "sockets"): 2,
        ("cpu", "cores"): 112,
        ("cpu", "threads"): 224,
        ("cpu", "smt_control"): "on",
        ("cpu", "smt_active"): True,
        ("cpufreq", "driver"): {"0-223": "intel_pstate"},
        ("cpufreq", "governor"): {"0-223": "performance"},
        ("cpufreq", "scaling_min_khz"): {"0-223": 800000},
        ("cpufreq", "scaling_max_khz"): {"0-223": 4000000},
        ("cpufreq", "no_turbo"): 0,
        ("cpufreq", "intel_pstate_status"): "active",
        ("cpuidle", "driver"): "intel_idle",
        # C6 disabled at run time on CPUs 0-111 of 224 (fixtures/gen_system.py): a mixed state, visible as a count
        ("cpuidle", "disabled"): {"POLL": 0, "C1": 0, "C1E": 0, "C6": 112},
        ("numa", "nodes"): 2,
        ("numa", "cpus"): {"node0": "0-55,112-167", "node1": "56-111,168-223"},
        ("numa", "balancing"): 0,
        ("memory", "total_bytes"): 2113407448 * 1024,
        ("thp", "enabled"): "madvise",
        ("thp", "defrag"): "madvise",
        ("hugepages", "2048kB"): 0,
        ("hugepages", "1048576kB"): 0,
        ("iommu", "units"): 4,
        ("iommu", "intel_iommu"): "on,sm_on",
        ("iommu", "iommu"): "pt",
    },
    "epyc-amd": {
        ("cpu", "vendor"): "AuthenticAMD",
        ("cpu", "sockets"): 1,
        ("cpu", "cores"): 96,
        ("cpu", "threads"): 192,
        ("cpufreq", "driver"): {"0-191": "amd-pstate-epp"},
        ("cpufreq", "governor"): {"0-95": "performance", "96-191": "powersave"},
        ("cpufreq", "energy_performance_preference"): {"0-95": "performance", "96-191": "balance_performance"},
        ("cpufreq", "boost"): 1,
        ("cpufreq", "amd_pstate_status"): "active",
        ("cpuidle", "disabled"): {"POLL": 0, "C1": 0, "C2": 0},
        ("numa", "balancing"): 1,
        ("thp", "enabled"): "always",
        ("hugepages", "2048kB"): 1024,
        ("iommu", "amd_iommu"): "on",
        ("kernel", "params", "amd_pstate"): "active",
    },
    "vm-nocpufreq": {
        ("kernel", "release"): "6.1.0-28-cloud-amd64",
        ("os", "id"): "debian",
        ("cpu", "threads"): 8,
        ("cpu", "cores"): 8,
        ("cpu", "smt_control"): "notsupported",
        ("cpu", "smt_active"): False,
        ("cpuidle", "driver"): "haltpoll",
        ("cpuidle", "disabled"): {"POLL": 0, "haltpoll idle": 0},
        ("iommu", "units"): 0,
    },
}


def lookup(data: dict, path: tuple[str, ...]):
    for key in path:
        data = data[key]
    return data


@pytest.mark.parametrize("host", sorted(EXPECTED))
def test_fixture_tree_values(host: str) -> None:
    section = collect(Context(root=str(HOSTS / host)))
    for path, expected in EXPECTED[host].items():
        assert lookup(section.data, path) == expected, path


def test_intel_host_reads_everything() -> None:
    section = collect(Context(root=str(HOSTS / "xeon-2s")))
    assert section.status == "ok"
    assert section.unreadable == {}


def test_vm_without_cpufreq_records_the_absence_not_a_guess() -> None:
    section = collect(Context(root=str(HOSTS / "vm-nocpufreq")))
    assert section.data["cpufreq"] == {"absent": True}  # knowledge, recorded as a value
    assert section.unreadable == {}
    assert section.status == "ok"
    # no turbo or boost value is invented for a host that has no cpufreq
    assert "no_turbo" not in str(section.data) and "boost" not in str(section.data)


def _copy_tree(tmp_path, host: str):
    import shutil

    root = tmp_path / host
    shutil.copytree(HOSTS / host, root, symlinks=True)
    return root


def test_kernel_without_numa_thp_or_iommu_is_ok_with_the_absence_recorded(tmp_path) -> None:
    import shutil

    root = _copy_tree(tmp_path, "xeon-2s")
    shutil.rmtree(root / "sys/devices/system/node")
    (root / "proc/sys/kernel/numa_balancing").unlink()
    shutil.rmtree(root / "sys/kernel/mm/transparent_hugepage")
    shutil.rmtree(root / "sys/class/iommu")
    section = collect(Context(root=str(root)))
    assert section.status == "ok", section.unreadable
    assert section.data["numa"] == {"absent": True}
    assert section.data["thp"] == {"absent": True}
    assert section.data["iommu"]["units"] == 0


def test_an_unreadable_cpufreq_directory_is_not_taken_for_absent(tmp_path) -> None:
    root = _copy_tree(tmp_path, "vm-nocpufreq")
    (root / "sys/devices/system/cpu/cpu0/cpufreq").write_text("not a directory\n")  # exists, but is no directory
    (root / "sys/devices/system/cpu/cpu0").chmod(0o000)
    try:
        section = collect(Context(root=str(root)))
    finally:
        (root / "sys/devices/system/cpu/cpu0").chmod(0o755)
    if os.geteuid() == 0:  # root reads through mode 000: the path exists, so it is not absent either
        assert section.data.get("cpufreq") != {"absent": True}
    else:
        assert section.unreadable.get("sys/devices/system/cpu/cpu0/cpufreq") == "EACCES"
        assert "cpufreq" not in section.data


def test_amd_host_has_no_intel_only_keys() -> None:
    section = collect(Context(root=str(HOSTS / "epyc-amd")))
    assert "no_turbo" not in section.data["cpufreq"]
    assert section.status == "ok", section.unreadable


def test_empty_root_is_absent(tmp_path) -> None:
    section = collect(Context(root=str(tmp_path)))
    assert section.status == "absent"
    assert "proc/sys/kernel/osrelease" in section.unreadable


@pytest.mark.parametrize("err", [errno.EACCES, errno.EIO, errno.ENXIO])
def test_read_errors_are_recorded_with_their_errno(err: int) -> None:
    rel = "sys/devices/system/cpu/cpu5/cpufreq/scaling_governor"
    with inject({rel: err}):
        section = collect(Context(root=str(HOSTS / "xeon-2s")))
    assert section.unreadable[rel] == errno.errorcode[err]
    assert section.status == "partial"
    # the other 223 CPUs still report, and CPU 5 is not guessed
    assert section.data["cpufreq"]["governor"] == {"0-4,6-223": "performance"}


IDLE = "sys/devices/system/cpu/cpu{}/cpuidle"


def test_idle_states_disabled_on_some_cpus_are_counted_by_name() -> None:
    section = collect(Context(root=str(HOSTS / "xeon-2s")))
    disabled = section.data["cpuidle"]["disabled"]
    assert disabled == {"POLL": 0, "C1": 0, "C1E": 0, "C6": 112}
    # mixed: C6 is off on some CPUs only, so its count lies strictly between none and every online CPU
    assert 0 < disabled["C6"] < section.data["cpu"]["threads"]
    assert section.status == "ok", section.unreadable


def test_idle_state_counts_follow_the_tree(tmp_path) -> None:
    """Every CPU, every state, by name whatever its index: C1E on all 224 CPUs, C6 on none; a CPU without a
    cpuidle directory (no idle driver for it) has no state to count and is no failure."""
    import shutil

    root = _copy_tree(tmp_path, "xeon-2s")
    for cpu in range(224):
        (root / IDLE.format(cpu) / "state2/disable").write_text("1\n")
        (root / IDLE.format(cpu) / "state3/disable").write_text("0\n")
    shutil.rmtree(root / IDLE.format(223))
    section = collect(Context(root=str(root)))
    assert section.data["cpuidle"]["disabled"] == {"POLL": 0, "C1": 0, "C1E": 223, "C6": 0}
    assert section.status == "ok", section.unreadable


def test_a_state_name_repeated_on_one_cpu_keeps_its_directory(tmp_path) -> None:
    root = _copy_tree(tmp_path, "vm-nocpufreq")
    for cpu in range(8):
        (root / IDLE.format(cpu) / "state2").mkdir()
        (root / IDLE.format(cpu) / "state2/name").write_text("haltpoll idle\n")
        (root / IDLE.format(cpu) / "state2/disable").write_text("1\n" if cpu < 2 else "0\n")
    section = collect(Context(root=str(root)))
    assert section.data["cpuidle"]["disabled"] == {"POLL": 0, "haltpoll idle": 0, "haltpoll idle (state2)": 2}


@pytest.mark.parametrize("rel", [f"{IDLE.format(5)}/state3/disable", f"{IDLE.format(5)}/state3/name",
                                 IDLE.format(5)])
@pytest.mark.parametrize("err", [errno.EACCES, errno.EIO])
def test_an_unreadable_idle_state_is_recorded_with_its_reason_never_counted(rel: str, err: int) -> None:
    from hoststate.capture import collect as capture

    with inject({rel: err}):
        section = collect(Context(root=str(HOSTS / "xeon-2s")))
        snap = capture(Context(root=str(HOSTS / "xeon-2s")), ("system",))
    assert section.unreadable == {rel: errno.errorcode[err]}
    assert section.status == "partial"
    # settled against SOURCES: the counts are unknown (C6 might be disabled on CPU 5 too), never a guess
    entry = snap["collectors"]["system"]["unreadable"]["cpuidle.disabled"]
    cls = "denied" if err == errno.EACCES else "error"
    assert entry == f"{cls}: {errno.errorcode[err]} [{rel}]"
    assert "disabled" not in snap["system"]["cpuidle"]
    assert snap["system"]["cpuidle"]["driver"] == "intel_idle"  # the rest is still read


def test_a_flag_that_is_no_number_is_recorded(tmp_path) -> None:
    root = _copy_tree(tmp_path, "xeon-2s")
    (root / IDLE.format(9) / "state3/disable").write_text("maybe\n")
    section = collect(Context(root=str(root)))
    assert section.unreadable == {f"{IDLE.format(9)}/state3/disable": "not an integer: 'maybe'"}


def test_idle_states_are_read_inside_the_root_and_never_through_cpu_dma_latency(tmp_path) -> None:
    """A tree's link to a flag outside it is not followed to the host's file; /dev/cpu_dma_latency (opening it
    adds a PM QoS request) is opened neither under a root nor on this machine."""
    from hoststate.io import ESCAPES
    from tests.faults import reader_faults

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "flag").write_text("1\n")
    root = _copy_tree(tmp_path, "xeon-2s")
    link = root / IDLE.format(200) / "state3/disable"
    link.unlink()
    link.symlink_to(outside / "flag")  # absolute: re-anchored at the root, where it does not exist
    seen: set[str] = set()
    with reader_faults(seen=seen):
        section = collect(Context(root=str(root)))
        collect(Context())
    assert section.unreadable == {f"{IDLE.format(200)}/state3/disable": ESCAPES}
    assert section.data["cpuidle"]["disabled"]["C6"] == 112  # CPU 200's C6 is not read as the host's "1"
    assert not [p for p in seen if "cpu_dma_latency" in p or p.startswith("dev/")]
    assert any(p.endswith("/cpuidle/state0/disable") for p in seen)


def test_live_machine_snap_succeeds() -> None:
    section = collect(Context())
    assert section.status in ("ok", "partial")
    assert section.data["kernel"]["release"]
    assert section.data["cpu"]["threads"] >= 1


def test_parsers() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []
    assert format_cpulist([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert group_by_value({0: "a", 1: "a", 2: "b", 3: "a"}) == {"0-1,3": "a", "2": "b"}
    assert bracketed("always [madvise] never") == "madvise"
    assert parse_os_release('ID="ubuntu"\n# c\nVERSION_ID=22.04\n') == {"id": "ubuntu", "version_id": "22.04"}
    assert parse_meminfo("MemTotal:  1024 kB\nHugePages_Total:   4\n") == {"MemTotal": 1048576, "HugePages_Total": 4}
    assert parse_cmdline("ro isolcpus=2-5 nohz_full=2-5 quiet nosmt") == {
        "isolcpus": "2-5", "nohz_full": "2-5", "nosmt": ""}
    # The kernel's reading (kernel-parameters.rst, lib/cmdline.c next_arg, kernel/params.c parse_args): dashes are
    # underscores in a name, quotes around a value or a whole parameter go, a bare -- ends the kernel's parameters.
    assert parse_cmdline('nohz-full=2-5 intel-idle.max-cstate=1 isolcpus="2-5" "nosmt" "iommu=pt" rcu_nocbs="2-5 '
                         '-- mitigations=off') == {"nohz_full": "2-5", "intel_idle.max_cstate": "1", "isolcpus": "2-5",
                                                   "nosmt": "", "iommu": "pt", "rcu_nocbs": "2-5 -- mitigations=off"}
    assert parse_cmdline("quiet -- mitigations=off nosmt") == {}
    assert parse_cmdline("mitigations=off mitigations=auto pti=") == {"mitigations": "auto", "pti": ""}
    # A CPU list is the CPUs it names (lib/bitmap.c bitmap_parselist); isolcpus's flags are OR'd in any order
    # (kernel/sched/isolation.c housekeeping_isolcpus_setup); other forms are kept as given.
    assert parse_cmdline("isolcpus=2,3,4-5 nohz_full=2-3,4,5 rcu_nocbs=5,4,3,2 irqaffinity=0-1 rcu_nocbs") == {
        "isolcpus": "2-5", "nohz_full": "2-5", "rcu_nocbs": "", "irqaffinity": "0-1"}
    assert parse_cmdline("isolcpus=managed_irq,domain,3,2 nohz_full=1-7:2/4 kthread_cpus=5-2 irqaffinity=N") == {
        "isolcpus": "domain,managed_irq,2-3", "nohz_full": "1-7:2/4", "kthread_cpus": "5-2", "irqaffinity": "N"}
    info = parse_cpuinfo("processor : 0\nvendor_id : X\ncpu family : 6\nmodel : 7\n\nprocessor : 1\nvendor_id : Y\n")
    assert info == {"vendor": "X", "family": 6, "model": 7}


def test_cpulist_is_bounded_before_it_is_expanded() -> None:
    import tracemalloc

    from hoststate.collectors.system import MAX_CPUS

    tracemalloc.start()
    for text, limit in (("0-99999999", MAX_CPUS), ("0-224", 224), (f"0,{MAX_CPUS}", MAX_CPUS)):
        with pytest.raises(ValueError, match="beyond the"):
            parse_cpulist(text, limit)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20  # nothing was expanded
    with pytest.raises(ValueError, match="bad range"):
        parse_cpulist("5-3")
    assert parse_cpulist("0-223", 224)[-1] == 223


@pytest.mark.parametrize("possible", ["0-223", "0-99999999", None])
def test_a_huge_cpulist_in_a_tree_is_recorded_not_expanded(tmp_path, possible) -> None:
    """cpu/online (bounded by cpu/possible, or by MAX_CPUS when that is missing or absurd too) and node/online."""
    import shutil

    from hoststate.collectors.system import MAX_CPUS

    root = tmp_path / "host"
    shutil.copytree(HOSTS / "xeon-2s", root, symlinks=True)
    cpu = root / "sys/devices/system/cpu"
    (cpu / "online").write_text("0-99999999\n")
    (root / "sys/devices/system/node/online").write_text("0-99999999\n")
    if possible is None:
        (cpu / "possible").unlink()
    else:
        (cpu / "possible").write_text(possible + "\n")
    sec = collect(Context(root=str(root)))
    bound = 224 if possible == "0-223" else MAX_CPUS
    assert sec.unreadable["sys/devices/system/cpu/online"] == f"not a cpulist: CPU 99999999 beyond the {bound} possible"
    assert sec.unreadable["sys/devices/system/node/online"].startswith("not a node list: CPU 99999999 beyond")
    assert "threads" not in sec.data["cpu"] and "nodes" not in sec.data.get("numa", {})
    assert sec.data["kernel"]["release"] == "5.15.0-131-generic"  # the rest is still read


def test_every_recorded_boot_parameter_has_a_rule_of_its_own() -> None:
    """A parameter parse_cmdline records is rated by a rule that names it, with the reason and source of that
    parameter, never by the catch-all ``system.kernel.params.*`` (a review of unknown effect)."""
    from hoststate.collectors.system import CMDLINE_KEYS
    from hoststate.diff import compare

    base = {"system": {"kernel": {"params": {}}}}
    for key in CMDLINE_KEYS:
        found = compare(base, {"system": {"kernel": {"params": {key: "1"}}}}).findings
        assert [f.rule for f in found] != ["system.kernel.params.*"], key
