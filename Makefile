# The README's two commands: `make demo` and `make test`. Both set up
# everything they need (venv, torch 2.13.0, the build) on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# Two cores here: more parallel compiles only thrash.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: demo test smoke build venv clean

demo: build
	$(PY) examples/demo.py

test: build
	$(PY) -m pytest tests $(PYTEST_ARGS)

smoke: build
	$(PY) -m pytest tests -m smoke $(PYTEST_ARGS)

venv: $(VENV)/.deps-stamp

$(VENV)/.deps-stamp: requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

# Always re-run: CMake's cached build directory (build/) makes it incremental.
# TORCH_DEVICE_BACKEND_AUTOLOAD=0: a half-built backend must not break the
# `import torch` of the build itself.
build: venv
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) install --quiet --no-build-isolation --no-deps .

clean:
	rm -rf build $(VENV)
