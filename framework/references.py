"""Object references (ROOT's TRef/TRefArray) turned into indices, for a whole chunk at once.

A split-object TTree links objects by *unique ID*, not by position: a Delphes jet's ``Constituents`` is a
TRefArray of the ``fUniqueID`` of EFlow tracks, photons and neutral hadrons (object numbers that ROOT's
TProcessID hands out per event). Producers written for NanoAOD-style files want index pairs instead
(``JetPFCands``: ``jetIdx``, ``pFCandsIdx``, the index into the event's candidate list). This module does
that translation schema-free and without a Python loop over events or objects: every (event, ID) becomes
one integer key, the targets' keys are sorted once, and ``numpy.searchsorted`` finds every reference.
"""

from __future__ import annotations

import awkward as ak
import numpy as np

#: the bits of ``fUniqueID`` that hold the object number (the rest hold the TProcessID index)
OBJECT_NUMBER_MASK = 0xFFFFFF


def _event_keys(ids: ak.Array, mask: int) -> tuple[np.ndarray, np.ndarray]:
    """Flat (event << 32 | id & mask) keys of an events → values array, and the per-event counts."""
    counts = ak.to_numpy(ak.num(ids, axis=1)).astype(np.int64)
    flat = ak.to_numpy(ak.flatten(ids, axis=None)).astype(np.int64) & mask
    events = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return (events << 32) | flat, counts


def resolve(refs: ak.Array, targets: ak.Array, mask: int = OBJECT_NUMBER_MASK) -> tuple[ak.Array, ak.Array, int]:
    """Index pairs (referring object, referred target) per event, from references by unique ID.

    Args:
        refs (ak.Array): events → objects → the unique IDs each object refers to (``var * var * int``).
        targets (ak.Array): events → the unique IDs of the objects that may be referred to, in the order
            whose positions the indices should give (``var * int``; several collections concatenated).
        mask (int): the bits of an ID that identify the object (ROOT: the low 24 bits).

    Returns:
        ``(owner, target, unresolved)``: per event, the referring object's index and the referred object's
        position in ``targets`` (both ``var * int64``, in the order of the references), and the number of
        references whose ID is not among the targets (left out).

    Example::

        owner, target, missing = resolve(jets_constituents_refs, ak.concatenate([tracks_uid, photons_uid], axis=1))
    """
    owners = ak.flatten(ak.broadcast_arrays(ak.local_index(refs, axis=1), refs)[0], axis=2)
    ref_keys, ref_counts = _event_keys(ak.flatten(refs, axis=2), mask)
    target_keys, target_counts = _event_keys(targets, mask)
    # a target's position within its own event
    starts = np.repeat(np.cumsum(target_counts) - target_counts, target_counts)
    positions = np.arange(len(target_keys), dtype=np.int64) - starts
    order = np.argsort(target_keys, kind="stable")
    sorted_keys = target_keys[order]
    at = np.searchsorted(sorted_keys, ref_keys)
    at_clipped = np.minimum(at, max(len(sorted_keys) - 1, 0))
    found = (at < len(sorted_keys)) & (sorted_keys[at_clipped] == ref_keys) if len(sorted_keys) else \
        np.zeros(len(ref_keys), dtype=bool)
    events = np.repeat(np.arange(len(ref_counts)), ref_counts)
    kept_counts = np.bincount(events[found], minlength=len(ref_counts))
    target_index = positions[order[at_clipped[found]]] if len(sorted_keys) else np.zeros(0, dtype=np.int64)
    owner_index = ak.to_numpy(ak.flatten(owners, axis=None)).astype(np.int64)[found]
    return (ak.unflatten(owner_index, kept_counts), ak.unflatten(target_index, kept_counts),
            int(len(ref_keys) - found.sum()))
