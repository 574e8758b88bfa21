"""Running Triton servers: everything the project does to start, check, own and stop a server.

``server.py`` runs one ``tritonserver`` process (``TritonServer``) from one options type
(``server_options.py``: ``ServerOptions``, whose fields are the flags of ``sonic server start``, the keys of
the fallback server and the settings of fleets). Around it: ``triton_install.py`` (the pip server's files),
``runtime_repository.py`` (what a server loads, checksums verified), ``servable.py`` (which backend serves
which model), ``spawner.py`` and ``private_memory.py`` (how the process is started and kept private),
``sockets.py`` (ports), ``shm_janitor.py``
(regions that dead clients leave), ``fleet_directory.py`` (the one registry of running servers) and
``library_cache.py`` (compiled libraries cached per machine). The code that runs *inside* a server is in
``framework/inference/backends/``, whose import path model repositories name.
"""

from .fleet_directory import (FLEET_FILE, HEARTBEAT_S, TTL_S, BadEntry, Entry, EntryProblem, deregister,
                              entry_from, read_entries, register, scan)
from .runtime_repository import write_entry
from .server import TritonServer, host_port
from .server_options import (FLAGS, HELP, METAVAR, TLS_FILES, ServerOptions, option_fields, parse_cpus,
                             tls_problem, with_default)

__all__ = ["FLAGS", "FLEET_FILE", "HEARTBEAT_S", "HELP", "METAVAR", "TLS_FILES", "TTL_S", "BadEntry", "Entry",
           "EntryProblem", "ServerOptions", "TritonServer", "deregister", "entry_from", "host_port",
           "option_fields", "parse_cpus", "read_entries", "register", "scan", "tls_problem", "with_default",
           "write_entry"]
