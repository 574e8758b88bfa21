#!/usr/bin/env bash
# A `sonic bench` as it runs on a lent GPU machine (no network; its python3 has torch+CUDA and onnxruntime).
#
# Prepared here, carried in .whl/ (git-ignored):
#   .whl/*.whl                         uproot, awkward(-cpp), cramjam, tritonclient, python-rapidjson,
#                                      hist, boost-histogram, histoprint, uhi, click (cp312)
#   .whl/tritonserver-pip-py312.tar.xz python -m sonic_hep.workflows.bench._triton_bundle pack <that> --python 3.12
# Usage: bash workflows/bench/lent_node_run.sh BENCH OUTDIR [sonic bench BENCH arguments]
#   e.g. bash workflows/bench/lent_node_run.sh protodune OUT --scale full --modes direct-cpu,direct-gpu,sonic-gpu
#        bash workflows/bench/lent_node_run.sh inference OUT --server-cpus 0-7 --load-processes 4
# Dry run without a GPU: PYTHON=.venv/bin/python BUNDLE=<bundle with this python's stub> SKIP_INSTALL=1 \
#   bash workflows/bench/lent_node_run.sh protodune /tmp/dry --scale small --events 2 --torch-device cpu --modes direct-cpu,direct-gpu
set -euo pipefail
bench=${1:?usage: lent_node_run.sh BENCH OUTDIR [bench arguments]}
out=${2:?usage: lent_node_run.sh BENCH OUTDIR [bench arguments]}
shift 2
PY=${PYTHON:-python3}
BUNDLE=${BUNDLE:-.whl/tritonserver-pip-py312.tar.xz}
SITE=${SITE:-/tmp/sonic-site}
export PYTHONUNBUFFERED=1
mkdir -p "$out" "$SITE"
if [ -z "${SKIP_INSTALL:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  if ! "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .; then
    # no usable setuptools there: the same layout by hand (rooms as sonic_hep.<room>, plug-in entry point)
    mkdir -p "$SITE/sonic_hep" "$SITE/sonic_hep-0.0.dist-info"
    for room in framework modules workflows data configs; do ln -sfn "$PWD/$room" "$SITE/sonic_hep/$room"; done
    printf 'Metadata-Version: 2.1\nName: sonic-hep\nVersion: 0.0\n' > "$SITE/sonic_hep-0.0.dist-info/METADATA"
    printf '[sonic_hep.modules]\nbuiltin = sonic_hep.modules\n' > "$SITE/sonic_hep-0.0.dist-info/entry_points.txt"
  fi
fi
"$PY" - "$BUNDLE" "$SITE" <<'EOF'
import sys, tarfile
tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], filter="tar")
EOF
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# Triton's python stub ignores PYTHONPATH: a .pth file shows it the carried packages (Exa.TrkX's python models)
"$PY" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/sonic-site.pth", "w").write(sys.argv[1] + "\n")' "$SITE" \
  || echo "warning: no .pth for the python stub: python models that need the carried packages will not load"
"$PY" -c 'import numpy, torch, onnxruntime; print("numpy", numpy.__version__, "torch", torch.__version__,
"cuda", torch.cuda.is_available(), "ort", onnxruntime.__version__)'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -m sonic_hep.workflows.cli bench "$bench" --out "$out" "$@"
