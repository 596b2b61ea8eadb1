"""Slurm: check each node before a job, stamp the verdict where the job reads it, record what the job changed.

Three programs for slurm.conf (docs/fleets-engines.md), run as ``hoststate-slurm ROLE`` (the console script of the
virtualenv hoststate is installed into; deploy/slurm/*.sh find it) or ``python -m hoststate.slurm ROLE``:

``prolog`` (``Prolog=``, root, on the node, before the job): snaps the node and compares it with the fleet's
reference baseline and, when the job names one (``sbatch --comment=hoststate-baseline=PATH``), with the job's own.
The verdict is stamped in ``STAMP_DIR/<job>.json`` (readable by the job) and in the job's ``AdminComment``
(``scontrol show job``); the job's own baseline is read with the job user's rights, never as root. Drift never
fails the prolog: a failing prolog drains the node and requeues the job, which is the answer to a sick node, not to
a job that wants another configuration. Health faults (a GPU lost, an XID that
needs a reset in the kernel log, memory rows that failed to remap or wait for a reset, uncorrectable ECC errors, a
GPU driver that cannot be read) drain the node with a readable reason and fail the prolog. XIDs are the kernel's own
/dev/kmsg records from the driver about this node's GPUs, each judged once (a cursor in root's ``state_dir``).

``task-prolog`` (``TaskProlog=``, the job's user, before each task): exports ``HOSTSTATE_VERDICT`` and
``HOSTSTATE_STAMP``; on drift prints the reason into the task's output and fails, so Slurm refuses the task and the
job ends FAILED with the reason in its output and its AdminComment, the node left in service.

``epilog`` (``Epilog=``, root, after the job): snaps again and writes what changed during the job
(``STAMP_DIR/<job>.changes.txt``, a diff of the prolog's snapshot against this one); drains the node on a health
fault found then.

Configuration: a TOML file (``HOSTSTATE_SLURM_CONFIG``, default /etc/hoststate/slurm.toml), keys in CONFIG_KEYS.
Every external command (hoststate itself, scontrol) runs with a timeout; nothing here waits unbounded.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.io import run
from hoststate.snapshot import toml_loads

CONFIG_ENV = "HOSTSTATE_SLURM_CONFIG"
DEFAULT_CONFIG = "/etc/hoststate/slurm.toml"
#: How a job names its own baseline: ``sbatch --comment=hoststate-baseline=/shared/baselines/run42.toml``.
JOB_BASELINE = re.compile(r"hoststate-baseline=(\S+)")
#: XIDs that say the GPU needs a reset or is gone (NVIDIA's XID catalogue): 48 double-bit ECC, 61/62 internal
#: micro-controller halt, 63/64 row remapping/retirement event or failure, 74 NVLink error, 79 fallen off the bus,
#: 92 high single-bit ECC rate, 94/95 contained/uncontained ECC error, 119/120 GSP timeout/error, 140 unrecovered ECC.
FATAL_XIDS = frozenset({48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})
#: The NVIDIA driver's XID report, as the message of a kernel record starts (``NVRM: Xid (PCI:0000:18:00): 79, ...``):
#: anchored, so text that merely contains it (a mount option a user had the kernel log) is no XID.
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?\): (\d+)(?:,|$)")
#: syslog facility of the kernel's own records (LOG_KERN); /dev/kmsg gives every record written from user space
#: another one (printk.c devkmsg_write: "we enforce LOG_USER").
LOG_KERN = 0
#: Largest job baseline read for the job's user: what a snapshot file may be (io.SNAPSHOT_MAX_BYTES).
MAX_JOB_BASELINE = 8 << 20
#: Every key the configuration file may hold, with its default.
CONFIG_KEYS: dict[str, Any] = {
    "baseline": "",            # the fleet's reference snapshot ("" = only the job's own)
    "policy": [],              # extra --policy files
    "accept": [],              # --accept patterns the site tolerates (guard's meaning)
    "root": "/",               # --root (a captured tree in tests)
    "only": [],                # --only collectors ([] = all)
    "stamp_dir": "/run/hoststate/slurm",
    "kmsg": "/dev/kmsg",       # the kernel log read for XIDs, under root ("" = not read)
    "state_dir": "/var/lib/hoststate/slurm",  # root's own state: the kernel log cursor
    "timeout": 60.0,           # seconds for one snap or diff
    "scontrol": "scontrol",
    "nvml_replay": "",         # HOSTSTATE_NVML_REPLAY for the snap (tests)
}


@dataclass
class Config:
    baseline: str = ""
    policy: list[str] = field(default_factory=list)
    accept: list[str] = field(default_factory=list)
    root: str = "/"
    only: list[str] = field(default_factory=list)
    stamp_dir: str = "/run/hoststate/slurm"
    kmsg: str = "/dev/kmsg"
    state_dir: str = "/var/lib/hoststate/slurm"
    timeout: float = 60.0
    scontrol: str = "scontrol"
    nvml_replay: str = ""


def _trusted(path: str, st: os.stat_result) -> None:
    """A configuration root acts on must be root's and writable by root alone (its baseline, policy and root are
    root's reads): ValueError otherwise."""
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise ValueError(f"{path}: not owned by root or writable by others: refused (uid {st.st_uid}, "
                         f"mode {stat.S_IMODE(st.st_mode):o})")
    _root_only("the configuration", path)


def _root_only(what: str, path: str) -> None:
    """ValueError when another user could have written ``path`` or swapped it (hoststate.filetrust.root_only): the
    prolog reads it as root for every job, so whoever could change it would decide every job's verdict (a policy
    that ignores everything, a baseline of their choosing, a forged kernel log that drains the node)."""
    from hoststate.filetrust import root_only

    why = root_only(path)
    if why:
        raise ValueError(f"{what} {path} {why}: refused (root reads it for every job)")


def _check_named(config: Config) -> None:
    """Every file and folder the configuration names that root reads, held to the configuration's own standard."""
    named = [("baseline", config.baseline), *(("policy", p) for p in config.policy)]
    if config.root != "/":
        named.append(("root", config.root))
    if config.kmsg:
        named.append(("kmsg", os.path.join(config.root, config.kmsg.lstrip("/"))))
    for what, path in named:
        if path:
            _root_only(what, path)


def load_config(path: str | None = None) -> Config:
    """The configuration file; a missing default file is the defaults. ValueError names an unknown key."""
    path = path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG
    try:
        with open(path, "rb") as f:
            if os.geteuid() == 0:
                _trusted(path, os.fstat(f.fileno()))
            data = toml_loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        if path != DEFAULT_CONFIG:
            raise
        data = {}
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(CONFIG_KEYS)})")
    config = Config(**{k: data.get(k, v) for k, v in CONFIG_KEYS.items()})
    if os.geteuid() == 0:
        try:
            _check_named(config)
        except ValueError as err:
            raise RefusedConfig(str(err), config) from None
    return config


class RefusedConfig(ValueError):
    """A configuration that names a file another user could change: the prolog still stamps the job (verdict
    ``error``) where the configuration says, so the job's task prolog finds the refusal."""

    def __init__(self, message: str, config: Config):
        super().__init__(message)
        self.config = config


# -- files the job reads -------------------------------------------------------------------------------------------


def _own_dir(path: str, mode: int) -> str:
    """``path`` made with ``mode`` if missing; refused when it is a link, someone else's, or writable by others."""
    from hoststate.filetrust import placed_by_owner

    os.makedirs(path, mode=mode, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(f"{path}: not a directory owned by uid {os.geteuid()} and writable only by it")
    if not placed_by_owner(path, st):  # another user could rename it away and put their own folder in its place
        raise OSError(f"{path}: sits behind a link or in a folder another user could change")
    return path


def stamp_dir(config: Config) -> str:
    """The stamp directory, made root-only-writable; refused when it is a link or someone else's."""
    return _own_dir(config.stamp_dir, 0o755)


def write_atomic(directory: str, name: str, text: str, mode: int = 0o644) -> str:
    """``directory/name`` replaced atomically with a new file (``mode``), never written through a link."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return os.path.join(directory, name)


_JOB_ID = re.compile(r"\d+(?:_\d+)?")


def job_id(env: Mapping[str, str]) -> str:
    value = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    if not _JOB_ID.fullmatch(value):
        raise ValueError(f"SLURM_JOB_ID is not a job id: {value!r}")
    return value


# -- hoststate itself, and scontrol, as bounded commands -----------------------------------------------------------


def _hoststate(config: Config, args: Sequence[str]) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOSTSTATE_")}
    if config.nvml_replay:
        env["HOSTSTATE_NVML_REPLAY"] = config.nvml_replay
    return run([sys.executable, "-m", "hoststate", *args], timeout=config.timeout, env=env)


def snap(config: Config, out: str) -> str | None:
    """Snap the node into ``out``; None, or why it could not be snapped."""
    args = ["snap", "-q", "--force", "-o", out, "--root", config.root]
    if config.only:
        args += ["--only", ",".join(config.only)]
    done = _hoststate(config, args)
    return None if done.ok else f"hoststate snap: {done.describe()}"


def scontrol(config: Config, *args: str) -> str | None:
    """Run ``scontrol ARGS``; None, or why it failed (never raised: the verdict stands without the comment)."""
    done = run([config.scontrol, *args], timeout=15.0)
    return None if done.ok else done.describe()


def job_baseline(config: Config, job: str) -> str | None:
    """The baseline a job names in its comment (``--comment=hoststate-baseline=PATH``), or None."""
    done = run([config.scontrol, "show", "job", "-o", job], timeout=15.0)
    if not done.ok:
        return None
    m = re.search(r"\bComment=(.*?)(?: [A-Z][A-Za-z]+=|$)", done.stdout)
    found = JOB_BASELINE.search(m[1]) if m else None
    return found[1] if found else None


# -- verdicts ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KmsgRecord:
    """One /dev/kmsg record (Documentation/ABI/testing/dev-kmsg: ``pri,seq,ts,flags;message``)."""

    facility: int
    seq: int
    message: str


def parse_kmsg(data: bytes) -> list[KmsgRecord]:
    """The records of /dev/kmsg output; continuation lines (`` KEY=value``) and anything unparsable are skipped.
    The kernel escapes a newline inside a message as ``\\x0a``, so every record is one line."""
    out = []
    for line in data.split(b"\n"):
        record = _record(line)
        if record is not None:
            (pri, seq), message = record
            out.append(KmsgRecord(pri >> 3, seq, message.decode("utf-8", "replace")))
    return out


def _record(line: bytes) -> tuple[tuple[int, int], bytes] | None:
    """((priority, sequence number), message) of one /dev/kmsg line, or None: a continuation line or not a record."""
    head, sep, message = line.partition(b";")
    fields = head.split(b",")
    if not sep or len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    return (int(fields[0]), int(fields[1])), message


def _bdf(text: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address as NVML (``00000000:18:00.0``), sysfs or the driver writes it."""
    m = re.fullmatch(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?", text.strip())
    return (int(m[1], 16), int(m[2], 16), int(m[3], 16)) if m else None


def node_gpus(snap_data: Mapping[str, Any]) -> set[tuple[int, int, int]]:
    """The PCI addresses of this node's GPUs: NVML's (gpu.devices) and sysfs's (system.p2p.gpus)."""
    found = set()
    devices = snap_data.get("gpu", {}).get("devices", {})
    for dev in devices.values() if isinstance(devices, Mapping) else ():
        if isinstance(dev, Mapping) and (bdf := _bdf(str(dev.get("pci_bus_id", "")))):
            found.add(bdf)
    p2p = snap_data.get("system", {}).get("p2p", {}).get("gpus", {})
    for key in p2p if isinstance(p2p, Mapping) else ():
        if bdf := _bdf(str(key)):
            found.add(bdf)
    return found


def xids(records: Sequence[KmsgRecord], gpus: set[tuple[int, int, int]]) -> list[tuple[str, int]]:
    """(PCI address, XID) of the driver's XID records: the kernel's own (facility 0), the message starting with
    the driver's prefix, naming a GPU of this node."""
    out = []
    for rec in records:
        m = _XID.match(rec.message) if rec.facility == LOG_KERN else None
        if m and (int(m[1], 16), int(m[2], 16), int(m[3], 16)) in gpus:
            out.append((f"{int(m[1], 16):04x}:{m[2].lower()}:{m[3].lower()}", int(m[4])))
    return out


#: Most bytes of the kernel log read in one pass: the ring is the kernel's (log_buf_len), but records a flood adds
#: while it is read would keep the reader going.
KMSG_SCAN_MAX = 256 << 20


def read_kmsg(config: Config, max_bytes: int = 4 << 20, after: int = -1) -> bytes:
    """The records of the kernel log under ``config.root`` whose sequence number is above ``after`` (the cursor),
    the newest ``max_bytes`` of them: the /dev/kmsg device read without blocking (one record per read), or a
    regular file of records (a captured log); b"" when it cannot be read.

    The whole log is read and only what is kept is bounded: /dev/kmsg starts at the oldest record, so stopping at a
    cap read the oldest records only, and on a node whose log outgrew it (a large ``log_buf_len``, or a user's
    flood of short kernel records) an XID after them was never read, by any prolog."""
    if not config.kmsg:
        return b""
    from collections import deque

    from hoststate.io import Reader

    try:
        fd = Reader(config.root, {}).open(config.kmsg.lstrip("/"), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return b""
    kept: deque[bytes] = deque()
    size = scanned = 0
    pending = b""

    def keep(line: bytes) -> None:
        nonlocal size
        record = _record(line)
        if record is None or record[0][1] <= after:
            return  # a continuation line, or a record already judged
        kept.append(line)
        size += len(line) + 1
        while size > max_bytes and kept:
            size -= len(kept.popleft()) + 1

    try:
        device = stat.S_ISCHR(os.fstat(fd).st_mode)
        while scanned < KMSG_SCAN_MAX:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten while reading; go on
                continue
            if not chunk:
                break
            scanned += len(chunk)
            if device and not chunk.endswith(b"\n"):
                chunk += b"\n"
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                keep(line)
    finally:
        os.close(fd)
    if pending:
        keep(pending)
    return b"".join(line + b"\n" for line in kept)


# -- root's own state: the kernel log cursor -----------------------------------------------------------------------


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def state_dir(config: Config) -> str:
    """Root's state directory, made and checked like the stamp directory, but readable by root only."""
    return _own_dir(config.state_dir, 0o700)


def new_kernel_records(config: Config) -> list[KmsgRecord]:
    """The kernel log records after the cursor kept in ``state_dir/kmsg.cursor`` (the last sequence number judged
    in this boot), and the cursor moved past them, under a lock (prologs and epilogs of several jobs may run at
    once): a record is judged once, so an XID a GPU reset has cleared does not drain the node again."""
    import fcntl

    if not config.kmsg:
        return []
    directory = state_dir(config)
    boot = _boot_id()
    with open(os.path.join(directory, "kmsg.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(os.path.join(directory, "kmsg.cursor"), encoding="utf-8") as f:
                saved = json.load(f)
            after = int(saved["seq"]) if saved.get("boot") == boot else -1
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            after = -1
        records = [r for r in parse_kmsg(read_kmsg(config, after=after)) if r.seq > after]
        if records and after >= 0 and min(r.seq for r in records) > after + 1:
            lost = min(r.seq for r in records) - after - 1
            print(f"hoststate.slurm: {lost} kernel log record(s) after the cursor ({after}) were overwritten before "
                  "they could be judged (the ring buffer wrapped), or were older than the newest 4 MiB of records "
                  "after it", file=sys.stderr)
        if records:
            last = max(r.seq for r in records)
            write_atomic(directory, "kmsg.cursor", json.dumps({"boot": boot, "seq": last}) + "\n", mode=0o600)
    return records


def health_faults(snap_data: Mapping[str, Any], kmsg: Sequence[KmsgRecord] = ()) -> list[str]:
    """Why this node should not run GPU work at all (empty: healthy): these drain it."""
    faults: list[str] = []
    entry = snap_data.get("collectors", {}).get("gpu", {})
    if entry.get("status") in ("error", "timeout", "denied"):
        faults.append(f"GPU driver unreadable: {entry.get('reason', entry.get('status'))}")
    lost = set()
    for where, value in entry.get("unreadable", {}).items():
        if "GpuIsLost" in str(value):  # settled entries name the NVML call in brackets: "error: GpuIsLost [devices/5]"
            m = re.search(r"\[([^\]]+)\]", str(value))
            lost.add(m[1] if m else where)
    faults += [f"GPU lost: {where}" for where in sorted(lost)]
    for key, dev in sorted(snap_data.get("gpu", {}).get("devices", {}).items()):
        health = dev.get("health", {}) if isinstance(dev, dict) else {}
        name = f"GPU {dev.get('index', key)} ({dev.get('pci_bus_id', key)})"
        if health.get("remapped_rows_failure"):
            faults.append(f"{name}: row remapping failed")
        if health.get("remapped_rows_pending"):
            faults.append(f"{name}: row remap pending a GPU reset")
        if health.get("retired_pages_pending"):
            faults.append(f"{name}: page retirement pending a driver reload")
        if health.get("ecc_errors_uncorrected_volatile"):
            faults.append(f"{name}: {health['ecc_errors_uncorrected_volatile']} uncorrectable ECC errors")
    fatal = sorted({(bus, x) for bus, x in xids(kmsg, node_gpus(snap_data)) if x in FATAL_XIDS})
    faults += [f"XID {x} on PCI {bus}" for bus, x in fatal]
    return faults


def refusal_lines(baseline: str | Mapping[str, Any], current: Mapping[str, Any], config: Config) -> list[str]:
    """Why ``current`` is not comparable with ``baseline`` under the site's policy and accept patterns, one
    summary line per subsystem (the lines ``hoststate diff`` opens with); [] when it is."""
    from hoststate.render.summary import summarize
    from hoststate.run.guard import evaluate

    try:
        result = evaluate(baseline, current=current, policy_files=config.policy, accept=config.accept)
    except Exception as err:  # noqa: BLE001 - a missing or bad baseline refuses the job with its reason
        return [f"not compared: {err}"]
    if not result.refused:
        return []
    return [s.text for s in summarize(result.refused) if s.severity == "invalidating"] or [
        f"{f.path} changed" for f in result.refused[:5]]


@dataclass
class Verdict:
    verdict: str  # match, refused, health, error
    reasons: list[str] = field(default_factory=list)
    baselines: dict[str, str] = field(default_factory=dict)

    def comment(self) -> str:
        """The AdminComment text: one line, bounded."""
        text = f"hoststate: {self.verdict}" + (f": {'; '.join(self.reasons)}" if self.reasons else "")
        return re.sub(r"[\r\n\t]", " ", text)[:900]


def job_user_baseline(path: str, env: Mapping[str, str]) -> tuple[Any, str | None]:
    """(the job's own baseline, loaded, None) or (None, why): read with the job user's rights (SLURM_JOB_UID,
    SLURM_JOB_GID) by a reader holding that identity (hoststate.procfiles.read_as), never as root. The reason is the
    kernel's answer to the job's user, which that user can learn by trying: it tells nothing of a root-only file
    (whether it exists, what it holds) and none of its bytes reach the stamp."""
    from hoststate import procfiles
    from hoststate.snapshot import loads

    uid, gid = env.get("SLURM_JOB_UID", ""), env.get("SLURM_JOB_GID", "")
    if not (uid.isdigit() and gid.isdigit()):
        return None, "the job's user is not known (SLURM_JOB_UID, SLURM_JOB_GID): not read"
    data, err = procfiles.read_as(procfiles.user_creds(int(uid), int(gid)), path, MAX_JOB_BASELINE)
    if data is None:
        return None, f"not read with the job user's rights: {err}"
    try:
        return loads(data, os.path.basename(path)), None
    except Exception as exc:  # noqa: BLE001 - the job's own file, readable to its user: its defect is the reason
        return None, f"not a snapshot: {exc}"


def judge(config: Config, current: str, job_base: str | None, kmsg: Sequence[KmsgRecord],
          env: Mapping[str, str] | None = None) -> Verdict:
    """The verdict on the snapshot ``current``: health first, then the fleet's baseline (a site file, read as root)
    and the job's own (read with the job user's rights)."""
    from hoststate.snapshot import load

    try:
        data = load(current)
    except Exception as err:  # noqa: BLE001 - an unreadable snapshot is a verdict, not a crash
        return Verdict("error", [f"snapshot unreadable: {err}"])
    faults = health_faults(data, kmsg)
    if faults:
        return Verdict("health", faults)
    verdict = Verdict("match")
    for label, path in (("fleet", config.baseline), ("job", job_base or "")):
        if not path:
            continue
        verdict.baselines[label] = path
        baseline: Any = path
        if label == "job":
            baseline, err = job_user_baseline(path, os.environ if env is None else env)
            if err is not None:
                verdict.verdict = "refused"
                verdict.reasons.append(f"job baseline {os.path.basename(path)}: {err}")
                continue
        lines = refusal_lines(baseline, data, config)
        if lines:
            verdict.verdict = "refused"
            verdict.reasons += [f"{label} baseline {os.path.basename(path)}: {line}" for line in lines[:6]]
    return verdict


# -- the three programs --------------------------------------------------------------------------------------------


def prolog(config: Config, env: Mapping[str, str]) -> int:
    job = job_id(env)
    node = env.get("SLURMD_NODENAME", "")
    directory = stamp_dir(config)
    before = os.path.join(directory, f"{job}.before.toml")
    err = snap(config, before)
    if err is not None:
        verdict = Verdict("error", [err])  # not checked: the job is refused, the node is not blamed
    else:
        verdict = judge(config, before, job_baseline(config, job), new_kernel_records(config), env)
    stamp = {"job": job, "node": node, "verdict": verdict.verdict, "reasons": verdict.reasons,
             "baselines": verdict.baselines, "snapshot": before}
    write_atomic(directory, f"{job}.json", json.dumps(stamp, indent=1) + "\n")
    scontrol(config, "update", f"JobId={job}", f"AdminComment={verdict.comment()}")
    if verdict.verdict == "health":
        if node:
            scontrol(config, "update", f"NodeName={node}", "State=DRAIN", f"Reason={verdict.comment()[:200]}")
        print(verdict.comment(), file=sys.stderr)
        return 1
    return 0


def task_prolog(config: Config, env: Mapping[str, str], out: Any = None) -> int:
    """TaskProlog protocol (slurm.conf): ``export NAME=value`` and ``print TEXT`` lines on stdout."""
    out = out or sys.stdout
    job = job_id(env)
    path = os.path.join(config.stamp_dir, f"{job}.json")
    try:
        with open(path, encoding="utf-8") as f:
            stamp = json.load(f)
    except (OSError, ValueError) as err:
        print(f"print hoststate: no verdict for job {job} ({type(err).__name__}): the node was not checked", file=out)
        print("export HOSTSTATE_VERDICT=unchecked", file=out)
        return 0
    verdict = str(stamp.get("verdict", "error"))
    print(f"export HOSTSTATE_VERDICT={verdict}", file=out)
    print(f"export HOSTSTATE_STAMP={path}", file=out)
    if verdict == "match":
        return 0
    print(f"print hoststate: job {job} refused on node {stamp.get('node', '?')} ({verdict}):", file=out)
    for reason in stamp.get("reasons", []):
        one_line = re.sub(r"[\r\n]", " ", str(reason))
        print(f"print hoststate:   {one_line}", file=out)
    out.flush()
    return 1


def epilog(config: Config, env: Mapping[str, str]) -> int:
    job = job_id(env)
    node = env.get("SLURMD_NODENAME", "")
    directory = stamp_dir(config)
    before = os.path.join(directory, f"{job}.before.toml")
    after = os.path.join(directory, f"{job}.after.toml")
    err = snap(config, after)
    lines = [f"job {job} on {node or '?'}: what changed on the node during the job"]
    if err is not None:
        lines.append(err)
    elif os.path.exists(before):
        paths = ["--", *(f"{name}.**" for name in config.only)] if config.only else []
        done = _hoststate(config, ["diff", before, after, "--color", "never", "-v", *paths])
        lines.append(done.stdout.strip() or done.describe())
    else:
        lines.append("no prolog snapshot to compare with")
    write_atomic(directory, f"{job}.changes.txt", "\n".join(lines) + "\n")
    if err is None:
        from hoststate.snapshot import load

        try:
            faults = health_faults(load(after), new_kernel_records(config))
        except Exception as exc:  # noqa: BLE001 - an epilog that fails drains the node: never for our own error
            print(f"hoststate.slurm epilog: {exc}", file=sys.stderr)
            faults = []
        if faults and node:
            reason = ("hoststate: health: " + "; ".join(faults))[:200]
            scontrol(config, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
    return 0


ROLES = {"prolog": prolog, "task-prolog": task_prolog, "epilog": epilog}


def prolog_error(config: Config, env: Mapping[str, str], problem: str) -> int:
    """hoststate itself failed in the prolog: the job is refused (verdict ``error``) and the node stays in service;
    only when not even the stamp can be written does the prolog fail (and Slurm drain the node)."""
    try:
        job = job_id(env)
        stamp = {"job": job, "node": env.get("SLURMD_NODENAME", ""), "verdict": "error", "reasons": [problem],
                 "baselines": {}, "snapshot": ""}
        write_atomic(stamp_dir(config), f"{job}.json", json.dumps(stamp, indent=1) + "\n")
    except Exception as err:  # noqa: BLE001 - reported in one line below
        print(f"hoststate.slurm prolog: {problem}; no stamp either: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    scontrol(config, "update", f"JobId={job}", f"AdminComment={Verdict('error', [problem]).comment()}")
    print(f"hoststate.slurm prolog: {problem}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 3) or argv[0] not in ROLES or (len(argv) == 3 and argv[1] != "--config"):
        print(f"usage: python -m hoststate.slurm {{{','.join(ROLES)}}} [--config FILE]", file=sys.stderr)
        return 2
    role = argv[0]
    try:
        config = load_config(argv[2] if len(argv) == 3 else None)
        return ROLES[role](config, os.environ)
    except Exception as err:  # noqa: BLE001 - one line, never a traceback in slurmd's log
        problem = f"{type(err).__name__}: {err}"
        if role == "prolog":
            return prolog_error(locals().get("config") or getattr(err, "config", None) or Config(), os.environ,
                                problem)
        print(f"hoststate.slurm {role}: {problem}", file=sys.stderr)
        return 0 if role == "epilog" else 1


if __name__ == "__main__":
    raise SystemExit(main())
