"""The SONIC client: inference sent to Triton servers over gRPC.

``client.py`` is the :class:`InferenceClient` a job gets with ``--inference sonic``; it sends each request
through a pool of servers (``servers.py``: discovery, choice, health, failover and the fallback server),
each reached through one ``connection.py`` that tracks its calls (``calls.py``: a request's life and local
deadline) and carries them over one transport (``transport/``: the compiled HTTP/2 client or grpcio, behind
one protocol). ``breaker.py`` stops sending to a server that keeps failing; ``server_statistics.py`` reads
what a server says it spent.
"""

from .client import SonicClient
from .connection import ServerConnection
from .server_statistics import compute_ns
from .servers import ServerPool

__all__ = ["ServerConnection", "ServerPool", "SonicClient", "compute_ns"]
