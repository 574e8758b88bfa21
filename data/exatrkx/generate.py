"""Exa.TrkX input events: ACTS Fatras simulation of the generic detector → TrackML-like hits in ROOT.

    sonic data generate exatrkx --events 100 --output exatrkx.root
    sonic data generate exatrkx --events 10 --output small.root --vertices 20 --seed 7

Writes one TTree ``Events`` entry per event, NanoAOD-style (a counter and one flat branch per field):

* ``Hit_*`` (``nHit``): x, y, z [mm]; volume, layer, module; cell_count, cell_value, size0, size1
  (cluster features); particle (truth: 1-based index into Particle, 0 = none); sequence (the hit's
  number along its particle's trajectory).
* ``Particle_*`` (``nParticle``): id, pdg, q, vx, vy, vz [mm], px, py, pz, pt [GeV], eta, phi,
  nhits, primary.
* ``event``: the event number.

Needs ``pyacts`` (the ``generators`` extra); runs offline. about 0.5 s per event of 1000 pions.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

import awkward as ak
import numpy as np

from ...framework.tree_writer import TreeWriter
from .simulation import GunConfig, SimulationError, simulate
from .trackml import read_event

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = GunConfig()
    parser.add_argument("--events", "-n", type=int, default=10, help="number of events (default 10)")
    parser.add_argument("--output", "-o", required=True, help="output ROOT file")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--vertices", type=int, default=defaults.vertices,
                        help=f"pile-up vertices per event (default {defaults.vertices})")
    parser.add_argument("--particles-per-vertex", type=int, default=defaults.particles_per_vertex,
                        help=f"charged pions per vertex (default {defaults.particles_per_vertex})")
    parser.add_argument("--pt-min", type=float, default=defaults.pt_min, help=f"GeV (default {defaults.pt_min})")
    parser.add_argument("--pt-max", type=float, default=defaults.pt_max, help=f"GeV (default {defaults.pt_max})")
    parser.add_argument("--eta-max", type=float, default=defaults.eta_max, help=f"(default {defaults.eta_max})")
    parser.add_argument("--detector", choices=("pixel", "full"), default="pixel",
                        help="read out the pixels only (Exa.TrkX's setting, default) or pixels and strips")
    parser.add_argument("--threads", type=int, default=1, help="ACTS threads (default 1)")


def to_columns(events: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]], first: int) -> dict[str, ak.Array]:
    """Per-event hit/particle dicts → the branches uproot writes (``Hit`` and ``Particle`` collections)."""
    def collection(parts: list[dict[str, np.ndarray]]) -> ak.Array:
        counts = np.array([len(next(iter(p.values()))) for p in parts])
        return ak.zip({name: ak.unflatten(np.concatenate([p[name] for p in parts]), counts) for name in parts[0]})

    return {"event": np.arange(first, first + len(events), dtype=np.int64) + 1,
            "Hit": collection([hits for hits, _ in events]), "Particle": collection([parts for _, parts in events])}


def write(path: str, directory: str, events: int, chunk: int = 100) -> None:
    """Converts the CSV events in ``directory`` into ``path`` (written under a temporary name, then renamed)."""
    with TreeWriter(path, expected_extends=-(-events // chunk)) as out:
        for start in range(0, events, chunk):
            block = [read_event(directory, i) for i in range(start, min(events, start + chunk))]
            out.extend(to_columns(block, start))
            print(f"wrote events {start + 1}-{start + len(block)} of {events}", file=sys.stderr, flush=True)


def generate(path: str | os.PathLike, events: int, seed: int = 1, gun: GunConfig = GunConfig(),
             detector: str = "pixel", threads: int = 1) -> str:
    """Simulates ``events`` events and writes them to ``path`` (see the module docstring); returns the path."""
    path = os.fspath(path)
    if events < 1:
        raise SimulationError(f"--events must be at least 1, not {events}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise SimulationError(f"output directory {directory!r} does not exist")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="exatrkx-acts-") as scratch:
        # progress on stderr: ACTS runs the events in one call, then the conversion goes chunk by chunk
        print(f"simulating {events} events with ACTS Fatras ({threads} thread(s))", file=sys.stderr, flush=True)
        simulate(events, scratch, gun, seed=seed, detector=detector, threads=threads)
        simulated = time.perf_counter()
        write(path, scratch, events)
    log.info("simulated %d events in %.1f s, wrote %s in %.1f s", events, simulated - start, path,
             time.perf_counter() - simulated)
    return path


def main(args: argparse.Namespace) -> int:
    gun = GunConfig(vertices=args.vertices, particles_per_vertex=args.particles_per_vertex, pt_min=args.pt_min,
                    pt_max=args.pt_max, eta_max=args.eta_max)
    generate(args.output, args.events, seed=args.seed, gun=gun, detector=args.detector, threads=args.threads)
    return 0
