"""A one-line description of the machine a benchmark ran on (CPU model, cores, memory, GPU if any)."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import psutil

        memory = f", {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        memory = ""
    gpu = ""
    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                   text=True, timeout=10).stdout.strip().splitlines()
            gpu = f", GPU: {', '.join(names)}" if names else ""
        except (OSError, subprocess.SubprocessError):
            gpu = ""
    return f"{cpu}, {cores} cores{memory}{gpu}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def load_average() -> float | None:
    """The 1-minute load average (None where the system has none). Printed beside a bench's times: on a
    machine busier than its cores a wall clock counts the waits for a core too, and the reader must know."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def describe_load(before: float | None, after: float | None) -> str:
    """``load 8.2 → 7.9 on 2 cores``: the machine's business over a bench, for its page."""
    if before is None or after is None:
        return "load: unknown"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    busy = " (busier than its cores: wall times include waits for a core)" if max(before, after) > (cores or 1) else ""
    return f"load (1-min average) {before:.1f} → {after:.1f} on {cores} cores{busy}"


def bench_command(name: str) -> str:
    """The command line that ran this bench, for its report: ``sonic bench NAME ...`` with the output folder
    written ``OUT`` (a temporary path says nothing to a reader); just ``sonic bench NAME`` when not run from
    the command line."""
    argv = sys.argv[1:]
    if argv[:2] != ["bench", name]:
        return f"sonic bench {name}"
    words = []
    for i, word in enumerate(argv):
        if i > 0 and argv[i - 1] == "--out":
            word = "OUT"
        elif word.startswith("--out="):
            word = "--out=OUT"
        words.append(word)
    return " ".join(["sonic", *words])


class CoreSplit:
    """``--server-cpus``: the server on some cores, this process (its threads, clients and load
    processes) on the others, as a node shared by a Triton server and jobs is set up. With
    ``clients="all"`` the clients keep every core and only the server is confined, as on a small
    machine where a job starts its own server and should not give up a core to it.

    Make it before starting anything; :meth:`pin_clients` once the server has started (the server
    inherits nothing from the pinning: it gets ``server_cpus`` explicitly).
    """

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, clients: str = "the clients", choice: bool = False) -> None:
        """``--server-cpus`` (and, with ``choice``, ``--client-cpus``): one spelling and one meaning in every
        benchmark that starts its own server."""
        parser.add_argument("--server-cpus", metavar="LIST",
                            help=f"pin the bench's local server(s) to these cores (e.g. 0-7) and {clients} to the "
                                 "rest (default: no pinning)")
        if choice:
            parser.add_argument("--client-cpus", choices=("rest", "all"), default="rest",
                                help="with --server-cpus: the clients on the cores the servers leave (rest), or on "
                                     "every core, the servers' too (all: only the server is confined, as on a small "
                                     "machine whose job starts its own server)")

    def __init__(self, server_cpus: str | None, clients: str = "rest"):
        from ...framework.inference.serving import parse_cpus

        if clients not in ("rest", "all"):
            raise SystemExit(f"--client-cpus must be rest or all, not {clients!r}")
        self.text = server_cpus
        self.server_cpus = parse_cpus(server_cpus) if server_cpus else None
        self.all_cpus = sorted(os.sched_getaffinity(0))
        self.clients_everywhere = clients == "all"
        self.client_cpus = self.all_cpus if self.clients_everywhere else \
            sorted(os.sched_getaffinity(0) - set(self.server_cpus or []))
        if not self.client_cpus:
            raise SystemExit(f"--server-cpus {server_cpus} leaves no core for the clients")

    def pin_clients(self) -> None:
        if self.server_cpus and not self.clients_everywhere:  # threads and processes started from now on inherit it
            os.sched_setaffinity(0, self.client_cpus)

    def describe(self) -> str:
        if not self.server_cpus:
            return "none (server and clients share every core)"
        if self.clients_everywhere:
            return f"server on cores {self.text}, clients on all {len(self.client_cpus)} cores (the server's too)"
        return f"server on cores {self.text}, clients on the {len(self.client_cpus)} other cores"
