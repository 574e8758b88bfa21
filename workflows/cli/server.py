"""``sonic server start|stop|status|add-model|checksum``: run and inspect Triton servers.

::

    sonic server start --repository data/models/demo            # foreground; Ctrl-C or SIGTERM stops it
    sonic server start --config miniaod --grpc-port 8001 --host 0.0.0.0 --device gpu \
        --tls-cert server.pem --tls-key server.key --tls-root-cert clients-ca.pem   # gRPC only, mutual TLS
    sonic server status                                          # servers started here: models, backends, readiness
    sonic server status 10.0.0.7:8001                            # any Triton server
    sonic server stop 127.0.0.1:8001                             # or --all
    sonic server add-model --repository data/models/mine --name tagger --onnx tagger.onnx --max-batch-size 256
    sonic server checksum data/models/mine                       # declare the MD5 of every model's files

``--host`` binds gRPC only; HTTP (plain, no TLS in Triton) and metrics stay on loopback unless
``--http-host`` / ``--metrics-host`` say otherwise, and every endpoint other machines can reach without
TLS is printed as a WARNING. The banner prints what the process really listens on.

A model the server cannot serve (no backend for its platform here, its engine — torch, tensorflow — missing
in the server's python, no model file) is left out: ``start`` prints ``not served: NAME: REASON`` and
``status`` lists it as ``NOT SERVED (reason)``; the rest are served. ``--strict`` (or
``services.inference.fallback_server.strict`` of ``--config``) refuses to start instead, in one line.

``start`` records the running server in ``$SONIC_HEP_STATE`` (default ``~/.cache/sonic-hep/servers``;
format and liveness rule: :mod:`.server_registry`) so ``stop`` and ``status`` find it; the record goes away
when the server stops. ``stop`` signals the ``sonic server start`` process only when its PID, start time
and command line still match, so a stale record (its process gone, its PID reused) never signals a
stranger; ``status`` lists stale records as such.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ...framework.errors import SonicError
from ...framework.inference.serving import HEARTBEAT_S
from ...framework.inference.serving import ServerOptions, placement_lines
from .server_flags import add_server_flags, options_from
from .server_registry import Registration, read_records, running_records, stale_line, state_dir, supervisor_of

if TYPE_CHECKING:
    from ...framework.inference.serving import TritonServer


# -- start ------------------------------------------------------------------------------------------------
def repositories_of(args: argparse.Namespace) -> list[str]:
    from ...framework.inference import resolve_repository

    paths = list(args.repository or [])
    if args.config:
        paths += list(_inference_settings(args.config).get("repository", []) or [])
    if not paths:
        raise SonicError("give --repository DIR (repeatable) or --config CONFIG with services.inference.repository")
    return [resolve_repository(p) for p in paths]


def _configured(args: argparse.Namespace) -> dict:
    """``services.inference.fallback_server`` of ``--config`` (checked as a job would), or {} without one."""
    return dict(_fallback_settings(args.config)) if args.config else {}


@functools.cache
def _inference_settings(config: str) -> dict:
    """``services.inference`` of ``config``, read once per command: the repositories and several options
    (strict, backend, cpus) all come from it."""
    from ...framework import config as cfgmod

    return cfgmod.load(config).services.get("inference", {}) or {}


@functools.cache
def _fallback_settings(config: str) -> dict:
    from ...framework.inference import InferenceConfig

    raw = _inference_settings(config)
    return dict(InferenceConfig.from_dict(raw).fallback_server) if raw.get("fallback_server") else {}


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The server's options: the flags given, else ``services.inference.fallback_server`` of ``--config`` (so a
    server started for a configuration runs as the job's own would), else the defaults."""
    return options_from(args, base=_configured(args))


def _not_served(skipped: dict[str, str]) -> list[str]:
    """One line per model a server leaves out, with the reason (``TritonServer.skipped``)."""
    return [f"not served: {name}: {reason}" for name, reason in skipped.items()]


def start(args: argparse.Namespace) -> int:
    from ...framework.inference.serving import TritonServer

    server = TritonServer(repositories_of(args), server_options(args))
    stop_requested: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    record = None
    try:
        server.start()
        record = Registration(server)
        print(f"Triton server ready: grpc {server.grpc_url}  {_banner(server)}")
        print(f"models: {', '.join(server.served)}")  # exposure warnings: logged by server.start()
        print(f"backends: {_backend_summary(server.model_backends)}")
        for line in _not_served(server.skipped):
            print(line)
        print(f"log: {server.log_path}   (Ctrl-C or `sonic server stop {server.grpc_url}` stops it)", flush=True)
        last_beat = time.monotonic()
        while not stop_requested and server.alive():
            time.sleep(0.2)
            if time.monotonic() - last_beat >= HEARTBEAT_S:
                last_beat = time.monotonic()
                try:
                    record.beat()
                except OSError as err:  # the server still serves; `status` shows it stale until a beat lands
                    print(f"sonic: warning: cannot refresh {record.path}: {err.strerror or err}", file=sys.stderr)
        if not stop_requested:
            print(f"sonic: error: the Triton server exited (code {server.process.returncode}); log "
                  f"{server.log_path}:\n{server.log_tail()}", file=sys.stderr)
            return 1
        return 0
    finally:
        server.stop()
        if record is not None:
            record.remove()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if record is not None:  # a server that never started (--strict, a taken port) leaves only its error line
            print("Triton server stopped", file=sys.stderr)


def _backend_summary(model_backends: dict[str, str]) -> str:
    """``onnxruntime (native): a, b; python: c`` — which backend serves which models."""
    by_backend: dict[str, list[str]] = {}
    for model, backend in model_backends.items():
        by_backend.setdefault(backend, []).append(model)
    return "; ".join(f"{backend}: {', '.join(models)}" for backend, models in sorted(by_backend.items())) or "none"


def _banner(server: TritonServer) -> str:
    """Each endpoint with what the process really listens on (from the kernel), and the TLS mode."""
    bound = server.bound()
    tls = ("mutual TLS: client certificates required" if server.tls["root"] else "TLS") if server.tls["cert"] else "plain"
    parts = []
    for kind in ("grpc", "http", "metrics"):
        where = ", ".join(a + (" (every interface)" if a.startswith(("0.0.0.0:", "[::]:")) else "")
                          for a in bound.get(kind) or []) or "not listening"
        parts.append(f"{kind} on {where}" + (f" ({tls})" if kind == "grpc" else " (plain)"))
    return "listening: " + "; ".join(parts)


# -- stop -------------------------------------------------------------------------------------------------
def stop(args: argparse.Namespace) -> int:
    records, stale = read_records(remove_stale=False)
    for record in stale:
        if args.all or record.get("grpc") in (args.address or []):
            Path(record["_path"]).unlink(missing_ok=True)
            print(stale_line(record), file=sys.stderr)
    stale_addresses = {r.get("grpc") for r in stale}
    if args.all:
        chosen = records
    else:
        if not args.address:
            raise SonicError("name the server(s) to stop (HOST:PORT, as `sonic server status` lists them) or --all")
        by_url = {r["grpc"]: r for r in records}
        missing = [a for a in args.address if a not in by_url and a not in stale_addresses]
        if missing:
            raise SonicError(f"no server started by `sonic server start` on this machine at {missing}; "
                             f"running: {sorted(by_url) or 'none'}")
        chosen = [by_url[a] for a in args.address if a in by_url]
    for record in chosen:
        supervisor = supervisor_of(record)
        if supervisor is None or not supervisor.alive():  # checked again right before the signal
            print(stale_line(record), file=sys.stderr)
            continue
        os.kill(supervisor.pid, signal.SIGTERM)
    for record in chosen:
        supervisor = supervisor_of(record)
        if supervisor is None:  # told as stale above, nothing signalled
            continue
        # by default as long as the server's own bound (server_stop.py: its instances are torn down one by one)
        deadline = time.monotonic() + (args.timeout if args.timeout is not None else
                                       float(record.get("stop_bound_s", 30.0)) + 5.0)
        while time.monotonic() < deadline and supervisor.alive():
            time.sleep(0.1)
        print(f"{record['grpc']}: {'still stopping' if supervisor.alive() else 'stopped'}")
    if not chosen and not stale:
        print("no running servers")
    return 1 if any(r.get("grpc") in (args.address or []) for r in stale) else 0


# -- status -----------------------------------------------------------------------------------------------
def status(args: argparse.Namespace) -> int:
    import tritonclient.grpc as grpcclient

    from ...framework.inference import certificate_problem, server_tls

    if not args.address:
        for record in read_records()[1]:
            print(stale_line(record), file=sys.stderr)
    records = {r["grpc"]: r for r in running_records()}
    addresses = args.address or list(records)
    if not addresses:
        print(f"no servers started here (records in {state_dir()}); give HOST:PORT to ask any server")
        return 0
    failures = 0
    for address in addresses:
        tls = bool(args.tls_ca or args.tls_client_cert) or records.get(address, {}).get("tls", False)
        client = grpcclient.InferenceServerClient(address, ssl=tls, root_certificates=args.tls_ca,
                                                  private_key=args.tls_client_key,
                                                  certificate_chain=args.tls_client_cert)
        try:
            live = client.is_server_live(client_timeout=5)
            metadata = client.get_server_metadata(client_timeout=5)
            index = client.get_model_repository_index(client_timeout=5).models
        except Exception as err:  # noqa: BLE001 - tritonclient raises its own and grpc's errors
            mode = server_tls(address)
            if mode is not None and not tls:
                print(f"{address}: unreachable over plain gRPC: the server speaks TLS (give --tls-ca)")
            elif mode == "mutual" and not args.tls_client_cert:
                print(f"{address}: refused: the server requires a client certificate "
                      "(give --tls-client-cert and --tls-client-key)")
            elif tls and (problem := certificate_problem(address, args.tls_ca, args.tls_client_key,
                                                         args.tls_client_cert)):
                print(f"{address}: refused: {problem}")
            else:
                print(f"{address}: unreachable ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})")
            failures += 1
            continue
        finally:
            client.close()
        print(f"{address}: {'live' if live else 'not live'}, Triton {metadata.version}, {len(index)} models")
        # which backend serves a model: from the record of a server started here; for another server, the
        # backend its config names (native and python-based onnxruntime look the same from outside)
        backends = records.get(address, {}).get("model_backends") or _config_backends(address, tls, args, index)
        rows = [(model.name, model.version or "-", backends.get(model.name, "-"),
                 (model.state or "UNAVAILABLE") + (f" ({model.reason})" if model.reason else "")) for model in index]
        rows += [(name, "-", "-", f"NOT SERVED ({why})")  # left out at start
                 for name, why in (records.get(address, {}).get("skipped") or {}).items()]
        print("\n".join(_model_table(rows)))
        for line in placement_lines(records.get(address, {})):  # which card serves what (a server started here)
            print(line)
    return 1 if failures else 0


def _model_table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    """The model table's lines, each column as wide as its longest cell (CMS's model names are long)."""
    table = [("model", "version", "backend", "state"), *rows]
    width = [max(len(row[i]) for row in table) for i in range(3)]
    return [f"  {a:<{width[0]}}  {b:>{width[1]}}  {c:<{width[2]}}  {d}" for a, b, c, d in table]


def _config_backends(address: str, tls: bool, args: argparse.Namespace, index: list) -> dict[str, str]:
    """``{model: backend}`` as the server's model configs name it (empty where it cannot say)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address, ssl=tls, root_certificates=args.tls_ca,
                                              private_key=args.tls_client_key, certificate_chain=args.tls_client_cert)
    backends = {}
    try:
        for model in index:
            if model.state == "READY":
                config = client.get_model_config(model.name, client_timeout=5).config
                backends[model.name] = config.backend or config.platform or "-"
    except Exception:  # noqa: BLE001 - status shows what it could learn; the table says "-" for the rest
        pass
    finally:
        client.close()
    return backends


# -- add-model --------------------------------------------------------------------------------------------
def add_model(args: argparse.Namespace) -> int:
    from ...framework.inference import onnx_specs
    from ...framework.inference import write_model

    inputs, outputs = onnx_specs(args.onnx, batched=args.max_batch_size > 0)
    labels = None
    if args.labels:
        output, _, path = args.labels.partition("=")
        labels = {output: Path(path).read_text().split()}
    path = write_model(args.repository, args.name, args.onnx, inputs, outputs, args.max_batch_size,
                       preferred_batch_sizes=tuple(args.preferred_batch_size or ()),
                       max_queue_delay_us=args.max_queue_delay_us, instance_count=args.instances, labels=labels)
    print(f"wrote {path}/config.pbtxt and {path}/1/model.onnx")
    for kind, specs in (("input", inputs), ("output", outputs)):
        for spec in specs:
            print(f"  {kind} {spec.name}: {spec.datatype} {list(spec.dims)}")
    return 0


# -- checksum ---------------------------------------------------------------------------------------------
def checksum(args: argparse.Namespace) -> int:
    """Declares the MD5 of each model's files in its config.pbtxt (a checksum block, as CMS writes them), so
    that any server of the repository can prove which model it serves; declared sums are verified, never
    replaced."""
    from ...framework.inference import add_checksums
    from ...framework.inference import ModelRepository

    repository = ModelRepository(args.repository)
    names = args.model or repository.names()
    for name in names:
        info = repository.get(name)
        added = add_checksums(info)
        what = f"declared {len(added)} file(s): {', '.join(added)}" if added else "checksums present and correct"
        print(f"{name}: {what}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("server", help="start, stop and inspect Triton servers", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("start", help="run a Triton server in the foreground on model repositories")
    p.add_argument("--repository", "-r", action="append", metavar="DIR", help="model repository (repeatable)")
    p.add_argument("--config", metavar="CONFIG", help="take the repositories from a configuration's services.inference, "
                   "and the options from its fallback_server (flags given win)")
    add_server_flags(p)
    p.set_defaults(func=start)

    p = actions.add_parser("stop", help="stop servers started with `sonic server start`")
    p.add_argument("address", nargs="*", metavar="HOST:PORT", help="gRPC address of the server")
    p.add_argument("--all", action="store_true", help="every server started here")
    p.add_argument("--timeout", type=float, help="seconds to wait for each to stop (default: the bound the server "
                                                 "set from its model instances, recorded at start)")
    p.set_defaults(func=stop)

    p = actions.add_parser("status", help="models and readiness of servers")
    p.add_argument("address", nargs="*", metavar="HOST:PORT", help="gRPC address (default: servers started here)")
    # a client's files, in the words of every client (``server_spec.CLIENT_TLS``): --tls-cert is a server's own
    p.add_argument("--tls-ca", metavar="PEM", help="talk TLS, trusting this CA for the server's certificate")
    p.add_argument("--tls-client-cert", metavar="PEM",
                   help="this client's certificate, for a server with mutual TLS (with --tls-client-key)")
    p.add_argument("--tls-client-key", metavar="PEM", help="private key of the client certificate")
    p.set_defaults(func=status)

    p = actions.add_parser("add-model", help="write a Triton repository entry (onnxruntime_onnx) for an ONNX file")
    p.add_argument("--repository", "-r", required=True, metavar="DIR")
    p.add_argument("--name", required=True, help="model name")
    p.add_argument("--onnx", required=True, metavar="FILE", help="the ONNX model (inputs/outputs are read from it)")
    p.add_argument("--max-batch-size", type=int, default=0, help="0: the first dimension is not a batch dimension")
    p.add_argument("--preferred-batch-size", type=int, action="append", metavar="N", help="dynamic batching preference")
    p.add_argument("--max-queue-delay-us", type=int, default=0, help="dynamic batching delay")
    p.add_argument("--instances", type=int, default=1, help="model instances (instance_group count)")
    p.add_argument("--labels", metavar="OUTPUT=FILE", help="class labels of an output, one per line")
    p.set_defaults(func=add_model)

    p = actions.add_parser("checksum", help="declare the MD5 of every model's files in its config.pbtxt")
    p.add_argument("repository", nargs="+", metavar="DIR", help="model repository")
    p.add_argument("--model", "-m", action="append", metavar="NAME", help="only these models (repeatable)")
    p.set_defaults(func=checksum)

