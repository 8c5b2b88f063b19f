# kftrain: two commands on a fresh machine: `make run` and `make test` (each installs what is missing).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Re-install whenever the pins change.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt constraints-mlflow-server.txt 2>/dev/null | sha256sum | cut -c1-12)

PIPELINE ?= pytorch-digits
STORAGE ?= local
PARAMS ?=
RUN_ROOT ?= runs
PYTEST_ARGS ?=
# The tests run in parallel, one worker per core; a test group (@pytest.mark.xdist_group) stays on one worker.
PYTEST_WORKERS ?= auto
PARALLEL := -n $(PYTEST_WORKERS) --dist loadgroup
# The 30 slowest tests (setup, call and teardown) listed at the end of every run, so that CI's log shows them.
DURATIONS := --durations=30
# What the tests need: the tools, and every extra but [gcs] (`pip install kftrain` alone is the authoring install).
EXTRAS := dev,data,samples,torch,tf,onnx,s3,examples,crd,mlflow,llm

# What `make run` installs: the extras the chosen pipeline's steps need (their images' extras, and [samples] for the
# bundled digits), not the Horovod build, TensorFlow, Chromium or the MLflow server's venv that the tests need; a
# pipeline not listed here (or STORAGE=s3: moto's server is a dev tool) gets the whole install.
RUN_EXTRAS_pytorch-digits := data,samples,torch,onnx,s3,mlflow
RUN_EXTRAS_llm-finetune := data,llm,s3,mlflow
RUN_EXTRAS := $(if $(filter local,$(STORAGE)),$(RUN_EXTRAS_$(PIPELINE)))
RUN_STAMP := $(if $(RUN_EXTRAS),$(VENV)/.run-installed-$(shell echo '$(RUN_EXTRAS)' | cat - pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-12),$(STAMP))

.PHONY: help install run test test-all test-node cluster-up cluster-down node-tools controlplane kserve-crd lint format compile check-compiled bench images images-clean clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv, install the pinned dependencies, OpenMPI and chromium (Debian), Horovod (built once, cached), the tests' MLflow server

$(STAMP): pyproject.toml constraints.txt constraints-mlflow-server.txt scripts/lib.sh scripts/install_mpi.sh scripts/install_chromium.sh scripts/build_horovod.sh scripts/install_mlflow_server.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	./scripts/install_mpi.sh
	./scripts/install_chromium.sh
	$(PIP) install --quiet --disable-pip-version-check pip==24.3.1
	$(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e '.[$(EXTRAS)]'
	@# PyPI's torch for x86_64 Linux is the CUDA build, which brings triton (a GPU kernel compiler, unused on a CPU).
	@# With TensorFlow loaded first in a process, importing triton (torch._dynamo does, e.g. torch.onnx.export)
	@# crashes it with a segmentation fault; this venv holds both frameworks, each image only one.
	$(PIP) uninstall --quiet --disable-pip-version-check -y triton
	VENV=$(VENV) ./scripts/build_horovod.sh
	VENV=$(VENV) ./scripts/install_mlflow_server.sh
	@rm -f $(VENV)/.installed-* && touch $@

# The run's extras alone, into the venv (or nothing, when the whole install is there already).
$(VENV)/.run-installed-%: pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ -e $(STAMP) ]; then touch $@; else \
		$(PIP) install --quiet --disable-pip-version-check pip==24.3.1 \
		&& $(PIP) install --quiet --disable-pip-version-check -c constraints.txt -e '.[$(RUN_EXTRAS)]' \
		&& $(PIP) uninstall --quiet --disable-pip-version-check -y triton \
		&& rm -f $(VENV)/.run-installed-* && touch $@; fi

run: $(RUN_STAMP) ## run the full PyTorch pipeline locally, installing only what it needs (PIPELINE=..., PARAMS='--param epochs=5', STORAGE=s3)
	$(VENV)/bin/kftrain run $(PIPELINE) --pipeline-root $(RUN_ROOT) --storage $(STORAGE) $(PARAMS)

test: install lint check-compiled kserve-crd ## before a change (minutes): lint, compiled YAML, the fast tests, one real pipeline per job kind
	$(PY) -m pytest $(PARALLEL) -m "not slow or e2e" $(DURATIONS) $(PYTEST_ARGS)

test-all: install lint check-compiled controlplane kserve-crd ## everything, the slow tiers too (what CI runs), but the node tier
	$(PY) -m pytest $(PARALLEL) -m "not node" $(DURATIONS) $(PYTEST_ARGS)

# The node tier needs root, the node's tools, the control plane built and the launch image (and the PyTorch image for
# its 2-replica DDP job, else that test skips; ~5 min to move into the node the first time): not in test-all yet.
test-node: install controlplane node-tools ## real pods on a real node (kubelet, containerd; root; ~4 min warm after make images)
	$(PY) -m pytest -p no:xdist -m node tests/node $(DURATIONS) $(PYTEST_ARGS)

node-tools: ## install the node's runtime from Debian (containerd, runc, CNI plugins, catatonit, mmdebstrap)
	./scripts/install_node_tools.sh

cluster-up: controlplane node-tools ## start the test cluster with a real node in the background; prints KUBECONFIG
	$(PY) -m testbed.controlplane --node --image "$$($(PY) -c 'from kftrain import images; print(images.image(images.LAUNCH))')" up

cluster-down: ## stop the cluster cluster-up started; the host is put back as it was found
	$(PY) -m testbed.controlplane down

controlplane: ## build etcd, kube-apiserver, kube-controller-manager and the Kubeflow operators from Go modules (cached; ~11 min cold, instant warm)
	@if command -v go >/dev/null 2>&1; then bash testbed/controlplane/build.sh && bash testbed/controlplane/operators/build.sh; \
	else echo "controlplane: no Go here; the real-control-plane tests will skip (install Go, then make controlplane)"; fi

kserve-crd: install ## fetch KServe v0.20.0's Go module (checksum-verified) into Go's cache: its InferenceService CRD, for the tests
	@if command -v go >/dev/null 2>&1; then $(PY) -m testbed.kserve_crd >/dev/null; \
	else echo "kserve-crd: no Go here; the tests against KServe's CRD will skip (install Go, then make kserve-crd)"; fi

lint: install ## ruff (lint + format check) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy kftrain

format: install ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

compile: install ## regenerate every committed pipeline.yaml / component.yaml (refused when CI is set)
	$(VENV)/bin/kftrain compile

check-compiled: install ## fail, naming the file, when a committed compiled YAML is stale
	$(VENV)/bin/kftrain compile --check

bench: install ## run the benchmarks and write bench/results.md
	$(PY) bench/run.py

images: ## build every image kftrain.images names (buildah, or docker where an engine runs; cached by inputs: warm in seconds)
	PY=$(PY) ./scripts/build_images.sh $(IMAGES)

images-clean: ## remove the image storage and its settings (~/.cache/kftrain/images, or $$KFTRAIN_IMAGE_CACHE)
	@. scripts/lib.sh && image_env && podman system reset --force >/dev/null \
		&& rm -rf "$$KFTRAIN_IMAGE_CACHE" "$$KFTRAIN_IMAGE_RUN"

clean: ## remove local run outputs and caches (keeps .venv)
	rm -rf $(RUN_ROOT) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
