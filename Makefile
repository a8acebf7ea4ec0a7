# The two commands: `make demo` and `make test`. Both bootstrap .venv (and system packages) on first use.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.bootstrapped
APT_PACKAGES := libopenjp2-7 chromium
# DDS stays on loopback; each test allocates its own ROS_DOMAIN_ID (piper_recorder/rosenv.py).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export RMW_IMPLEMENTATION := rmw_fastrtps_cpp
export PYTHONUNBUFFERED := 1

.PHONY: demo test bench bootstrap system-deps clean
demo: $(STAMP)
	$(BIN)/piper-demo --out demo_output

test: $(STAMP)
	$(BIN)/python -m pytest -q test

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

bootstrap: $(STAMP)

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(STAMP): requirements.txt setup.py setup.cfg | system-deps
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

clean:
	rm -rf $(VENV) demo_output build *.egg-info
