"""The network lab: Triton servers and client jobs on two sides of a link this process shapes.

::

    from sonic_hep.workflows.netlab import Link, NetworkLab

    with NetworkLab(Link.parse("rate=100mbit,rtt=50ms")) as lab:       # refused in one line where not allowed
        address = lab.start_server("--config", "miniaod")              # `sonic server start` in the server side
        lab.run(["sonic", "run", "miniaod", "--inference", "sonic", "--server", address, ...])   # in the jobs side
        lab.shape(Link.parse("rate=1gbit,rtt=10ms,loss=0.1%"))          # the same servers, another link
        print(lab.measure(pings=20, upload=2_000_000))                  # what the link really does
    # every process in both namespaces ended, namespaces and veth pair gone

Two network namespaces (``namespaces.py``), one for the servers and one for the jobs, joined by a veth
pair; the addresses (10.77.0.1 the servers, 10.77.0.2 the jobs) exist only inside them. The rate and the
loss are shaped in the kernel on both ends of the pair (``link.py``). Delay and jitter are ``netem``'s
where the kernel has it; elsewhere a relay in user space (``relay.py``) runs in the server namespace in
front of every server, and jobs reach the servers through it. The relay costs something of its own: the
lab measures its round trip with no added delay once (``relay_base_rtt_ms``, against the bare veth's
``base_rtt_ms``) and asks it for the requested round trip less that, so a 50 ms link measures 50 ms.
``relay=True`` keeps the relay in the path at every link, even with no delay, so that points measured
at different round trips all pay the same relay cost; ``relay=False`` refuses delays it cannot make.

Nothing is left behind: :meth:`close` (the ``with`` block's end, an exception, interpreter exit) stops
every process started in the namespaces and deletes them; namespaces of runs killed before they could
(``kill -9``) are removed by the next lab (their creator's PID and start time are in their names).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from ...framework.errors import SonicError
from ...framework.inference import ProcessId
from . import namespaces as ns
from .link import Link, clear_command, shaping_commands

SERVER_ADDRESS, JOBS_ADDRESS = "10.77.0.1", "10.77.0.2"
#: the probe and the relay run as scripts (standard library only: they start in a few ms, import nothing of ours)
HERE = Path(__file__).parent
PROBE_PORT, RELAY_OFFSET = 7007, 1000  #: the relay listens at a port + 1000 for each port it relays
#: per server k (0, 1, ...): gRPC, HTTP and metrics ports inside the server namespace (nothing else is there)
GRPC_PORT, HTTP_PORT, METRICS_PORT, PORT_STEP = 8001, 8000, 8002, 10
#: the largest correction of the relay's delay after measuring it (ms): its own wake-ups cost ~0.1 ms
CALIBRATION_MS = 0.5
#: the relay and the probes stand for the wire, which never waits for a CPU: on a machine busier than its cores
#: they run ahead of the jobs and servers (a higher priority), so that the delay is the one asked for
WIRE = ["nice", "-n", "-10"]

_LIVE: weakref.WeakSet[NetworkLab] = weakref.WeakSet()
_counter = iter(range(1 << 30))


class NetworkLab:
    """Two namespaces and a shaped link; see the module docstring.

    Args:
        link (Link): the link to start with (default: unshaped).
        relay (bool | None): None: a relay only where delay is asked and the kernel has no netem; True:
            always in the path; False: never (a delay without netem is then refused).
        python (str): the interpreter of the processes the lab starts (default: this one).

    Raises:
        LabRefused: on a machine or account that cannot make namespaces (one line saying why).
    """

    def __init__(self, link: Link | None = None, relay: bool | None = None, python: str = sys.executable):
        self.link = link or Link()
        self.relay_mode = relay
        self.python = python
        self.names: dict[str, str] = {}
        self.netem = False
        self.base_rtt_ms: float | None = None
        self.relay_base_rtt_ms: float | None = None
        self.measured_rtt_ms: float | None = None  #: the round trip measured after the last shaping
        self.small_packets = False  #: TCP sends MTU-sized packets (see :meth:`shape`)
        self.servers: list[str] = []  # gRPC addresses of the servers, on the server side
        self._processes: list[tuple[str, subprocess.Popen]] = []
        self._relay: subprocess.Popen | None = None
        self._relay_delay_ms = self._relay_jitter_ms = 0.0
        self.workdir: Path | None = None

    # -- life cycle -----------------------------------------------------------------------------------
    def __enter__(self) -> NetworkLab:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> NetworkLab:
        """Makes the namespaces and the link, measures the bare round trip (and the relay's, when used); an
        open lab is returned as it is (``with NetworkLab(...).open() as lab`` opens it once)."""
        if self.names:
            return self
        problem = ns.refusal()
        if problem:
            raise ns.LabRefused(problem)
        ns.sweep_leftovers()
        tag = f"{ProcessId.current().tag}-{next(_counter)}"
        try:
            self.names = ns.create_pair(tag, SERVER_ADDRESS, JOBS_ADDRESS)
        except SonicError as err:
            raise ns.LabRefused(str(err)) from None
        _LIVE.add(self)
        try:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"{ns.PREFIX}-{tag}-"))
            self.netem = self._has_netem()
            self._start("probe", "server", [str(HERE / "probe.py"), "serve", f"{SERVER_ADDRESS}:{PROBE_PORT}"],
                        ready="probe ready", wire=True)
            self.base_rtt_ms = self._quick_rtt_ms(through_relay=False)
            if not self.netem and self.relay_mode is not False:  # the relay's own round trip, unshaped
                self._restart_relay(0.0, 0.0)
                self.relay_base_rtt_ms = self._quick_rtt_ms()
            self.shape(self.link)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stops what the lab started (servers first, with SIGTERM: they stop cleanly), then anything left in
        its namespaces, and deletes them. Safe to call twice."""
        for _, process in reversed(self._processes):
            _terminate(process, 15.0)
        self._processes.clear()
        if self._relay is not None:
            _terminate(self._relay, 5.0)
            self._relay = None
        for name in self.names.values():
            ns.remove(name)
        self.names = {}
        _LIVE.discard(self)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    # -- the link -------------------------------------------------------------------------------------
    @property
    def uses_relay(self) -> bool:
        return self._relay is not None

    def shape(self, link: Link, small_packets: bool | None = None) -> None:
        """Gives the link ``link``'s rate, loss, delay and jitter (servers keep running; relayed connections
        are cut when the relay's delay changes, as jobs between points start anew anyway).

        With loss, TCP sends MTU-sized packets (``small_packets``, by default only then): a veth passes 64 KiB
        segments, which would be dropped whole. Small packets cost the kernel more CPU per byte than a real
        NIC's segmentation offload does, so a loss point is compared with the same link without loss and with
        ``small_packets=True``."""
        small = bool(link.loss) if small_packets is None else small_packets
        needed = self.relay_mode is True or (link.delays and not self.netem)
        if needed and self.relay_mode is False:
            raise SonicError(f"network lab: {link.describe()} needs delay, and this kernel has no netem "
                             f"(relay=False forbids the user-space relay)")
        if not needed and self.uses_relay:
            _terminate(self._relay, 5.0)
            self._relay = None
        for side in ns.SIDES:
            self._tc(side, clear_command(ns.DEVICE), check=False)
            ns.ip("link", "set", "dev", ns.DEVICE, "gso_max_segs", "1" if small else "65535", namespace=self.names[side])
            for command in shaping_commands(ns.DEVICE, link, netem=self.netem):
                self._tc(side, command)
        if needed:
            # the relay's own round trip is part of the one asked for (netem's delay adds to the veth's alone)
            wanted = 0.0 if self.netem else max(0.0, (link.rtt_ms - (self.relay_base_rtt_ms or 0.0)) / 2)
            jitter = 0.0 if self.netem else link.jitter_ms
            if not self.uses_relay or (wanted, jitter) != (self._relay_delay_ms, self._relay_jitter_ms):
                self._restart_relay(wanted, jitter)
        self.link, self.small_packets = link, small
        self.measured_rtt_ms = self.rtt_ms()
        if self.uses_relay and link.rtt_ms and not link.jitter_ms:
            # a relay thread's wake-up adds ~0.1 ms to each delayed chunk: asked once more, less that. The
            # quickest quarter of the pings says it (a busy machine only ever adds), and a correction is at most
            # CALIBRATION_MS: anything larger is the machine's load, not the relay
            error = self._quick_rtt_ms() - link.rtt_ms
            if abs(error) > max(0.02, 0.005 * link.rtt_ms):
                correction = max(-CALIBRATION_MS, min(CALIBRATION_MS, error))
                self._restart_relay(max(0.0, self._relay_delay_ms - correction / 2), 0.0)
                self.measured_rtt_ms = self.rtt_ms()

    def partition(self) -> None:
        """Drops every packet both ways from now on: a silent partition (nobody is told; connections stay
        open, as when a link or a host dies). :meth:`shape` heals it."""
        for side in ns.SIDES:
            self._tc(side, clear_command(ns.DEVICE), check=False)
            for command in shaping_commands(ns.DEVICE, self.link, netem=self.netem, drop_all=True):
                self._tc(side, command)

    def _tc(self, side: str, command: list[str], check: bool = True) -> None:
        ns.run(ns.in_namespace(self.names[side], command), check=check)

    def _has_netem(self) -> bool:
        probe = ["tc", "qdisc", "add", "dev", ns.DEVICE, "root", "netem", "delay", "0ms"]
        if ns.run(ns.in_namespace(self.names["jobs"], probe), check=False).returncode != 0:
            return False
        self._tc("jobs", clear_command(ns.DEVICE), check=False)
        return True

    def _restart_relay(self, delay_ms: float, jitter_ms: float) -> None:
        if self._relay is not None:
            _terminate(self._relay, 5.0)
        ports = [PROBE_PORT, *(int(address.rpartition(":")[2]) for address in self.servers)]
        routes = [f"--route={SERVER_ADDRESS}:{port + RELAY_OFFSET}={SERVER_ADDRESS}:{port}" for port in ports]
        self._relay = self._spawn("relay", "server", [str(HERE / "relay.py"), *routes,
                                                      f"--delay-ms={delay_ms:g}", f"--jitter-ms={jitter_ms:g}"],
                                  ready="relay ready", wire=True)
        self._relay_delay_ms, self._relay_jitter_ms = delay_ms, jitter_ms

    # -- addresses ------------------------------------------------------------------------------------
    def address(self, server_address: str) -> str:
        """Where jobs reach a server of the lab: through the relay when it is in the path."""
        if not self.uses_relay:
            return server_address
        host, _, port = server_address.rpartition(":")
        return f"{host}:{int(port) + RELAY_OFFSET}"

    @property
    def grpc_addresses(self) -> list[str]:
        """The jobs' addresses of every server started, in order."""
        return [self.address(server) for server in self.servers]

    # -- processes ------------------------------------------------------------------------------------
    def start_server(self, *server_args: str, timeout: float = 180.0) -> str:
        """Starts ``sonic server start SERVER_ARGS`` in the server namespace (its own ports, its registry
        record in the lab's folder) and returns the address jobs reach it at.

        Raises:
            SonicError: the server exited or was not ready in ``timeout`` s (with the end of its output).
        """
        k = len(self.servers)
        ports = {"grpc": GRPC_PORT + PORT_STEP * k, "http": HTTP_PORT + PORT_STEP * k,
                 "metrics": METRICS_PORT + PORT_STEP * k}
        command = ["-m", "sonic_hep.workflows.cli", "server", "start", *server_args, "--host", SERVER_ADDRESS,
                   *(f"--{kind}-port={port}" for kind, port in ports.items())]
        self._start(f"server{k}", "server", command, ready="Triton server ready", timeout=timeout,
                    env={"SONIC_HEP_STATE": str(self.workdir / "state")})
        self.servers.append(f"{SERVER_ADDRESS}:{ports['grpc']}")
        if self.uses_relay:
            self._restart_relay(self._relay_delay_ms, self._relay_jitter_ms)
        return self.address(self.servers[-1])

    def stop_servers(self) -> None:
        """Stops every server started (SIGTERM: each stops cleanly); the next one gets the first ports again."""
        for name, process in [entry for entry in self._processes if entry[0].startswith("server")]:
            _terminate(process, 30.0)
        self._processes = [entry for entry in self._processes if not entry[0].startswith("server")]
        self.servers = []

    def popen(self, command: list[str], side: str = "jobs", **kwargs: Any) -> subprocess.Popen:
        """``command`` started in one side's namespace (``python`` as the first word is the lab's python;
        ``sonic`` is ``python -m sonic_hep.workflows.cli``)."""
        return subprocess.Popen(ns.in_namespace(self.names[side], self._resolve(command)), **kwargs)

    def run(self, command: list[str], side: str = "jobs", timeout: float | None = None,
            **kwargs: Any) -> subprocess.CompletedProcess:
        """Runs ``command`` to its end in one side's namespace (as :meth:`popen`); output captured as text
        unless told otherwise."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("check", False)
        return subprocess.run(ns.in_namespace(self.names[side], self._resolve(command)), timeout=timeout, **kwargs)

    def _resolve(self, command: list[str]) -> list[str]:
        if command[:1] == ["python"]:
            return [self.python, *command[1:]]
        if command[:1] == ["sonic"]:
            return [self.python, "-m", "sonic_hep.workflows.cli", *command[1:]]
        return list(command)

    def _spawn(self, name: str, side: str, args: list[str], ready: str, timeout: float = 30.0,
               env: dict[str, str] | None = None, wire: bool = False) -> subprocess.Popen:
        """A python process of the lab, started in ``side`` (at the wire's priority with ``wire``) and awaited
        until its output shows ``ready``."""
        log_path = self.workdir / f"{name}.log"
        start = log_path.stat().st_size if log_path.exists() else 0  # a restarted process appends to its log
        with open(log_path, "ab") as log:
            command = [*(WIRE if wire else []), self.python, *args]
            process = subprocess.Popen(ns.in_namespace(self.names[side], command), stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env={**os.environ, **(env or {})})
        deadline = time.monotonic() + timeout
        while ready not in log_path.read_bytes()[start:].decode(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                _terminate(process, 5.0)
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
                state = f"exited ({process.returncode})" if process.returncode is not None else f"not ready in {timeout:.0f} s"
                raise SonicError(f"network lab: {name} {state}; its output:\n{tail}")
            time.sleep(0.05)
        return process

    def _start(self, name: str, side: str, args: list[str], ready: str, timeout: float = 30.0,
               env: dict[str, str] | None = None, wire: bool = False) -> None:
        self._processes.append((name, self._spawn(name, side, args, ready, timeout, env, wire)))

    # -- measuring the link ---------------------------------------------------------------------------
    def measure(self, pings: int = 10, upload: int = 0, download: int = 0, through_relay: bool = True) -> dict[str, Any]:
        """Round trips (ms) and transfer times (s) from the jobs' side to the server's, as a job's
        connections see them (through the relay when it is in the path, unless ``through_relay=False``)."""
        target = f"{SERVER_ADDRESS}:{PROBE_PORT}"
        if through_relay:
            target = self.address(target)
        result = self.run([*WIRE, self.python, str(HERE / "probe.py"), "measure", target, f"--pings={pings}",
                           f"--upload={upload}", f"--download={download}"], timeout=300)
        if result.returncode != 0:
            raise SonicError(f"network lab: the probe failed: {(result.stderr.strip() or 'no output').splitlines()[-1]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def rtt_ms(self, pings: int = 15) -> float:
        """The median round trip a job's connection sees now (ms)."""
        return statistics.median(self.measure(pings=pings)["rtt_ms"])

    def _quick_rtt_ms(self, pings: int = 20, through_relay: bool = True) -> float:
        """The quickest quarter's round trip (ms): what the link itself takes, with little of the machine's load."""
        return statistics.quantiles(self.measure(pings=pings, through_relay=through_relay)["rtt_ms"], n=4)[0]

    def describe(self) -> dict[str, Any]:
        """The lab as a report records it."""
        return {"link": self.link.describe(), "rate_mbit": self.link.rate_mbit, "rtt_ms": self.link.rtt_ms,
                "jitter_ms": self.link.jitter_ms, "loss": self.link.loss, "netem": self.netem,
                "relay": self.uses_relay, "relay_delay_ms_each_way": self._relay_delay_ms if self.uses_relay else None,
                "small_packets": self.small_packets,
                "base_rtt_ms": self.base_rtt_ms, "relay_base_rtt_ms": self.relay_base_rtt_ms,
                "measured_rtt_ms": self.measured_rtt_ms}

    def server_pids(self) -> list[int]:
        """The ``sonic server start`` process of each server started (its children are the Triton server)."""
        return [process.pid for name, process in self._processes if name.startswith("server")]

    def relay_pid(self) -> int | None:
        """The relay's process (its CPU is the relay's cost on this machine), None without one."""
        return self._relay.pid if self._relay is not None else None


def _terminate(process: subprocess.Popen, grace_s: float) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@atexit.register
def _close_all() -> None:
    for lab in list(_LIVE):
        lab.close()
