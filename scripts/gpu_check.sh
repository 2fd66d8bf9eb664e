#!/usr/bin/env bash
# One script for every GPU check: the GPU tests (pytest -m gpu) and the GPU benchmarks.
#
#   scripts/gpu_check.sh [all|tests|bench] [FILTER]
#
#   tests    - pytest -m gpu with KNNGRAPH_GPU_TESTS=1 (FILTER is passed to -k)
#   tests-parallel - the same tests as 8 pytest processes side by side (one per group in GPU_TEST_GROUPS),
#              then the tests marked fills_gpu alone (they take nearly all memory of a GPU, which would fail
#              whatever runs beside them); the whole GPU suite fits one 10-minute call of the lent machine
#              (about 4 minutes on an H100)
#   tests-fills - the tests marked fills_gpu alone (after tests-parallel with GPU_FILLS=0)
#   bench    - every GPU benchmark in GPU_BENCHMARKS below (FILTER: run only those whose name contains it)
#   sanitize - scripts/gpu_sanitize.py under compute-sanitizer memcheck, racecheck and synccheck; fails on any kernel
#              error or hazard (scripts/sanitizer_summary.py filters the driver probing of numba's start)
#   multi    - a machine of several GPUs in one call of at most $MULTI_SECONDS (default 540): first
#              benchmarks/studies/multi_gpu.py alone on every GPU (scaling needs quiet GPUs), then one lane
#              per GPU side by side (CUDA_VISIBLE_DEVICES): the GPU tests in four groups (the several-GPU
#              tests on two cards), a GPU soak ($MULTI_SOAK_MINUTES, default 3), the first-call, clustered-recall
#              and filtered-search studies and the speed guard of this tree against an older one in .before/
#              (if carried: gpu_regression.py in each tree, and search_calls_ab.py's per-call A/B of small
#              searches with both trees in one process); every step under its share of the time;
#              everything it writes ends in $OUT/multi.tar.xz
#   background STEPS - start steps that outlast one call of the lent machine (at most 10 minutes a call) in a
#              process session of their own (setsid), on the machine's last GPU, and return at once: STEPS is
#              a comma list of soak (a GPU soak of $BACKGROUND_SOAK_MINUTES, default 10, 4 threads) and sanitize
#              (the sanitize step below); each writes to $BACKGROUND_DIR/STEP (default ~/knngraph-background)
#              and leaves STEP.rc there when it ends. Later calls must follow while the machine is warm.
#   collect  - wait for the background steps (at most $COLLECT_SECONDS, default 480), then pack what they
#              wrote into $OUT/background.tar.xz and print their summaries
#   all      - tests and bench (default)
#
# Results (logs, JSON, PNG) go to $OUT (the lent machine's return folder) or ./out. Real data comes from
# .data/ (make it with scripts/prepare_device_data.py and carry it) or from ../shared/datasets.
# On the lent machine, carry .data and, if any, .whl (extra pure-Python wheels, installed to /tmp/site).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
export PYTHONPATH="$ROOT/scripts/device_env:$ROOT/src:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export KNNGRAPH_GPU_TESTS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
# carried compressed data (.dataz/*.tar.xz, archives of .data/ made by scripts/prepare_device_data.py)
if [ ! -d .data ] && ls .dataz/*.tar.xz >/dev/null 2>&1; then
  for f in .dataz/*.tar.xz; do tar xJf "$f"; done
fi
[ -d .data ] && export KNNGRAPH_DEVICE_DATA="$ROOT/.data"

# name:command pairs; each benchmark writes its JSON/PNG under $OUT
GPU_BENCHMARKS=(
  # the speed guard of refactors: exact k-NN k=10/100, exact graph, NN-Descent 6 iterations, SONG sweep
  "regression:python3 benchmarks/studies/gpu_regression.py --out $OUT ${BENCH_ARGS:-}"
  "exact:python3 benchmarks/studies/exact_gpu.py --out $OUT ${BENCH_ARGS:-}"
  "profile_select:python3 benchmarks/studies/profile_select.py --out $OUT"
  # first and second calls of fresh processes with warm and empty kernel caches (knn, NN-Descent, SONG, GRNND,
  # GGNN on the bundled sample; knngraph demo)
  "first_call:python3 benchmarks/studies/first_call.py --out $OUT"
  "nndescent:python3 benchmarks/studies/nndescent_gpu.py --out $OUT ${BENCH_ARGS:-}"
  # whole-list recall@k (k = 32, 64, 100) against the length of the lists NN-Descent iterates with
  "nndescent_full_list:python3 benchmarks/studies/nndescent_full_list.py --device cuda --out $OUT"
  # GNND time against iterations from random lists and from cluster windows (JSON lines on stdout)
  "profile_join:python3 benchmarks/studies/profile_join.py --sample-size 32 --iterations 5,6,7 --repeat 3 --recall && python3 benchmarks/studies/profile_join.py --init cluster_windows --sample-size 32 --iterations 1,3,4,7 --repeat 2 --recall"
  # SONG's parameters on sift-photos 450k, as runner specs (register caps, fill, hashing, Bloom, batches)
  "song:python3 benchmarks/studies/song_gpu.py --out $OUT ${BENCH_ARGS:-}"
  # the fast searcher against cuVS CAGRA on the same graph (source $CUVS_ENV first; without cuVS the CAGRA
  # parts are skipped): sift-photos 450k, and minilm-words from $KNNGRAPH_MINILM_DIR (a carried .minilm
  # folder) or the shared datasets
  "search_sift:python3 benchmarks/studies/search_gpu.py --out $OUT ${BENCH_ARGS:-}"
  "search_minilm:python3 benchmarks/studies/search_gpu.py --dataset minilm --out $OUT ${BENCH_ARGS:-}"
  # many host queries on one GPU: the search in one piece against chunks on two streams (SONG and GGNN)
  "host_chunks:python3 benchmarks/studies/host_chunks.py --out $OUT ${BENCH_ARGS:-}"
  # GRNND and GGNN builds, CPU against GPU step by step on sift-photos (must agree exactly; fails otherwise)
  "compare_builders:python3 scripts/compare_builders.py"
  "grnnd:python3 benchmarks/studies/grnnd_gpu.py --out $OUT ${BENCH_ARGS:-}"
  "ggnn:python3 benchmarks/studies/ggnn_gpu.py --out $OUT ${BENCH_ARGS:-}"
  "ggnn_minilm:python3 benchmarks/studies/ggnn_gpu.py --dataset minilm --out $OUT ${BENCH_ARGS:-}"
  # GGNN sharded: sift-photos 770k (carry .dataz770 in a second call, see prepare_device_data.py --rest770) and
  # a 20M x 96 set within a quarter of its size; BENCH_ARGS="--parts synthetic-cut" etc. splits it over calls
  "ggnn_sharded:python3 benchmarks/studies/ggnn_sharded_gpu.py --out $OUT ${BENCH_ARGS:-}"
  # seconds per step of the GRNND rounds (propose / group / merge / reverse / final prune)
  "profile_grnnd:python3 benchmarks/studies/profile_grnnd_rounds.py --out $OUT ${BENCH_ARGS:-}"
  # Dask on one GPU: needs the wheels listed in benchmarks/studies/distributed_gpu.py in .whl/ (or on PYTHONPATH)
  "distributed:python3 benchmarks/studies/distributed_gpu.py --out $OUT --part search ${BENCH_ARGS:-}"
  # the benchmark runner's whole GPU suite, within the lent machine's 10 minutes: sift-photos 450k and the
  # in-memory scaling series took about 5 minutes on an H200, the clustered out-of-core builds at 1M and
  # 10M about 1.5 more, the search graphs of GGNN and GRNND (new, not yet timed there) come on top;
  # BENCH_ARGS="--parts ooc" runs only the out-of-core part (the last --parts wins)
  "suite:python3 -m benchmarks suite gpu --out $OUT/bench_gpu.jsonl --plots --parts sift,search_graphs,scaling,ooc --ooc-sizes 1m,10m --ooc-time-limit 300 ${BENCH_ARGS:-}"
)

# groups of GPU test files for tests-parallel, of similar run times
GPU_TEST_GROUPS=(
  "tests/bruteforce" "tests/nndescent" "tests/beam" "tests/song/test_song_gpu.py tests/graphops tests/primitives"
  "tests/grnnd" "tests/ggnn tests/test_first_call_gpu.py" "tests/distributed tests/test_faults_gpu.py"
  "tests/test_handoff_gpu.py tests/test_bench_runner_gpu.py tests/test_concurrency_gpu.py tests/test_multidevice_gpu.py"
)

what=${1:-all}
filter=${2:-}
status=0
python3 - <<'PY' 2>&1 | tee "$OUT/env.txt"
import platform, numpy, numba, knngraph
from knngraph._device import _gpu_probe
print("python", platform.python_version(), "numpy", numpy.__version__, "numba", numba.__version__)
try:
    import cupy, numba_cuda
    print("cupy", cupy.__version__, "numba-cuda", numba_cuda.__version__,
          "gpu", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
except Exception as exc:
    print("gpu stack:", exc)
print("gpu usable:", _gpu_probe())
PY

if [ "$what" = all ] || [ "$what" = tests ]; then
  echo "== GPU tests"
  python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests ${filter:+-k "$filter"} 2>&1 | tee "$OUT/gpu_tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = tests-parallel ]; then
  echo "== GPU tests, ${#GPU_TEST_GROUPS[@]} groups in parallel"
  pids=()
  for i in "${!GPU_TEST_GROUPS[@]}"; do
    # shellcheck disable=SC2086
    timeout "${GPU_TEST_TIMEOUT:-480}" python3 -m pytest -m "gpu and not fills_gpu" -q -p no:cacheprovider \
      -o addopts="" ${GPU_TEST_GROUPS[$i]} ${filter:+-k "$filter"} > "$OUT/gpu_tests_group$i.log" 2>&1 &
    pids+=($!)
  done
  : > "$OUT/gpu_tests.log"
  # pytest's exit status 5 is "no test collected" (a FILTER that matches nothing in a group): not a failure
  ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
  for i in "${!pids[@]}"; do
    rc=0; wait "${pids[$i]}" || rc=$?
    ok "$rc" || status=1
    { echo "-- ${GPU_TEST_GROUPS[$i]}"
      grep -E "^(FAILED|ERROR)|passed|failed|skipped|error" "$OUT/gpu_tests_group$i.log" | tail -8; } >> "$OUT/gpu_tests.log"
  done
  # the groups' limit plus this one's stay within one 10-minute call of the lent machine by default;
  # GPU_FILLS=0 leaves them out (a background step on the same GPU would fail beside them): run them later
  # with `tests-fills`
  rc=0
  if [ "${GPU_FILLS:-1}" = 1 ]; then
    # shellcheck disable=SC2086
    timeout "${GPU_FILLS_TIMEOUT:-50}" python3 -m pytest -m "gpu and fills_gpu" -q -p no:cacheprovider \
      -o addopts="" tests ${filter:+-k "$filter"} > "$OUT/gpu_tests_group_fills_gpu.log" 2>&1 || rc=$?
  else
    echo "left out: GPU_FILLS=0" > "$OUT/gpu_tests_group_fills_gpu.log"
  fi
  ok "$rc" || status=1
  { echo "-- tests marked fills_gpu, alone"
    grep -E "^(FAILED|ERROR)|passed|failed|skipped|error" "$OUT/gpu_tests_group_fills_gpu.log" | tail -8; } \
    >> "$OUT/gpu_tests.log"
  cat "$OUT/gpu_tests.log"
  for i in "${!pids[@]}" _fills_gpu; do
    cat "$OUT/gpu_tests_group$i.log" >> "$OUT/gpu_tests_full.log"; rm -f "$OUT/gpu_tests_group$i.log"
  done
fi
if [ "$what" = tests-fills ]; then
  echo "== GPU tests marked fills_gpu, alone"
  # shellcheck disable=SC2086
  python3 -m pytest -m "gpu and fills_gpu" -q -p no:cacheprovider -o addopts="" tests ${filter:+-k "$filter"} 2>&1 \
    | tee "$OUT/gpu_tests_fills_gpu.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  for entry in "${GPU_BENCHMARKS[@]}"; do
    name=${entry%%:*}; cmd=${entry#*:}
    if [ -n "$filter" ] && [ "$what" = bench ] && [[ "$name" != *"$filter"* ]]; then continue; fi
    echo "== benchmark $name: $cmd"
    eval "$cmd" 2>&1 | tee "$OUT/bench_$name.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if [ "$what" = multi ]; then
  start=$SECONDS
  budget=${MULTI_SECONDS:-540}
  W="$OUT/multi"
  mkdir -p "$W"
  left() { echo $(( budget - 30 - (SECONDS - start) )); }
  gpus=$(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())")
  echo "== $gpus GPUs; several-GPU benchmark" | tee "$W/steps.log"
  # the several-GPU study: at most 45% of the time; parts in order of importance (a part cut short leaves the
  # lines written before it)
  timeout $(( budget * 45 / 100 )) python3 benchmarks/studies/multi_gpu.py --out "$W" \
    --parts "${MULTI_PARTS:-replicated,sharded,dask,graph}" --shard-rows "${MULTI_SHARD_ROWS:-1000000}" \
    --graph-rows "${MULTI_GRAPH_ROWS:-2000000}" > "$W/multi_gpu.log" 2>&1
  echo "multi_gpu rc=$? at $((SECONDS - start)) s" | tee -a "$W/steps.log"
  tar cJf "$OUT/multi.tar.xz" -C "$OUT" multi  # what a call cut short still brings back
  T() { timeout "$(left)" "$@"; }  # a step ends by the deadline of the whole call
  pyt="python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="
  # the GPU tests of the top level are the files named *_gpu.py (tests/<folder>/test_<topic>_gpu.py elsewhere)
  top_level=$(ls tests/test_*_gpu.py | grep -v test_multidevice_gpu | tr '\n' ' ')
  lanes=(
    "T $pyt tests/beam tests/song tests/graphops > $W/tests_beam_song.log 2>&1;
     T python3 benchmarks/studies/gpu_regression.py --out $W/regression_new > $W/regression_new.log 2>&1;
     [ -d .before ] && (cd .before && PYTHONPATH=$ROOT/scripts/device_env:$ROOT/.before/src:$ROOT/.before \
        T python3 benchmarks/gpu_regression.py --out $W/regression_old > $W/regression_old.log 2>&1);
     [ -d .before ] && T python3 benchmarks/studies/search_calls_ab.py --before .before/src --out $W/calls_ab \
        > $W/calls_ab.log 2>&1"
    "T $pyt tests/ggnn tests/grnnd tests/distributed > $W/tests_ggnn_grnnd_distributed.log 2>&1;
     T python3 benchmarks/soak.py --device cuda --minutes ${MULTI_SOAK_MINUTES:-3} --threads 4 --out $W \
        > $W/soak.log 2>&1"
    "CUDA_VISIBLE_DEVICES=LANE,NEXT T $pyt tests/test_multidevice_gpu.py > $W/tests_multidevice.log 2>&1;
     T $pyt tests/bruteforce tests/nndescent tests/primitives $top_level > $W/tests_rest.log 2>&1"
    "T python3 benchmarks/studies/first_call.py --out $W > $W/first_call.log 2>&1;
     T python3 benchmarks/studies/clustered_recall.py --device cuda --n 100000 --out $W > $W/clustered.log 2>&1;
     T python3 benchmarks/studies/filtered_search.py --device cuda --n 450000 --queries 10000 --calibrate \
        --label cuda_sift450k --out $W > $W/filtered.log 2>&1"
  )
  pids=()
  for g in $(seq 0 $(( gpus - 1 ))); do
    cmds=""
    for i in "${!lanes[@]}"; do
      if [ $(( i % gpus )) -eq "$g" ]; then cmds+="${lanes[$i]//LANE/$g};"; fi
    done
    cmds=${cmds//NEXT/$(( (g + 1) % gpus ))}
    (export CUDA_VISIBLE_DEVICES=$g; eval "$cmds") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  echo "lanes done at $((SECONDS - start)) s" | tee -a "$W/steps.log"
  for f in "$W"/tests_*.log; do echo "-- $f"; grep -E "^(FAILED|ERROR)|passed|failed" "$f" | tail -15; done \
    | tee "$W/tests_summary.txt"
  tar cJf "$OUT/multi.tar.xz" -C "$OUT" multi && rm -rf "$W"
fi
BACKGROUND_DIR=${BACKGROUND_DIR:-$HOME/knngraph-background}
if [ "$what" = background ]; then
  mkdir -p "$BACKGROUND_DIR"
  last_gpu=$(( $(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())") - 1 ))
  for step in ${filter//,/ }; do
    dir="$BACKGROUND_DIR/$step"
    mkdir -p "$dir"
    rm -f "$BACKGROUND_DIR/$step.rc"
    case "$step" in
      soak) cmd="python3 benchmarks/soak.py --device cuda --minutes ${BACKGROUND_SOAK_MINUTES:-10} --threads 4 --out $dir";;
      sanitize) cmd="OUT=$dir bash scripts/gpu_check.sh sanitize";;
      *) echo "unknown background step: $step (soak, sanitize)"; exit 2;;
    esac
    # a session of its own: the lent machine ends a call's processes when the call returns, but not these
    CUDA_VISIBLE_DEVICES=$last_gpu setsid nohup bash -c "$cmd > $dir/$step.log 2>&1; echo \$? > $BACKGROUND_DIR/$step.rc" \
      < /dev/null > /dev/null 2>&1 &
    echo "started $step on GPU $last_gpu: $cmd"
  done
fi
if [ "$what" = collect ]; then
  waited=0
  while [ "$waited" -lt "${COLLECT_SECONDS:-480}" ]; do
    pending=0
    for d in "$BACKGROUND_DIR"/*/; do
      [ -d "$d" ] && [ ! -f "${d%/}.rc" ] && pending=1
    done
    [ "$pending" -eq 0 ] && break
    sleep 5; waited=$(( waited + 5 ))
  done
  for d in "$BACKGROUND_DIR"/*/; do
    step=$(basename "$d")
    rc=$(cat "$BACKGROUND_DIR/$step.rc" 2>/dev/null || echo "still running")
    echo "== background $step: rc=$rc"
    tail -5 "$d/$step.log"
    [ "$rc" = 0 ] || status=1
  done
  [ -f "$BACKGROUND_DIR/sanitize/sanitize_summary.txt" ] && cat "$BACKGROUND_DIR/sanitize/sanitize_summary.txt"
  tar cJf "$OUT/background.tar.xz" -C "$BACKGROUND_DIR" .
fi
if [ "$what" = sanitize ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool"
    # shellcheck disable=SC2086
    compute-sanitizer --tool "$tool" --print-limit 50 python3 scripts/gpu_sanitize.py ${SANITIZE_ARGS:-} \
      > "$OUT/sanitize_$tool.log" 2>&1
    tail -3 "$OUT/sanitize_$tool.log"
  done
  python3 scripts/sanitizer_summary.py "$OUT/sanitize_memcheck.log" "$OUT/sanitize_racecheck.log" \
    "$OUT/sanitize_synccheck.log" \
    | tee "$OUT/sanitize_summary.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
