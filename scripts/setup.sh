#!/usr/bin/env bash
# Create .venv and install knngraph into it (editable), with the GPU stack when an NVIDIA GPU is present.
#
#   bash scripts/setup.sh          # the library (+ CuPy/numba-cuda extras if nvidia-smi works)
#   bash scripts/setup.sh test     # ... plus the test dependencies
#   bash scripts/setup.sh bench    # ... plus the benchmark baselines (pynndescent, hnswlib, faiss-cpu, matplotlib)
#
# Set KNNGRAPH_CUDA=cuda12|cuda13|none to override the GPU detection. With a GPU it then compiles every GPU
# kernel once (`knngraph warmup`, kept in ~/.cache/knngraph/kernels), so that the first command answers at
# once; KNNGRAPH_NO_WARMUP=1 skips that.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
extras=()
for e in "$@"; do extras+=("$e"); done
cuda=${KNNGRAPH_CUDA:-auto}
if [ "$cuda" = auto ]; then
  cuda=none
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    major=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
    if [ "${major:-0}" -ge 13 ]; then cuda=cuda13; elif [ "${major:-0}" -ge 12 ]; then cuda=cuda12; fi
  fi
fi
[ "$cuda" != none ] && extras+=("$cuda")
spec="."
if [ ${#extras[@]} -gt 0 ]; then spec=".[$(IFS=,; echo "${extras[*]}")]"; fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e "$spec"
echo "knngraph installed in .venv ($spec)"
if [ "$cuda" != none ] && [ -z "${KNNGRAPH_NO_WARMUP:-}" ]; then
  echo "compiling knngraph's GPU kernels for this machine (knngraph warmup, once)"
  .venv/bin/knngraph warmup --device cuda || echo "knngraph warmup failed: kernels will compile on first use" >&2
fi
