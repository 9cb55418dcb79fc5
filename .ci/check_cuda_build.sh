#!/usr/bin/env bash
# .ci/check_cuda_build.sh PYTHON: fails when nvcc is present but the mgg that PYTHON imports was
# built without its CUDA kernels (setup.py's CPU-only fallback, which every CPU test passes).
# nvcc is looked for where setup.py looks (CUDA_HOME, else CUDA_PATH; /usr/local/cuda; PATH);
# MGG_CPU_ONLY=1 asks for a CPU-only build and skips the check. It reads setup.py's build record
# (mgg/_build.py) without loading the extension, so a build against another torch is checked too;
# where the extension loads, its own with_cuda must say the same.
set -euo pipefail
PY=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute (the check runs from /tmp), links kept: a venv's python
if [ "${MGG_CPU_ONLY:-}" = 1 ]; then
  echo "cuda check: MGG_CPU_ONLY=1: a CPU-only build was asked for"
  exit 0
fi
nvcc=""
for d in "${CUDA_HOME:-${CUDA_PATH:-}}" /usr/local/cuda; do
  if [ -n "$d" ] && [ -x "$d/bin/nvcc" ]; then
    nvcc=$d/bin/nvcc
    break
  fi
done
[ -n "$nvcc" ] || nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ]; then
  echo "cuda check: no nvcc here: the CPU-only build is expected"
  exit 0
fi
cd /tmp  # the installed mgg, not a checkout in the working directory
"$PY" - "$nvcc" <<'PYEOF'
import importlib.util
import runpy
import sys

where = importlib.util.find_spec("mgg").submodule_search_locations[0]
rec = runpy.run_path(where + "/_build.py")
why = (f"nvcc is at {sys.argv[1]} but mgg in {where} was built without its CUDA kernels (the build's note "
       "says why; MGG_CPU_ONLY=1 asks for a CPU-only build)")
if not rec.get("nvcc") or not rec.get("archs"):
    sys.exit(f"cuda check: {why}: build record nvcc={rec.get('nvcc')!r}, archs={rec.get('archs')!r}")
try:
    import mgg._C as c
except ImportError as e:
    print(f"cuda check: the extension does not load with this torch ({str(e)[:120]}): the build record alone")
else:
    if not c.with_cuda:
        sys.exit(f"cuda check: {why}: mgg._C.with_cuda is False")
print(f"cuda check: mgg built with its CUDA kernels (nvcc {rec['nvcc']}, archs {', '.join(rec['archs'])})")
PYEOF
