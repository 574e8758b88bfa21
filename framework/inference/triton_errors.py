"""The one place where Triton/gRPC errors become sonic-hep errors (like tritonclient's ``get_error_grpc``).

Every failure of a request to a server is turned into a :class:`RequestError` that keeps the gRPC
status, names the model and the server, and says what the client may do about it:

* ``retry``     — worth sending again, to the same server (a deadline passed, the server was busy);
* ``failover``  — this server cannot serve it now (unreachable, model not loaded): try another;
* ``fatal``     — the request itself is wrong (bad shape or type): no server will accept it.
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
    "INVALID_ARGUMENT": "fatal",      # shape, dtype or name wrong: the same everywhere
    "DEADLINE_EXCEEDED": "retry",
    "RESOURCE_EXHAUSTED": "retry",
    "INTERNAL": "retry",
    "UNKNOWN": "retry",
    "CANCELLED": "retry",
}


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
    """``"UNAVAILABLE"`` from tritonclient's ``"StatusCode.UNAVAILABLE"``, "" for other exceptions."""
    status = getattr(err, "status", None)
    text = str(status() if callable(status) else status or "")
    return text.removeprefix("StatusCode.")


def convert(err: BaseException, model: str, server: str) -> RequestError:
    """A :class:`RequestError` for any exception raised by or reported to a tritonclient call."""
    if isinstance(err, RequestError):
        return err
    status = status_name(err)
    message = err.message() if callable(getattr(err, "message", None)) else str(err)
    message = (message or type(err).__name__).strip().splitlines()[0]
    if not status and isinstance(err, (ConnectionError, OSError)):
        status = "UNAVAILABLE"
    return RequestError(model, server, status, message, ACTIONS.get(status, "retry"))
