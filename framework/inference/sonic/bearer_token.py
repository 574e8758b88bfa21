"""The job's bearer token: found as WLCG Bearer Token Discovery says, sent as gRPC ``authorization`` metadata.

Why: sites that offer GPUs as a shared service put an identity in front of them (a proxy that verifies JSON Web
Tokens, ``serving/grpc_proxy.py``), and grid jobs already carry a token for that identity. A job finds it
without configuration, in this order:

1. ``services.inference.token_file`` (the configuration names a file: this job's own choice wins);
2. ``BEARER_TOKEN`` (the token itself);
3. ``BEARER_TOKEN_FILE`` (a file holding it);
4. ``$XDG_RUNTIME_DIR/bt_u<uid>``;
5. ``/tmp/bt_u<uid>``.

A file's content, stripped of surrounding white space, is the token. A token file is read again when it changes
(its modification time, size or inode; looked at every ``RECHECK_S`` at most), so a credential agent that
renews it during a long job is followed without a restart.

Every call carries ``authorization: Bearer <token>``, on both transports and on the control calls, but only where
nobody else can read it: over TLS or to this host's loopback. To any other server in clear text it is not sent
(one warning naming where the token came from), and a refusal from that server then says so.

The token is never logged, printed or written: :class:`BearerToken` shows only where it came from.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ..server_spec import ServerSpec
from ..serving.sockets import is_loopback
from ..triton_errors import RequestError

log = logging.getLogger(__name__)

#: how often (seconds, at most) a token file is looked at for a change
RECHECK_S = 0.5

#: gRPC statuses with which a server or proxy refuses a caller's identity
REFUSALS = ("UNAUTHENTICATED", "PERMISSION_DENIED")


class BearerToken:
    """A token and where it came from; :meth:`header` gives the current ``authorization`` value.

    Args:
        origin (str): where it was found, for messages (``BEARER_TOKEN_FILE=/path``); never the token.
        value (str): the token as found.
        path (Path | None): its file, read again when it changes; None for a token given as a value.
    """

    def __init__(self, origin: str, value: str, path: Path | None = None):
        self.origin, self.path = origin, path
        self._value = value
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._stamp = _stamp(path) if path is not None else None
        self._missing_said = False

    def header(self) -> str:
        """``"Bearer <token>"``, the file read again first when it changed since the last look."""
        if self.path is not None and time.monotonic() - self._checked >= RECHECK_S:
            self._recheck()
        return f"Bearer {self._value}"

    def _recheck(self) -> None:
        with self._lock:
            self._checked = time.monotonic()
            stamp = _stamp(self.path)
            if stamp == self._stamp:
                return
            value = _read(self.path) if stamp is not None else None
            if not value:  # gone or empty for now (an agent replacing it): the last token is kept
                if not self._missing_said:
                    self._missing_said = True
                    log.warning("the bearer token file %s is %s; the token read before is sent until it is back",
                                self.path, "empty" if stamp is not None else "gone")
                return
            self._stamp, self._value, self._missing_said = stamp, value, False
            log.info("the bearer token file %s changed; sending the new token", self.path)

    def __repr__(self) -> str:
        return f"BearerToken({self.origin})"


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a changed file: modification time, size and inode (an agent may rename a new file over it)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def discover(token_file: str = "", environ: Mapping[str, str] | None = None, uid: int | None = None) -> BearerToken | None:
    """The token this job presents (see the module docstring for the order), or None when there is none.

    Raises:
        ConfigError: ``token_file`` is named but cannot be read, or holds nothing.
    """
    environ = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    if token_file:
        path = Path(token_file).expanduser()
        value = _read(path)
        if not value:
            why = "is empty" if path.is_file() else "cannot be read" if path.exists() else "does not exist"
            raise ConfigError(f"the bearer token file {path} {why}", key="services.inference.token_file")
        return BearerToken(f"services.inference.token_file={path}", value, path)
    if environ.get("BEARER_TOKEN", "").strip():
        return BearerToken("BEARER_TOKEN", environ["BEARER_TOKEN"].strip())
    candidates = []
    if environ.get("BEARER_TOKEN_FILE"):
        candidates.append((f"BEARER_TOKEN_FILE={environ['BEARER_TOKEN_FILE']}", Path(environ["BEARER_TOKEN_FILE"])))
    if environ.get("XDG_RUNTIME_DIR"):
        path = Path(environ["XDG_RUNTIME_DIR"]) / f"bt_u{uid}"
        candidates.append((str(path), path))
    candidates.append((f"/tmp/bt_u{uid}", Path(f"/tmp/bt_u{uid}")))
    for origin, path in candidates:
        value = _read(path)
        if value:
            return BearerToken(origin, value, path)
        if origin.startswith("BEARER_TOKEN_FILE"):  # named but unusable: said, and discovery goes on as WLCG's does
            log.warning("BEARER_TOKEN_FILE names %s, which %s; looking further", path,
                        "is empty" if path.is_file() else "does not exist or cannot be read")
    return None


_said: set[str] = set()


def for_server(token: BearerToken | None, spec: ServerSpec) -> tuple[BearerToken | None, str]:
    """The token to send to ``spec`` (None where it must not go) and, when it is withheld, why (one line,
    logged once per server)."""
    if token is None or spec.ssl or is_loopback(spec.host.strip("[]").lower()):  # nobody else sees the bytes
        return token, ""
    why = (f"the bearer token ({token.origin}) is not sent to {spec.address}: the connection is clear text to "
           "another host, where anyone on the path could read and reuse it; reach the server over TLS (ssl: true)")
    if spec.address not in _said:
        _said.add(spec.address)
        log.warning(why)
    return None, why


def explain(error: RequestError, token: BearerToken | None, withheld: str = "") -> RequestError:
    """A refusal of the caller's identity (UNAUTHENTICATED, PERMISSION_DENIED) with what to fix on this side:
    the token's origin (which file to renew) or that there was none (where it was looked for). Other errors
    pass unchanged."""
    if error.status not in REFUSALS:
        return error
    if withheld:
        hint = withheld
    elif token is None:
        hint = ("this job has no bearer token: put one in BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u<uid> or "
                "/tmp/bt_u<uid>, or name it in services.inference.token_file")
    else:
        hint = f"the token sent came from {token.origin}"
    message = str(error).partition(f"{error.status}: ")[2] or str(error)
    return RequestError(error.model, error.server, error.status, f"{message} ({hint})", "failover")


class TokenPlugin:
    """tritonclient's plugin interface: the ``authorization`` header on every control call of a
    ``tritonclient.grpc.InferenceServerClient`` (readiness, configs, statistics, shared memory)."""

    def __init__(self, token: BearerToken):
        self.token = token

    def __call__(self, request: Any) -> None:  # tritonclient's Request
        request.headers["authorization"] = self.token.header()
