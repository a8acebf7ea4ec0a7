# The two commands: `make demo` and `make test`. Both bootstrap the venv (and system packages) on first use.
# `make check` is the one-minute loop while working: ruff (format and lint), mypy and the unit tier (test/conftest.py says
# what each tier is); `make test` runs every tier, as CI does.
#
# ROS_DISTRO picks the ROS 2 wheels from PyPI and the Python they run on (requirements/ros-<distro>.txt):
#   jazzy  (default, the LTS robots run: Python 3.12, Fast DDS 2.14)  -> .venv
#   kilted (Python 3.11, Fast DDS 3)                                  -> .venv-kilted
# A shell that sourced a ROS setup file has ROS_DISTRO set already; a distro without PyPI wheels (humble) is
# refused by name. `make test-core` runs the ROS-free unit tier on another Python (CORE_PY, default 3.10: Humble's).
SHELL := /bin/bash
ROS_DISTRO ?= jazzy
ROS_DISTROS := jazzy kilted
DISTRO_PY_jazzy := 3.12
DISTRO_PY_kilted := 3.11
PYENV_ROOT ?= $(HOME)/.pyenv
# $(call find_python,3.12): the newest pyenv CPython 3.12.x of this machine, else `python3.12` on PATH
find_python = $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python$(1)))),python$(1))
PYTHON ?= $(call find_python,$(DISTRO_PY_$(ROS_DISTRO)))
VENV := $(if $(filter jazzy,$(ROS_DISTRO)),.venv,.venv-$(ROS_DISTRO))
BIN := $(VENV)/bin
STAMP := $(VENV)/.bootstrapped
ROS_REQUIREMENTS := requirements/ros-$(ROS_DISTRO).txt
APT_PACKAGES := libopenjp2-7 chromium
# DDS stays on loopback; each test allocates its own ROS_DOMAIN_ID (piper_recorder/graph/rosenv.py).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export RMW_IMPLEMENTATION := rmw_fastrtps_cpp
export PYTHONUNBUFFERED := 1

ifeq ($(filter $(ROS_DISTRO),$(ROS_DISTROS)),)
$(error ROS_DISTRO=$(ROS_DISTRO): PyPI has ROS 2 wheels for $(ROS_DISTROS) only (a robot on Humble installs ROS from apt: docs/install.md))
endif

.PHONY: demo test check docs bench bootstrap system-deps clean consumers consumer-system-deps test-consumers web-test-deps node-system-deps test-distro test-core other-venvs
demo: $(STAMP)
	$(BIN)/piper-demo --out demo_output

# Every tier: the unit tier on a worker per core; the in-process tests that hold deadlines (`slow`) two at a time,
# each test file on one worker; then the DDS graphs one at a time, since their checks hold real-time graphs to
# their rates, and beside them, at idle priority (SCHED_IDLE, idle I/O), the tests that start processes but hold
# no tight deadline (`integration`: the consumers and trainers, converters, console scripts, a browser). Those
# take only the CPU the graphs leave: the DDS tier alone keeps the machine about 28 % busy. Their output
# follows the DDS tier's.
test: $(STAMP) web-test-deps
	$(BIN)/python -m pytest -q -n $(UNIT_WORKERS) -m "$(UNIT_TIER)" test
	$(BIN)/python -m pytest -q -n $(TIMED_WORKERS) --dist loadfile -m "$(TIMED_TIER)" test
	@beside=$$(mktemp); \
	$(IDLE) $(BIN)/python -m pytest -q -n $(BESIDE_WORKERS) --dist loadfile -m "$(BESIDE_TIER)" test >$$beside 2>&1 & \
	pid=$$!; trap 'kill $$pid 2>/dev/null; rm -f $$beside; exit 130' INT TERM; \
	echo "[test] beside the DDS tier, at idle priority: $(BESIDE_TIER) (their output follows)"; \
	$(BIN)/python -m pytest -q -m "$(ROS_TIER)" test; ros=$$?; \
	wait $$pid; rc=$$?; trap - INT TERM; echo "[test] $(BESIDE_TIER):"; cat $$beside; rm -f $$beside; \
	test $$ros -eq 0 && test $$rc -eq 0

# The unit tier: in-process tests, no child process and no DDS (the tiers' guard in test/conftest.py),
# less the in-process tests that take seconds (`slow`: real-time loops, deadlines, fuzzing); `make test` runs all.
UNIT_TIER := not ros and not integration and not slow
# Its in-process tests share nothing but the CPU: one pytest-xdist worker per core halves its wall time.
UNIT_WORKERS ?= auto
# The tests without DDS that hold deadlines against wall-clock time: each holds them beside one other such test.
TIMED_TIER := slow and not ros
TIMED_WORKERS ?= 2
# The tests that start processes, without DDS and without a tight deadline: they may be starved for seconds.
BESIDE_TIER := integration and not slow and not ros
BESIDE_WORKERS ?= 2
# The DDS tests, one at a time.
ROS_TIER := ros
# How the tests beside the DDS tier run: scheduled only when a core is idle, their disk I/O too.
IDLE := $(shell command -v chrt >/dev/null && echo chrt --idle 0 || echo nice -n 19) $(shell command -v ionice >/dev/null && echo ionice -c 3)
check: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -n $(UNIT_WORKERS) -m "$(UNIT_TIER)" test

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

# The headset page's CI test (test/system/test_quest_web.py) injects Meta's WebXR emulator (npm `iwer`, MIT) into
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

$(STAMP): $(ROS_REQUIREMENTS) requirements/dev.txt setup.py setup.cfg package.xml | system-deps
	@$(PYTHON) --version >/dev/null 2>&1 || { echo "$(VENV): no Python $(DISTRO_PY_$(ROS_DISTRO)) for ROS_DISTRO=$(ROS_DISTRO) ('$(PYTHON)'; set PYTHON=/path/to/python)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	$(call pip_install,$(BIN)/python,-r $(ROS_REQUIREMENTS) -r requirements/dev.txt -e .)
	touch $(STAMP)

# Consumer virtualenvs: real trainers (LeRobot 0.3.3 reads v2.x, 0.4.4 and 0.6.1 read v3.0) with torch, outside .venv
# so the project's own environment stays free of torch. Built on demand (minutes, GBs); test/lerobot/test_consumers.py drives
# them.
CONSUMER_VENVS := .venv-lerobot03 .venv-lerobot04 .venv-lerobot06
# LeRobot 0.6 requires Python >= 3.12; 0.3.3 and 0.4.4 run on 3.11 (the torch wheel this machine keeps is cp311).
# Debian bookworm ships only 3.11, so 3.12 is the machine image's pyenv CPython (find_python); PYTHON311=... and
# PYTHON312=/path/to/python3.12 override. test/consumers/lerobot06-facts.md says what was tried.
PYTHON312 ?= $(call find_python,3.12)
PYTHON311 ?= $(call find_python,3.11)
CONSUMER_PYTHON = $(PYTHON311)
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
	$(BIN)/python -m pytest -q test/lerobot/test_consumers.py

# A second distro's leg, as CI runs it (ROS_DISTRO=kilted make test-distro): the unit tier, DDS staying on loopback,
# image delivery to every subscriber, service replies to fresh clients (the profile's service settings), and the demo.
DISTRO_TESTS := test/system/test_dds_loopback.py test/system/test_image_delivery.py test/system/test_service_call_latency.py
test-distro: $(STAMP)
	$(BIN)/python -m pytest -q -n $(UNIT_WORKERS) -m "$(UNIT_TIER)" test
	$(BIN)/python -m pytest -q $(DISTRO_TESTS)
	$(BIN)/piper-demo --out demo_output/$(ROS_DISTRO)

# The ROS-free core on another Python (Humble's 3.10 by default): its own venv without any ROS wheel; mypy of the
# core as that Python's standard library is (a newer API fails here), then the unit tier (tests that need rclpy
# skip). The modules that import ROS (the nodes, the sim session, piper-launch, rosenv's ament lookup) are not
# checked there: mypy follows them silently where the core imports them.
CORE_PY ?= 3.10
CORE_VENV := .venv-py$(subst .,,$(CORE_PY))
CORE_MYPY_EXCLUDE := ^piper_recorder/(nodes/|graph/sim_session\.py|cli/launch\.py|graph/rosenv\.py)
$(CORE_VENV)/.bootstrapped: requirements/dev.txt setup.py setup.cfg package.xml
	test -x $(CORE_VENV)/bin/python || $(call find_python,$(CORE_PY)) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(call pip_install,$(CORE_VENV)/bin/python,-r requirements/dev.txt -e .)
	touch $@

test-core: $(CORE_VENV)/.bootstrapped | system-deps
	$(CORE_VENV)/bin/python -m mypy --python-version $(CORE_PY) --follow-imports=silent --exclude '$(CORE_MYPY_EXCLUDE)' \
	  piper_recorder rgbd_writer
	$(CORE_VENV)/bin/python -m pytest -q -n $(UNIT_WORKERS) -m "$(UNIT_TIER)" test

# CI builds the other legs' venvs while the consumer venvs download (.ci/run): one after another here, since each
# `pip install -e .` writes into the source tree.
other-venvs:
	$(MAKE) ROS_DISTRO=kilted .venv-kilted/.bootstrapped
	$(MAKE) $(CORE_VENV)/.bootstrapped
	$(MAKE) $(DOCS_VENV)/.bootstrapped

clean:
	rm -rf .venv $(addprefix .venv-,$(ROS_DISTROS)) .venv-py* $(CONSUMER_VENVS) $(DOCS_VENV) demo_output build *.egg-info test/web/node_modules
