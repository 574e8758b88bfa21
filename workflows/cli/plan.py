"""``sonic plan``: from measured timing, how many CPU jobs one inference server feeds (68:1 in the
ProtoDUNE SONIC paper) and how many jobs a network link carries before it saturates (~600 on 100 Gb/s in the
Exa.TrkX-as-a-service estimates).

Give timing reports of the workflow's jobs (``sonic run --timing-json``, or task directories). The
server's compute time per event comes from Triton's statistics in a SONIC run's report, or from a
report of direct inference on the server's device (``--server-timing``), or ``--server-ms-per-event``.
Bytes per event come from the inference report's byte counters, or from the measured rows per
event and the models' shapes (``--repository``; a shipped repository such as ``data/models/miniaod`` is found from
any working directory), or ``--bytes-per-event``.

Example::

    sonic plan task-cpu/ --server-timing gpu-direct.json --bytes-per-event 15.6e6 --link-gbps 100
"""

from __future__ import annotations

import argparse
import json
import sys

from ...framework.inference.service import resolve_repository
from ..grid.errors import GridError
from ..grid.plan import bytes_from_repository, measure, plan, report


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
    parser.add_argument("--json", metavar="FILE", help="also write the plan as JSON")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    job = measure(args.timing) if args.timing else None
    server = measure(args.server_timing) if args.server_timing else None
    sources: dict[str, str] = {}
    if args.other_ms_per_event is not None:
        other, sources["t_other"] = args.other_ms_per_event / 1000, "given"
    elif job is not None:
        basis = "wall time (inference remote)" if job.mode == "sonic" else "wall - wait on inference, or module time"
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
    result = plan(other, server_s, bytes_per_event, args.link_gbps, args.link_utilisation, args.server_utilisation)
    print(report(result, job, server, sources))
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({**result.as_dict(), "sources": sources, "job_reports": list(job.sources) if job else [],
                       "server_reports": list(server.sources) if server else []}, stream, indent=1)
    return 0
