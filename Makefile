# Quick start (see README): `make run` sets up and runs the main job, `make test` sets up
# and runs every test tier. Both are idempotent; set-up is skipped when nothing changed.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: setup system-packages run test test-fast clean

setup: $(STAMP)

# System packages: libnuma (node-local memory), Java 17 (Spark), QEMU, a Debian kernel and a
# static busybox (NUMA-VM test tier), python3-venv where Debian's python3 lacks it. Installed
# with apt-get when missing and we are root (scripts/install-system-packages.sh says why).
system-packages:
	@scripts/install-system-packages.sh $(PYTHON)

$(STAMP): pyproject.toml | system-packages
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

run: setup
	$(VENV)/bin/bobox run

test: setup
	BOBOX_REQUIRE_VM=$${BOBOX_REQUIRE_VM:-1} $(PY) -m pytest -q -ra tests

test-fast: setup
	$(PY) -m pytest -q -ra -m "not vm and not slow" tests

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
