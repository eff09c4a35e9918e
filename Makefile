# Everything runs from a virtual environment in .venv; `make run` and `make test` set it up.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE := examples/deepseek-moe-8rank/msrun_log

.PHONY: setup run lint test system-deps clean kubernetes-rules

setup: $(VENV)/.installed

# Reinstalling (pip install -e) also rebuilds the C speedups in place when their sources change.
$(VENV)/.installed: pyproject.toml $(wildcard exporter/*/_speedups.c)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: setup
	$(BIN)/trainlog-exporter --log-dir $(EXAMPLE) --demo

system-deps:
	./scripts/install-system-deps.sh

# ruff and mypy, as configured in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# system-deps first: it brings the C compiler that setup builds the speedups with; lint before the tests.
test: system-deps setup lint
	$(BIN)/python -m pytest -q

# deploy/kubernetes/base/rules from deploy/prometheus/rules (kustomize cannot read them there).
kubernetes-rules: setup
	$(BIN)/python scripts/sync_kubernetes_rules.py

clean:
	rm -rf $(VENV) build dist *.egg-info exporter/*/_speedups*.so
