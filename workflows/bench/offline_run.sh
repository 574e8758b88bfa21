#!/usr/bin/env bash
# Runs a `sonic bench` on a machine without network access whose python3 already has numpy, onnxruntime and
# (for GPU modes) torch with CUDA, as GPU nodes of a batch system often do. Everything else comes from an
# offline bundle made beforehand on a machine with network and this project installed (make install):
#
#   mkdir -p offline
#   pip download --only-binary=:all: --no-deps --python-version 3.12 -d offline \
#       uproot awkward awkward-cpp cramjam tritonclient python-rapidjson hist boost-histogram histoprint uhi click
#   python -m sonic_hep.workflows.bench._triton_bundle pack offline/tritonserver-py312.tar.xz --python 3.12
#
# (--python-version / --python: the GPU machine's Python.) Copy the checkout with offline/ to that machine, then:
#
# Usage: bash workflows/bench/offline_run.sh BENCH OUTDIR [sonic bench BENCH arguments]
#   e.g. bash workflows/bench/offline_run.sh protodune OUT --scale full --modes direct-cpu,direct-gpu,sonic-gpu
#        bash workflows/bench/offline_run.sh inference OUT --server-cpus 0-7 --load-processes 4
# Environment: PYTHON (default python3), OFFLINE (default offline), BUNDLE (default
# $OFFLINE/tritonserver-py312.tar.xz), SITE (where they are installed, default /tmp/sonic-site), SKIP_INSTALL=1
# (use the packages PYTHON or SITE already has).
# Dry run without a GPU, from a `make install` checkout:
#   python -m sonic_hep.workflows.bench._triton_bundle pack /tmp/ts.tar.xz --python 3.11
#   PYTHON=.venv/bin/python BUNDLE=/tmp/ts.tar.xz SKIP_INSTALL=1 bash workflows/bench/offline_run.sh protodune /tmp/dry \
#       --scale small --events 2 --torch-device cpu --modes direct-cpu,direct-gpu
set -euo pipefail
bench=${1:?usage: offline_run.sh BENCH OUTDIR [bench arguments]}
out=${2:?usage: offline_run.sh BENCH OUTDIR [bench arguments]}
shift 2
PY=${PYTHON:-python3}
OFFLINE=${OFFLINE:-offline}
BUNDLE=${BUNDLE:-$OFFLINE/tritonserver-py312.tar.xz}
SITE=${SITE:-/tmp/sonic-site}
export PYTHONUNBUFFERED=1
[ -f "$BUNDLE" ] || { echo "offline_run.sh: error: no Triton bundle at $BUNDLE (make it as this script's header says)" >&2; exit 1; }
if [ -z "${SKIP_INSTALL:-}" ] && ! compgen -G "$OFFLINE/*.whl" >/dev/null; then
  echo "offline_run.sh: error: no wheels in $OFFLINE/ (make them as this script's header says, or SKIP_INSTALL=1)" >&2; exit 1
fi
mkdir -p "$out" "$SITE"
if [ -z "${SKIP_INSTALL:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$OFFLINE"/*.whl
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
# Triton's python stub ignores PYTHONPATH: a .pth file shows it the carried packages (Exa.TrkX's python models);
# it is removed when the bench ends, so the python is left as it was
pth=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"] + "/sonic-site.pth")')
if { echo "$SITE" > "$pth"; } 2>/dev/null; then
  trap 'rm -f "$pth"' EXIT
else
  echo "warning: no .pth for the python stub: python models that need the carried packages will not load"
fi
"$PY" -c 'import numpy, torch, onnxruntime; print("numpy", numpy.__version__, "torch", torch.__version__,
"cuda", torch.cuda.is_available(), "ort", onnxruntime.__version__)'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$PY" -m sonic_hep.workflows.cli bench "$bench" --out "$out" "$@"
