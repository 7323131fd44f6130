# oxray: `make demo` builds everything and runs the demo; `make test` runs what CI runs.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?= --timeout 300

.PHONY: all venv develop release demo test lint rust-test py-test bench clean

all: develop

$(VENV)/.deps: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "maturin>=1.7,<2" "cloudpickle>=2.1" "numpy>=1.23" "pytest>=7" "pyarrow>=14" "psutil>=5" "pytest-timeout>=2"
	touch $@

venv: $(VENV)/.deps

# Debug build of the native module into the venv (shares compiled deps with `cargo test`).
develop: venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --quiet

# Optimized build, for the demo and benchmarks.
release: venv
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet

demo: release
	$(PY) examples/demo.py

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

rust-test:
	cargo test --workspace

py-test: develop
	$(PY) -m pytest tests/python $(PYTEST_ARGS) -q

test: lint rust-test py-test

bench: release
	$(PIP) install --quiet "ray==2.60.*" || echo "could not install ray: benchmarking oxray alone"
	$(PY) bench/core_bench.py

clean:
	cargo clean
	rm -rf $(VENV)
