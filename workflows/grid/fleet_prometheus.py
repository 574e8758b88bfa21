"""Prometheus for a fleet: scrape targets kept in step with the fleet directory, a Prometheus the fleet may run
itself, and the queue-time signal read back from it with SuperSONIC's rule.

::

    sonic fleet start fleet -r data/models/demo --servers 2 --prometheus local --scale-metric prometheus
    sonic fleet start fleet ... --metrics-host 0.0.0.0 --prometheus http://prometheus.site:9090   # the site's own

Every server entry says where its metrics are (``Entry.metrics``); the fleet's manager rewrites
``FLEET/prometheus/targets.json`` (Prometheus' ``file_sd`` format, written whole with a rename, and only when it
changes) each round from the live entries, so a server that joins is scraped within a round and one that
leaves is dropped (Prometheus watches the file). A site's Prometheus reads the same file with::

    scrape_configs:
      - job_name: sonic-fleet
        file_sd_configs: [{files: [/path/to/fleet/prometheus/targets.json]}]

With ``--prometheus local`` the manager starts Debian's ``prometheus`` itself (``FLEET/prometheus/``: its
configuration, data and log; ``prometheus.json`` records its URL while it runs) and stops it when the fleet
stops. The queue-time signal is SuperSONIC's::

    sum by (server) (rate(nv_inference_queue_duration_us[W])) / sum by (server) (rate(nv_inference_exec_count[W]))

microseconds of queueing per model execution over the window ``W`` (at least four scrapes), per server and for
the whole fleet. ``--scale-metric prometheus`` makes the autoscaler compare it (in ms) with its threshold
instead of its own reading of Triton's statistics API (queue time per request); ``sonic fleet status`` shows
the same query's numbers. A Grafana dashboard of these queries ships beside this module (``fleet_dashboard.json``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...framework.atomic import write_atomically
from ...framework.inference.serving import Entry, free_port, host_port, is_loopback, live_entries, spawn
from .errors import GridError
from .fleet_autoscale import Sample
from .records import read_json, write_json

if TYPE_CHECKING:
    from ...framework.inference.serving import TritonServer
    from .fleet import Fleet, FleetSpec

log = logging.getLogger(__name__)

FOLDER = "prometheus"
TARGETS = "targets.json"
RECORD = "prometheus.json"
JOB = "sonic-fleet"
#: where the Grafana dashboard of these queries is (shipped with the package)
DASHBOARD = Path(__file__).resolve().parent / "fleet_dashboard.json"
#: how long ``--prometheus local`` may take to answer ``/-/ready``
READY_TIMEOUT_S = 60.0


def folder(directory: str | os.PathLike) -> Path:
    return Path(directory) / FOLDER


# -- targets ---------------------------------------------------------------------------------------------------
def metrics_address(spec: FleetSpec, server: TritonServer) -> str:
    """Where a Prometheus reaches the server's metrics: the advertised host when they are bound to every
    interface, else the address they are bound to (loopback: only a Prometheus on the same node)."""
    host = spec.metrics_host
    if host in ("0.0.0.0", "::", ""):
        host = spec.advertised_host()
    return host_port(host, server.ports["metrics"])


def target_groups(entries: Iterable[Entry], fleet_name: str) -> list[dict[str, Any]]:
    """``file_sd`` groups: one per server with a metrics address, labelled with its name and the fleet's."""
    return [{"targets": [entry.metrics], "labels": {"server": entry.name, "fleet": fleet_name}}
            for entry in sorted(entries, key=lambda e: e.name) if entry.metrics]


def write_targets(directory: str | os.PathLike, entries: Iterable[Entry]) -> bool:
    """Writes ``prometheus/targets.json`` for ``entries`` (whole, by a rename; Prometheus never reads half a
    file) when it differs from what is there; returns whether it wrote."""
    path = folder(directory) / TARGETS
    text = json.dumps(target_groups(entries, Path(directory).resolve().name), indent=1) + "\n"
    try:
        if path.read_text() == text:
            return False
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda temporary: Path(temporary).write_text(text))
    return True


def keep_in_step(directory: str | os.PathLike) -> bool:
    """The targets of the servers live in the fleet directory now (one round of the manager)."""
    return write_targets(directory, live_entries(directory))


# -- a Prometheus the fleet runs ---------------------------------------------------------------------------------
def configuration(directory: str | os.PathLike, scrape_s: float) -> str:
    """``prometheus.yml`` of a fleet's own Prometheus: every ``scrape_s`` seconds, the targets of ``targets.json``."""
    targets = folder(directory).resolve() / TARGETS
    return (f"global:\n  scrape_interval: {scrape_s:g}s\n  scrape_timeout: {max(1.0, min(scrape_s, 10.0)):g}s\n"
            f"  evaluation_interval: {scrape_s:g}s\nscrape_configs:\n  - job_name: {JOB}\n"
            f"    file_sd_configs:\n      - files: [{json.dumps(str(targets))}]\n        refresh_interval: 30s\n")


@dataclass
class LocalPrometheus:
    """Debian's ``prometheus`` started for one fleet (``--prometheus local``), stopped with the manager.

    The process dies with the manager whatever ends it (``spawner.py``), and records its URL in
    ``prometheus/prometheus.json`` while it runs.
    """

    directory: Path
    scrape_s: float = 5.0
    host: str = "127.0.0.1"
    process: subprocess.Popen | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://{host_port(self.host, self.port)}"

    def start(self) -> LocalPrometheus:
        """Starts it and waits until it answers ``/-/ready``.

        Raises:
            GridError: no ``prometheus`` on PATH, or it did not become ready (with the end of its log).
        """
        binary = shutil.which("prometheus")
        if binary is None:
            raise GridError("--prometheus local needs the prometheus program (Debian: apt-get install prometheus), "
                            "or give the URL of a Prometheus that scrapes prometheus/targets.json")
        base = folder(self.directory)
        (base / "data").mkdir(parents=True, exist_ok=True)
        keep_in_step(self.directory)  # the file Prometheus is told to read exists from the start
        config = base / "prometheus.yml"
        config.write_text(configuration(self.directory, self.scrape_s))
        self.port = free_port(self.host)
        with open(base / "prometheus.log", "ab") as out:
            self.process = spawn([binary, f"--config.file={config}", f"--storage.tsdb.path={base / 'data'}",
                                  f"--web.listen-address={host_port(self.host, self.port)}",
                                  "--storage.tsdb.retention.time=7d", "--log.level=warn"],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready(self.url):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join((base / "prometheus.log").read_text(errors="replace").splitlines()[-5:])
                raise GridError(f"the fleet's Prometheus did not start; its log {base / 'prometheus.log'} ends:\n{tail}")
            time.sleep(0.2)
        write_json(base / RECORD, {"url": self.url, "pid": self.process.pid, "scrape_s": self.scrape_s})
        log.info("fleet %s: Prometheus on %s scrapes its servers every %g s", self.directory, self.url, self.scrape_s)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        (folder(self.directory) / RECORD).unlink(missing_ok=True)
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def url_of(directory: str | os.PathLike, setting: str) -> str | None:
    """The Prometheus a fleet uses: the URL it was given, or the one its manager started (while it runs)."""
    if setting.startswith(("http://", "https://")):
        return setting.rstrip("/")
    if setting == "local":
        record = read_json(folder(directory) / RECORD)
        return record.get("url") if record else None
    return None


# -- reading it back -----------------------------------------------------------------------------------------------
def query(url: str, expression: str, timeout: float = 5.0, at: float | None = None) -> list[tuple[dict[str, str], float]]:
    """An instant PromQL query over Prometheus' HTTP API: ``[(labels, value)]``, evaluated now or ``at`` (Unix time).

    Raises:
        GridError: Prometheus did not answer, or refused the expression (its error, one line).
    """
    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expression, **({'time': at} if at else {})})}"
    try:
        with urllib.request.urlopen(address, timeout=timeout) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as err:
        try:
            answer = json.loads(err.read())
        except ValueError:
            raise GridError(f"Prometheus {url}: HTTP {err.code} for {expression!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise GridError(f"Prometheus {url} did not answer: {err}") from None
    if answer.get("status") != "success":
        raise GridError(f"Prometheus {url} refused {expression!r}: {answer.get('error', answer)}")
    return [(item.get("metric", {}), float(item["value"][1])) for item in answer["data"]["result"]]


def expressions(fleet_name: str, window_s: float) -> dict[str, str]:
    """The queries: SuperSONIC's queue time per execution by server and for the fleet, requests answered by
    server over the window, and requests per second by server."""
    where = f'{{job="{JOB}",fleet="{fleet_name}"}}'
    window = f"[{max(1, round(window_s * 1000))}ms]"  # PromQL durations are whole numbers of a unit

    def rate(metric: str, by: str = " by (server)") -> str:
        return f"sum{by} (rate({metric}{where}{window}))"

    return {"queue_us_per_exec": f"{rate('nv_inference_queue_duration_us')} / {rate('nv_inference_exec_count')}",
            "fleet_queue_us_per_exec": f"{rate('nv_inference_queue_duration_us', '')} / "
                                       f"{rate('nv_inference_exec_count', '')}",
            "requests": f"sum by (server) (increase(nv_inference_request_success{where}{window}))",
            "requests_per_s": rate("nv_inference_request_success")}


@dataclass
class FleetLoad:
    """What Prometheus says of a fleet over one window (None: no number, e.g. nothing executed yet)."""

    window_s: float
    queue_us_per_exec: float | None = None
    servers: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "queue_us_per_exec": self.queue_us_per_exec, "servers": self.servers}


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None  # NaN: 0/0, nothing executed in the window


def fleet_load(url: str, fleet_name: str, window_s: float, at: float | None = None) -> FleetLoad:
    """SuperSONIC's signal and each server's requests, from one set of queries (see the module docstring),
    evaluated now or ``at`` (Unix time)."""
    queries = expressions(fleet_name, window_s)
    load = FleetLoad(window_s)
    fleet = query(url, queries["fleet_queue_us_per_exec"], at=at)
    load.queue_us_per_exec = _number(fleet[0][1]) if fleet else None
    for key in ("queue_us_per_exec", "requests", "requests_per_s"):
        for labels, value in query(url, queries[key], at=at):
            load.servers.setdefault(labels.get("server", "?"), {})[key] = _number(value)
    return load


def window_for(spec: FleetSpec, interval_s: float) -> float:
    """The rate window: the autoscaler's interval, and at least four scrapes (a rate needs two samples)."""
    return max(interval_s, 4 * spec.prometheus_scrape_s)


class PrometheusSampler:
    """The autoscaler's samples from Prometheus (``--scale-metric prometheus``): the fleet's members from its
    directory as always (``Sampler.members``), their load from SuperSONIC's rule."""

    source = "prometheus"

    def __init__(self, membership: Any, url: str, fleet_name: str, window_s: float):
        self.membership, self.url, self.fleet_name, self.window_s = membership, url, fleet_name, window_s

    def sample(self, fleet: Fleet) -> Sample:
        live, starting, failed, last = self.membership.members(fleet)
        try:
            load = fleet_load(self.url, self.fleet_name, self.window_s)
        except GridError as err:  # no numbers this round: every server counts as busy (never removed blind)
            log.warning("fleet %s: %s", fleet.directory, err)
            return Sample(queue_ms=None, requests={name: -1 for name in live}, starting=starting, failed=failed,
                          last_failure=last)
        requests = {}
        for name in live:
            answered = load.servers.get(name, {}).get("requests")
            requests[name] = -1 if answered is None else round(answered)  # not scraped twice yet: unknown
        queue = load.queue_us_per_exec
        return Sample(queue_ms=queue / 1000 if queue is not None else None, requests=requests, starting=starting,
                      failed=failed, last_failure=last)

    def close(self) -> None:
        self.membership.close()


def local_url_warning(spec: FleetSpec) -> str:
    """Why a Prometheus elsewhere cannot scrape the servers ("" when it can)."""
    if spec.prometheus.startswith(("http://", "https://")) and is_loopback(spec.metrics_host):
        return (f"the servers' metrics stay on {spec.metrics_host}: a Prometheus on another node cannot scrape them "
                f"(give --metrics-host 0.0.0.0)")
    return ""


# -- the manager's part ----------------------------------------------------------------------------------------------
def start_for(fleet: Fleet) -> LocalPrometheus | None:
    """The fleet's own Prometheus with ``--prometheus local`` (None otherwise, or when it cannot start: the fleet
    runs on without it, the reason logged)."""
    if fleet.spec.prometheus != "local":
        return None
    try:
        return LocalPrometheus(fleet.directory, fleet.spec.prometheus_scrape_s).start()
    except GridError as err:
        log.error("fleet %s: no Prometheus: %s", fleet.directory, err)
        return None


def sampler_for(fleet: Fleet, statistics: Any, interval_s: float) -> Any:
    """What the autoscaler samples: ``statistics`` (the manager's reading of Triton's statistics API), or with
    ``--scale-metric prometheus`` the fleet's Prometheus, SuperSONIC's rule over :func:`window_for`."""
    spec = fleet.spec
    if spec.scale_metric != "prometheus":
        return statistics
    url = url_of(fleet.directory, spec.prometheus)
    if url is None:
        log.error("fleet %s: --scale-metric prometheus, but no Prometheus runs for it; scaling on Triton's "
                  "statistics instead", fleet.directory)
        return statistics
    return PrometheusSampler(statistics, url, fleet.directory.name, window_for(spec, interval_s))
