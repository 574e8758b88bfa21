"""Many servers behind one client: discovery, choice, health, failover and the local fallback server.

* **Discovery.** Each configured server's repository index says which models it has ready. A server
  that does not answer at start is skipped with a warning (and probed again later).
* **The right model or none.** The first time a server is chosen for a model, the MD5 sums of the
  model's files it reports (its config's checksums) are compared with the job's own repository
  (``model_digest``); a server that serves other files under that name, or reports none, is passed
  over for that model with a warning naming both digests. When no server is left, the fallback serves
  the job's own copy, or the job fails naming each server and why. A server serving several versions of
  the model (a fleet rolling one in) is pinned to the one whose files are the job's (``version_pins.py``).
* **Choice.** For each request: the healthy servers with the model, by recent queue time (from Triton's
  statistics API, refreshed in the background every ``refresh_s``): servers within 1 ms or twice the best
  count as equal and take turns (weighted round robin per model), busier ones get fewer turns in proportion
  and the far busier are last resorts (``server_choice.py`` says why, and why a server that answered nothing
  reads less each time).
* **Health** is a circuit breaker per server (``breaker.py``): ``threshold`` consecutive requests that
  pass their deadline or find the server unreachable take it out of the rotation for a back-off
  (a hung server says nothing, it only lets deadlines pass); one request whose connection its
  keepalive found silent (a network partition, ``keepalive.py``) takes it out at once; so does a failed
  probe, and the background statistics call finding it unreachable (it may have been sent nothing since
  it died). When the back-off is over, one cheap probe on the background thread brings it back or takes
  it out again for twice as long (capped). While every server with a model is out, the fallback serves
  it (or, without fallback, requests fail naming each server and why it is out; those whose server only
  went silent wait for it up to ``timeout_s`` first: ``SonicClient``).
* **Joining and leaving** (fleets, :meth:`ServerPool.follow`): a discovery callable (e.g. a fleet
  directory's live entries, ``fleet_directory.discover``) is asked at once and on every background refresh. A server it
  names for the first time is probed and joins the pool; one it no longer names (its job ended, its
  heartbeat expired) is *retired*: never chosen again, while requests already sent to it finish or fail
  over as usual; it is used again if it comes back. Servers configured by address never retire.
* **Fallback.** When no healthy server has a model and the policy allows it (``fallback.py``: by default
  only for a job that names no server), a local Triton server (CPU, like CMSSW's TritonService fallback) is
  started on the job's own repository, once, and joins the pool; when and why is recorded for the report.
  With no server configured at all, it is started at the beginning of the job.

A model nobody serves (and no fallback) raises :class:`~.triton_errors.NoServerError` naming the
model, every server and why each could not serve it (for a model a server has but cannot serve, the reason
its repository index gives).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...errors import did_you_mean
from .breaker import FAILURE_STATUSES, Action, Breaker, BreakerSettings, Event, event_for
from .connection import ServerConnection
from .fallback import LocalFallback
from .server_choice import Turns, order
from .server_state import ServerState
from .server_statistics import queue_ms, since
from .version_pins import VersionPins
from ..keepalive import dead_by_keepalive
from ..model_digest import model_digest
from ..repository import ModelInfo, ModelRepository
from ..server_spec import ServerSpec
from ..triton_errors import NoServerError, RequestError

log = logging.getLogger(__name__)


class ServerPool:
    """The servers one job may use.

    Args:
        specs (list[ServerSpec]): configured servers (may be empty: then the fallback serves everything).
        repository (ModelRepository | None): the job's repository: checksums are compared against it
            and the fallback server serves it.
        fallback (bool): start a local server when no healthy server has a model (``fallback.py`` decides).
        fallback_note (str): why it may not, for messages (``FallbackPolicy.refusal``).
        fallback_options (dict): options of the fallback server, ``services.inference.fallback_server``
            (:class:`~.server_options.ServerOptions`' fields by name).
        connection_options (dict): keyword arguments for every :class:`ServerConnection`
            (timeout_s, compression, model_versions).
        shared_memory (str): "auto" (local servers), "on" or "off".
        refresh_s (float): how often queue times are refreshed (and open breakers' back-offs checked).
        probe_timeout (float): deadline of the probes at start.
        breaker (BreakerSettings | None): each server's circuit breaker (see ``breaker.py``).
    """

    def __init__(self, specs: list[ServerSpec], repository: ModelRepository | None = None, fallback: bool = True,
                 fallback_options: Mapping[str, Any] | None = None, connection_options: Mapping[str, Any] | None = None,
                 shared_memory: str = "auto", refresh_s: float = 2.0, probe_timeout: float = 5.0,
                 breaker: BreakerSettings | None = None, fallback_note: str = ""):
        self.repository = repository
        self.fallback = LocalFallback(repository, fallback, fallback_note)
        self.fallback_options = dict(fallback_options or {})
        self.connection_options = dict(connection_options or {})
        self.shared_memory = shared_memory
        self.refresh_s, self.probe_timeout = refresh_s, probe_timeout
        self.breaker_settings = breaker or BreakerSettings()
        self.states: list[ServerState] = []
        self.pins = VersionPins(repository)  # the job's version of each model, pinned per server
        self.fallback_server: Any = None
        self._lock = threading.RLock()
        self._infos: dict[str, ModelInfo] = {}
        self._server_infos: dict[tuple[str, str], ModelInfo] = {}
        self._turns = Turns()  # weighted round robin per model (server_choice.py)
        self._refreshing = False
        self._last_refresh = time.monotonic()
        self._background = ThreadPoolExecutor(1, thread_name_prefix="sonic-servers")
        self.discover: Callable[[], list[ServerSpec]] | None = None
        self._discovered: set[str] = set()  # addresses discovery named (they may retire)
        self._discovering = threading.Lock()  # one rediscovery at a time (the background one, or a caller's)
        for spec in specs:
            self._add(spec)
        for state in self.states:
            self._probe(state, at_start=True)
        if self.fallback.allowed and not any(s.healthy for s in self.states):
            self.start_fallback(why=f"none of the servers {[s.address for s in specs]} answers" if specs else
                                "the job names no server")

    # -- membership ------------------------------------------------------------------------------------
    def _use_shm(self, spec: ServerSpec) -> str:
        """The connection's shared memory setting: only a server on this host can read our memory (an address
        that looks local is not enough: the connection proves it before any request uses it, ``shm.py``)."""
        return self.shared_memory if spec.local or self.shared_memory == "on" else "off"

    def _add(self, spec: ServerSpec, fallback: bool = False) -> ServerState:
        connection = ServerConnection(spec, shared_memory=self._use_shm(spec), **self.connection_options)
        state = ServerState(connection, breaker=Breaker(self.breaker_settings), fallback=fallback)
        with self._lock:
            self.states.append(state)
        return state

    def _probe(self, state: ServerState, at_start: bool = False, timeout: float | None = None) -> None:
        """Asks the server whether it is live and which models it has; the answer closes its breaker,
        silence or refusal opens it."""
        try:
            models = state.connection.probe(timeout or self.probe_timeout)
        except RequestError as err:
            self._record(state, "trip", err.args[0])
            if at_start:
                log.warning("Triton server %s is not reachable; skipped (%s)", state.connection.address, err.args[0])
            return
        with self._lock:
            was_down = state.checked > 0 and state.reason != ""
            state.models = {m: v for m, v in models.items() if m not in state.refused}
            state.checked = time.monotonic()
        self._record(state, "success")
        self._begin_statistics(state)
        if was_down:
            log.info("Triton server %s is back with %d models", state.connection.address, len(state.models))

    def start_fallback(self, model: str = "", why: str = "") -> ServerState:
        """Starts (once) the local CPU server on the job's repository and adds it to the pool; ``why`` (what every
        server said) is recorded for the report (``fallback.py``)."""
        with self._lock:
            for state in self.states:
                if state.fallback:
                    return state
            self.fallback_server = self.fallback.start(self.fallback_options, model, why)
            state = self._add(ServerSpec(self.fallback_server.grpc_url), fallback=True)
            self._probe(state)
            return state

    # -- choice ----------------------------------------------------------------------------------------
    def candidates(self, model: str, exclude: frozenset[str] = frozenset()) -> list[ServerConnection]:
        """Healthy servers with the model, best first (see the module docstring)."""
        self._maybe_refresh()
        with self._lock:
            usable = [s for s in self.states if s.healthy and model in s.models and s.connection.address not in exclude]
            if not usable:
                return []
            return [s.connection for s in order([(s, s.queue_ms.get(model, 0.0)) for s in usable], self._turns, model,
                                                key=lambda s: s.connection.address)]

    def choose(self, model: str, exclude: frozenset[str] = frozenset()) -> ServerConnection:
        """The server for the next request of ``model``; starts the fallback when nobody else has it.

        Raises:
            NoServerError: naming the model and every server with the reason it cannot serve it.
        """
        for connection in self.candidates(model, exclude):
            if self._verified(connection, model):
                return connection
        if self.fallback.allowed and self._fallback_has(model, exclude):
            state = self.start_fallback(model, "; ".join(self._server_lines(model, exclude)))
            if state.healthy and model in state.models and state.connection.address not in exclude:
                return state.connection
        raise NoServerError(self.describe_missing(model, exclude))

    def _fallback_has(self, model: str, exclude: frozenset[str]) -> bool:
        if not self.fallback.has(model):
            return False
        with self._lock:
            return not any(s.fallback and s.connection.address in exclude for s in self.states)

    def describe_missing(self, model: str, exclude: frozenset[str] = frozenset()) -> str:
        """Why no server can serve ``model`` (every server and its reason, and the fallback's)."""
        lines = self._server_lines(model, exclude) or ["no servers configured"]
        return f"no server can run model {model!r}: " + "; ".join(lines + self.fallback.describe(model))

    def _server_lines(self, model: str, exclude: frozenset[str]) -> list[str]:
        lines = []
        with self._lock:
            for s in self.states:
                if s.connection.address in exclude:
                    why = "failed this request"
                elif s.retired:
                    why = "left the fleet (discovery no longer names it)"
                elif not s.healthy:
                    why = f"down ({s.reason})"
                elif model in s.refused:
                    why = s.refused[model]
                elif s.fallback and model in getattr(self.fallback_server, "skipped", {}):
                    why = f"cannot serve it: {self.fallback_server.skipped[model]}"  # left out at start (servable.py)
                elif model in getattr(s.connection, "unavailable", {}):  # its repository index says why
                    why = f"has it but cannot serve it ({s.connection.unavailable[model]})"
                elif model not in s.models:
                    why = f"does not have it{did_you_mean(model, s.models)}"
                else:
                    why = "usable"
                lines.append(f"{s.connection.address}{' (fallback)' if s.fallback else ''}: {why}")
        return lines

    def mark_down(self, connection: ServerConnection, reason: str) -> None:
        """Takes the server out of rotation now (it was found unreachable by a control call)."""
        state = self._state_of(connection)
        if state is not None:
            self._record(state, "trip", reason)

    def record(self, connection: ServerConnection, status: str | None, reason: str = "") -> Action:
        """What a finished request says about its server: ``status`` None for a result, else the gRPC status.

        Returns the breaker's action: "open"/"reopen" when this took the server out of rotation (requests
        still waiting on it should fail over now rather than each wait for its own deadline).
        """
        state = self._state_of(connection)
        if state is None:
            return "none"
        event = event_for(status)
        if status == "UNAVAILABLE" and dead_by_keepalive(reason):
            event = "trip"  # its keepalive found the connection silent (a partition): decisive at once (keepalive.py)
        return self._record(state, event, reason)

    def returning(self, model: str) -> set[str]:
        """Servers with ``model`` out of rotation because their connection went silent (keepalive): a partition
        may heal, so a request with nowhere else to go may wait for them (``SonicClient``)."""
        with self._lock:
            return {s.connection.address for s in self.states if model in s.models and not s.retired
                    and not s.breaker.usable() and dead_by_keepalive(s.reason)}

    def has_other(self, model: str, connection: ServerConnection) -> bool:
        """Whether another server in rotation has ``model`` (then a request that passed its deadline on
        ``connection`` is better sent there than again to a server that may be hung)."""
        with self._lock:
            return any(s.healthy and model in s.models and s.connection is not connection for s in self.states)

    def usable(self, connection: ServerConnection) -> bool:
        """Whether the server is in rotation (a request may be retried on it)."""
        state = self._state_of(connection)
        return state is not None and state.healthy

    def _state_of(self, connection: ServerConnection) -> ServerState | None:
        with self._lock:
            return next((s for s in self.states if s.connection is connection), None)

    def _record(self, state: ServerState, event: Event, reason: str = "") -> Action:
        with self._lock:
            now = time.monotonic()
            failures = state.breaker.failures + 1
            action = state.breaker.record(event, now)
            if action == "open":
                why = f"{failures} consecutive failures, the last: {reason}" if event == "failure" else reason
                state.reason, state.checked = why or "not answering", now
            elif action == "reopen":
                state.checked = now
            elif action == "close":
                state.reason = ""
        address = state.connection.address
        if action == "open":
            log.warning("Triton server %s out of rotation for %.1f s (%s)", address, state.breaker.backoff, state.reason)
        elif action == "reopen":
            log.warning("Triton server %s still not answering; out of rotation for %.1f s more",
                        address, state.breaker.backoff)
        elif action == "close":
            log.info("Triton server %s answers again: back in rotation", address)
        return action

    # -- model configs ---------------------------------------------------------------------------------
    def model_info(self, model: str) -> ModelInfo:
        """The model's config from a server that has it (one whose version matches the local repository)."""
        with self._lock:
            if model in self._infos:
                return self._infos[model]
        # A server that dies between the job's start and its first request of the model must not fail the
        # event: its silence counts against it like a request's, and the next server (or the fallback) is asked.
        exclude: set[str] = set()
        while True:
            connection = self.choose(model, frozenset(exclude))
            try:
                info = self._server_infos.get((connection.address, model)) or connection.model_info(model)
                break
            except RequestError as err:
                if err.status not in FAILURE_STATUSES:
                    raise
                log.warning("failing over: %s", err.args[0])
                self.record(connection, err.status, err.args[0])
                exclude.add(connection.address)
        with self._lock:
            self._infos[model] = info
        return info

    def _verified(self, connection: ServerConnection, model: str) -> bool:
        """The right model or none, once per server and model: the server must report the MD5 sums of the
        model's files and they must equal the local repository's (``model_digest``). A server that serves
        other files under the name, or cannot say which, is passed over for that model."""
        state = next(s for s in self.states if s.connection is connection)
        if model in state.verified:
            return True
        try:
            info = connection.model_info(model)
        except RequestError:
            return True  # cannot ask now; the request itself will fail over if the server is gone
        problem = self.pins.check(info, connection)
        with self._lock:
            self._server_infos[(connection.address, model)] = info
            state.verified.add(model)
            if problem:
                state.refused[model] = problem
                state.models.pop(model, None)
        if problem:
            log.warning("%s; passed over for this model", problem)
        return not problem

    def digest_on(self, address: str, model: str) -> str | None:
        """The digest of what the server at ``address`` answers for ``model`` (None when it was not asked or
        reported none): the job's version of it (``version_pins.py``)."""
        return self.pins.digest_on(address, model)

    def local_digest(self, model: str) -> str | None:
        """The digest of the job's own copy of ``model`` (None when it has none)."""
        local = self.repository.find(model) if self.repository is not None else None
        return model_digest(self.repository, model) if local is not None else None

    # -- statistics and background refresh -------------------------------------------------------------
    def _begin_statistics(self, state: ServerState) -> None:
        if state.baseline is not None:
            return
        try:
            state.baseline = state.connection.statistics()
            state.last_stats = dict(state.baseline)
        except RequestError:
            state.baseline = {}

    def _maybe_refresh(self) -> None:
        now = time.monotonic()
        if self._refreshing or now - self._last_refresh < self.refresh_s:
            return
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True
            self._last_refresh = now
        try:
            self._background.submit(self._refresh)
        except RuntimeError:  # shut down
            self._refreshing = False

    def _ask_discovery(self) -> list[ServerSpec] | None:
        """What discovery names now; None without discovery or when it failed (then nothing changes)."""
        if self.discover is None:
            return None
        try:
            return list(self.discover())
        except Exception as err:  # noqa: BLE001 - a shared filesystem hiccup must not stop the job
            log.warning("server discovery failed; keeping the servers known so far (%s: %s)", type(err).__name__, err)
            return None

    def follow(self, discover: Callable[[], list[ServerSpec]]) -> None:
        """Lets servers join and leave during the job (see "Joining and leaving"): ``discover`` is asked now
        and on every background refresh; servers of the pool it names now may retire later."""
        self.discover = discover
        self.rediscover()

    def rediscover(self) -> None:
        """Adds servers discovery names for the first time (probed at once), retires discovered ones it no
        longer names and brings back retired ones it names again. Runs on each background refresh."""
        with self._discovering:
            self._rediscover()

    def _rediscover(self) -> None:
        found = self._ask_discovery()
        if found is None:
            return
        named = {spec.address for spec in found}
        with self._lock:
            known = {s.connection.address: s for s in self.states}
        for spec in found:
            if spec.address in known:
                with self._lock:
                    self._discovered.add(spec.address)
                continue
            state = self._add(spec)
            with self._lock:
                self._discovered.add(spec.address)
            self._probe(state)
            log.info("Triton server %s joined (discovered) with %d models", spec.address, len(state.models))
        for address, state in known.items():
            if address not in self._discovered:
                continue
            retired = address not in named
            if retired != state.retired:
                with self._lock:
                    state.retired = retired
                log.info("Triton server %s %s", address, "left the fleet: retired (requests in flight finish or "
                         "fail over)" if retired else "is back in the fleet")

    def _refresh(self) -> None:
        """Recent queue times of healthy servers; probes of down ones (runs on the background thread)."""
        try:
            self.rediscover()
            for state in list(self.states):
                with self._lock:
                    action = state.breaker.poll(time.monotonic())
                if action == "probe":  # the back-off is over: one short probe decides
                    self._probe(state, timeout=self.breaker_settings.probe_timeout_s)
                    continue
                if not state.healthy:
                    continue
                try:
                    stats = state.connection.statistics()
                except RequestError as err:
                    # a server that died while the pool sent it nothing (others had shorter queues) is noticed
                    # here, not only by a failing request, so reports and later choices know it is down
                    if err.status == "UNAVAILABLE":
                        self.mark_down(state.connection, err.args[0])
                    elif err.status == "DEADLINE_EXCEEDED":
                        self.record(state.connection, err.status, err.args[0])
                    continue
                queue, doubt = queue_ms(state.last_stats, stats, state.queue_ms)
                state.doubt = doubt or state.doubt
                with self._lock:
                    state.queue_ms.update(queue)
                    state.last_stats = stats
        finally:
            self._refreshing = False

    def statistics_doubts(self) -> dict[str, str]:
        """``{address: why}`` of the servers whose statistics are not one server's (see ``ServerState.doubt``)."""
        with self._lock:
            return {s.connection.address: s.doubt for s in self.states if s.doubt}

    def transports(self) -> dict[str, str]:
        """Each server's transport ("native" or "grpcio"), for the job's report."""
        with self._lock:
            return {s.connection.address: s.connection.transport for s in self.states}

    def breaker_openings(self) -> dict[str, int]:
        """How many times each server left the rotation (its breaker opened or re-opened) in this job."""
        with self._lock:
            return {s.connection.address: s.breaker.opened for s in self.states if s.breaker.opened}

    def statistics(self) -> dict[str, dict[str, dict[str, float]]]:
        """Server-side counters since this job started using each server: ``{server: {model: {...}}}``."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for state in list(self.states):
            if state.baseline is None:
                continue
            now = state.last_stats  # a dead or hung server (asking it would make the report wait): what we saw last
            if state.healthy:
                try:
                    now = state.connection.statistics()
                except RequestError:
                    pass
            per_model, doubt = since(state.baseline, now)
            state.doubt = doubt or state.doubt
            if per_model:
                out[state.connection.address + (" (fallback)" if state.fallback else "")] = per_model
        return out

    def close(self) -> None:
        self._background.shutdown(wait=True, cancel_futures=True)
        for state in self.states:
            # calls left running on a server in rotation get a grace period to end (closing cancels them, which
            # Triton 2.51 may not survive); one out of rotation is not answering: waiting would only delay the
            # job's end, and the job's exit would drop those calls all the same
            state.connection.close(**({} if state.breaker.usable() else {"grace_s": 0.0}))
        if self.fallback_server is not None:
            self.fallback_server.stop()  # kept (stopped) so reports can still name it
        self.pins.close()  # the job no longer uses its versions (a fleet's record of its use goes)
