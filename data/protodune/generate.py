"""ProtoDUNE-SP-like LArTPC events: cosmics, beam, showers, Michel electrons, noise → ROIs and hits.

Writes a ROOT file (TTree ``Events``) with NanoAOD-style branches per event:

* ``run``, ``event``;
* ``nRoi``, ``Roi_tpc``, ``Roi_plane``, ``Roi_wire``, ``Roi_start``, ``Roi_length``: zero-suppressed
  regions of interest of the deconvolved waveforms;
* ``nAdc``, ``Adc``: their int16 samples, concatenated in ROI order;
* ``nHit``, ``Hit_tpc``, ``Hit_plane``, ``Hit_wire``, ``Hit_peak_tick``, ``Hit_rms``, ``Hit_amplitude``,
  ``Hit_integral``, ``Hit_start_tick``, ``Hit_end_tick``, ``Hit_truth`` (0 track, 1 shower,
  2 none), ``Hit_michel``.

The simulation settings are stored next to the tree as JSON (``protodune_simulation``). Event ``i``
uses the random stream ``(seed, i)``, so files made in pieces (``--first-event``) equal one big file.

Example::

    sonic data generate protodune --events 10 --output pdsp.root --scale full
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import awkward as ak
import numpy as np

from ...framework.errors import SonicError
from ...framework.tree_writer import TreeWriter
from .simulate import Simulation

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", "-n", type=int, required=True, help="number of events")
    parser.add_argument("--output", "-o", required=True, help="ROOT file to write")
    parser.add_argument("--scale", choices=("full", "small"), default="full",
                        help="full: ProtoDUNE-SP size (~55k hits/event); small: one 1 m³ TPC (tests)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (event i uses the stream (seed, i))")
    parser.add_argument("--first-event", type=int, default=0, help="number of the first event")
    parser.add_argument("--basket", type=int, default=10, help="events written per basket")


def _events_to_arrays(events: list[dict]) -> dict[str, ak.Array | np.ndarray]:
    """Per-event dicts of flat arrays → chunk-level jagged arrays (records for collections)."""
    out: dict[str, ak.Array | np.ndarray] = {}
    for name in ("Roi", "Hit"):
        fields = events[0][name]
        counts = np.array([len(next(iter(e[name].values()))) for e in events])
        out[name] = ak.zip({f: ak.unflatten(np.concatenate([e[name][f] for e in events]), counts) for f in fields},
                           depth_limit=2)
    counts = np.array([len(e["Adc"]) for e in events])
    out["Adc"] = ak.unflatten(np.concatenate([e["Adc"] for e in events]), counts)
    return out


def generate(path: str | os.PathLike, events: int, scale: str = "full", seed: int = 1, first_event: int = 0,
             basket: int = 10, simulation: Simulation | None = None) -> str:
    """Simulates ``events`` events and writes them to ``path`` (atomically: a temporary name, then renamed).

    Args:
        path: the ROOT file to write.
        events: number of events.
        scale: ``"full"`` or ``"small"`` (see :meth:`Simulation.preset`); ignored if ``simulation`` is given.
        seed: random seed; event ``i`` uses ``np.random.default_rng([seed, i])``.
        first_event: number of the first event (for files made in pieces).
        basket: events per write.
        simulation: custom settings instead of a preset.
    """
    sim = simulation or Simulation.preset(scale)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SonicError(f"output directory {directory!r} does not exist")
    with TreeWriter(path, compression="zstd:4", expected_extends=-(-events // basket)) as writer:
        for lo in range(first_event, first_event + events, basket):
            numbers = np.arange(lo, min(lo + basket, first_event + events))
            start = time.perf_counter()
            batch = [sim.event(np.random.default_rng([seed, int(i)])) for i in numbers]
            writer.extend({"run": np.full(len(numbers), 1, np.int32), "event": numbers.astype(np.int64),
                           **_events_to_arrays(batch)})
            # a line per basket on stderr: a full-scale event takes seconds, the user sees it moving
            print(f"events {numbers[0]}-{numbers[-1]} of {first_event}-{first_event + events - 1}: "
                  f"{time.perf_counter() - start:.1f} s, {sum(len(e['Hit']['wire']) for e in batch)} hits",
                  file=sys.stderr, flush=True)
        writer["protodune_simulation"] = json.dumps({"scale": scale, "seed": seed, "first_event": first_event,
                                                     **sim.settings()})
    return path


def main(args: argparse.Namespace) -> int:
    if args.events < 1:
        raise SonicError(f"--events must be at least 1, got {args.events}")
    start = time.perf_counter()
    generate(args.output, args.events, args.scale, args.seed, args.first_event, args.basket)
    print(f"wrote {args.events} {args.scale}-scale ProtoDUNE events to {args.output} "
          f"in {time.perf_counter() - start:.1f} s")
    return 0
