"""A real single-node Slurm cluster in a temporary directory, for tests: Debian's munged, slurmctld and slurmd
started with their own key, socket, ports, spool and state directories (nothing under /etc is used), and stopped
again; every wait is bounded."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def which(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.path.exists(f"{d}/{name}")), None)


def available() -> bool:
    return all(which(n) for n in (*DAEMONS, "sbatch", "scontrol", "sinfo")) and os.geteuid() == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SlurmNode:
    """One controller and one compute node (this host) with Prolog, TaskProlog and Epilog scripts."""

    base: Path
    prolog: str = ""
    task_prolog: str = ""
    epilog: str = ""
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.base / "slurm.conf")}

    def _conf(self) -> str:
        b = self.base
        cpus = os.cpu_count() or 1
        mem = 1024
        lines = [
            "ClusterName=hoststate-test", f"SlurmctldHost={self.node}(127.0.0.1)",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={b}/munge.sock",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={b}/state", f"SlurmdSpoolDir={b}/spool",
            f"SlurmctldPidFile={b}/slurmctld.pid", f"SlurmdPidFile={b}/slurmd.pid",
            f"SlurmctldLogFile={b}/slurmctld.log", f"SlurmdLogFile={b}/slurmd.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "MpiDefault=none", "ReturnToService=2", "SchedulerType=sched/builtin",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5", "MinJobAge=300",
            "PrologFlags=Alloc", f"PlugStackConfig={b}/plugstack.conf", "MailProg=/bin/true",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem} State=UNKNOWN",
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=10 State=UP",
        ]
        for key, script in (("Prolog", self.prolog), ("TaskProlog", self.task_prolog), ("Epilog", self.epilog)):
            if script:
                lines.append(f"{key}={script}")
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 30.0) -> None:
        b = self.base
        for d in ("state", "spool", "munge"):
            (b / d).mkdir(parents=True, exist_ok=True)
        os.chmod(b, 0o755)
        key = b / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        (b / "slurm.conf").write_text(self._conf())
        (b / "plugstack.conf").write_text("")
        self._spawn("munged", [which("munged") or "munged", "-F", "--force", f"--key-file={key}",
                               f"--socket={b}/munge.sock", f"--pid-file={b}/munge/munged.pid",
                               f"--log-file={b}/munge/munged.log", f"--seed-file={b}/munge/munged.seed"])
        self._wait(lambda: (b / "munge.sock").exists(), timeout, "munged socket")
        self._spawn("slurmctld", [which("slurmctld") or "slurmctld", "-D", "-i", "-f", str(b / "slurm.conf")])
        self._spawn("slurmd", [which("slurmd") or "slurmd", "-D", "-f", str(b / "slurm.conf"), "-N", self.node])
        self._wait(self._idle, timeout, "the node to come up idle")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.base / f"{name}.out", "wb")  # noqa: SIM115 - kept open while the daemon runs
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True)

    def _wait(self, ready, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    def wait_for(self, ready, timeout: float) -> bool:  # type: ignore[no-untyped-def]
        """Whether ``ready()`` became true within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return True
            time.sleep(0.2)
        return False

    def _idle(self) -> bool:
        return self.node_state() in ("IDLE", "IDLE+DRAIN") or self.node_state().startswith("IDLE")

    def run(self, *argv: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout)

    def node_state(self) -> str:
        out = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T", timeout=10)
        return out.stdout.strip().upper() if out.returncode == 0 else ""

    def node_reason(self) -> str:
        out = self.run("scontrol", "show", "node", self.node, "-o")
        for field_ in out.stdout.split(" "):
            if field_.startswith("Reason="):
                return out.stdout.split("Reason=", 1)[1]
        return ""

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as key=value pairs (values may hold spaces: keys are CamelCase words)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout.strip()
        fields: dict[str, str] = {}
        key = None
        for token in out.split(" "):
            head, sep, value = token.partition("=")
            if sep and head[:1].isupper() and head.replace(":", "").replace("/", "").isalnum():
                key = head
                fields[key] = value
            elif key is not None:
                fields[key] += " " + token
        return fields

    def wait_job(self, job_id: str, timeout: float = 60.0) -> dict[str, str]:
        """The job's fields once it reached a final (or held pending) state."""
        deadline = time.monotonic() + timeout
        fields: dict[str, str] = {}
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            state = fields.get("JobState", "")
            if state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "OUT_OF_MEMORY"):
                return fields
            if state == "PENDING" and fields.get("Reason", "") not in ("None", "Priority", "Resources", ""):
                return fields  # held or requeued: it will not run here
            time.sleep(0.3)
        raise RuntimeError(f"job {job_id} did not finish: {fields}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for name in ("munged.out", "slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"):
            path = self.base / name
            if path.exists():
                out.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        for name in reversed(DAEMONS):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
