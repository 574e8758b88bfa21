"""The one place where Triton/gRPC errors become sonic-hep errors (like tritonclient's ``get_error_grpc``).

Every failure of a request to a server is turned into a :class:`RequestError` that keeps the gRPC
status, names the model and the server, and says what the client may do about it:

* ``retry``     — worth sending again, to the same server (a deadline passed, the server was busy);
* ``failover``  — this server cannot serve it now (unreachable, model not loaded, its python stub
  died): try another;
* ``fatal``     — the request itself is wrong (bad shape or type) or the model fails on this input
  (an error raised by the model's execute): the same on every server, so no retry, no failover.

The line between the last two is drawn by the status and, for ``INTERNAL``, by what the message
says. Triton reports a model's own execution error as ``INTERNAL`` (python and onnxruntime
backends alike: an out-of-range embedding index, a NaN check in a python model); sending that input
again gives the same error, so it is fatal. A few ``INTERNAL`` texts come from the server or the
transport instead (``SERVER_TROUBLE``): those fail over.
"""

from __future__ import annotations

from typing import Literal

from ..errors import InferenceError

Action = Literal["retry", "failover", "fatal"]

#: gRPC status → what to do; anything not listed is retried, then failed over
ACTIONS: dict[str, Action] = {
    "UNAVAILABLE": "failover",        # connection refused or dropped: the server is down
    "NOT_FOUND": "failover",          # model not loaded on this server
    "UNIMPLEMENTED": "failover",
    "UNAUTHENTICATED": "failover",    # a proxy refused the job's bearer token: sending it again cannot help;
    "PERMISSION_DENIED": "failover",  # another server may not ask for it (bearer_token.py says what to fix)
    "INVALID_ARGUMENT": "fatal",      # shape, dtype or name wrong: the same everywhere
    "INTERNAL": "fatal",              # the model raised an error for this input (see SERVER_TROUBLE)
    "DEADLINE_EXCEEDED": "retry",     # no answer in time (enforced locally, connection.py)
    "RESOURCE_EXHAUSTED": "retry",    # queue full, message too large for now
    "UNKNOWN": "retry",
    "CANCELLED": "retry",             # only when a channel closes under a call
}

#: lower-case fragments of an INTERNAL or INVALID_ARGUMENT message that blame the server or the
#: transport, not the request: the request may well succeed on another server
SERVER_TROUBLE: tuple[str, ...] = (
    "stub process",                   # the python backend's stub died or hangs ("... is not healthy")
    "not healthy",
    "rst_stream",                     # HTTP/2 stream reset by a dying server
    "socket closed",
    "shared memory region",           # our region is unknown to a restarted server: send it elsewhere
)


def action_for(status: str, message: str) -> Action:
    """What the client may do after a request failed with gRPC ``status`` and ``message``."""
    action = ACTIONS.get(status, "retry")
    if action == "fatal" and any(fragment in message.lower() for fragment in SERVER_TROUBLE):
        return "failover"
    return action


class RequestError(InferenceError):
    """A request that failed on a server.

    Attributes:
        model: the model name.
        server: the server's address.
        status: the gRPC status name (``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` ...), or "" when unknown.
        action: "retry", "failover" or "fatal" (see the module docstring).
    """

    def __init__(self, model: str, server: str, status: str, message: str, action: Action):
        self.model, self.server, self.status, self.action = model, server, status, action
        super().__init__(f"model {model!r} on server {server}: {status + ': ' if status else ''}{message}")


class NoServerError(InferenceError):
    """No healthy server has the model (and no fallback could be used)."""


def status_name(err: BaseException) -> str:
    """``"UNAVAILABLE"`` from tritonclient's ``"StatusCode.UNAVAILABLE"`` or a gRPC call's own error
    (``code()``, the data plane's), "" for other exceptions."""
    code = getattr(err, "code", None)
    if callable(code) and hasattr(code(), "name"):
        return code().name
    status = getattr(err, "status", None)
    text = str(status() if callable(status) else status or "")
    return text.removeprefix("StatusCode.")


def convert(err: BaseException, model: str, server: str) -> RequestError:
    """A :class:`RequestError` for any exception raised by or reported to a tritonclient call."""
    if isinstance(err, RequestError):
        return err
    status = status_name(err)
    text = getattr(err, "message", None) or getattr(err, "details", None)  # tritonclient's / gRPC's own
    message = text() if callable(text) else str(err)
    message = (message or type(err).__name__).strip().splitlines()[0]
    if not status and isinstance(err, (ConnectionError, OSError)):
        status = "UNAVAILABLE"
    return RequestError(model, server, status, message, action_for(status, message))
