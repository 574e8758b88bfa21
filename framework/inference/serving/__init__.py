"""Running Triton servers: everything the project does to start, check, own and stop a server.

``server.py`` runs one ``tritonserver`` process (``TritonServer``) from one options type
(``server_options.py``: ``ServerOptions``, whose fields are the flags of ``sonic server start``, the keys of
the fallback server and the settings of fleets). Around it: ``triton_install.py`` (the pip server's files),
``runtime_repository.py`` (what a server loads, checksums verified), ``servable.py`` (which backend serves
which model), ``spawner.py`` and ``private_memory.py`` (how the process is started and kept private),
``sockets.py`` (ports), ``gpu_placement.py`` (which cards a server uses), ``shm_janitor.py``
(regions that dead clients leave), ``fleet_directory.py`` (the one registry of running servers; beside it
``fleet_use.py``, the versions of models the fleet's client jobs use), ``model_versions.py`` (several versions of
a model side by side on a running server) and
``library_cache.py`` (compiled libraries cached per machine); ``grpc_proxy.py`` and ``haproxy_config.py`` run
a gRPC proxy (HAProxy) in front of servers, checking bearer tokens. The code that runs *inside* a server is in
``framework/inference/backends/``, whose import path model repositories name.
"""

from .fleet_directory import (FLEET_FILE, HEARTBEAT_S, TTL_S, BadEntry, Entry, EntryProblem, deregister,
                              entry_from, live_entries, read_entries, register, scan)
from .gpu_placement import available_cards, node_shares, placement_lines, share_of, shared_note
from .grpc_proxy import GrpcProxy, ProxyOptions, ProxyUnavailable, preflight
from .haproxy_config import BackendTls, TokenRules
from .runtime_repository import write_entry
from .fleet_use import jobs_per_version
from .model_versions import VersionSource, interface_problem, ready_versions, serve_versions, source_of
from .server import TritonServer, host_port
from .server_stop import stop_bound_s
from .sockets import free_port, is_loopback
from .spawner import spawn
from .server_options import (FLAGS, HELP, METAVAR, TLS_FILES, ServerOptions, option_fields, parse_cpus,
                             tls_problem, with_default)

__all__ = ["BackendTls", "GrpcProxy", "ProxyOptions", "ProxyUnavailable", "TokenRules", "preflight", "FLAGS", "FLEET_FILE", "HEARTBEAT_S", "HELP", "METAVAR", "TLS_FILES", "TTL_S", "BadEntry", "Entry",
           "EntryProblem", "ServerOptions", "TritonServer", "available_cards", "deregister", "entry_from", "host_port",
           "node_shares", "option_fields", "parse_cpus", "placement_lines", "read_entries", "register", "scan",
           "share_of", "shared_note", "tls_problem", "with_default", "write_entry",
           "VersionSource", "interface_problem", "jobs_per_version", "ready_versions", "serve_versions", "source_of",
           "free_port", "is_loopback", "live_entries", "spawn", "stop_bound_s"]
