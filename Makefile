# The two commands of the README. Each sets up .venv (idempotent) and then runs.
PY      ?= python3
VENV    ?= .venv
TORCH   ?= torch==2.14.1
PIP      = $(VENV)/bin/pip
STAMP    = $(VENV)/.mgg-installed

.PHONY: train test test-full test-rest test-isa lint format bench-smoke gpu-wheels gpu-build clean

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(VENV)/bin/python pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.h csrc/*/*.cpp csrc/*/*.cu csrc/*/*.cuh csrc/*/*.h csrc/*.json)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "$(TORCH)" ninja pybind11 numpy
	$(PIP) install -q --no-build-isolation -e ".[test,bench]"
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/mgg train --dataset cora

# `make test`: every test but the cases marked `full` (tests/conftest.py: the long tests and the
# inner cases of the big matrices), on two processes (pytest-xdist; a test file stays in one, so its
# module fixtures run once). `make test-full`: every case; `make test-rest`: the `full` cases alone.
# CI runs `make test`; a landing runs the `full` cases too (docs/testing.md).
PYTEST = $(VENV)/bin/python -m pytest tests -q -n $(TEST_WORKERS) --dist loadfile
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PYTEST) -m "not full"

test-full: $(STAMP)
	$(PYTEST)

test-rest: $(STAMP)
	$(PYTEST) -m full

# The float comparisons (mgg against PyG, torch and the float64 references, the oracles) once more
# under other instruction sets and in random order, so that a tolerance that holds on one CPU only
# (MKL's AVX-512 GEMM sums in another order than its AVX2 one) fails before it lands. CI runs it.
NUMERICS = tests/core/test_oracle.py tests/core/test_op.py tests/core/test_attend.py tests/nn/test_nn.py tests/nn/test_sage.py \
           tests/nn/test_gat.py tests/core/test_graph.py
test-isa: $(STAMP)
	MKL_ENABLE_INSTRUCTIONS=SSE4_2 ATEN_CPU_CAPABILITY=default \
	  $(VENV)/bin/python -m pytest $(NUMERICS) -q --random-order-bucket=global

# Every benchmark suite on a tiny graph, CPU-friendly (what tests/bench/test_bench.py runs in CI); the
# results go to build/bench-smoke, not bench/results.
bench-smoke: $(STAMP)
	$(VENV)/bin/python -m bench all --smoke --quiet --out build/bench-smoke

# Style: ruff check and ruff format (pyproject.toml) for Python, clang-format (.clang-format) for csrc/;
# .pre-commit-config.yaml runs the same at commit. CI runs `make lint`.
CSRC = $(shell find csrc -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')
LINTERS = $(VENV)/.mgg-linters
$(LINTERS): $(VENV)/bin/python pyproject.toml
	$(PIP) install -q "ruff==0.17.6" "clang-format==23.1.5"
	touch $(LINTERS)

lint: $(LINTERS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/clang-format --dry-run --Werror $(CSRC)

format: $(LINTERS)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i $(CSRC)

# Wheels for the GPU machine (Python 3.12, no network) of what its image lacks: nvshmem4py and the
# cuda-core/cuda-pathfinder it needs (KINDS.md lists what is there). Carry wheels/ with the device
# tool (carry: ["wheels"]); bench/gpu_verify.sh's `deps` stage installs them with --no-deps.
GPU_WHEELS = nvshmem4py-cu13==0.4.1 cuda-core==1.2.2 cuda-pathfinder==1.9.0
gpu-wheels: $(VENV)/bin/python
	$(PIP) download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d wheels $(GPU_WHEELS)
	ls -la wheels

# The extension for the GPU machines (their Python 3.12 and torch, sm_90), built here so that no
# device minute compiles: leaves gpu/mgg_C-cp312-torchV-sm90.so.gz and its build record; carry
# "gpu" in the device calls and bench/gpu_verify.sh's build stage unpacks it.
GPU_PY    ?= $(HOME)/.pyenv/versions/3.12.1/bin/python
GPU_TORCH ?= torch==2.11.0
GPU_ARCHS ?= 9.0
GPU_DIR    = .gpu-build
gpu-build:
	@test -x $(GPU_PY) || { echo "make gpu-build: needs a Python 3.12 interpreter (GPU_PY=...)"; exit 2; }
	test -x $(GPU_DIR)/venv/bin/python || $(GPU_PY) -m venv $(GPU_DIR)/venv
	$(GPU_DIR)/venv/bin/pip install -q "$(GPU_TORCH)" setuptools wheel ninja pybind11 numpy
	rm -rf $(GPU_DIR)/src && mkdir -p $(GPU_DIR)/src
	tar -c --exclude=./.venv --exclude=./$(GPU_DIR) --exclude=./build --exclude='*.so' --exclude=./gpu . | tar -x -C $(GPU_DIR)/src
	cd $(GPU_DIR)/src && TORCH_CUDA_ARCH_LIST="$(GPU_ARCHS)" MAX_JOBS=2 ../venv/bin/python setup.py -q build_ext --inplace
	mkdir -p gpu && cd $(GPU_DIR)/src && name=$$(../venv/bin/python -c "import sys, torch; \
	  print(f'mgg_C-cp{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__.split(\"+\")[0]}')")-sm$$(echo "$(GPU_ARCHS)" | tr -d '.; ') \
	  && gzip -1 -c mgg/_C.cpython-3*.so > ../../gpu/$$name.so.gz && cp mgg/_build.py ../../gpu/$$name-build.py \
	  && ls -la ../../gpu

clean:
	rm -rf build $(VENV) $(GPU_DIR) mgg/_C*.so mgg/_build.py *.egg-info
