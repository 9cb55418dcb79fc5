# The two commands of the README. Each sets up .venv (idempotent) and then runs.
PY      ?= python3
VENV    ?= .venv
TORCH   ?= torch==2.14.1
PIP      = $(VENV)/bin/pip
STAMP    = $(VENV)/.mgg-installed

.PHONY: train test bench-smoke clean

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

clean:
	rm -rf build $(VENV) mgg/_C*.so *.egg-info
