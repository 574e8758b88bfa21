"""SONIC: inference as a service. The same ``infer`` call as direct mode, run on Triton servers over gRPC.

::

    client = SonicClient.from_config(InferenceConfig(mode="sonic", servers=["10.0.0.7:8001"],
                                                     repository=["data/models/demo"]))
    future = client.infer("demo_mlp", {"x": x})     # returns at once; the connection's workers complete it
    probs = future.result()["probs"]

What happens behind ``infer`` (the CMSSW SonicTriton client, in Python):

1. the model's config is read **from the server** (inputs, dtypes, dims, max_batch_size) and the
   inputs are checked against it, on the caller's thread, so mistakes name the module that made them;
2. the inputs become requests (:func:`~.client.split_requests`): batches larger than max_batch_size
   are split, ragged entries go as several rectangular requests, a model without batch dimension
   gets its inputs as they are;
3. each request goes to the server the :class:`~.servers.ServerPool` chooses, asynchronously
   (the server's connection hands it to its transport, ``transport/`` says which and why; system shared
   memory when the server is local; gRPC compression if asked, per model: ``compression.py``);
4. a failed request is retried on the same server up to ``allowed_tries`` times when that can help
   (server busy; a deadline only when no other server has the model) and the server is still in
   rotation, then **fails over** to another server
   with the model, and finally to the local **fallback** server; a request that is wrong in itself
   (bad shape) fails at once. Each server has a circuit breaker (``breaker.py``): when a few
   consecutive requests pass their deadline or find it unreachable, it leaves the rotation and every
   request still waiting on it fails over at once (its gRPC call is left to finish or expire; its
   answer is ignored), so a hung server costs a job about one ``timeout_s``, not one per request. A
   connection its HTTP/2 keepalive finds silent (a network partition: ``keepalive.py``) fails its calls
   with UNAVAILABLE within seconds and takes its server out at once; with no other server and no
   fallback, requests wait for it to answer again (``timeout_s`` at most) instead of failing;
5. the answers are reassembled in request order into one ``{output: array}``.

Server-side queue and compute times per model (Triton's statistics API) are part of
:meth:`SonicClient.statistics`, so they appear in the job's timing report.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...futures import gather, then
from ..client import (Counters, InferenceClient, InputArray, assemble, check_inputs, is_ragged, payload_bytes,
                     split_requests)
from ..compression import Compression
from .bearer_token import discover as discover_token
from .breaker import BreakerSettings
from .connection import ServerConnection, fixed_size
from ..keepalive import Keepalive
from ..repository import ModelInfo, ModelRepository
from ..server_spec import ServerSpec
from .server_statistics import compute_ns, not_one_server
from .fallback import FallbackPolicy
from .servers import ServerPool
from ..triton_errors import NoServerError, RequestError

log = logging.getLogger(__name__)

#: how often requests that wait for a silent server to return look again (each look lets the pool probe it)
WAIT_POLL_S = 0.5


@dataclass(eq=False)  # kept in sets by identity (requests waiting on a server)
class _Attempt:
    """One request's way through retries and failovers."""

    info: ModelInfo
    inputs: dict[str, np.ndarray]
    outputs: list[str]
    result: Future
    connection: ServerConnection | None = None
    tries: int = 0
    failed: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    last_error: BaseException | None = None
    sent: int = 0  # which send the pending callback belongs to: an abandoned send's answer is ignored
    finish: Callable[[dict[str, np.ndarray]], Any] | None = None  # turns the answer into the call's result
    nbytes: int = -1  # tensor bytes of the inputs, counted at the first send
    waiting_since: float | None = None  # when it began waiting for a silent server to return (``_wait``)


class SonicClient(InferenceClient):
    """Runs models on Triton servers.

    Args:
        pool (ServerPool): the servers (and the fallback) this client may use.
        allowed_tries (int): attempts of one request on one server before failing over.
    """

    mode = "sonic"

    def __init__(self, pool: ServerPool, allowed_tries: int = 3):
        self.pool = pool
        self.allowed_tries = max(1, allowed_tries)
        self.counters = Counters()
        # retries and failovers may start a server (seconds): never on a gRPC callback thread
        self._recovery = ThreadPoolExecutor(2, thread_name_prefix="sonic-recovery")
        self._lock = threading.Lock()
        self._waiting: dict[str, set[_Attempt]] = {}  # server address → requests sent there, unanswered
        self.deadlines: Counter[str] = Counter()  # server address → requests that passed their deadline there
        self._parked: list[_Attempt] = []  # requests waiting for a silent server to return (``_wait``)
        self._unpark: threading.Timer | None = None

    @classmethod
    def from_config(cls, config: Any, repository: ModelRepository | None) -> SonicClient:
        """From the ``services.inference`` settings (:class:`~.service.InferenceConfig`)."""
        specs = [ServerSpec.parse(item) for item in config.servers]
        fallback = FallbackPolicy.of(config.fallback, named=bool(config.servers or getattr(config, "fleet", "")))
        fallback.check_start()  # a job that names no server and may not start one: one line, now
        try:
            breaker = BreakerSettings(threshold=config.breaker_threshold, backoff_s=config.breaker_backoff_s,
                                      max_backoff_s=config.breaker_max_backoff_s)
        except ValueError as err:
            raise ConfigError(str(err), key="services.inference.breaker_*") from None
        pool = ServerPool(specs, repository=repository, fallback=fallback.allowed, fallback_note=fallback.refusal(),
                          fallback_options=dict(config.fallback_server or {}),
                          connection_options={"timeout_s": config.timeout_s,
                                              "compression": Compression(config.compression, config.model_compression),
                                              "model_versions": config.model_versions,
                                              "transport": config.transport,
                                              "keepalive": Keepalive(config.keepalive_s, config.keepalive_timeout_s),
                                              "token": discover_token(config.token_file)},
                          shared_memory=config.shared_memory,
                          breaker=breaker)
        return cls(pool, allowed_tries=config.allowed_tries)

    def model_info(self, model: str) -> ModelInfo:
        """The server's config of the model, with the local repository's entry of it for its labels
        (the pool uses only servers whose checksums match the local entry's)."""
        info = self.pool.model_info(model)
        if info.local is None and self.pool.repository is not None:
            info.local = self.pool.repository.find(model)
        return info

    def infer(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> Future:
        info = self.model_info(model)
        batch = check_inputs(info, inputs, outputs)
        names = list(outputs or [spec.name for spec in info.outputs])
        requests = split_requests(info, inputs, batch)
        start = time.perf_counter()
        ragged = is_ragged(inputs)

        def finish(results: list[dict[str, np.ndarray]]) -> dict[str, InputArray]:
            self.counters.add(model, calls=1, requests=len(results), rows=batch, seconds=time.perf_counter() - start)
            return assemble(info, results, ragged)

        if len(requests) == 1:  # the common case: the request's own Future is the call's (one Future less)
            return self._send(_Attempt(info, requests[0], names, Future(), finish=lambda answer: finish([answer])))
        return then(gather([self._send(_Attempt(info, request, names, Future())) for request in requests]), finish)

    # -- one request ----------------------------------------------------------------------------------
    def _send(self, attempt: _Attempt) -> Future:
        try:
            if attempt.connection is None:
                attempt.connection = self.pool.choose(attempt.info.name, frozenset(attempt.failed))
                attempt.tries = 0
        except NoServerError as err:
            if self._wait(attempt):
                return attempt.result
            self.counters.add(attempt.info.name, failures=1)
            if attempt.last_error is not None:  # what went wrong matters more than that nobody else could help
                final = attempt.last_error
                final.add_note(f"after {len(attempt.errors)} attempts ({'; '.join(attempt.errors[:-1]) or 'no other'} "
                               f"before); no other server to fail over to: {err}")
                attempt.result.set_exception(final)
            else:
                attempt.result.set_exception(err)
            return attempt.result
        except Exception as err:  # noqa: BLE001 - e.g. the fallback failed to start: reaches the caller
            attempt.result.set_exception(err)
            return attempt.result
        attempt.tries += 1
        connection = attempt.connection
        with self._lock:
            attempt.sent += 1
            sent = attempt.sent
            self._waiting.setdefault(connection.address, set()).add(attempt)
        if not self.pool.usable(connection):
            # it left the rotation after it was chosen: the failover of its waiting requests may have run before
            # this one was registered, so this one goes elsewhere now instead of waiting for its deadline
            with self._lock:
                abandoned = attempt.sent != sent  # that failover took it: it resends it
                self._waiting.get(connection.address, set()).discard(attempt)
            if abandoned:
                return attempt.result
            self._fail_over(attempt, connection)
            return self._send(attempt)
        self.counters.count_server(attempt.info.name, connection.address)
        self._count_bytes(attempt, connection, sent=attempt.inputs)
        connection.send(attempt.info, attempt.inputs, attempt.outputs).add_done_callback(
            lambda fut: self._done(attempt, connection, sent, fut))
        return attempt.result

    def _done(self, attempt: _Attempt, connection: ServerConnection, sent: int, fut: Future) -> None:
        with self._lock:
            if attempt.sent != sent:  # abandoned when the server left the rotation: already sent elsewhere
                return
            self._waiting.get(connection.address, set()).discard(attempt)
        if fut.cancelled():  # the client is closing (or a sibling request failed): nothing to retry
            attempt.result.cancel()
            return
        err = fut.exception()
        status = err.status if isinstance(err, RequestError) else None
        if status == "DEADLINE_EXCEEDED":
            with self._lock:
                self.deadlines[connection.address] += 1
        if self.pool.record(connection, status, str(err) if err else "") in ("open", "reopen"):
            self._abandon(connection)
        if err is None:
            answer = fut.result()
            try:  # whatever fails here reaches the caller: a request is never left unanswered
                self._count_bytes(attempt, connection, received=answer)
                self.counters.count_answer(attempt.info.name, connection.address)
                attempt.result.set_result(answer if attempt.finish is None else attempt.finish(answer))
            except Exception as exc:  # noqa: BLE001 - reaches the caller through the Future
                attempt.result.set_exception(exc)
            return
        model = attempt.info.name
        action = err.action if isinstance(err, RequestError) else "fatal"
        attempt.errors.append(str(err))
        attempt.last_error = err
        if action == "fatal":
            self.counters.add(model, failures=1)
            attempt.result.set_exception(err)
            return
        if (action == "retry" and attempt.tries < self.allowed_tries and self.pool.usable(connection)
                and not (status == "DEADLINE_EXCEEDED" and self.pool.has_other(model, connection))):
            self.counters.add(model, retries=1)
            log.info("retrying (%d/%d): %s", attempt.tries + 1, self.allowed_tries, err)
        else:
            self._fail_over(attempt, connection)
            log.warning("failing over: %s", err)
        self._resend(attempt, err)

    def _count_bytes(self, attempt: _Attempt, connection: ServerConnection, sent: dict[str, np.ndarray] | None = None,
                     received: dict[str, np.ndarray] | None = None) -> None:
        """Tensor bytes of one request as sent (every try counts: each crossed the wire) or of its answer;
        those in system shared memory (a request the connection stages, ``ServerConnection.stages``, and
        its fixed-size outputs that reach the threshold: the rule of ``ServerConnection._stage``) also count
        as ``shm_bytes``."""
        if attempt.nbytes < 0:
            attempt.nbytes = payload_bytes(attempt.inputs)
        threshold = getattr(connection, "shm_min_bytes", 0)
        if sent is not None:
            size = shared = attempt.nbytes
        else:
            fixed = {spec.name for spec in attempt.info.outputs if fixed_size(spec)}
            sizes = [(name in fixed, payload_bytes({name: array})) for name, array in (received or {}).items()]
            size = sum(n for _, n in sizes)
            shared = sum(n for in_region, n in sizes if in_region and n >= threshold)
        staged = hasattr(connection, "stages") and connection.stages(attempt.inputs)
        key = "bytes_sent" if sent is not None else "bytes_received"
        self.counters.add(attempt.info.name, **{key: size, "shm_bytes": shared if staged else 0})

    def _fail_over(self, attempt: _Attempt, connection: ServerConnection) -> None:
        attempt.failed.add(connection.address)
        attempt.connection = None
        self.counters.add(attempt.info.name, failovers=1)

    def _resend(self, attempt: _Attempt, err: BaseException) -> None:
        try:
            self._recovery.submit(self._send, attempt)
        except RuntimeError:  # closed while requests were still failing
            attempt.result.set_exception(err)

    def _wait(self, attempt: _Attempt) -> bool:
        """Whether a request with nowhere to go waits (True) for servers that left the rotation because their
        connection went silent (keepalive). Before keepalive it waited on the silent connection itself, and a
        partition that healed within ``timeout_s`` lost nothing; it still does, now waiting here: it is sent
        again every ``WAIT_POLL_S`` until one of them is back, for ``timeout_s`` at most."""
        silent = self.pool.returning(attempt.info.name)
        now = time.monotonic()
        if not silent or now - (attempt.waiting_since or now) > self.pool.connection_options.get("timeout_s", 60.0):
            return False
        if attempt.waiting_since is None:
            attempt.waiting_since = now
            log.info("a request for %s waits for %s to answer again (its connection went silent)", attempt.info.name,
                     ", ".join(sorted(silent)))
        attempt.failed -= silent  # they may serve it once back
        with self._lock:
            self._parked.append(attempt)
            if self._unpark is None:
                self._unpark = threading.Timer(WAIT_POLL_S, self._resend_waiting)
                self._unpark.daemon = True
                self._unpark.start()
        return True

    def _resend_waiting(self) -> None:
        with self._lock:
            parked, self._parked, self._unpark = self._parked, [], None
        for attempt in parked:  # each goes through the pool again: sent, waits again, or fails (past timeout_s)
            self._resend(attempt, attempt.last_error or NoServerError(f"no server for {attempt.info.name!r}"))

    def _abandon(self, connection: ServerConnection) -> None:
        """The server just left the rotation: the requests still waiting on it fail over now instead of
        each waiting for its own deadline (their gRPC calls are not cancelled: the answer is ignored)."""
        with self._lock:
            stuck = self._waiting.pop(connection.address, set())
            for attempt in stuck:
                attempt.sent += 1
        if stuck:
            log.warning("failing over %d requests waiting on %s (out of rotation)", len(stuck), connection.address)
        for attempt in stuck:
            err = RequestError(attempt.info.name, connection.address, "UNAVAILABLE",
                               "left waiting: the server stopped answering (circuit breaker open)", "failover")
            attempt.errors.append(str(err))
            attempt.last_error = attempt.last_error or err
            self._fail_over(attempt, connection)
            self._resend(attempt, err)

    # -- reports and life cycle ------------------------------------------------------------------------
    def statistics(self) -> dict[str, Any]:
        servers = self.pool.statistics()
        counters = self.counters.as_dict()
        # an address whose counts cannot be one server's (a proxy in front of several) is marked, never presented
        # as the server's totals (server_statistics.not_one_server)
        partial = not_one_server(servers, counters, self.pool.statistics_doubts())
        lines = []
        if servers:
            lines += ["server-side (Triton statistics, this job):",
                      f"{'server':<26} {'model':<20} {'requests':>9} {'executions':>10} {'avg batch':>9} "
                      f"{'queue ms/req':>12} {'compute ms/exec':>15}"]
            for address, models in servers.items():
                label = address + (" *" if address.removesuffix(" (fallback)") in partial else "")
                for model, s in models.items():
                    executions = s["executions"] or 1
                    compute = compute_ns(s) / executions / 1e6
                    lines.append(f"{label:<26} {model:<20} {int(s['requests']):9d} {int(s['executions']):10d} "
                                 f"{s['inferences'] / executions:9.1f} {s['queue_ns'] / max(1, s['requests']) / 1e6:12.3f} "
                                 f"{compute:15.3f}")
            lines += [f"* {address}: not one server's totals ({why}): the address reaches several servers (a proxy or "
                      f"load balancer answers each statistics call from one of them), or its server restarted"
                      for address, why in partial.items()]
        with self._lock:
            deadlines = dict(self.deadlines)
        transports = self.pool.transports()
        if transports:
            lines.append("transport: " + ", ".join(f"{address} {kind}" for address, kind in transports.items()))
        lines += self.pool.fallback.report_lines()  # a fallback is a decision the report shows (fallback.py)
        return {"mode": self.mode, "models": counters, "servers": servers, "extra_lines": lines,
                "partial_statistics": partial, "transports": transports,
                "deadlines": deadlines, "out_of_rotation": self.pool.breaker_openings(),
                "fallback": self.pool.fallback_server.describe() if self.pool.fallback_server else None,
                "fallback_taken": list(self.pool.fallback.taken)}

    def provenance(self) -> dict[str, dict[str, Any]]:
        """Each model's answering servers and the digest they reported (the fallback serves the job's own
        repository: its digest is that of the local files)."""
        fallback = self.pool.fallback_server.grpc_url if self.pool.fallback_server is not None else None
        out: dict[str, dict[str, Any]] = {}
        for model, counters in self.counters.as_dict().items():
            answers = counters["answers"]
            if not answers:
                continue
            digests = {self.pool.digest_on(address, model) or self.pool.local_digest(model) for address in answers}
            kinds = sorted({"fallback" if address == fallback else "sonic" for address in answers}, reverse=True)
            out[model] = {"mode": "+".join(kinds), "digest": " | ".join(sorted(d or "unknown" for d in digests)),
                          "answers": dict(answers)}
        return out

    def close(self) -> None:
        with self._lock:
            timer, parked, self._parked = self._unpark, self._parked, []
        if timer is not None:
            timer.cancel()
        for attempt in parked:
            attempt.result.set_exception(attempt.last_error or NoServerError(
                f"the client closed while a request for {attempt.info.name!r} waited for a server"))
        self._recovery.shutdown(wait=True, cancel_futures=True)
        self.pool.close()


