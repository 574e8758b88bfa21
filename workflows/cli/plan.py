"""``sonic plan``: from measured timing, how many CPU jobs one inference server feeds (68:1 in the
ProtoDUNE SONIC paper) and how many jobs a network link carries before it saturates (~600 on 100 Gb/s in the
Exa.TrkX-as-a-service estimates).

Give timing reports of the workflow's jobs (``sonic run --timing-json``, or task directories). The
server's compute time per event comes from Triton's statistics in a SONIC run's report, or from a
report of direct inference on the server's device (``--server-timing``), or ``--server-ms-per-event``.
Bytes per event come from the inference report's byte counters, or from the measured rows per
event and the models' shapes (``--repository``; a shipped repository such as ``data/models/miniaod`` is found from
any working directory), or ``--bytes-per-event``.

The knee is where the time per event starts to rise: the flat line (one job alone) times the most events
per second the server, the host's cores when jobs share them (``--host-cores``), or the link they share
(``--link-gbps``) let through; the report says which bound applies (see ``workflows/grid/plan.py``).
``--rtt-ms`` plans for jobs that far from servers measured close to them (bytes ÷ rate and round trips added
to a job's time alone).

``--json`` prints the plan as JSON instead of text (``--json FILE`` writes it there and prints the text).
``--simulate`` adds a discrete-event simulation (``workflows/grid/simulate.py``) of ``--jobs`` jobs on
``--servers`` servers with the measured times and bytes, for the queues, batching and link load the
arithmetic leaves out.

Examples::

    sonic plan task-cpu/ --server-timing gpu-direct.json --bytes-per-event 15.6e6 --link-gbps 100
    sonic plan job.json --json                                        # the plan as JSON on stdout
    sonic plan job.json --host-cores 2 --server-on-host               # jobs and a CPU server on 2 cores
    sonic plan job.json --simulate --jobs 10 50 100 --servers 2 --max-batch 4 --queue-delay-ms 1
    sonic plan job.json --link-gbps 1 --rtt-ms 50                     # jobs 50 ms away on a 1 Gb/s link
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...framework.inference import resolve_repository
from ..grid.errors import GridError
from ..grid.compression_pays import CompressionPays, compression_pays
from ..grid.compression_pays import report_lines as compression_lines
from ..grid.plan import Measurement, Plan, bytes_from_repository, measure, plan, report


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("plan", help="CPU jobs per inference server, and the job cap for a network link",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timing", nargs="*", metavar="REPORT", help="timing JSON files or task directories of the jobs")
    parser.add_argument("--other-ms-per-event", type=float, metavar="MS",
                        help="job time per event outside inference (instead of, or overriding, the reports)")
    parser.add_argument("--server-timing", nargs="+", metavar="REPORT",
                        help="timing report(s) of direct inference on the server's device")
    parser.add_argument("--server-ms-per-event", type=float, metavar="MS", help="server compute time per event")
    parser.add_argument("--bytes-per-event", type=float, metavar="B", help="bytes sent + received per event")
    parser.add_argument("--repository", action="append", metavar="DIR",
                        help="model repository: bytes per event from the measured rows and the models' shapes")
    parser.add_argument("--link-gbps", type=float, default=100.0, help="link bandwidth in Gb/s (default: 100)")
    parser.add_argument("--link-utilisation", type=float, default=0.8,
                        help="fraction of the link jobs may use (default: 0.8)")
    parser.add_argument("--server-utilisation", type=float, default=1.0,
                        help="target busy fraction of a server (default: 1.0, saturation)")
    parser.add_argument("--latency-ms-per-event", type=float, metavar="MS",
                        help="a job's wait on inference per event with the server to itself (for the knee; default: "
                             "the wait in a SONIC job report, else the server time)")
    parser.add_argument("--host-cores", type=float, metavar="C",
                        help="CPU cores the jobs share on one host (default: each job has its own: only the server "
                             "bounds the knee)")
    parser.add_argument("--cpu-ms-per-event", type=float, metavar="MS",
                        help="a job's CPU time per event (default: CPU time / events of the job reports)")
    parser.add_argument("--rtt-ms", type=float, metavar="MS",
                        help="plan for jobs this round trip away from servers measured close to them: a job alone "
                             "also waits B / link rate and --round-trips round trips per event (and so does --simulate)")
    parser.add_argument("--round-trips", type=float, default=1.0, metavar="R",
                        help="round trips an event waits in turn (default: 1, its requests sent together)")
    parser.add_argument("--server-on-host", action="store_true",
                        help="a CPU server computes on those same cores: its compute per event counts as host CPU")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="the plan as JSON: on stdout instead of the text, or written to FILE")
    packed = parser.add_argument_group("compression (sonic bench compression measures both numbers)")
    packed.add_argument("--compression-ratio", type=float, metavar="R",
                        help="bytes on the wire without gRPC compression / with it: the plan says below which "
                             "link rate per job compressing pays")
    packed.add_argument("--compression-cpu-ms-per-event", type=float, metavar="MS",
                        help="CPU that compression adds per event, job and server together")
    sim = parser.add_argument_group("simulation (--simulate)")
    sim.add_argument("--simulate", action="store_true", help="simulate jobs, servers and the link (see above)")
    sim.add_argument("--jobs", type=int, nargs="+", metavar="J", help="jobs to simulate (default: around the knee)")
    sim.add_argument("--servers", type=int, default=1, help="servers (default: 1)")
    sim.add_argument("--instances", type=int, default=1, help="executions at a time per server (default: 1)")
    sim.add_argument("--max-batch", type=int, default=1, help="requests per execution, dynamic batching (default: 1)")
    sim.add_argument("--queue-delay-ms", type=float, default=0.0, help="dynamic batching's queue delay (default: 0)")
    sim.add_argument("--batch-fixed", type=float, default=0.0,
                     help="share of a request's server time a batch pays once (default: 0, batching saves nothing)")
    sim.add_argument("--service-cv", type=float, default=0.0,
                     help="coefficient of variation of the server time (default: 0, deterministic)")
    sim.add_argument("--other-cv", type=float, default=0.0, help="coefficient of variation of t_other (default: 0)")
    sim.add_argument("--requests-per-event", type=float, metavar="R",
                     help="requests per event (default: measured in the job reports, else 1)")
    sim.add_argument("--sent-fraction", type=float, default=None,
                     help="share of the bytes per event that is sent (default: measured, else 1)")
    sim.add_argument("--events", type=int, default=40, help="events per simulated job (default: 40)")
    sim.add_argument("--no-link", action="store_true", help="simulate without the link")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    job = measure(args.timing) if args.timing else None
    server = measure(args.server_timing) if args.server_timing else None
    sources: dict[str, str] = {}
    if args.other_ms_per_event is not None:
        other, sources["t_other"] = args.other_ms_per_event / 1000, "given"
    elif job is not None:
        basis = "wall - wait on inference, or module time per thread"
        other, sources["t_other"] = job.other_s_per_event, f"job reports: {basis}"
    else:
        raise GridError("give timing reports of the jobs, or --other-ms-per-event")
    server_s = None
    if args.server_ms_per_event is not None:
        server_s, sources["t_server"] = args.server_ms_per_event / 1000, "given"
    elif server is not None:
        direct = server.mode != "sonic" or server.server_s_per_event is None
        server_s = server.wait_s_per_event if direct else server.server_s_per_event
        sources["t_server"] = "server reports: " + ("wait on direct inference" if direct else "Triton compute")
    elif job is not None and job.server_s_per_event:
        server_s, sources["t_server"] = job.server_s_per_event, "job reports: Triton compute statistics"
    bytes_per_event = None
    if args.bytes_per_event is not None:
        bytes_per_event, sources["B"] = args.bytes_per_event, "given"
    elif job is not None and job.bytes_per_event:
        bytes_per_event, sources["B"] = job.bytes_per_event, "job reports: inference byte counters"
    elif job is not None and args.repository and job.rows_per_event:
        # relative paths that do not exist here name the shipped repositories, as in the configurations
        repositories = [resolve_repository(path) for path in args.repository]
        bytes_per_event, notes = bytes_from_repository(job.rows_per_event, repositories)
        sources["B"] = "rows per event x bytes per row of " + ", ".join(job.rows_per_event)
        for note in notes:
            print(f"sonic: note: {note}", file=sys.stderr)
    latency = None
    if args.latency_ms_per_event is not None:
        latency, sources["t_ml"] = args.latency_ms_per_event / 1000, "given"
    elif job is not None and job.mode == "sonic" and job.wait_s_per_event > 0:
        # a one-stream job's time per event less t_other; its producers' waits overlap one another and its
        # own work, so their sum (the wait) can only be an upper bound
        measured = max(0.0, (job.steady_wall_s_per_event or job.wall_s_per_event) - other)
        latency = min(job.wait_s_per_event, measured)
        sources["t_ml"] = ("job reports: " + ("wall per event after the first - t_other" if latency < job.wait_s_per_event
                                              else "wait on inference") +
                           " (unloaded only if the job had the server to itself)")
    host_cpu = None
    if args.host_cores is not None:
        if args.cpu_ms_per_event is not None:
            host_cpu, sources["c_host"] = args.cpu_ms_per_event / 1000, "given"
        elif job is not None and job.cpu_s_per_event > 0:
            host_cpu, sources["c_host"] = job.cpu_s_per_event, "job reports: CPU time per event (after the first where marked)"
        else:
            raise GridError("--host-cores needs the job's CPU per event: job reports or --cpu-ms-per-event")
        if args.server_on_host:
            if not server_s:
                raise GridError("--server-on-host needs the server time per event (--server-ms-per-event or reports)")
            host_cpu += server_s
            sources["c_host"] += " + the server's compute per event"
    fraction = args.sent_fraction if args.sent_fraction is not None else (job.sent_fraction if job else None)
    result = plan(other, server_s, bytes_per_event, args.link_gbps, args.link_utilisation, args.server_utilisation,
                  latency, cores=args.host_cores, host_cpu_s_per_event=host_cpu, sent_fraction=fraction,
                  rtt_s=None if args.rtt_ms is None else args.rtt_ms / 1000, round_trips=args.round_trips)
    document: dict[str, Any] = {**result.as_dict(), "sources": sources,
                                "job_reports": list(job.sources) if job else [],
                                "server_reports": list(server.sources) if server else [],
                                "measurement": job.__dict__ if job else None}
    text = report(result, job, server, sources)
    if args.compression_ratio is not None or args.compression_cpu_ms_per_event is not None:
        verdict = compression(args, result)
        document["compression"] = verdict.as_dict()
        text += "\n" + "\n".join(compression_lines(verdict, args.link_gbps, result.link_job_cap))
    if args.simulate:
        document["simulation"] = simulation(args, result, job)
        text += "\n" + simulation_text(document["simulation"])
    if args.json == "-":
        print(json.dumps(document, indent=1, default=list))
        return 0
    print(text)
    if args.json:
        from ...framework.atomic import PendingText

        pending = PendingText(args.json, "plan JSON")
        try:
            pending.write(json.dumps(document, indent=1, default=list))
            pending.commit()
        except BaseException:
            pending.abort()
            raise
    return 0


def compression(args: argparse.Namespace, result: Plan) -> CompressionPays:
    """Whether gRPC compression pays for these jobs (``workflows/grid/compression_pays.py``)."""
    if args.compression_ratio is None or args.compression_cpu_ms_per_event is None:
        raise GridError("give both --compression-ratio and --compression-cpu-ms-per-event (sonic bench compression "
                        "measures them)")
    if not result.bytes_per_event:
        raise GridError("--compression-ratio needs the bytes per event: job reports that count them, --repository "
                        "or --bytes-per-event")
    return compression_pays(result.bytes_per_event, args.compression_ratio, args.compression_cpu_ms_per_event / 1000)


def simulation(args: argparse.Namespace, result: Plan, job: Measurement | None) -> dict[str, Any]:
    """The simulated scenarios (one per ``--jobs``) from the plan's measured inputs."""
    from ..grid.simulate import Scenario, from_measurement, simulate

    if not result.server_s_per_event:
        raise GridError("--simulate needs the server time per event (--server-ms-per-event or reports with it)")
    requests = args.requests_per_event or (sum(job.requests_per_event.values()) if job and job.requests_per_event else 1.0)
    fraction = args.sent_fraction if args.sent_fraction is not None else (job.sent_fraction if job else None)
    # the jobs' own CPU on the host's cores; a server on the host executes there too (its compute is its work)
    job_cpu = (result.host_cpu_s_per_event or 0.0) - (result.server_s_per_event if args.server_on_host else 0.0)
    settings = from_measurement(result.other_s_per_event, result.server_s_per_event, requests,
                                result.bytes_per_event, 1.0 if fraction is None else fraction,
                                servers=args.servers, instances=args.instances, max_batch=args.max_batch,
                                queue_delay_s=args.queue_delay_ms / 1000, fixed=args.batch_fixed,
                                service_cv=args.service_cv, other_cv=args.other_cv, events=args.events,
                                cores=round(result.cores or 0), cpu_s=min(job_cpu, result.other_s_per_event),
                                server_on_cores=bool(args.server_on_host and result.cores),
                                link_gbps=None if args.no_link or not result.bytes_per_event else args.link_gbps,
                                rtt_s=(args.rtt_ms or 0.0) * args.round_trips / 1000)
    knee = min((result.knee_jobs_per_server or 1.0) * args.servers, result.host_knee_jobs or float("inf"),
               result.link_knee_jobs or float("inf"))
    jobs = args.jobs or sorted({max(1, round(knee * f)) for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)})
    runs = [simulate(Scenario(jobs=j, **settings)).as_dict() for j in jobs]
    return {"settings": settings, "runs": runs}


def _shares(shares: list[float]) -> str:
    """Each server's share of the requests against an even split: the range over the servers."""
    low, high = (len(shares) * min(shares), len(shares) * max(shares)) if shares else (1.0, 1.0)
    return f"{low:.3f}" if abs(high - low) < 5e-4 else f"{low:.3f}-{high:.3f}"


def simulation_text(sim: dict[str, Any]) -> str:
    settings = sim["settings"]
    lines = [f"simulation: {settings['servers']} server(s) x {settings['instances']} instance(s), max batch "
             f"{settings['max_batch']}, {settings['requests']} request(s)/event of {1000 * settings['service_s']:.3f} ms, "
             f"link {settings['link_gbps'] or 'none'} Gb/s",
             f"  {'jobs':>6} {'s/event med':>11} {'p90':>9} {'events/s':>9} {'server busy':>11} {'queue ms/req':>12} "
             f"{'link peak MB/s':>14} {'share / even':>18}"]
    for run in sim["runs"]:
        peak = run["peak_link_bytes_per_s"]
        lines.append(f"  {run['scenario']['jobs']:6d} {run['time_per_event_median']:11.4f} {run['time_per_event_p90']:9.4f} "
                     f"{run['events_per_s']:9.2f} {100 * max(run['server_utilisation']):10.0f}% "
                     f"{1000 * run['queue_s_per_request']:12.3f} {'-' if peak is None else f'{peak / 1e6:.1f}':>14} "
                     f"{_shares(run['server_share']):>18}")
    return "\n".join(lines)
