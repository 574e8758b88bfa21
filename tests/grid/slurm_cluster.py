"""A real single-node Slurm (Debian's slurm-wlm) started in a temporary directory for the tests.

``slurmctld`` and ``slurmd`` run in the foreground as our children, with a generated ``slurm.conf``
(auth/none and cred/none: no munge; free ports chosen now; state, spool, logs and pid files in
the directory). Clients find it through ``SLURM_CONF``. Starts in about a second.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

DAEMONS = ("slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scancel")


def missing_programs() -> list[str]:
    """Slurm programs not found on PATH or in /usr/sbin."""
    return [name for name in DAEMONS + CLIENTS if not _which(name)]


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MiniSlurm:
    """One controller and one compute node on this machine.

    Args:
        directory: where the configuration, state, spool and logs go.
        min_job_age: seconds Slurm keeps ended jobs visible to squeue.
    """

    def __init__(self, directory: Path, min_job_age: int = 300):
        self.directory = Path(directory)
        self.min_job_age = min_job_age
        self.conf = self.directory / "slurm.conf"
        self.processes: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        d = self.directory
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        user = getpass.getuser()
        memory = int(psutil.virtual_memory().total / 2**20 * 0.8)
        self.conf.write_text(f"""\
ClusterName=sonictest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/none
CredType=cred/none
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge={self.min_job_age}
KillWait=5
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory={memory} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout: float = 20.0) -> MiniSlurm:
        self.write_config()
        for name in DAEMONS:
            log = open(self.directory / "log" / f"{name}.stdout", "ab")
            self.processes.append(subprocess.Popen([_which(name), "-D", "-f", str(self.conf)] +
                                                   (["-i"] if name == "slurmctld" else []),
                                                   stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                   start_new_session=True))
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"{process.args[0]} exited with {process.returncode}: {self.logs()}")
            state = subprocess.run([_which("sinfo"), "-h", "-o", "%t"], capture_output=True, text=True, env=self.env)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mix", "alloc"):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Slurm did not become ready in {timeout} s: {self.logs()}")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (``scancel``, ``squeue`` ...)."""
        return subprocess.run([_which(args[0]), *args[1:]], capture_output=True, text=True, env=self.env, timeout=30)

    def logs(self) -> str:
        out = []
        for path in sorted((self.directory / "log").glob("*")):
            out.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        if self.processes:
            subprocess.run([_which("scancel"), "--full", "--user", getpass.getuser()], env=self.env,
                           capture_output=True, timeout=30)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
