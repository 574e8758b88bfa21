"""Hostile clients for one shared Triton server: many bad requests at once, counted by what came back.

A shared server must outlive any client: one job's bad request must never cost the others their server. :func:`fuzz` asks the server which models it
serves, then sends ``requests`` requests from ``clients`` concurrent raw ``tritonclient.grpc``
clients (threads spread over ``processes`` processes, so the load generator is not the bottleneck),
each request one of :data:`CASES` against one model, and returns a :class:`FuzzResult`: what
each case got back (``ok``, a gRPC status, ``timed_out``), the messages that were garbled or did not
name their culprit, and the valid requests that failed (everyone else must be served).

The caller owns the server and judges it afterwards (alive? answers valid requests correctly?)::

    from sonic_hep.workflows.bench._fuzz import fuzz

    result = fuzz("127.0.0.1:8001", requests=2000, clients=16)
    print(result.summary())
    assert not result.bad_messages and not result.valid_failures

About cancellation: Triton 2.51's gRPC frontend can SIGSEGV when a client cancels a call in flight
(a gRPC deadline is such a cancellation; upstream issues 7368/8034, fixed after 2.51). Nothing on the
server side here prevents it, so the ``cancelled`` case (a gRPC deadline of a few milliseconds) is
not in :data:`DEFAULT_CASES`; ``timed_out`` is what sonic-hep's client does instead (it stops waiting
after its deadline and lets the call finish, see ``framework/inference/sonic/connection.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: what a hostile request can be (``valid`` ones are mixed in: they must keep being served)
CASES = ("valid", "wrong_dtype", "wrong_shape", "byte_mismatch", "out_of_range", "nan_inf", "empty_batch",
         "oversize_batch", "missing_input", "unknown_input", "unknown_output", "unknown_model", "bad_shm_handle",
         "bad_shm_offset", "timed_out", "cancelled")

#: every case except ``cancelled``, which can crash Triton 2.51 itself (see the module docstring)
DEFAULT_CASES = tuple(case for case in CASES if case != "cancelled")

#: an oversize batch is sent with real data only up to this size; above, its shape claims more than it carries
OVERSIZE_MAX_BYTES = 4 << 20

#: how long a worker waits for any answer before counting it ``no_answer`` (the call is left running)
ANSWER_TIMEOUT_S = 30.0

#: a worker stops sending after this many requests in a row got no answer (the server is hung or dying)
GIVE_UP_AFTER = 3

#: deadline of control calls (shared memory registration) and of :func:`infer_valid`: only a server
#: that is already broken lets one expire (an expired deadline is a cancellation, see above)
CONTROL_TIMEOUT_S = 60.0

#: a variable dimension (-1) in valid requests; oversize requests to models without batching use OVERSIZE_ROWS
VARIABLE_SIZE, OVERSIZE_ROWS = 20, 4000

_NUMPY = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32,
          "INT16": np.int16, "INT8": np.int8, "UINT8": np.uint8, "UINT16": np.uint16, "BOOL": np.bool_}
_WRONG = {"FP32": "FP64", "FP64": "FP32", "INT64": "INT32", "INT32": "INT64", "UINT8": "FP32"}


@dataclass(frozen=True)
class ModelSpec:
    """What the fuzzer needs to know of a served model (picklable, read from the server's config)."""

    name: str
    max_batch_size: int
    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]  # (name, datatype "FP32", dims without batch)
    outputs: tuple[str, ...]
    valid_seed: int | None = None  # valid_inputs(spec, default_rng(valid_seed)) was served; None: no such seed


@dataclass
class FuzzResult:
    """Counts of one fuzz run.

    Attributes:
        requests: requests sent.
        outcomes: per case, ``{outcome: count}``; an outcome is ``ok``, a gRPC status name
            (``INVALID_ARGUMENT`` ...), ``timed_out`` (our client's local deadline passed; the call was
            left to finish) or ``late_ok``/``late_<STATUS>`` for how such a call ended; ``no_answer``
            (none within ``ANSWER_TIMEOUT_S``), ``not_sent`` (the time limit came first), ``skipped``
            (a valid request for a model without known valid input).
        bad_messages: error messages that were not clean text or did not name their model (or
            region); must be empty.
        valid_failures: valid requests that failed (``model: message``); must be empty.
        hung: worker processes that did not finish within the time limit (then killed).
        seconds: wall time of the run.
    """

    requests: int = 0
    outcomes: dict[str, Counter] = field(default_factory=dict)
    bad_messages: list[str] = field(default_factory=list)
    valid_failures: list[str] = field(default_factory=list)
    hung: int = 0
    seconds: float = 0.0

    def failures_by_kind(self) -> Counter:
        """``{outcome: count}`` over every case, successes left out."""
        total: Counter = Counter()
        for counts in self.outcomes.values():
            total.update({k: v for k, v in counts.items() if k not in ("ok", "late_ok")})
        return total

    def summary(self) -> str:
        """A few lines for a report."""
        lines = [f"{self.requests} requests in {self.seconds:.1f} s; hung workers: {self.hung}; "
                 f"bad messages: {len(self.bad_messages)}; valid requests failed: {len(self.valid_failures)}"]
        for case in sorted(self.outcomes):
            counts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes[case].items()))
            lines.append(f"  {case:<15} {counts}")
        return "\n".join(lines)

    def _merge(self, part: dict[str, Any]) -> None:
        self.requests += part["requests"]
        for case, counts in part["outcomes"].items():
            self.outcomes.setdefault(case, Counter()).update(counts)
        self.bad_messages += part["bad_messages"]
        self.valid_failures += part["valid_failures"]


def served_models(url: str, tries: int = 8) -> list[ModelSpec]:
    """The ready models of the server at ``url`` (gRPC), as :class:`ModelSpec`.

    For each, the first of ``tries`` seeds whose :func:`valid_inputs` the model serves is kept as its
    ``valid_seed`` (random inputs are not always valid: an Exa.TrkX graph may end up without edges).
    """
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import model_config_pb2 as mc

    client = grpcclient.InferenceServerClient(url)
    try:
        specs = []
        for entry in client.get_model_repository_index(client_timeout=CONTROL_TIMEOUT_S).models:
            if entry.state != "READY":
                continue
            config = client.get_model_config(entry.name, client_timeout=CONTROL_TIMEOUT_S).config
            inputs = tuple((i.name, mc.DataType.Name(i.data_type).removeprefix("TYPE_"), tuple(i.dims))
                           for i in config.input)
            spec = ModelSpec(config.name, config.max_batch_size, inputs, tuple(o.name for o in config.output))
            for seed in range(tries):
                try:
                    infer_valid(client, spec, seed)
                except Exception:  # noqa: BLE001 - not valid for this model: the next seed
                    continue
                spec = dataclasses.replace(spec, valid_seed=seed)
                break
            specs.append(spec)
        return specs
    finally:
        client.close()


def infer_arrays(client: Any, model: str, arrays: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    """One request of ``arrays`` through ``tritonclient`` (a ``tritonclient.grpc`` client, not the project's:
    what is checked is the server alone); every output the server sent, ``outputs`` among them."""
    import tritonclient.grpc as grpcclient

    tensors = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), grpcclient.np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(np.ascontiguousarray(array))
        tensors.append(tensor)
    result = client.infer(model, tensors, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                          client_timeout=CONTROL_TIMEOUT_S)
    return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}


def infer_valid(client: Any, spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """The outputs of the valid request of ``seed`` (``client``: a ``tritonclient.grpc`` client)."""
    import tritonclient.grpc as grpcclient

    inputs = []
    for (name, datatype, _), array in zip(spec.inputs, valid_inputs(spec, np.random.default_rng(seed)).values()):
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(spec.name, inputs, outputs=[grpcclient.InferRequestedOutput(n) for n in spec.outputs],
                          client_timeout=CONTROL_TIMEOUT_S)
    return {name: result.as_numpy(name) for name in spec.outputs}


def fuzz(url: str, requests: int = 2000, clients: int = 16, processes: int | None = None,
         cases: tuple[str, ...] = DEFAULT_CASES, models: list[ModelSpec] | None = None, seed: int = 0,
         burst: int = 8, local_timeout_s: float = 0.002, time_limit_s: float = 300.0) -> FuzzResult:
    """Sends ``requests`` hostile requests from ``clients`` concurrent clients to the server at ``url``.

    Args:
        url (str): the server's gRPC ``host:port``.
        requests (int): how many requests in all: every (case, model) pair in turn, in random order.
        clients (int): concurrent clients (threads, each with its own gRPC channel).
        processes (int | None): processes the clients are spread over (default: one per core, at most ``clients``).
        cases (tuple[str, ...]): which of :data:`CASES` to draw from.
        models (list[ModelSpec] | None): the models to target (default: every model the server serves).
        seed (int): random seed (the same seed sends the same requests).
        burst (int): equal requests sent at once for each (case, model) pair.
        local_timeout_s (float): the ``timed_out`` case's deadline (our client's way: stop waiting, never cancel).
        time_limit_s (float): the whole run's limit; workers still running then are killed and counted as hung.

    Returns:
        FuzzResult: counts per case and outcome, bad messages, failed valid requests.
    """
    unknown = set(cases) - set(CASES)
    if unknown:
        raise ValueError(f"unknown fuzz cases {sorted(unknown)}; known: {', '.join(CASES)}")
    models = list(models or served_models(url))
    if not models:
        raise ValueError(f"server {url} serves no model to fuzz")
    processes = max(1, min(clients, processes or len(os.sched_getaffinity(0))))
    rng = np.random.default_rng(seed)
    # every (case, model) pair in turn, in random order, each as a burst of ``burst`` equal requests
    # sent at once: a bad input reaches a model as a dynamically batched group, the way a
    # misconfigured job sends it (and what crashed Triton 2.51)
    pairs = [(case, m) for case in cases for m in range(len(models))]
    order = rng.permutation(len(pairs))
    bursts = -(-requests // burst)
    plan = [pairs[order[b % len(pairs)]] for b in range(bursts) for _ in range(burst)][:requests]
    shares = [plan[p::processes] for p in range(processes)]
    threads = [clients // processes + (1 if p < clients % processes else 0) for p in range(processes)]
    result = FuzzResult()
    start = time.monotonic()
    # worker processes are fresh interpreters running this module (gRPC and fork do not mix, and
    # multiprocessing's spawn would re-run the caller's __main__)
    workers, jobs = [], []
    for p, (share, n) in enumerate(zip(shares, threads)):
        job = {"url": url, "models": [dataclasses.asdict(m) for m in models], "plan": share, "threads": n,
               "seed": seed + 1 + p, "local_timeout_s": local_timeout_s,
               "time_limit_s": max(1.0, time_limit_s - ANSWER_TIMEOUT_S - 15)}  # to report before the parent gives up
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump(job, handle)
        jobs.append(handle.name)
        workers.append(subprocess.Popen([sys.executable, "-m", __name__, handle.name], stdout=subprocess.PIPE,
                                        text=True))
    for proc in workers:
        try:
            output, _ = proc.communicate(timeout=max(1.0, time_limit_s - (time.monotonic() - start)))
            result._merge(json.loads(output.strip().splitlines()[-1]))
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            proc.kill()
            proc.communicate()
            result.hung += 1
    for path in jobs:
        os.unlink(path)
    result.seconds = time.monotonic() - start
    return result


# -- inside a worker process -------------------------------------------------------------------------------
def _worker(url: str, models: list[ModelSpec], plan: list[tuple[str, int]], threads: int, seed: int,
            local_timeout_s: float, time_limit_s: float) -> dict[str, Any]:
    """Runs ``plan`` on ``threads`` threads (one client each); returns plain counts for the parent.

    Nothing here blocks without a bound and nothing is cancelled: a request is waited for at most
    ``ANSWER_TIMEOUT_S`` (then counted ``no_answer`` and left running); requests not started before
    the time limit, or after ``GIVE_UP_AFTER`` requests in a row got no answer, are counted ``not_sent``.
    """
    deadline = time.monotonic() + time_limit_s
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm

    region = f"fuzz_{os.getpid()}"
    handle = shm.create_shared_memory_region(region, "/" + region, 1 << 16)
    control = grpcclient.InferenceServerClient(url)
    try:
        control.register_system_shared_memory(region, "/" + region, 1 << 16, client_timeout=CONTROL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a server already dead: the requests will say so
        pass
    work: queue.Queue = queue.Queue()
    for index, item in enumerate(plan):
        work.put((index, *item))
    out: dict[str, Any] = {"requests": len(plan), "outcomes": {}, "bad_messages": [], "valid_failures": []}
    models = [m if isinstance(m, ModelSpec) else ModelSpec(m["name"], m["max_batch_size"],
                                                            tuple((i[0], i[1], tuple(i[2])) for i in m["inputs"]),
                                                            tuple(m["outputs"]), m["valid_seed"]) for m in models]
    lock = threading.Lock()
    gave_up = threading.Event()

    def record(case: str, outcome: str, model: str, culprit: str, message: str = "") -> None:
        with lock:
            out["outcomes"].setdefault(case, Counter())[outcome] += 1
            quiet = ("ok", "timed_out", "late_ok", "skipped", "not_sent", "no_answer")
            local = case == "cancelled" and outcome == "DEADLINE_EXCEEDED"  # gRPC's own text, not the server's
            if outcome not in quiet and not local and not _intact(message, culprit):
                out["bad_messages"].append(f"{case} {model}: {message!r}")
            if case == "valid" and outcome not in ("ok", "skipped"):
                out["valid_failures"].append(f"{model}: {outcome}: {message}")

    def run_thread(number: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        rng = np.random.default_rng(seed * 1000 + number)
        late: list[threading.Event] = []
        silent = 0
        while True:
            try:
                    index, case, which = work.get_nowait()
            except queue.Empty:
                break
            spec = models[which]
            if time.monotonic() > deadline or gave_up.is_set():
                record(case, "not_sent", spec.name, spec.name)
                continue
            before = len(late)
            _send(client, grpcclient, spec, case, rng, region, local_timeout_s, record, late)
            silent = silent + 1 if len(late) > before and case != "timed_out" else 0
            if silent >= GIVE_UP_AFTER:
                gave_up.set()
        for event in late:  # timed-out calls are left to finish; closing the channel would cancel them
            event.wait(max(0.0, deadline - time.monotonic()))
        client.close()

    workers = [threading.Thread(target=run_thread, args=(n,), daemon=True) for n in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    try:
        control.unregister_system_shared_memory(region, client_timeout=CONTROL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - the server may have died: the region is ours to remove anyway
        pass
    control.close()
    shm.destroy_shared_memory_region(handle)
    return out


def _send(client: Any, grpcclient: Any, spec: ModelSpec, case: str, rng: np.random.Generator, region: str,
          local_timeout_s: float, record: Any, late: list) -> None:
    """One request of ``case`` to ``spec``; its outcome goes to ``record``."""
    model, culprit = spec.name, spec.name
    if case == "valid" and spec.valid_seed is None:
        record(case, "skipped", model, culprit)  # no valid input known for this model
        return
    arrays = valid_inputs(spec, np.random.default_rng(spec.valid_seed) if case == "valid" else rng)
    datatypes = {name: datatype for name, datatype, _ in spec.inputs}
    outputs = [grpcclient.InferRequestedOutput(name) for name in spec.outputs]
    shapes: dict[str, list[int]] = {}
    shm_inputs: dict[str, tuple[str, int, int]] = {}
    version = ""
    first = spec.inputs[0][0]
    if case == "wrong_dtype":
        wrong = _WRONG.get(datatypes[first], "FP32")
        arrays[first], datatypes[first] = arrays[first].astype(_NUMPY[wrong]), wrong
    elif case == "wrong_shape":
        arrays[first] = np.concatenate([arrays[first], arrays[first]], axis=-1)
    elif case == "byte_mismatch":
        shapes[first] = [s + 1 for s in arrays[first].shape]
    elif case in ("out_of_range", "nan_inf"):
        for name, array in arrays.items():
            if array.dtype.kind == "f":
                values = [1e6, -1e6] if case == "out_of_range" else [np.nan, np.inf, -np.inf]
                array[...] = rng.choice(values, size=array.shape)
            elif array.dtype.kind in "iu":
                info = np.iinfo(array.dtype)
                values = [min(info.max, 10**6), max(info.min, -(10**6))]
                array[...] = rng.choice(values, size=array.shape)
    elif case == "empty_batch":
        arrays = {name: array[:0] if spec.max_batch_size > 0 else _resize_variable(array, dims, 0)
                  for (name, _, dims), array in zip(spec.inputs, arrays.values())}
    elif case == "oversize_batch":
        rows = spec.max_batch_size + 1 if spec.max_batch_size > 0 else OVERSIZE_ROWS
        for (name, _, dims), array in zip(spec.inputs, list(arrays.values())):
            if spec.max_batch_size > 0:
                claimed = [rows, *array.shape[1:]]
                if array.nbytes * rows <= OVERSIZE_MAX_BYTES:
                    arrays[name] = np.repeat(array, rows, axis=0)
                else:
                    shapes[name] = claimed  # a claim the bytes do not back: rejected before any copy
            elif -1 in dims:
                arrays[name] = _resize_variable(array, dims, rows)
    elif case == "missing_input":
        arrays.pop(first)
    elif case == "unknown_input":
        arrays["no_such_input"], datatypes["no_such_input"] = np.zeros((1, 1), np.float32), "FP32"
    elif case == "unknown_output":
        outputs = [grpcclient.InferRequestedOutput("no_such_output")]
    elif case == "unknown_model":
        if rng.random() < 0.5:
            model = culprit = f"no_such_model_{int(rng.integers(1000))}"
        else:
            version = "99"
    elif case == "bad_shm_handle":
        culprit = f"no_such_region_{int(rng.integers(1000))}"
        shm_inputs[first] = (culprit, arrays[first].nbytes, 0)
    elif case == "bad_shm_offset":
        culprit = region
        shm_inputs[first] = (region, max(arrays[first].nbytes, 64), (1 << 16) - 32)
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), datatypes[name])
        if name in shm_inputs:
            tensor.set_shared_memory(*shm_inputs[name])
        else:
            tensor.set_data_from_numpy(np.ascontiguousarray(array))
        if name in shapes:
            tensor.set_shape(shapes[name])
        inputs.append(tensor)
    if case == "cancelled":  # a gRPC deadline: the cancellation that can crash Triton 2.51
        try:
            client.infer(model, inputs, outputs=outputs, client_timeout=float(rng.uniform(0.0003, 0.006)))
            record(case, "ok", model, culprit)
        except Exception as err:  # noqa: BLE001 - every failure is an outcome to count
            record(case, _status(err), model, culprit, _message(err))
        return
    timeout_s = local_timeout_s if case == "timed_out" else ANSWER_TIMEOUT_S
    _send_waiting(client, case, model, culprit, version, inputs, outputs, timeout_s, record, late)


def _send_waiting(client: Any, case: str, model: str, culprit: str, version: str, inputs: list, outputs: list,
                  timeout_s: float, record: Any, late: list) -> None:
    """Our client's way with deadlines: wait ``timeout_s`` for the answer, then stop waiting, never cancel."""
    done, waited = threading.Event(), threading.Event()

    def callback(result: Any, error: Any) -> None:
        if waited.is_set():
            outcome = "late_ok" if error is None else f"late_{_status(error)}"
        else:
            outcome = "ok" if error is None else _status(error)
        record(case, outcome, model, culprit, "" if error is None else _message(error))
        done.set()

    client.async_infer(model, inputs, callback, model_version=version, outputs=outputs)
    if not done.wait(timeout_s):
        waited.set()
        if not done.is_set():
            record(case, "timed_out" if case == "timed_out" else "no_answer", model, culprit)
        late.append(done)


def valid_inputs(spec: ModelSpec, rng: np.random.Generator, rows: int = 1) -> dict[str, np.ndarray]:
    """Inputs every shipped model accepts: small floats, zero indices, a count equal to the variable size.

    Variable dimensions all get :data:`VARIABLE_SIZE` (so e.g. ``edge_index`` [2, -1] and ``score``
    [-1] agree), float entries come in equal pairs along them (so a radius graph has edges); integer inputs are zeros (always in range as an index), except a ``[1]`` integer
    input (a count such as ``num_hits``), which is the variable size.
    """
    arrays = {}
    for name, datatype, dims in spec.inputs:
        shape = ([rows] if spec.max_batch_size > 0 else []) + [VARIABLE_SIZE if d < 0 else d for d in dims]
        dtype = _NUMPY[datatype]
        if datatype == "UINT8":
            arrays[name] = rng.integers(0, 256, size=shape, dtype=np.uint8)
        elif np.issubdtype(dtype, np.integer):
            fill = VARIABLE_SIZE if list(dims) == [1] else 0
            arrays[name] = np.full(shape, fill, dtype)
        elif "cat" in name:  # categorical inputs (an embedding index as float): 0 is valid
            arrays[name] = np.zeros(shape, dtype)
        else:
            arrays[name] = (0.5 * rng.standard_normal(shape)).astype(dtype)
            if -1 in dims:  # entries in equal pairs along the variable axis: close neighbours, so graphs have edges
                axis = len(shape) - len(dims) + list(dims).index(-1)
                half = np.take(arrays[name], range(VARIABLE_SIZE // 2), axis=axis)
                arrays[name] = np.repeat(half, 2, axis=axis)
    return arrays


def _resize_variable(array: np.ndarray, dims: tuple[int, ...], size: int) -> np.ndarray:
    """``array`` with its variable dimension(s) resized to ``size`` (zero-filled when growing)."""
    shape = [size if d < 0 else s for d, s in zip(dims, array.shape)]
    return np.zeros(shape, array.dtype) if size else np.empty(shape, array.dtype)


def _status(err: Any) -> str:
    status = getattr(err, "status", None)
    return str(status() if callable(status) else status or type(err).__name__).removeprefix("StatusCode.")


def _message(err: Any) -> str:
    message = err.message() if callable(getattr(err, "message", None)) else str(err)
    return message or ""


def _intact(message: str, culprit: str) -> bool:
    """Clean text (no control or replacement characters) that names ``culprit``."""
    if not message or "\ufffd" in message:
        return False
    if any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in message):
        return False
    return culprit in message


if __name__ == "__main__":  # a worker process of fuzz(): the job in a JSON file, the counts as JSON on stdout
    with open(sys.argv[1]) as _file:
        _job = json.load(_file)
    print(json.dumps(_worker(_job["url"], _job["models"], [tuple(item) for item in _job["plan"]], _job["threads"],
                             _job["seed"], _job["local_timeout_s"], _job["time_limit_s"])))
