#!/usr/bin/env bash
# The GPU verification in device calls of under 10 minutes each (bench/README.md has the call
# plan with each stage's expected length). A call may find the machine bare, so each begins with
# `versions deps build`: `build` unpacks the extension that `make gpu-build` made on the CPU
# machine (carry: ["wheels", "gpu"]), else compiles it (39 s on an H200's 16 cores; the gzipped
# build, 17.7 MB, is over the 16 MiB a returned file may have):
#
#   A  bash bench/gpu_verify.sh versions deps build graphs bad-schedule cuda kernel ncu-kernel
#   B  bash bench/gpu_verify.sh versions deps build graphs tune-one memcheck
#   later: kernel-bf16 nvshmem-a nvshmem-b nvshmem-c accuracy train-dist nodes nodes-nvshmem grid racecheck synccheck ncu scaling dist tune
#
# `graphs` generates the kernel stage's graphs into the cache in the background, one process a
# graph, while the stages after it run; `kernel` waits for them first.
#
# Nothing is installed: the checkout is on PYTHONPATH (workers too). Every stage runs under its
# own timeout and writes its files into a work folder ($MGG_VERIFY_DIR); the device tool brings
# back at most 8 files, so after each stage the whole folder is packed again into
# $OUT/results.tgz (replaced atomically), and the stage running now writes its log straight to
# $OUT/running.log: a call cut off keeps everything finished so far and the log of the stage it
# was in. All stages run even if an earlier one failed; the exit status says whether all passed.
# MGG_STAGE_SCALE multiplies every stage's timeout.
#
# The rehearsal, on the CPU machine before asking for a GPU (the same stages, nothing launched):
#   PY=.venv/bin/python bash bench/gpu_verify.sh --dry-run versions deps build graphs cuda kernel ...
# prints each stage's command and checks what it names: its tests collect (pytest --collect-only,
# at least one selected), its modules import, the carried build and wheels are there.
set -u
DRY=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY=1
  shift
fi
DEST=${OUT:-gpu-out}                          # what comes back
OUT=${MGG_VERIFY_DIR:-/tmp/mgg-verify}        # every stage's logs, CSVs and plots
[ $DRY = 1 ] || mkdir -p "$DEST" "$OUT"
PY=${PY:-python3}
export PYTHONPATH="$PWD:/tmp/mgg-site${PYTHONPATH:+:$PYTHONPATH}"  # the checkout, then carried wheels
# the GPU image sets TORCH_CUDA_ARCH_LIST=9.0a, which would not match the carried sm_90 build
export TORCH_CUDA_ARCH_LIST=${MGG_ARCHS:-9.0} MAX_JOBS=${MAX_JOBS:-16}
export NVSHMEM_REMOTE_TRANSPORT=${NVSHMEM_REMOTE_TRANSPORT:-none}        # one node: no network transport
export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}  # bootstrap over loopback
export NVSHMEM_SYMMETRIC_SIZE=${NVSHMEM_SYMMETRIC_SIZE:-2G}
export MGG_WORKER_TIMEOUT=${MGG_WORKER_TIMEOUT:-180}  # one torchrun worker of the tests
# the extension's rpath names the NVSHMEM wheel of the machine that built it: here, this Python's
LD_LIBRARY_PATH="$($PY -c 'import nvidia.nvshmem as n; print(n.__path__[0] + "/lib")' 2>/dev/null)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
export MGG_GRAPH_CACHE=${MGG_GRAPH_CACHE:-/tmp/mgg-graphs}
SCALE=${MGG_STAGE_SCALE:-1}
KERNEL_GRAPHS=${MGG_KERNEL_GRAPHS:-"rmat-reddit rmat-products"}  # the kernel stage's graphs
status=0
graph_pids=()

stage() {  # stage NAME SECONDS CMD...
  local name=$1 secs=$2
  shift 2
  secs=$(awk "BEGIN {print int($secs * $SCALE)}")
  if [ $DRY = 1 ]; then
    echo "== $name (timeout ${secs}s): $*"
    rehearse "$@" || { echo "== $name: REHEARSAL FAILED"; status=1; }
    return
  fi
  echo "== $name (timeout ${secs}s): $*" | tee -a "$OUT/stages.txt"
  local t0=$SECONDS
  # a child bash, so that a stage can be one of the functions below (exported before the stages run)
  timeout -k 10 "$secs" bash -c '"$@"' "$name" "$@" >"$DEST/running.log" 2>&1
  local rc=$?
  mv "$DEST/running.log" "$OUT/$name.log"
  echo "== $name: exit $rc after $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo ' (timed out)')" | tee -a "$OUT/stages.txt"
  tail -n 12 "$OUT/$name.log"
  [ $rc -eq 0 ] || status=1
  pack
}

pack() {  # the work folder into $DEST/results.tgz, replaced atomically
  tar -czf "$DEST/results.tgz.tmp" -C "$OUT" . && mv "$DEST/results.tgz.tmp" "$DEST/results.tgz"
}

versions() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  nvcc --version | tail -n 2
  compute-sanitizer --version 2>/dev/null | head -n 2
  $PY - <<'EOF'
import importlib.metadata as md, sys, torch
def v(p):
    try:
        return md.version(p)
    except md.PackageNotFoundError:
        return "not installed"
pin = [r for r in (md.requires("torch") or []) if r.startswith("nvidia-nvshmem")]
print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "|", torch.cuda.get_device_name(), torch.cuda.get_device_capability())
print("nvshmem: torch pins", pin, "| installed", v("nvidia-nvshmem-cu13"), "| nvshmem4py", v("nvshmem4py-cu13"))
for p in ("setuptools", "ninja", "pybind11", "numpy", "scipy", "torch-geometric", "cupy-cuda13x", "pytest",
          "pytest-timeout", "hypothesis"):
    print(f"{p} {v(p)}")
EOF
}

deps() {  # the carried wheels (make gpu-wheels) of what the image lacks, without touching its own packages
  [ -d wheels ] || { echo "no wheels/ carried: nvshmem4py is missing, the nvshmem stages will say so"; return 0; }
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/mgg-site wheels/*.whl || return 1
  $PY -c "import nvshmem.core as c; print('nvshmem4py', c.get_version())"
}

tag() {  # the results' tag: the GPU's short name ("NVIDIA H200" -> h200)
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | awk '{print tolower($NF)}' | tr -cd 'a-z0-9-'
}
TAG=${MGG_TAG:-$(tag)}
TAG=${TAG:-gpu}

graphs() {  # the kernel stage's graphs into $MGG_GRAPH_CACHE, in the background (CPU only)
  local g
  for g in $KERNEL_GRAPHS; do
    $PY -c "import sys, bench.cache as c; g, t = c.graph(sys.argv[1]); print(sys.argv[1], g.num_nodes, g.num_edges, f'{t:.1f} s')" \
      "$g" >"$OUT/graphs-${g//[^A-Za-z0-9._-]/_}.log" 2>&1 &
    graph_pids+=($!)
  done
  echo "generating $KERNEL_GRAPHS in the background: pids ${graph_pids[*]}"
}

wait_graphs() {
  local p
  for p in "${graph_pids[@]}"; do wait "$p"; done
  cat "$OUT"/graphs-*.log 2>/dev/null
  graph_pids=()
}

so_name() { $PY -c "import importlib.machinery as m; print('mgg/_C' + m.EXTENSION_SUFFIXES[0])"; }
so_tag() { $PY -c "import sys, torch; print(f'cp{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__.split(\"+\")[0]}')"; }

build() {  # unpack a carried build of this Python and torch, else compile and leave it in $OUT
  local so gz
  so=$(so_name)
  gz="mgg_C-$(so_tag)-sm${TORCH_CUDA_ARCH_LIST//[.; ]/}.so.gz"
  for d in gpu "$DEST"; do
    if [ -f "$d/$gz" ]; then
      echo "using the carried build $d/$gz"
      gunzip -c "$d/$gz" >"$so" || return 1
      [ -f "$d/${gz%.so.gz}-build.py" ] && cp "$d/${gz%.so.gz}-build.py" mgg/_build.py
      $PY -c "import mgg._C as c; print('mgg._C with_cuda', c.with_cuda, 'with_nvshmem', c.with_nvshmem)"
      return $?
    fi
  done
  echo "no carried $gz: compiling ($MAX_JOBS jobs, archs $TORCH_CUDA_ARCH_LIST)"
  $PY setup.py -q build_ext --inplace -j "$MAX_JOBS" || return 1
  gzip -1 -c "$so" >"$DEST/$gz" && cp mgg/_build.py "$DEST/${gz%.so.gz}-build.py" && ls -la "$DEST/$gz"
  $PY -c "import mgg._C as c; print('mgg._C with_cuda', c.with_cuda, 'with_nvshmem', c.with_nvshmem)"
}

sanitize() {  # sanitize TOOL: compute-sanitizer on mgg's kernels only, every one of them (aggregation and
  # attention: all live in namespace mgg::kernels, so "mgg" is in each name, mangled or not), on the case
  # of bench/sanitize_case.py, which checks every result against a reference
  local filter="--kernel-name kns=mgg"
  compute-sanitizer --help 2>/dev/null | grep -q -- "--kernel-name" || filter="--filter kns=mgg"
  # shellcheck disable=SC2086
  compute-sanitizer --tool "$1" $filter --error-exitcode 9 $PY -m bench.sanitize_case
}

ncu_counters() {  # Nsight Compute's counterparts of bench.counters' columns (the emulator's memory
  # counters), for mgg's kernels on bench/sanitize_case.py's checked case, as CSV
  local ncu metrics
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [ -x "$ncu" ] || { echo "no ncu (Nsight Compute) here"; return 3; }
  metrics=$($PY -m bench.counters --ncu-metrics) || return 1
  "$ncu" --kernel-name-base demangled --kernel-name regex:mgg::kernels --metrics "$metrics" --csv --page raw \
    --log-file "$OUT/ncu-log.txt" $PY -m bench.sanitize_case >"$OUT/ncu.csv"
}


bad_schedule() {  # the case that crashed the first GPU run (a host SIGSEGV in the op, with the build compiled
  # on the GPU machine), alone: with the native stack under cuda-gdb if it crashes again
  local t="tests/kernels/test_cuda.py::test_bad_schedule_is_an_error_on_the_gpu[cuda]"
  TORCH_SHOW_CPP_STACKTRACES=1 $PY -X faulthandler -m pytest -q -p no:cacheprovider "$t" && return 0
  command -v cuda-gdb >/dev/null || return 1
  echo "== failed or crashed: again under cuda-gdb for the native stack"
  cuda-gdb -q -batch -ex run -ex bt --args $PY -m pytest -q -p no:cacheprovider "$t"
  return 1
}

ncu_kernel() {  # Nsight Compute on one kernel-stage case, mgg's kernels and then cuSPARSE's (one run
  # each, so that mgg's many launches do not use up the count): what the kernel stage's ratios need
  # explained (occupancy, memory throughput, stall reasons)
  local ncu impl regex
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [ -x "$ncu" ] || { echo "no ncu (Nsight Compute) here"; return 3; }
  for impl in mgg torch.sparse; do
    regex="aggregate_"
    [ "$impl" = mgg ] || regex="[Cc]usparse|[Cc]srmm|[Ss]p[Mm][Mm]"
    "$ncu" --clock-control none --kernel-name-base demangled --kernel-name "regex:$regex" --launch-count 4 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats --export "$OUT/ncu-$impl" --force-overwrite \
      $PY -m bench kernel --graphs rmat-reddit --dims 64 --impls "$impl" --kernel-tuned off --warmup 0 \
      --reps 20 --out "$OUT/ncu-run" --quiet || return 1
    "$ncu" --import "$OUT/ncu-$impl.ncu-rep" --csv --page details >"$OUT/ncu-$impl.csv" || return 1
  done
}

has_module() { $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec(sys.argv[1]) is None)" "$1"; }

rehearse() {  # rehearse CMD...: what a stage's command names, checked on the CPU (--dry-run)
  local out
  case "$1" in
    "$PY")
      [ "${2:-}" = "-m" ] || return 0
      if [ "$3" = pytest ]; then  # the same selection, collected (no report written)
        local a args=()
        for a in "$@"; do [[ $a == --junitxml=* ]] || args+=("$a"); done
        out=$("${args[@]}" --collect-only 2>&1) || { echo "$out" | tail -n 5; return 1; }
        echo "   $(echo "$out" | grep -E "tests? collected|selected" | tail -n 1)"
        return 0
      fi
      has_module "$3" || { echo "   no module $3"; return 1; }
      echo "   module $3 imports"
      if [ "$3" = bench ]; then  # the harness's options, parsed as it would parse them
        shift 3
        $PY -c "import sys; from bench.cli import parser; parser().parse_args(sys.argv[1:])" "$@" || return 1
        echo "   its options parse"
      fi
      if [ "$3" = torch.distributed.run ]; then  # and the module it starts: the word after its -m
        shift 3
        while [ $# -gt 0 ] && [ "$1" != -m ]; do shift; done
        has_module "${2:-}" || { echo "   no module ${2:-} for torchrun"; return 1; }
        echo "   module $2 imports"
      fi ;;
    versions | deps) echo "   (on the GPU machine)" ;;
    build)
      local gz
      gz="mgg_C-*-sm${TORCH_CUDA_ARCH_LIST//[.; ]/}.so.gz"
      # shellcheck disable=SC2086
      ls gpu/$gz 2>/dev/null || echo "   no carried gpu/$gz: the GPU machine compiles (about 40 s; make gpu-build)"
      ls wheels/*.whl 2>/dev/null | sed 's/^/   /' || echo "   no wheels/ (make gpu-wheels): the nvshmem stages will say nvshmem4py is missing" ;;
    bad_schedule) rehearse "$PY" -m pytest -q -p no:cacheprovider \
      "tests/kernels/test_cuda.py::test_bad_schedule_is_an_error_on_the_gpu[cuda]" ;;
    sanitize) has_module bench.sanitize_case && echo "   module bench.sanitize_case imports" ;;
    ncu_counters) $PY -m bench.counters --ncu-metrics >/dev/null && echo "   bench.counters --ncu-metrics runs" ;;
    ncu_kernel) has_module bench.suites.kernel && echo "   module bench.suites.kernel imports" ;;
    *) echo "   nothing to check for $1" ;;
  esac
}

export PY OUT DEST TAG
export -f versions deps so_name so_tag build sanitize ncu_counters ncu_kernel bad_schedule

PYTEST="$PY -m pytest -q -p no:cacheprovider --timeout=300"
for s in "$@"; do
  case $s in
    versions) stage versions 60 versions ;;
    deps) stage deps 60 deps ;;
    build) stage build 420 build ;;
    cuda) stage cuda 300 $PYTEST -m gpu tests/core/test_op.py tests/core/test_attend.py tests/kernels/test_cuda.py \
      --junitxml="$OUT/cuda.xml" ;;
    graphs) if [ $DRY = 1 ]; then echo "== graphs: $KERNEL_GRAPHS in the background"; else graphs; fi ;;
    bad-schedule) stage bad-schedule 180 bad_schedule ;;
    nvshmem-one) stage nvshmem-one 180 $PYTEST tests/distributed/test_nvshmem.py -k "2 and cora and match_single" ;;
    # the whole file ran past 369 s on an H200 (about 19 s a torchrun): three stages
    nvshmem-a) stage nvshmem-a 300 $PYTEST tests/distributed/test_nvshmem.py \
      -k "pes_on_one_gpu_match or deterministic or halo" --junitxml="$OUT/nvshmem-a.xml" ;;
    nvshmem-b) stage nvshmem-b 300 $PYTEST tests/distributed/test_nvshmem.py -k "read_once" \
      --junitxml="$OUT/nvshmem-b.xml" ;;
    nvshmem-c) stage nvshmem-c 200 $PYTEST tests/distributed/test_nvshmem.py -k "with_a_partition" \
      --junitxml="$OUT/nvshmem-c.xml" ;;
    # Cora on the GPU: mgg's layers against PyG's (5 seeds, each model's protocol), then 2 PEs on the
    # one GPU under torchrun with each backend (issue 29: reaches the one-process accuracy)
    accuracy) stage accuracy 300 $PY -m bench.accuracy --dataset cora --device cuda --seeds 5 --out "$OUT" \
      --tag "$TAG" --quiet ;;
    nodes) stage nodes 300 $PYTEST tests/distributed/test_node_halo.py -k on_one_gpu ;;
    # node-nvshmem: two "machines" of two PEs on the GPU (two NVSHMEM jobs), the fused kernel inside each
    nodes-nvshmem) stage nodes-nvshmem 300 $PYTEST tests/distributed/test_nvshmem.py -k two_machines \
      --junitxml="$OUT/nodes-nvshmem.xml" ;;
    # the grid backend's CUDA path: 4 ranks on the one GPU (gloo), 2x2x1 and 1x2x2, against one process
    grid) stage grid 300 $PYTEST tests/distributed/test_grid.py -k on_one_gpu ;;
    train-dist)
      for b in nvshmem halo; do
        stage "train-$b" 180 $PY -m torch.distributed.run --standalone --nproc-per-node 2 -m mgg train \
          --dataset cora --device cuda --backend "$b" --seeds 3 --quiet
      done ;;
    memcheck | racecheck | synccheck) stage "$s" 300 sanitize "$s" ;;
    ncu) stage ncu 300 ncu_counters ;;
    ncu-kernel)
      wait_graphs
      stage ncu-kernel 300 ncu_kernel ;;
    kernel)
      wait_graphs
      # shellcheck disable=SC2086
      stage kernel 480 $PY -m bench kernel --graphs $KERNEL_GRAPHS --dims 16 64 128 256 \
        --impls mgg torch.sparse --budget-s 420 --out "$OUT" --tag "$TAG" --quiet ;;
    # bf16 storage, fp32 accumulation (issue 29: against the kernel stage's cuSPARSE fp32 times)
    kernel-bf16)
      wait_graphs
      # shellcheck disable=SC2086
      stage kernel-bf16 420 $PY -m bench kernel --graphs $KERNEL_GRAPHS --dims 64 128 256 --dtype bfloat16 \
        --impls mgg torch.sparse --budget-s 360 --out "$OUT" --tag "$TAG-bf16" --quiet ;;
    # one GPU: the tuner against the whole (ps, dist, wpb) grid, the cost of the default config
    tune-one)
      wait_graphs
      stage tune-one 300 $PY -m bench tune --graphs rmat-reddit --dims 16 64 --pes 1 --budget-s 270 --out "$OUT" \
        --tag "$TAG-one" --quiet ;;
    tune) stage tune 540 $PY -m bench tune --graphs rmat-reddit rmat-products rmat:2000000:40000000 --dims 64 \
      --pes 2 4 --budget-s 480 --out "$OUT" --tag "$TAG" --quiet ;;
    dist) stage dist 540 $PY -m bench dist --graphs rmat-reddit:scale=0.25 rmat-products:scale=0.25 --dims 64 \
      --pes 1 2 4 --budget-s 480 --worker-timeout 200 --out "$OUT" --tag "$TAG" --quiet ;;
    dlrm) stage dlrm 420 $PY -m bench dlrm --dims 16 64 --pes 2 4 --budget-s 360 --worker-timeout 150 \
      --out "$OUT" --tag "$TAG" --quiet ;;
    scaling)
      stage scaling 420 $PY -m bench scaling --graphs rmat-reddit rmat-products --dims 64 --pes 1 2 3 4 6 8 \
        --budget-s 360 --out "$OUT" --tag "$TAG-scaling" --quiet
      for g in rmat-reddit rmat-products; do
        stage "project-$g" 120 $PY -m bench.project "$(ls -t "$OUT"/scaling-*"$TAG"-scaling*.csv 2>/dev/null | head -1)" \
          --graph $g --dim 64
      done ;;
    *) echo "unknown stage $s"; status=1 ;;
  esac
done
exit $status
