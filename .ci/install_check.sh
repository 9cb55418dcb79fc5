#!/usr/bin/env bash
# `pip install .` as a new user types it, with pip's default build isolation, into a fresh venv
# that holds the torch the Makefile pins. pip builds mgg in an isolated environment with the
# newest torch the package index serves, so this step is also CI's compile against the newest
# torch (CUDA kernels included where nvcc exists, unless MGG_CPU_ONLY=1). Then the import must work if that is
# the same torch, and otherwise fail with mgg's one-line message, never an undefined symbol.
# Where nvcc exists, that build must have its CUDA kernels (.ci/check_cuda_build.sh), unless
# MGG_CPU_ONLY=1 asks for a C++-only build (CI does: it compiles the CUDA kernels in the README's
# build instead, against the pinned torch).
# Disk: two CUDA builds of torch (about 5.5 GB each: the venv's and the build environment's) and
# the newest one's wheels (about 2 GB) at the peak; pip's cache is off so that those wheels are not
# kept, and a temporary venv goes whether the check passes or fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
TORCH=${TORCH:-$(sed -n 's/^TORCH *?= *//p' Makefile)}
export PIP_NO_CACHE_DIR=1
# CHECK_VENV: where the venv goes (must not exist yet); CI passes .venv, so that the README's setup
# after it reuses the venv and its torch instead of installing torch a second time. Otherwise a
# temporary folder, removed when the check ends.
if [ -n "${CHECK_VENV:-}" ]; then
  [ ! -e "$CHECK_VENV" ] || { echo "install_check: $CHECK_VENV exists; the check needs a fresh venv"; exit 2; }
  VENV=$(realpath -m "$CHECK_VENV")  # absolute: the checks below run from /tmp
else
  VENV=$(mktemp -d)/venv
  trap 'rm -rf "$(dirname "$VENV")"' EXIT
fi
start=$(date +%s)
echo "install_check: free disk where pip builds: $(df -h --output=avail "${TMPDIR:-/tmp}" | tail -n 1 | tr -d ' ')"
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "$TORCH"
# sed, not grep -v: it succeeds whatever it filters, so under pipefail the status is pip's
"$VENV/bin/pip" install -q . 2>&1 | sed '/^WARNING: Location/d'
"$VENV/bin/pip" show mgg >/dev/null  # installed
bash .ci/check_cuda_build.sh "$VENV/bin/python"
built=$(cd /tmp && "$VENV/bin/python" - <<'PYEOF'
import importlib.util, runpy
spec = importlib.util.find_spec("mgg")
print(runpy.run_path(spec.submodule_search_locations[0] + "/_build.py")["torch"])
PYEOF
)
have=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
echo "install_check: mgg built (isolated) against torch $built; the venv has torch $have"
if [ "$built" = "$have" ]; then
  (cd /tmp && "$VENV/bin/python" -c "import mgg, torch; g = mgg.Graph.from_edges([0, 1], [1, 0], 2); \
x = torch.arange(6.0).view(2, 3); y = mgg.aggregate(x, g); assert torch.equal(y, x.flip(0)), y; \
print('install_check: A @ x swaps the two rows, as it must')")
else
  out=$(cd /tmp && "$VENV/bin/python" -c "import mgg" 2>&1 || true)
  echo "$out" | tail -n 1
  echo "$out" | tail -n 1 | grep -qx "ImportError: mgg was built for torch $built but torch $have is installed: reinstall mgg with \`pip install --no-build-isolation .\` in this environment"
fi
echo "install_check: passed in $(( $(date +%s) - start ))s"
