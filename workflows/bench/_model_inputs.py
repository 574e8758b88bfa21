"""Real model inputs for ``sonic bench gpu-models``: recorded from the MiniAOD job on generated events.

Inputs drawn from a model's shapes make ParticleNet and DeepTau answer with saturated scores (1 or 0),
which hide how far another engine or float16 moves them. So the benchmark can instead use what the
MiniAOD producers really send: :func:`record` generates events (the project's generator, which needs
pythia8mc), runs the shipped ``miniaod`` configuration on them in direct mode with a client that keeps
a copy of every request (:class:`RecordingClient`), and writes, per model, up to ``rows`` request rows
(variable lengths zero-padded to the longest, as the producers pad a batch) and the mean rows per event
to one compressed ``.npz``. A GPU machine without pythia8mc takes that file (``--inputs FILE``).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from ...framework import config as cfgmod
from ...framework.atomic import write_atomically
from ...framework.inference import InferenceClient, InputArray
from ...framework.inference import use_client
from ...framework.inference import ModelInfo
from ...framework.inference import InferenceConfig, make_client, resolve_repository
from ...framework.process import Process

#: separates model and input names in the .npz keys
SEP = "::"
#: the key suffix holding a model's mean rows per event
PER_EVENT = "__rows_per_event"


class RecordingClient(InferenceClient):
    """Passes every call to ``inner`` and keeps each request's rows (batched arrays or ragged lists)."""

    def __init__(self, inner: InferenceClient):
        self.inner = inner
        self.mode = inner.mode
        self.rows: dict[str, dict[str, list[np.ndarray]]] = {}
        self._lock = threading.Lock()

    def model_info(self, model: str) -> ModelInfo:
        return self.inner.model_info(model)

    def check_runnable(self, model: str) -> None:
        self.inner.check_runnable(model)

    def infer(self, model: str, inputs: Mapping[str, InputArray], outputs: list[str] | None = None) -> Future:
        with self._lock:
            kept = self.rows.setdefault(model, {})
            for name, value in inputs.items():
                kept.setdefault(name, []).extend(np.array(row) for row in value)
        return self.inner.infer(model, inputs, outputs)

    def statistics(self):
        return self.inner.statistics()

    def close(self) -> None:
        self.inner.close()


def stack(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of one input as one array, each zero-padded on its last axis to the longest row."""
    length = max(row.shape[-1] for row in rows) if rows[0].ndim else 0
    if rows[0].ndim == 0 or all(row.shape[-1] == length for row in rows):
        return np.stack(rows)
    return np.stack([np.pad(row, [(0, 0)] * (row.ndim - 1) + [(0, length - row.shape[-1])]) for row in rows])


def recorded_rows(source: Path, workdir: Path) -> dict[str, dict[str, list[np.ndarray]]]:
    """Every request row the MiniAOD job's producers send, by model and input, for the events of ``source``."""
    config = cfgmod.load("miniaod", [f"source.files=['{source}']", f"output.file='{workdir / (source.stem + '_out.root')}'",
                                     "options.progress=false"])
    client = RecordingClient(make_client(InferenceConfig(mode="direct",
                                                         repository=[resolve_repository("data/models/miniaod")])))
    process = Process(config)
    use_client(process, client)
    process.run(progress=False)
    return client.rows


def record(path: str | os.PathLike, events: int, seed: int, rows: int) -> dict[str, float]:
    """Writes the recorded inputs to ``path`` (see the module docstring); returns rows per event by model.

    Rows per event come from a tt̄ / Z→ττ / W+jets mix; boosted jets are rare there, so a second sample of
    boosted tt̄ (p̂T > 400 GeV, half as many events) tops up the rows of models that have fewer than ``rows``.
    """
    from ...data.miniaod.generate import generate

    with tempfile.TemporaryDirectory(prefix="sonic-gpu-models-inputs-") as tmp:
        folder = Path(tmp)
        mix = recorded_rows(generate(folder / "mix.root", events, seed=seed, process="ttbar,ztautau,wjets"), folder)
        boosted = recorded_rows(generate(folder / "boosted.root", max(1, events // 2), seed=seed + 1, process="ttbar",
                                         pthat_min=400.0), folder)
    arrays: dict[str, np.ndarray] = {}
    per_event: dict[str, float] = {}
    for model in sorted(set(mix) | set(boosted)):
        per_event[model] = len(next(iter(mix[model].values()))) / events if model in mix else 0.0
        arrays[f"{model}{SEP}{PER_EVENT}"] = np.float64(per_event[model])
        names = list((mix.get(model) or boosted[model]))
        for name in names:
            kept = (mix.get(model, {}).get(name, []) + boosted.get(model, {}).get(name, []))[:rows]
            arrays[f"{model}{SEP}{name}"] = stack(kept)
    def fill(temporary: str) -> None:
        with open(temporary, "wb") as stream:  # a stream: numpy would add ``.npz`` to a name
            np.savez_compressed(stream, **arrays)

    write_atomically(path, fill)
    return per_event


def load(path: str | os.PathLike) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, float]]:
    """``({model: {input: rows}}, {model: rows per event})`` from a file :func:`record` wrote."""
    models: dict[str, dict[str, np.ndarray]] = {}
    per_event: dict[str, float] = {}
    with np.load(path) as data:
        for key in data.files:
            model, _, name = key.partition(SEP)
            if name == PER_EVENT:
                per_event[model] = float(data[key])
            else:
                models.setdefault(model, {})[name] = data[key]
    return models, per_event
