# The two commands of the README: `make run` and `make test`. Everything they need is
# installed from here: Python 3.12 (.python-version, via pyenv), the virtualenv, and Debian's
# chromium for the browser tests.
SHELL := /bin/bash
PYTHON ?= $(shell PYENV_VERSION=$$(cat .python-version) pyenv which python 2>/dev/null || command -v python3.12 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Where `make run` serves: `make run PORT=8100 HOST=0.0.0.0`.
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test install lint system-packages evals

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "Python 3.12 or newer is needed; found " + sys.version.split()[0] + " (see .python-version)")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) manage.py migrate_all --verbosity 0
	$(PY) manage.py seed_demo
	$(PY) manage.py serve --host $(HOST) --port $(PORT)

# Debian packages the tests need: chromium (browser tests) and bubblewrap (the shell sandbox);
# prometheus for its promtool (deploy/'s rules and config), without the node exporter it
# recommends, and with the server the package starts on a systemd machine stopped again.
system-packages:
	@missing=""; \
	  [ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	  command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	  if [ -n "$$missing" ]; then \
	    echo "Installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi
	@if ! command -v promtool >/dev/null; then \
	    echo "Installing Debian packages: prometheus (for promtool)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	    if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi; \
	  fi

# The whole suite under coverage (its floor, in pyproject.toml, only goes up; a run of part
# of the suite, PYTEST_ARGS="-k ...", is not held to it), then types, imports and style.
# PYTEST_WORKERS processes share the suite (pytest-xdist; 0 runs it in this one), each with
# databases, files and queues of its own (tests/worker_env.py).
PYTEST_WORKERS ?= 2
test: $(STAMP) system-packages
	HARNESS_VAR_DIR=$${HARNESS_VAR_DIR:-$(CURDIR)/var/test} $(PY) -m pytest -n $(PYTEST_WORKERS) \
	  --cov --cov-report= --cov-fail-under=0 $(PYTEST_ARGS)
	@if [ -z "$(PYTEST_ARGS)" ]; then $(PY) -m coverage report; fi
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The eval set (SPEC E1) against the offline replay, with a worker of its own: exits 1 when a
# malicious case gets through. EVALS_ARGS="--category malicious --html var/evals.html".
# Silent commands, so that `make -s evals EVALS_ARGS=--json` prints only the JSON.
evals: $(STAMP)
	@$(PY) manage.py migrate_all --verbosity 0
	@$(PY) manage.py run_evals --start-worker $(EVALS_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
