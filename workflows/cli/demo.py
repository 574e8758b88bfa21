"""``sonic demo``: the embedded default job — MiniAOD events generated here, run direct and through Triton.

1. generates a small MiniAOD-like sample with Pythia 8 (``sonic data generate miniaod``), unless present;
2. runs the MiniAOD workflow (ParticleNet AK4/AK8, DeepMET, DeepTau) with direct inference (onnxruntime);
3. runs it again with ``--inference sonic``: a local Triton server is started on the project's model
   repository, every model request goes to it over gRPC, and the server is stopped at the end;
4. compares the two outputs value by value (within 1e-5, absolute or relative) and prints both timing reports.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...framework import config as cfgmod
from ...framework.process import Process
from ..compare import compare_files


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="generate events, run MiniAOD direct and via a local Triton, compare",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="sonic-demo", help="where the sample, outputs and timing reports go")
    parser.add_argument("--events", type=int, default=40, help="events to generate")
    parser.add_argument("--seed", type=int, default=1, help="generator seed")
    parser.add_argument("--config", default="miniaod", help="workflow configuration to run")
    parser.add_argument("--regenerate", action="store_true", help="generate the sample even if it exists")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from ...data.miniaod.generate import generate

    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    sample = workdir / "miniaod.root"
    if args.regenerate or not sample.exists():
        print(f"[1/4] generating {args.events} ttbar events with Pythia 8 → {sample}", flush=True)
        generate(sample, args.events, seed=args.seed)
    else:
        print(f"[1/4] using existing sample {sample} (--regenerate to make a new one)", flush=True)
    outputs = {}
    for step, mode in ((2, "direct"), (3, "sonic")):
        where = "in-process onnxruntime" if mode == "direct" else "a local Triton server over gRPC"
        print(f"\n[{step}/4] {args.config} with {mode} inference ({where})", flush=True)
        output = workdir / f"{mode}.root"
        config = cfgmod.load(args.config, [f"source.files=['{sample}']", f"output.file='{output}'",
                                           f"services.inference.mode={mode}"])
        result = Process(config).run(timing_json=str(workdir / f"timing_{mode}.json"), progress=False)
        print(result.timing.table())
        outputs[mode] = result.output
    comparison = compare_files(outputs["direct"], outputs["sonic"])
    print("\n[4/4] direct vs SONIC outputs")
    print(comparison.summary())
    print(f"\noutputs and timing reports in {workdir}")
    if not comparison.equal():
        print("sonic demo: direct and SONIC outputs differ", file=sys.stderr)
        return 1
    return 0
