"""The Prometheus flags of ``sonic fleet start`` and what ``sonic fleet status`` shows of it.

Why apart from ``fleet.py``: the flags are checked together before the fleet starts anything (a scale metric
without a Prometheus, ``--prometheus local`` without the program: one line and no fleet), and status shows the
numbers of the same queries the autoscaler reads (``grid/fleet_prometheus.py``).
"""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from ..grid.errors import GridError
from ..grid.fleet import SCALE_METRICS, Fleet
from ..grid.fleet_prometheus import (
    DASHBOARD,
    fleet_load,
    local_url_warning,
    url_of,
    window_for,
)


def add_prometheus_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Prometheus (docs/fleets.md#prometheus)")
    group.add_argument("--prometheus", default="", metavar="local|URL",
                       help="local: the manager runs Debian's prometheus, scraping every server of the fleet; URL: a "
                            "site's Prometheus that reads DIR/prometheus/targets.json (file_sd)")
    group.add_argument("--prometheus-scrape-s", type=float, default=5.0, metavar="S",
                       help="scrape interval of --prometheus local (default 5)")
    group.add_argument("--scale-metric", choices=SCALE_METRICS, default="statistics",
                       help="where the autoscaler reads the load: statistics (Triton's statistics API, queue ms per "
                            "request; the default) or prometheus (SuperSONIC's rule: rate of queue µs over rate of "
                            "executions, compared in ms with --scale-threshold-ms)")


def prometheus_options(args: argparse.Namespace) -> dict[str, Any]:
    """``FleetSpec``'s Prometheus fields from the flags (``FleetSpec`` checks them together).

    Raises:
        GridError: ``--prometheus local`` where the program is not installed.
    """
    if args.prometheus == "local" and shutil.which("prometheus") is None:
        raise GridError("--prometheus local needs the prometheus program (Debian: apt-get install prometheus), or "
                        "give --prometheus URL of a Prometheus that scrapes DIR/prometheus/targets.json")
    return {"prometheus": args.prometheus, "prometheus_scrape_s": args.prometheus_scrape_s,
            "scale_metric": args.scale_metric}


def prometheus_status(fleet: Fleet) -> dict[str, Any] | None:
    """What the fleet's Prometheus says now (None when it has none): SuperSONIC's queue time per execution for
    the fleet and per server, each server's requests over the same window (``fleet_prometheus.fleet_load``)."""
    spec = fleet.spec
    if not spec.prometheus:
        return None
    url = url_of(fleet.directory, spec.prometheus)
    out: dict[str, Any] = {"url": url, "scale_metric": spec.scale_metric, "dashboard": str(DASHBOARD)}
    if url is None:
        return {**out, "error": "its Prometheus does not run (the manager starts it; see logs/manager-*.log)"}
    window = window_for(spec, float((spec.autoscale or {}).get("interval_s", 5.0)))
    try:
        return {**out, **fleet_load(url, fleet.directory.name, window).as_dict()}
    except GridError as err:
        return {**out, "error": str(err)}


def prometheus_lines(status: dict[str, Any] | None) -> list[str]:
    """The status lines of :func:`prometheus_status`."""
    if status is None:
        return []
    head = f"  prometheus {status['url'] or '-'} (autoscaler reads {status['scale_metric']})"
    if "error" in status:
        return [f"{head}: {status['error']}"]

    def us(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} µs"

    lines = [(f"{head}: queue {us(status['queue_us_per_exec'])} per execution over {status['window_s']:g} s "
              f"(rate(nv_inference_queue_duration_us) / rate(nv_inference_exec_count))")]
    for name, numbers in sorted(status["servers"].items()):
        rate = numbers.get("requests_per_s")
        lines.append(f"    {name}: queue {us(numbers.get('queue_us_per_exec'))} per execution, "
                     f"{'-' if rate is None else format(rate, '.1f')} requests/s")
    return lines


def warnings_for(spec: Any) -> list[str]:
    """What an operator should know about the fleet's Prometheus setting before it runs."""
    warning = local_url_warning(spec)
    return [f"sonic: warning: {warning}"] if warning else []
