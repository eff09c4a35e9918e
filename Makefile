# Everything runs from a virtual environment in .venv; `make run` and `make test` set it up.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE := examples/deepseek-moe-8rank/msrun_log

.PHONY: setup setup-real run lint test test-real sanitize system-deps clean kubernetes-rules

setup: $(VENV)/.installed

# Reinstalling (pip install -e) also rebuilds the native kernels in place when their sources change.
# pip --no-compile here and below: pip would byte-compile every module of every package (transformers alone: 5,347
# files, 31 of its 65 s here); Python compiles a module the first time it is imported, and keeps it.
$(VENV)/.installed: pyproject.toml setup.py $(wildcard exporter/native/*.c)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[test]'
	touch $@

# The real trainers tests/real/ runs (torch's CPU build, transformers, accelerate), into the same venv, once:
# again only when their list changes. The list is also the constraints, so nothing pulls another torch.
REAL_REQUIREMENTS := tests/real/requirements.txt
# DeepSpeed (in that list) builds none of its C++ ops at install: the one its CPU engine needs is built at first use.
export DS_BUILD_OPS = 0
setup-real: $(VENV)/.installed-real

$(VENV)/.installed-real: $(VENV)/.installed $(REAL_REQUIREMENTS)
	@start=$$(date +%s); \
	$(BIN)/pip install --quiet --no-compile -c $(REAL_REQUIREMENTS) -r $(REAL_REQUIREMENTS) && \
	$(BIN)/python -c 'import torch; assert torch.__version__.endswith("+cpu"), torch.__version__' && \
	echo "setup-real: the real trainers installed in $$(( $$(date +%s) - start )) s"
	touch $@

# The MindSpore trainers (msrun, MindFormers' callbacks) into their own venv, .venv-ms, once: MindSpore 2.10.0 needs
# NumPy 1.x, the torch venv holds NumPy 2 (tests/real/requirements-mindspore.txt says why). MindFormers last, with
# --no-deps: its declared pins (mindspore~=2.11.0, ...) are not published.
VENV_MS ?= .venv-ms
MS_REQUIREMENTS := tests/real/requirements-mindspore.txt
setup-real: $(VENV_MS)/.installed

$(VENV_MS)/.installed: $(MS_REQUIREMENTS)
	@start=$$(date +%s); \
	$(PYTHON) -m venv $(VENV_MS) && \
	$(VENV_MS)/bin/pip install --quiet --no-compile -c $(MS_REQUIREMENTS) -r $(MS_REQUIREMENTS) && \
	$(VENV_MS)/bin/pip install --quiet --no-compile --no-deps mindformers==2.1.0 && \
	(cd $(VENV_MS) && bin/python -c 'from mindformers.core.callback import MFLossMonitor' 2>/dev/null) && \
	echo "setup-real: MindSpore and MindFormers installed in $$(( $$(date +%s) - start )) s"
	touch $@

run: setup
	$(BIN)/trainlog-exporter --log-dir $(EXAMPLE) --demo

system-deps:
	./scripts/install-system-deps.sh

# ruff and mypy, as configured in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

# system-deps first: it brings the C compiler that setup builds the native kernels with; lint and
# the sanitized kernels before the tests.
# The real runs (tests/real/, marker `real`) are part of it: the PyTorch runs (each job under nice -n 19).
# At once where nothing is shared: .venv-ms, and .venv then its real trainers beside lint and the sanitized kernels
# (which only read .venv; pip waits on the disk and the network, they on the CPU); the tests on every core
# (pytest-xdist), a test file's tests in one worker (their module fixtures made once), the longest files first
# (tests/conftest.py); the 30 slowest tests listed at the end, to keep the suite within CI's time.
test: system-deps
	$(MAKE) -j4 -O setup-real lint sanitize
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=30

# The whole real matrix: every run of tests/real/, the long ones too (TRAINLOG_REAL_MATRIX=1).
test-real: setup setup-real
	TRAINLOG_REAL_MATRIX=1 $(BIN)/python -m pytest -q -m real tests/real

# The native kernels built with AddressSanitizer and UndefinedBehaviorSanitizer into a copy of
# the package, and the kernels' tests against their twins (tests/test_native.py) run on that
# build: any report of either sanitizer aborts the run and fails it. PYTHONMALLOC=malloc:
# Python's own allocator would hide the kernels' small blocks from ASan. The tests run from
# inside the copy, so the copy is what they import (checked first); --capture=sys leaves the
# sanitizers' reports on stderr.
SANITIZED := build/sanitize
SANITIZE_CFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -ffp-contract=off
SANITIZE_ENV = LD_PRELOAD=$$(gcc -print-file-name=libasan.so) PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
PY_CONFIG = $(BIN)/python -c 'import sys, sysconfig; print(sysconfig.get_config_var(sys.argv[1]) or sysconfig.get_paths()[sys.argv[1]])'
sanitize: system-deps setup
	rm -rf $(SANITIZED) && mkdir -p $(SANITIZED)/tests $(SANITIZED)/benchmarks
	cp -r pyproject.toml exporter $(SANITIZED)/
	cp tests/__init__.py tests/conftest.py tests/test_native.py $(SANITIZED)/tests/
	cp benchmarks/__init__.py benchmarks/generate.py $(SANITIZED)/benchmarks/
	mkdir -p $(SANITIZED)/tests/fixtures/real/healthy $(SANITIZED)/tests/fixtures/formats && cp tests/fixtures/real/torchrun_ddp_*.log \
	  tests/fixtures/real/hf_trainer_*.log tests/fixtures/real/megatron_*.log tests/fixtures/real/nemo2.log \
	  tests/fixtures/real/paddlenlp.log tests/fixtures/real/nanogpt.log tests/fixtures/real/mmengine_*.log \
	  tests/fixtures/real/mmcv_*.log tests/fixtures/real/llamafactory_trainer_log.log tests/fixtures/real/msrun_nan_worker_1.log \
	  tests/fixtures/real/mindformers_legacy.log tests/fixtures/real/mindvision_lossmonitor.log \
	  tests/fixtures/real/fairseq_plain.log tests/fixtures/real/lightning_bar_nan.log $(SANITIZED)/tests/fixtures/real/
	cp tests/fixtures/real/healthy/deepspeed_dschat_sft_opt1.3b.log tests/fixtures/real/healthy/torchtitan_qwen3_14b_run54.log \
	  tests/fixtures/real/healthy/llamafactory_finetuneLLM_running_log.log \
	  $(SANITIZED)/tests/fixtures/real/healthy/
	cp tests/fixtures/formats/megatron.log $(SANITIZED)/tests/fixtures/formats/
	for kernel in scan step_fields detectors; do \
	  gcc $(SANITIZE_CFLAGS) -shared -fPIC -I"$$($(PY_CONFIG) include)" exporter/native/$$kernel.c \
	      -o $(SANITIZED)/exporter/native/_$$kernel$$($(PY_CONFIG) EXT_SUFFIX) || exit 1; \
	done
	cd $(SANITIZED) && $(SANITIZE_ENV) $(abspath $(BIN))/python -c \
	  'import os, exporter.native as n; assert all(k.__file__.startswith(os.getcwd()) for k in (n._scan, n._step_fields, n._detectors))'
	cd $(SANITIZED) && $(SANITIZE_ENV) $(abspath $(BIN))/python -m pytest -q -p no:cacheprovider --capture=sys tests/test_native.py

# deploy/kubernetes/base/rules from deploy/prometheus/rules (kustomize cannot read them there).
kubernetes-rules: setup
	$(BIN)/python scripts/sync_kubernetes_rules.py

clean:
	rm -rf $(VENV) $(VENV_MS) build dist *.egg-info exporter/native/_*.so
