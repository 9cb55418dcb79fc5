# The two commands of the README. Each sets up .venv (idempotent) and then runs.
PY      ?= python3
VENV    ?= .venv
TORCH   ?= torch==2.14.1
PIP      = $(VENV)/bin/pip
STAMP    = $(VENV)/.mgg-installed

.PHONY: train test lint format bench-smoke gpu-wheels clean

$(VENV)/bin/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(VENV)/bin/python pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.h csrc/*/*.cpp csrc/*/*.cu csrc/*/*.cuh csrc/*/*.h csrc/*.json)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "$(TORCH)" ninja pybind11 numpy
	$(PIP) install -q --no-build-isolation -e ".[test,bench]"
	touch $(STAMP)

train: $(STAMP)
	$(VENV)/bin/mgg train --dataset cora

test: $(STAMP)
	$(VENV)/bin/python -m pytest tests -q

# Style: ruff (pyproject.toml) for Python, clang-format (.clang-format) for csrc/. CI runs `make lint`.
CSRC = $(shell find csrc -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')
LINTERS = $(VENV)/.mgg-linters
$(LINTERS): $(VENV)/bin/python pyproject.toml
	$(PIP) install -q "ruff==0.17.6" "clang-format==23.1.5"
	touch $(LINTERS)

lint: $(LINTERS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/clang-format --dry-run --Werror $(CSRC)

format: $(LINTERS)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/clang-format -i $(CSRC)

# Wheels for the GPU machine (Python 3.12, no network) of what it may lack; carry wheels/ along
# with the device tool (carry: ["wheels"]) and bench/gpu_verify.sh installs the missing ones from it.
gpu-wheels: $(VENV)/bin/python
	$(PIP) download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d wheels \
	  scipy tqdm rich hypothesis matplotlib
	rm -f wheels/numpy-*  # torch's machine has numpy; this keeps wheels/ under the 64 MiB carry limit

clean:
	rm -rf build $(VENV) mgg/_C*.so *.egg-info
