# The two commands: `make demo` and `make test`. Both bootstrap .venv (and system packages) on first use.
# `make check` is the one-minute loop while working: ruff, mypy and the unit tier (test/conftest.py says
# what each tier is); `make test` runs every tier, as CI does.
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

.PHONY: demo test check docs bench bootstrap system-deps clean consumers consumer-system-deps test-consumers web-test-deps node-system-deps
demo: $(STAMP)
	$(BIN)/piper-demo --out demo_output

test: $(STAMP) web-test-deps
	$(BIN)/python -m pytest -q test

# The unit tier: in-process tests, no child process and no DDS (the tiers' guard in test/conftest.py),
# less the in-process tests that take seconds (`slow`: real-time loops, deadlines, fuzzing); `make test` runs all.
UNIT_TIER := not ros and not integration and not slow
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -m "$(UNIT_TIER)" test

# The manual: docs/ built by MkDocs (Material) with --strict link checking, in its own venv (.venv-docs).
DOCS_VENV := .venv-docs
$(DOCS_VENV)/.bootstrapped: docs/requirements.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install -q --upgrade pip
	$(call pip_install,$(DOCS_VENV)/bin/python,-r docs/requirements.txt)
	touch $@

# not --quiet: mkdocs does not count the warnings it was told not to print, and --strict then passes
docs: $(STAMP) $(DOCS_VENV)/.bootstrapped
	$(BIN)/python docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

bootstrap: $(STAMP) web-test-deps

# The headset page's CI test (test/test_quest_web.py) injects Meta's WebXR emulator (npm `iwer`, MIT) into
# headless Chromium: pinned in test/web/package-lock.json, installed by `npm ci` into the git-ignored
# test/web/node_modules (test-only; the page itself ships none of it).
WEB_DEPS := test/web/node_modules/.installed
web-test-deps: $(WEB_DEPS)

node-system-deps:
	@command -v npm >/dev/null 2>&1 || { echo "installing system packages: nodejs npm"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; }

$(WEB_DEPS): test/web/package.json test/web/package-lock.json | node-system-deps
	cd test/web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

# $(call apt_install,PACKAGES): install the Debian packages not yet installed.
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
endef

# $(call pip_install,PYTHON,ARGS): pip install from the registry, robust to a dropped connection (a consumer venv
# downloads several GB: torch and its CUDA wheels, PyPI has no CPU build): pip resumes a cut download where it
# stopped, and a download that still fails retries the whole install (pip keeps no HTTP cache of these here).
define pip_install
	ok=0; for attempt in 1 2 3; do \
	  $(1) -m pip install -q --resume-retries 20 $(2) && { ok=1; break; }; \
	  echo "pip install $(2): attempt $$attempt failed, retrying"; sleep 15; \
	done; test $$ok = 1
endef

system-deps:
	$(call apt_install,$(APT_PACKAGES))

$(STAMP): requirements.txt setup.py setup.cfg | system-deps
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(call pip_install,$(BIN)/python,-r requirements.txt)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Consumer virtualenvs: real trainers (LeRobot 0.3.3 reads v2.x, 0.4.4 and 0.6.1 read v3.0) with torch, outside .venv
# so the project's own environment stays free of torch. Built on demand (minutes, GBs); test/test_consumers.py drives
# them.
CONSUMER_VENVS := .venv-lerobot03 .venv-lerobot04 .venv-lerobot06
# LeRobot 0.6 requires Python >= 3.12. Debian bookworm ships only 3.11 (trixie's python3.13 pre-depends on
# libc6 >= 2.38, bookworm has 2.36), so the interpreter is the machine image's pyenv CPython 3.12 (beside the 3.11 the
# project runs on); PYTHON312=/path/to/python3.12 overrides. test/consumers/lerobot06-facts.md says what was tried.
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHON312 ?= $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3.12)))
CONSUMER_PYTHON = $(PYTHON)
.venv-lerobot06/.bootstrapped: CONSUMER_PYTHON = $(PYTHON312)
# torchcodec (LeRobot's default video decoder) loads the system FFmpeg 4-7 shared libraries.
CONSUMER_APT_PACKAGES := libavutil57 libavcodec59 libavformat59 libavdevice59 libavfilter8 libswscale6 libswresample4
consumers: $(addsuffix /.bootstrapped,$(CONSUMER_VENVS))

consumer-system-deps:
	$(call apt_install,$(CONSUMER_APT_PACKAGES))

.venv-lerobot%/.bootstrapped: test/consumers/requirements-lerobot%.txt | consumer-system-deps
	@test -n "$(CONSUMER_PYTHON)" && "$(CONSUMER_PYTHON)" --version >/dev/null || \
	  { echo "$(@D): no usable interpreter '$(CONSUMER_PYTHON)' (.venv-lerobot06 takes PYTHON312, by default the newest $(PYENV_ROOT)/versions/3.12.*/bin/python3.12; set PYTHON312=/path/to/python3.12)"; exit 1; }
	test -x $(@D)/bin/python || $(CONSUMER_PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(call pip_install,$(@D)/bin/python,-r $<)
	touch $@

# The consumer tests alone (the venvs are built first); `make test` runs them too, skipping none.
test-consumers: $(STAMP) consumers
	$(BIN)/python -m pytest -q test/test_consumers.py

clean:
	rm -rf $(VENV) $(CONSUMER_VENVS) $(DOCS_VENV) demo_output build *.egg-info test/web/node_modules
