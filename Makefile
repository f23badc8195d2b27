# Quick start (see README): `make run` sets up and runs the main job, `make test` sets up
# and runs every test tier. Both are idempotent; set-up is skipped when nothing changed.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
# make run installs the runtime dependencies only; make test and make setup add the test
# extra (pytest, hypothesis, duckdb, virtme-ng, ...). Measured in a fresh clone on the 2-core
# CI machine (2026-11-28): venv 5 s, pip's upgrade 3 s, `pip install -e .` 31 s, the test
# extra 15 s more: make run's set-up without it is about 40 s instead of 55.
RUN_STAMP = $(VENV)/.installed-run
STAMP     = $(VENV)/.installed
# pytest-xdist workers for `make test`: modules dealt out whole (--dist loadscope), in
# tests/conftest.py's order, the NUMA-VM modules first (--no-loadscope-reorder: xdist
# would sort modules by test count). Most tests keep about one core busy (the runtime is
# GIL-bound; the rest waits on subprocesses or Spark's JVM) and an emulated guest 0.75 to
# 1.25 (871 CPU-s in 722 s for the VM tier alone), so on the 2-core CI machine one worker
# runs the guests while the other runs the unit tiers. Measured there
# (measurements/2026-11-27-test-time/): the unit and Spark tiers used 1.08 cores on one
# worker and 1.38 on two; three workers beside the guests were slower than two (make test
# 1653 s against 1446-1490 s in a fresh clone). `make test TEST_JOBS=1` runs one process.
TEST_JOBS ?= 2
XDIST   = $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder)

.PHONY: setup system-packages run test test-fast clean

setup: $(STAMP)

# System packages: libnuma (node-local memory), Java 17 (Spark), QEMU, a Debian kernel and a
# static busybox (NUMA-VM test tier), python3-venv where Debian's python3 lacks it. Installed
# with apt-get when missing and we are root (scripts/install-system-packages.sh says why).
system-packages:
	@scripts/install-system-packages.sh $(PYTHON)

$(PY): | system-packages
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml $(RUN_STAMP)
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

run: $(RUN_STAMP)
	$(VENV)/bin/bobox run

test: setup
	BOBOX_REQUIRE_VM=$${BOBOX_REQUIRE_VM:-1} $(PY) -m pytest -q -ra $(XDIST) tests

test-fast: setup
	$(PY) -m pytest -q -ra $(XDIST) -m "not vm and not slow" tests

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
