"""MiniAOD-like events from Pythia 8 with a simple CMS-like detector, PF candidates, jets, SVs and τs.

Writes a ROOT file (TTree ``Events``) in NanoAOD/PF-NanoAOD naming: ``PFCands_*``, ``Jet_*`` (AK4 CHS)
and ``FatJet_*`` (AK8 PUPPI) with constituents as ``JetPFCands_*``/``FatJetPFCands_*`` index pairs,
``SV_*``, ``Tau_*``, ``MET_*``, ``PuppiMET_*``, and truth: ``Jet_hadronFlavour``/``partonFlavour``,
``FatJet_label``, ``GenMET_*``, ``GenVisTau_*``, ``Tau_genPartFlav``, ``PFCands_genOrigin``; ``LostTracks_*``
(tracks no PF candidate carries, see lost_tracks.py); ``Electron_*`` and ``Muon_*`` (reconstructed
leptons with the detector variables DeepTau reads, see leptons.py).

Examples::

    sonic data generate miniaod --events 50 --output ttbar.root --seed 1
    sonic data generate miniaod --events 2000 --process mix --pileup 40 --output mix.root

The detector model, pile-up model and reconstruction are documented in the modules of
``sonic_hep.data.miniaod`` (detector.py, pileup.py, puppi.py, jets.py, vertices.py, taus.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from ...framework.errors import SonicError
from ...framework.tree_writer import TreeWriter
from .events import Settings, make_branches
from .pythia_events import PROCESSES, PythiaGenerator

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", "-n", type=int, required=True, help="number of events")
    parser.add_argument("--output", "-o", required=True, help="output ROOT file")
    parser.add_argument("--seed", type=int, default=1, help="random seed (Pythia and detector)")
    parser.add_argument("--process", default="ttbar",
                        help=f"one of {sorted(PROCESSES)}, a comma-separated list (events alternate), or 'mix' (all)")
    parser.add_argument("--pileup", type=float, default=Settings.pileup,
                        help="mean number of pile-up interactions (0: none)")
    parser.add_argument("--ak4-min-pt", type=float, default=Settings.ak4_min_pt, help="AK4 jets stored above (GeV)")
    parser.add_argument("--ak8-min-pt", type=float, default=Settings.ak8_min_pt, help="AK8 jets stored above (GeV)")
    parser.add_argument("--pthat-min", type=float, default=None,
                        help="minimum pT of the hard scattering (GeV) for every process, e.g. 200 for boosted jets")
    parser.add_argument("--batch-size", type=int, default=100, help="events processed together")


def processes(spec: str) -> list[str]:
    """``"mix"`` → all processes; ``"ttbar,qcd"`` → both; checks the names."""
    names = list(PROCESSES) if spec == "mix" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [name for name in names if name not in PROCESSES]
    if unknown or not names:
        raise SonicError(f"--process {spec!r}: unknown {unknown}; use one of {sorted(PROCESSES)}, a comma-separated "
                         f"list of them, or 'mix'")
    return names


def generate(output: str | os.PathLike, events: int, seed: int = 1, process: str = "ttbar",
             settings: Settings | None = None, batch_size: int = 100, progress: bool = False,
             pthat_min: float | None = None) -> Path:
    """Generates ``events`` events into ``output`` (written under a temporary name, then renamed).

    Example::

        generate("ttbar.root", 20, seed=3)
    """
    if events < 1:
        raise SonicError(f"--events must be at least 1, got {events}")
    settings = settings or Settings()
    output = Path(output)
    if not output.parent.exists():
        raise SonicError(f"output directory {str(output.parent)!r} does not exist")
    generator = PythiaGenerator(processes(process), seed, pthat_min)
    start, tty = time.perf_counter(), sys.stderr.isatty()
    with TreeWriter(output, compression="zstd:4", expected_extends=-(-events // batch_size)) as writer:
        for index, first in enumerate(range(0, events, batch_size)):
            n = min(batch_size, events - first)
            rng = np.random.default_rng([seed, index])
            branches = make_branches(rng, generator.batch(n), settings)
            ids = {"run": np.ones(n, dtype=np.uint32), "luminosityBlock": np.full(n, seed, dtype=np.uint32),
                   "event": np.arange(first + 1, first + n + 1, dtype=np.uint64)}
            writer.extend({**ids, **branches})
            if progress:  # a terminal gets one line rewritten in place, a pipe or log (make demo) a line per batch
                done = first + n
                rate = done / (time.perf_counter() - start)
                start_of_line, end = ("\r", "") if tty else ("", "\n")
                print(f"{start_of_line}{done}/{events} events ({rate:.1f}/s)", end=end, file=sys.stderr, flush=True)
    if progress and tty:
        print(file=sys.stderr)
    return output


def main(args: argparse.Namespace) -> int:
    settings = Settings(pileup=args.pileup, ak4_min_pt=args.ak4_min_pt, ak8_min_pt=args.ak8_min_pt)
    start = time.perf_counter()
    path = generate(args.output, args.events, seed=args.seed, process=args.process, settings=settings,
                    batch_size=args.batch_size, progress=True, pthat_min=args.pthat_min)
    print(f"wrote {args.events} events to {path} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0
