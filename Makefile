# The README's two commands: `make demo` and `make test`. Both set up
# everything they need (venv, torch 2.13.0, the build) on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# Two cores here: more parallel compiles only thrash.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: demo test smoke build venv clean check-asan check-tsan

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

# The documentation site (docs/conf.py): static HTML in docs/_build/html,
# every warning an error. Its API page is generated from the installed
# package, hence `build` first. tests/docs/test_site.py runs the same build
# and checks the result in headless Chromium.
SPHINXOPTS ?= -q
.PHONY: docs
docs: build
	$(PY) -m sphinx -b html -W --keep-going $(SPHINXOPTS) -d docs/_build/doctrees docs docs/_build/html

# Always re-run: CMake's cached build directory (build/) makes it incremental.
# TORCH_DEVICE_BACKEND_AUTOLOAD=0: a half-built backend must not break the
# `import torch` of the build itself.
build: venv
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) install --quiet --no-build-isolation --no-deps .

# Sanitizer runs (docs/sanitizers.md): the runtime and liboccl, torch-free,
# built with AddressSanitizer + UndefinedBehaviorSanitizer or with
# ThreadSanitizer into build-asan/ or build-tsan/, and their test suites run
# against those builds (tests/_torch_free.py loads them, tools/sanitizers/run.py
# sets the environment and fails on any report).
SAN_TESTS ?= tests/runtime tests/distributed/test_occl_lib.py tests/distributed/test_occl_fuzz.py \
             tests/distributed/test_occl_wire.py
CMAKE := $(VENV)/bin/cmake

define sanitizer_build
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(CMAKE) -S . -B build-$(1) -G Ninja \
	  -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DOPENREG_TORCH_FREE_ONLY=ON \
	  -DOPENREG_SANITIZE="$(2)" > /dev/null
	$(CMAKE) --build build-$(1) > /dev/null
	$(CMAKE) --install build-$(1) --prefix build-$(1)/install > /dev/null
endef

check-asan: venv
	$(call sanitizer_build,asan,address;undefined)
	$(PY) tools/sanitizers/run.py asan build-asan -- \
	  $(PY) -m pytest $(SAN_TESTS) -s -p no:cacheprovider $(PYTEST_ARGS)

check-tsan: venv
	$(call sanitizer_build,tsan,thread)
	$(PY) tools/sanitizers/run.py tsan build-tsan -- \
	  $(PY) -m pytest $(SAN_TESTS) -s -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf build build-asan build-tsan $(VENV)
