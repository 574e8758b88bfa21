"""``sonic fleet start|status|scale|update|stop DIR``: Triton servers as batch jobs, found by client jobs in DIR.

``start`` submits N server jobs through an executor (local, slurm, condor, dask) with their resources;
each server, once ready, registers its address, models and health in DIR (a heartbeat keeps the entry
alive; an ended job removes it). A manager process autoscales the fleet between --min-servers and
--max-servers on the average queue time per request (Triton's statistics), replaces server jobs that
ended, and logs every decision in DIR/logs/autoscaler.jsonl. Client jobs use the fleet with
``sonic run --fleet DIR`` or ``sonic submit ... --fleet DIR``: no addresses typed, servers that join
are used, servers that leave are failed over.

Examples::

    sonic fleet start fleet --config miniaod --servers 2 --executor slurm --gpus-per-server 1 \\
        --cpus-per-server 4 --mem 16G --time 08:00:00 -E partition=gpu --max-servers 8 --wait
    sonic fleet start fleet -r data/models/demo --servers 1 --host 127.0.0.1 --wait   # this machine only
    sonic fleet status fleet
    sonic fleet scale fleet --min-servers 1 --max-servers 4      # the autoscaler's bounds, while it runs
    sonic fleet update fleet demo_mlp --from new/demo_mlp        # a new version of a model, rolled in live
    sonic fleet stop fleet
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, replace

from ...framework.inference.serving import TLS_FILES
from ..grid import executors
from ..grid.fleet import Fleet, FleetSpec, executor_options, start_manager
from ..grid.errors import GridError
from ..grid.fleet_autoscale import Rule
from ..grid.fleet_rollout import describe as describe_versions
from .fleet_update import add_update, served, version_lines
from ..grid.fleet_proxy import record as proxy_record, start_proxy, stop_proxy
from .proxy_flags import add_proxy_flags, proxy_options
from .prometheus_flags import (add_prometheus_flags, prometheus_lines, prometheus_options, prometheus_status,
                               warnings_for)
from .server_flags import add_server_flags, options_from

#: server options a fleet does not offer: its server jobs choose their own ports and work folders on their node
#: (several may share one), and ``--cpus-per-server`` is the number of cores the batch system gives each job
NOT_OFFERED = ("cpus", "workdir", "grpc_port", "http_port", "metrics_port")


def start(args: argparse.Namespace) -> int:
    from .server import repositories_of

    servers = args.servers
    proxy = proxy_options(args)  # checked before anything starts
    rule = Rule(min_servers=servers if args.min_servers is None else args.min_servers,
                max_servers=max(servers, args.max_servers or servers), threshold_ms=args.scale_threshold_ms,
                window_s=args.scale_window_s, idle_s=args.scale_idle_s, interval_s=args.scale_interval_s)
    options = executor_options(args.executor, executors.parse_key_values(args.executor_option), cpus=args.cpus_per_server,
                               mem=args.mem, time_limit=args.time, gpus=args.gpus_per_server)
    spec = options_from(args, FleetSpec, exclude=NOT_OFFERED, repository=[os.path.abspath(p) for p in
                                                                        repositories_of(args)],
                        device="gpu" if args.gpus_per_server else "cpu", advertise=args.advertise or "",
                        tls_ca=_abs(args.tls_ca), tls_client_cert=_abs(args.tls_client_cert),
                        tls_client_key=_abs(args.tls_client_key), heartbeat_s=args.heartbeat_s, ttl_s=args.ttl_s,
                        drain_s=args.drain_s, executor=args.executor, executor_options=options,
                        gpus_per_server=args.gpus_per_server, **prometheus_options(args),
                        autoscale={**asdict(rule), "stop_with_tasks": args.stop_with_tasks})
    # the server jobs start elsewhere: their certificates are named from the root
    spec = replace(spec, **{name: _abs(getattr(spec, name)) for name in TLS_FILES})
    for line in warnings_for(spec):
        print(line, file=sys.stderr)
    fleet = Fleet.create(args.directory, spec, 0, cpus=args.cpus_per_server or 1)
    indices = fleet.add(servers) if servers else []
    manager = start_manager(fleet)
    print(f"fleet {fleet.directory}: {len(indices)} server job(s) submitted to {args.executor}; manager pid "
          f"{manager.pid} (min {rule.min_servers}, max {rule.max_servers} servers)", file=sys.stderr)
    if proxy is not None:
        try:
            proxy = start_proxy(fleet, proxy)
        except GridError:
            fleet.stop(timeout=30)  # a fleet without the proxy asked for is not what was wanted
            raise
    if args.wait and servers:
        for entry in fleet.wait_ready(servers, args.timeout):
            tls = "(TLS) " if entry.ssl else ""
            print(f"{entry.name}: {entry.address} {tls}serving {', '.join(sorted(entry.models))}")
    if proxy is not None:
        print(f"proxy: {_proxy_line(proxy)}")
    return 0


def _proxy_line(record: dict) -> str:
    tokens = record.get("tokens")
    return (f"{record['address']}{' (TLS)' if record['ssl'] else ''}"
            f"{', bearer tokens of ' + tokens['issuer'] + ' for ' + tokens['audience'] if tokens else ''}")


def _abs(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def status(args: argparse.Namespace) -> int:
    fleet = Fleet(args.directory)
    members, bad = fleet.members(), fleet.bad_entries()
    if args.json:
        print(json.dumps({"fleet": str(fleet.directory), "stopping": fleet.stopping,
                          "manager": fleet.manager().pid if fleet.manager() else None,
                          "members": [m.as_dict() for m in members], "decisions": fleet.decisions(),
                          "bad_entries": [{"file": str(b.path), "problem": b.problem} for b in bad],
                          "rollouts": describe_versions(fleet.directory),
                          "proxy": proxy_record(fleet.directory),
                          "prometheus": prometheus_status(fleet)}, indent=1))
        return 0
    manager = fleet.manager()
    print(f"fleet {fleet.directory} ({fleet.spec.executor}){' stopping' if fleet.stopping else ''}; manager "
          f"{'pid ' + str(manager.pid) if manager else 'not running'}")
    proxy = proxy_record(fleet.directory)
    if proxy is not None:
        print(f"  proxy {_proxy_line(proxy)}: {len(proxy['servers'])} server(s) in rotation")
    print(f"  {'job':>4} {'state':<8} {'batch id':<14} {'address':<28} models / reason")
    for m in members:
        where = m.entry.address if m.entry else "-"
        what = served(m.entry) if m.entry and not m.expired else (m.expired or m.reason)
        if m.entry and m.entry.gpus is not None and not m.expired:  # which card serves what
            what = f"GPU {','.join(m.entry.gpus)}: {what}"
        print(f"  {m.index:>4} {m.state:<8} {m.batch_id or '-':<14} {where:<28} {what}"
              + (" (leaving)" if m.stopping and m.state == "running" else ""))
    for item in bad:
        print(f"  bad entry {item.path.name}, skipped by clients: {item.problem}")
    for line in prometheus_lines(prometheus_status(fleet)):  # the numbers the autoscaler can read
        print(line)
    for line in version_lines(fleet.directory):  # models rolled out with `sonic fleet update`
        print(line)
    for decision in fleet.decisions()[-5:]:
        print(f"  autoscaler: {decision['action']}{' ' + decision['server'] if decision.get('server') else ''}: "
              f"{decision['reason']}")
    return 0


def scale(args: argparse.Namespace) -> int:
    settings = Fleet(args.directory).rescale(min_servers=args.min_servers, max_servers=args.max_servers,
                                             threshold_ms=args.scale_threshold_ms, window_s=args.scale_window_s,
                                             idle_s=args.scale_idle_s, interval_s=args.scale_interval_s)
    print(", ".join(f"{k} {v}" for k, v in settings.items()))
    return 0


def stop(args: argparse.Namespace) -> int:
    fleet = Fleet(args.directory)
    members = fleet.stop(timeout=args.timeout)
    stop_proxy(fleet.directory, timeout=args.timeout)  # it stopped itself with the fleet, or is told now
    for m in members:
        print(f"{m.index:>4} {m.state}: {m.reason}")
    print(f"fleet {fleet.directory}: stopped ({len(members)} server jobs ended)", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("fleet", help="Triton servers as batch jobs: start, status, scale, stop "
                                          "(clients: --fleet DIR)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("start", help="submit server jobs and start the fleet's manager (autoscaler)")
    p.add_argument("directory", metavar="DIR", help="the fleet directory (new; on a filesystem the nodes share)")
    p.add_argument("--repository", "-r", action="append", metavar="DIR", help="model repository (repeatable)")
    p.add_argument("--config", metavar="CONFIG", help="take the repositories from a configuration's services.inference")
    p.add_argument("--servers", "-N", type=int, default=1, help="server jobs to start (default 1)")
    p.add_argument("--executor", "-x", default="local", choices=executors.names(), help="where server jobs run")
    p.add_argument("-E", "--executor-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an executor option, as for sonic submit (e.g. -E partition=gpu)")
    p.add_argument("--gpus-per-server", type=int, default=0, metavar="G",
                   help="GPUs per server job (slurm --gres=gpu:G, condor request_gpus: the cards the batch system "
                        "assigns; local: the job's own slice of this node's cards, one server per card with 1); "
                        "0: CPU servers")
    p.add_argument("--cpus-per-server", type=int, metavar="C", help="cores the batch system gives each server job")
    p.add_argument("--mem", metavar="M", help="memory per server job (e.g. 16G)")
    p.add_argument("--time", metavar="T", help="wall-time limit per server job (e.g. 08:00:00)")
    p.add_argument("--advertise", metavar="HOST", help="host name clients use (default: the node's name)")
    p.add_argument("--tls-ca", metavar="PEM", help="CA clients trust for the servers (default: --tls-cert itself)")
    p.add_argument("--tls-client-cert", metavar="PEM", help="the manager's client certificate (mutual TLS)")
    p.add_argument("--tls-client-key", metavar="PEM", help="the manager's client key (mutual TLS)")
    p.add_argument("--heartbeat-s", type=float, default=5.0, help="how often a server renews its entry")
    p.add_argument("--ttl-s", type=float, default=20.0, help="an entry without heartbeat this long is ignored")
    p.add_argument("--drain-s", type=float, default=3.0, help="wait after deregistering before a server stops")
    p.add_argument("--min-servers", type=int, metavar="N", help="autoscaling lower bound (default: --servers)")
    p.add_argument("--max-servers", type=int, metavar="N", help="autoscaling upper bound (default: --servers)")
    p.add_argument("--scale-threshold-ms", type=float, default=10.0,
                   help="add a server when the average queue time per request stays above this (default 10)")
    p.add_argument("--scale-window-s", type=float, default=60.0, help="... for this long (default 60)")
    p.add_argument("--scale-idle-s", type=float, default=300.0,
                   help="remove a server that answered nothing for this long (default 300)")
    p.add_argument("--scale-interval-s", type=float, default=5.0, help="seconds between samples (default 5)")
    p.add_argument("--stop-with-tasks", action="store_true",
                   help="stop the fleet once every task submitted with --fleet DIR has ended")
    p.add_argument("--wait", action="store_true", help="return once --servers servers are registered")
    p.add_argument("--timeout", type=float, default=600.0, help="with --wait: give up after S seconds")
    add_server_flags(p, FleetSpec, exclude=NOT_OFFERED)
    add_proxy_flags(p)
    add_prometheus_flags(p)
    p.set_defaults(func=start)

    p = actions.add_parser("scale", help="change the autoscaler's bounds and thresholds while the fleet runs")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--min-servers", type=int, metavar="N")
    p.add_argument("--max-servers", type=int, metavar="N")
    p.add_argument("--scale-threshold-ms", type=float, metavar="MS")
    p.add_argument("--scale-window-s", type=float, metavar="S")
    p.add_argument("--scale-idle-s", type=float, metavar="S")
    p.add_argument("--scale-interval-s", type=float, metavar="S")
    p.set_defaults(func=scale)

    add_update(actions)

    p = actions.add_parser("status", help="server jobs, their addresses and models, autoscaler decisions")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--json", action="store_true", help="machine-readable")
    p.set_defaults(func=status)

    p = actions.add_parser("stop", help="stop the manager and every server job (cancelled if they do not leave)")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a server job is cancelled")
    p.set_defaults(func=stop)
