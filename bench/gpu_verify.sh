#!/usr/bin/env bash
# The GPU verification of issues 4-6, in stages that each fit one device call (10 min):
#
#   bash bench/gpu_verify.sh build tests sanitize     # then, in later calls:
#   bash bench/gpu_verify.sh kernel                   # rmat-reddit + rmat-products, D 16..256, vs cuSPARSE
#   bash bench/gpu_verify.sh tune
#   bash bench/gpu_verify.sh nvshmem dist scaling     # scaling ends with the 8-GPU projection
#
# Logs, CSVs, plots and JUnit XML go to $OUT (default ./gpu-out). Every stage runs even if an
# earlier one failed; the exit status says whether all passed. Python modules the machine lacks
# are installed from ./wheels if that folder was carried along.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PY:-python}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16}
export NVSHMEM_REMOTE_TRANSPORT=${NVSHMEM_REMOTE_TRANSPORT:-none}
status=0

stage() {  # stage NAME CMD...: runs CMD, logs to $OUT/NAME.log, records the status
  local name=$1; shift
  echo "== $name: $*" | tee -a "$OUT/stages.txt"
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/stages.txt"
  tail -n 15 "$OUT/$name.log"
  [ $rc -eq 0 ] || status=1
}

versions() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  $PY -m pip list 2>/dev/null | grep -i -E "nvshmem|cupy|geometric|^torch |hypothesis|matplotlib|tqdm|rich|scipy"
}

deps() {
  for m in numpy scipy tqdm rich matplotlib hypothesis torch_geometric; do
    $PY -c "import $m" 2>/dev/null && continue
    if [ -d wheels ]; then $PY -m pip install --no-index --find-links wheels "${m/torch_geometric/torch-geometric}" || true
    else echo "missing python module $m (carry wheels/ to install it)"; fi
  done
  $PY -m pip install --no-build-isolation --no-deps -e .
  $PY -c "import mgg._C as c; print('mgg._C with_cuda', c.with_cuda, 'with_nvshmem', c.with_nvshmem)"
}

for s in "$@"; do
  case $s in
    build) stage versions versions; stage build deps ;;
    tests) stage tests $PY -m pytest tests/test_cuda.py tests/test_op.py tests/test_nn.py -q -x --junitxml="$OUT/tests.xml" ;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        stage "sanitize-$tool" compute-sanitizer --tool $tool --error-exitcode 9 $PY -m bench.sanitize_case
      done ;;
    kernel) stage kernel $PY -m bench kernel --graphs rmat-reddit rmat-products --dims 16 64 128 256 \
              --impls mgg torch.sparse --out "$OUT" --tag h100 --quiet ;;
    tune) stage tune $PY -m bench tune --graphs rmat-reddit rmat-products rmat:2000000:40000000 --dims 64 \
              --out "$OUT" --tag h100 --quiet ;;
    nvshmem) stage nvshmem $PY -m pytest tests/test_nvshmem.py -q -x --junitxml="$OUT/nvshmem.xml" ;;
    dist) stage dist $PY -m bench dist --graphs rmat-reddit:scale=0.25 rmat-products:scale=0.25 --dims 64 \
              --pes 1 2 4 --out "$OUT" --tag h100 --quiet ;;
    scaling)
      stage scaling $PY -m bench scaling --graphs rmat-reddit rmat-products --dims 64 --pes 1 2 3 4 6 8 \
              --out "$OUT" --tag h100-scaling --quiet
      for g in rmat-reddit rmat-products; do
        stage "project-$g" $PY -m bench.project "$(ls -t "$OUT"/scaling-*h100-scaling*.csv | head -1)" --graph $g --dim 64
      done ;;
    *) echo "unknown stage $s"; status=1 ;;
  esac
done
exit $status
