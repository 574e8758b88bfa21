"""EmTrkMichelId: track / EM shower / none / Michel scores for every hit, from its patch.

The most expensive module of ProtoDUNE reconstruction (≈ 55k patches per event). The event's
patches are cut into requests of ``batch_size`` (235 and 1693 in the ProtoDUNE SONIC paper) that are all
sent at once and awaited together (one ``gather``): with SONIC they are in flight on the server together,
in direct mode they queue for the onnxruntime workers. The module never knows which mode runs.
"""

from __future__ import annotations

import numpy as np

from ...framework import InputTag, Output, Param, completed, gather
from ...framework.inference import InferenceProducer

SCORES = ("track", "em", "none", "michel")


def requests(patches: np.ndarray, batch_size: int) -> list[dict[str, np.ndarray]]:
    """One event's inference requests: its patches cut into ``batch_size`` rows (none without hits).
    A function of its own so that ``sonic bench protodune`` sends exactly what the module sends."""
    return [{"patches": patches[lo:lo + batch_size]} for lo in range(0, len(patches), batch_size)]


def scores(results: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The per-hit scores (:data:`SCORES`, float32) from the results of :func:`requests`, in order."""
    if not results:
        return {name: np.zeros(0, np.float32) for name in SCORES}
    em = np.concatenate([r["em_trk_none"] for r in results]).astype(np.float32, copy=False)
    michel = np.concatenate([r["michel"] for r in results]).astype(np.float32, copy=False)
    columns = {"track": em[:, 0], "em": em[:, 1], "none": em[:, 2], "michel": michel[:, 0]}
    return {name: np.ascontiguousarray(values) for name, values in columns.items()}


class EmTrkMichelId(InferenceProducer):
    """Runs the EmTrkMichelId CNN on every hit's patch; puts LArSoft's 4-value MVA output per hit."""

    # a full ProtoDUNE event holds ~55,000 patches: ~6 GB of RSS per event in flight (patches, their float
    # copies, the CNN's activations), so the scheduler's own choice is one event per call
    memory_per_event_mb = 6000.0

    patches = InputTag("patches:patches", doc="uint8 patches [n_hits, 48, 48, 1] (HitPatches)")
    model = Param(str, "emtrkmichelid", doc="model name in the model repository")
    batch_size = Param(int, 1693, doc="patches per inference request (the ProtoDUNE SONIC paper used 235 and 1693)", min=1)

    scores = Output("per hit: track, em, none (softmax of em_trk_none) and michel (sigmoid), float32")

    def acquire(self, event):
        batches = requests(event.get(self.patches), self.batch_size)
        return gather([self.infer(inputs) for inputs in batches]) if batches else completed([])

    def produce(self, event, results) -> None:
        event.put("scores", scores(results))
