"""Reliability: what faults cost running jobs (killed, stopped, restarted servers) and whether hostile clients crash a server.

Every scenario runs ``--jobs`` concurrent ``sonic run demo_inference`` jobs (real subprocesses, ``--events``
toy-jet events each, ``--timeout-s`` per request, fallback on) against two managed Triton servers, and
injects its faults once both servers are busy with the jobs:

* ``none`` — no fault: the reference wall time per job;
* ``sigstop`` — one server SIGSTOPped for ``--stop-s`` (a hung server: it refuses nothing, answers nothing),
  then SIGCONTed. Goal: extra wall time per job ≤ 3 × ``timeout_s`` (its circuit breaker takes it out
  after a few deadlines; before, every request sent to it waited ``allowed_tries × timeout_s``);
* ``sigstop-no-breaker`` (``--without-breaker``) — the same with the breaker's threshold out of reach, to
  show what the breaker saves;
* ``sigkill`` — one server SIGKILLed, restarted on the same ports ``--restart-after-s`` later;
* ``chaos`` — one server SIGKILLed, the other SIGSTOPped until every job has started its local
  fallback server, SIGCONTed, the first restarted (the schedule of ``tests/reliability/test_chaos.py``).

For each: faults injected, jobs completed (exit 0), events lost (events a job did not write, or wrote
different from a clean direct run: ``sonic compare``'s tolerance), deadlines the jobs waited out, and the
extra wall time per job against ``none``. Then the **fuzz**: ``--fuzz-requests`` hostile requests from 16
concurrent raw clients (``_fuzz.py``) to one server holding every shipped model; server crashes (goal 0),
garbled or culprit-less messages and failed valid requests (goal 0 each).

Results go to ``--out``: ``reliability.md`` and ``reliability.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...data.demo.models import REPOSITORY as DEMO_REPOSITORY
from ...framework.inference.serving import TritonServer
from ..compare import compare_files
from ._report import BenchReport, header
from ...framework.paths import PROJECT_ROOT

PROJECT = PROJECT_ROOT
#: every shipped repository a CPU server loads (the fuzz target)
CPU_REPOSITORIES = [PROJECT / "data" / "models" / name for name in ("demo", "miniaod", "protodune", "exatrkx")]
SCENARIOS = ("none", "sigstop", "sigstop-no-breaker", "sigkill", "chaos")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs", type=int, default=3, help="concurrent sonic run jobs per scenario")
    parser.add_argument("--events", type=int, default=3000, help="events per job")
    parser.add_argument("--timeout-s", type=float, default=2.0, help="the jobs' per-request deadline (timeout_s)")
    parser.add_argument("--stop-s", type=float, default=20.0, help="how long the sigstop scenarios keep a server stopped")
    parser.add_argument("--restart-after-s", type=float, default=5.0, help="sigkill: seconds before the restart")
    parser.add_argument("--without-breaker", action="store_true",
                        help="also run sigstop with the circuit breaker out of reach (what it saves)")
    parser.add_argument("--fuzz-requests", type=int, default=2000, help="hostile requests (0: no fuzz)")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, help="run only these scenarios")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 2 jobs × 1000 events, a 4 s stop, 200 fuzz requests")


# -- jobs ------------------------------------------------------------------------------------------------------
@dataclass
class Jobs:
    """Concurrent ``sonic run`` jobs, each with its own output, timing report and fallback work folder."""

    folder: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    started: list[float] = field(default_factory=list)
    ended: dict[int, float] = field(default_factory=dict)

    @classmethod
    def start(cls, folder: Path, count: int, servers: list[str], settings: list[str]) -> Jobs:
        jobs = cls(folder)
        folder.mkdir(parents=True)
        for i in range(count):
            fallback = f"services.inference.fallback_server={{workdir: '{folder / f'fallback-{i}'}', models: [demo_mlp]}}"
            args = [*sonic_run(folder / f"job-{i}.root", settings), "--timing-json", str(folder / f"job-{i}.json"),
                    "--inference", "sonic", f"-p={fallback}", "-p=services.inference.fallback=always"]  # servers named
            for url in servers:
                args += ["--server", url]
            jobs.started.append(time.monotonic())
            with open(folder / f"job-{i}.log", "w") as log:  # the child keeps its own descriptor
                jobs.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log))
        return jobs

    def poll(self) -> bool:
        """Records the end of finished jobs; True when all have ended."""
        for i, proc in enumerate(self.procs):
            if i not in self.ended and proc.poll() is not None:
                self.ended[i] = time.monotonic()
        return len(self.ended) == len(self.procs)

    def running(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.poll() and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in self.running():  # past the limit: counted as not completed
            proc.kill()
            proc.wait()
        self.poll()

    def results(self, direct: Path, events: int) -> list[dict[str, Any]]:
        rows = []
        for i, proc in enumerate(self.procs):
            output, timing = self.folder / f"job-{i}.root", self.folder / f"job-{i}.json"
            row: dict[str, Any] = {"job": i, "exit": proc.returncode, "wall_s": self.ended[i] - self.started[i],
                                   "written": 0, "equal": False}
            if proc.returncode == 0 and output.exists():
                comparison = compare_files(str(direct), str(output))
                row.update(written=comparison.entries[1], equal=comparison.equal)
            if timing.exists():
                report = json.loads(timing.read_text()).get("inference", {})
                row["deadlines"] = sum(report.get("deadlines", {}).values())
                row["out_of_rotation"] = report.get("out_of_rotation", {})
                row["fallback"] = report.get("fallback") is not None
            row["lost"] = events - row["written"] if row["equal"] else events
            if proc.returncode != 0:
                row["error"] = (self.folder / f"job-{i}.log").read_text(errors="replace").strip().splitlines()[-1:]
            rows.append(row)
        return rows


def sonic_run(output: Path, settings: list[str]) -> list[str]:
    return [sys.executable, "-m", "sonic_hep.workflows.cli", "run", "demo_inference", "--no-progress", "-q",
            "-o", str(output), *[f"-p={s}" for s in settings]]


def answered(server: TritonServer) -> int:
    """Requests of ``demo_mlp`` the server answered (0 when it does not answer)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = client.get_inference_statistics("demo_mlp", client_timeout=2).model_stats
        return stats[0].inference_stats.success.count if stats else 0
    except Exception:  # noqa: BLE001 - a dead or stopped server answered nothing more
        return 0
    finally:
        client.close()


def has_server_child(pid: int) -> bool:
    """Whether a ``tritonserver`` runs below process ``pid`` (a job's fallback server)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            names[int(entry.name)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    for child, name in names.items():
        ancestor = parents.get(child)
        while ancestor and ancestor != pid:
            ancestor = parents.get(ancestor)
        if ancestor == pid and name == "tritonserver":
            return True
    return False


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# -- scenarios -------------------------------------------------------------------------------------------------
class Bench:
    """The two shared servers and the reference output, kept across scenarios."""

    def __init__(self, args: argparse.Namespace, work: Path):
        self.args, self.work = args, work
        self.settings = [f"source.events={args.events}", "options.progress=false",
                         f"services.inference.timeout_s={args.timeout_s}", "services.inference.breaker_backoff_s=0.5",
                         "services.inference.breaker_max_backoff_s=2"]
        self.direct = work / "direct.root"
        subprocess.run(sonic_run(self.direct, self.settings), check=True, timeout=600, capture_output=True)
        self.servers = [self._server(f"server-{i}") for i in range(2)]

    def _server(self, name: str, like: TritonServer | None = None) -> TritonServer:
        ports = {f"{k}_port": v for k, v in (like.ports if like else {}).items()}
        return TritonServer([DEMO_REPOSITORY], models=["demo_mlp"], workdir=self.work / f"{name}-{time.monotonic_ns()}",
                            **ports).start()

    def restart(self, index: int) -> None:
        old = self.servers[index]
        old.stop()
        self.servers[index] = self._server(f"server-{index}", like=old)

    def scenario(self, name: str) -> dict[str, Any]:
        args = self.args
        settings = list(self.settings)
        if name == "sigstop-no-breaker":
            settings.append("services.inference.breaker_threshold=1000000000")
        first, second = self.servers
        before = (answered(first), answered(second))
        jobs = Jobs.start(self.work / name, args.jobs, [s.grpc_url for s in self.servers], settings)
        faults: list[str] = []
        def both_busy() -> bool:
            return answered(first) - before[0] >= 200 and answered(second) - before[1] >= 200

        # jobs too short to make both servers busy end first: nothing is left to inject a fault into
        wait_for(lambda: both_busy() or jobs.poll(), 120)
        if not both_busy():
            faults.append("none: the servers never got busy")
        elif name.startswith("sigstop"):
            os.kill(second.pid, signal.SIGSTOP)
            faults.append(f"SIGSTOP server 2 for {args.stop_s:g} s")
            try:
                wait_for(lambda: jobs.poll(), args.stop_s)
            finally:
                os.kill(second.pid, signal.SIGCONT)
            faults.append("SIGCONT server 2")
        elif name == "sigkill":
            first.kill()
            faults.append("SIGKILL server 1")
            wait_for(lambda: jobs.poll(), args.restart_after_s)
            self.restart(0)
            faults.append(f"restart server 1 after {args.restart_after_s:g} s")
        elif name == "chaos":
            first.kill()
            os.kill(second.pid, signal.SIGSTOP)
            faults += ["SIGKILL server 1", "SIGSTOP server 2"]
            try:
                wait_for(lambda: all(p.poll() is not None or has_server_child(p.pid) for p in jobs.procs), 120)
            finally:
                os.kill(second.pid, signal.SIGCONT)
            faults.append("SIGCONT server 2 (every job on its fallback)")
            self.restart(0)
            faults.append("restart server 1")
        jobs.wait(900)
        rows = jobs.results(self.direct, args.events)
        return {"scenario": name, "faults": faults, "jobs": rows, "completed": sum(r["exit"] == 0 for r in rows),
                "events_lost": sum(r["lost"] for r in rows), "deadlines": sum(r.get("deadlines", 0) for r in rows),
                "wall_s": [r["wall_s"] for r in rows]}

    def close(self) -> None:
        for server in self.servers:
            server.stop()


def fuzz_server(requests: int, work: Path) -> dict[str, Any]:
    """Hostile requests to one server holding every shipped model; did it survive?"""
    from ._fuzz import fuzz, served_models

    with TritonServer(CPU_REPOSITORIES, workdir=work / "fuzz-server") as server:
        models = served_models(server.grpc_url)
        result = fuzz(server.grpc_url, requests=requests, clients=16, processes=2, models=models, seed=11,
                      time_limit_s=180)
        alive = server.alive()
        return {"requests": result.requests, "models": len(models), "server_crashes": 0 if alive else 1,
                "server_log_tail": "" if alive else server.log_tail(40),
                "hung_clients": result.hung, "bad_messages": len(result.bad_messages),
                "valid_failures": len(result.valid_failures), "seconds": result.seconds,
                "outcomes": {case: dict(counts) for case, counts in result.outcomes.items()},
                "summary": result.summary()}


# -- report ----------------------------------------------------------------------------------------------------
def extra_times(scenarios: list[dict[str, Any]]) -> None:
    """Adds each scenario's extra wall time per job against the no-fault run (median of the jobs)."""
    reference = next((s for s in scenarios if s["scenario"] == "none"), None)
    if reference is None:
        return
    base = statistics.median(reference["wall_s"])
    for s in scenarios:
        s["extra_s_per_job"] = statistics.median(s["wall_s"]) - base
        s["extra_s_max"] = max(s["wall_s"]) - base


def markdown(results: dict[str, Any]) -> str:
    args = results["settings"]
    lines = [*header("sonic bench reliability", results),
             f"{args['jobs']} concurrent `sonic run demo_inference` jobs × {args['events']} events per scenario, "
             f"timeout_s {args['timeout_s']:g} s, two managed servers, fallback on.\n",
             "| scenario | faults injected | jobs completed | events lost | deadlines waited | "
             "extra wall s/job (median, max) | goal |",
             "|---|---|---:|---:|---:|---:|---|"]
    for s in results["scenarios"]:
        goal = ""
        if s["scenario"] == "sigstop":
            goal = f"≤ {3 * args['timeout_s']:g} s: {'met' if s.get('extra_s_per_job', 0) <= 3 * args['timeout_s'] else 'MISSED'}"
        extra = (f"{s['extra_s_per_job']:+.1f}, {s['extra_s_max']:+.1f}" if "extra_s_per_job" in s else "")
        lines.append(f"| {s['scenario']} | {'; '.join(s['faults']) or '—'} | {s['completed']}/{len(s['jobs'])} | "
                     f"{s['events_lost']} | {s['deadlines']} | {extra} | {goal} |")
    lines.append("\nGoal: every job completed, 0 events lost.\n")
    fz = results.get("fuzz")
    if fz:
        lines += ["## Hostile clients (fuzz)\n",
                  f"{fz['requests']} requests from 16 concurrent raw tritonclient clients to one server holding "
                  f"{fz['models']} models, in {fz['seconds']:.0f} s.\n",
                  "| server crashes | hung clients | garbled or culprit-less messages | valid requests failed |",
                  "|---:|---:|---:|---:|",
                  f"| {fz['server_crashes']} | {fz['hung_clients']} | {fz['bad_messages']} | {fz['valid_failures']} |",
                  "\nGoal: 0 in every column.\n", "```", fz["summary"], "```"]
        if fz["server_log_tail"]:
            lines += ["\nThe server died; the end of its log:\n", "```", fz["server_log_tail"], "```"]
    else:
        lines.append("Fuzz: not run (--fuzz-requests 0).")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.quick:
        args.jobs, args.events, args.stop_s, args.restart_after_s = 2, 1000, 4.0, 2.0
        args.fuzz_requests = min(args.fuzz_requests, 200)
    report = BenchReport.start("reliability", args.out)
    names = args.scenarios or [s for s in SCENARIOS if s != "sigstop-no-breaker" or args.without_breaker]
    if "none" not in names:
        names = ["none", *names]
    results: dict[str, Any] = {**report.fields(), "settings": vars(args).copy(), "scenarios": []}
    results["settings"].pop("verbose", None)
    with tempfile.TemporaryDirectory(prefix="sonic-bench-reliability-") as tmp:
        work = Path(tmp)
        bench = Bench(args, work)
        try:
            for name in names:
                print(f"scenario {name} ...", file=sys.stderr, flush=True)
                results["scenarios"].append(bench.scenario(name))
        finally:
            bench.close()
        extra_times(results["scenarios"])
        if args.fuzz_requests > 0:
            print("fuzz ...", file=sys.stderr, flush=True)
            results["fuzz"] = fuzz_server(args.fuzz_requests, work)
    report.write(markdown(results), results)
    failed = any(s["completed"] < len(s["jobs"]) or s["events_lost"] for s in results["scenarios"]
                 if s["scenario"] != "sigstop-no-breaker")
    return 1 if failed or (results.get("fuzz") or {}).get("server_crashes") else 0
