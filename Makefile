# The two entry points of the README: `make run` and `make test`. Everything they need is set up here.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test lint setup etcd chromium promtool protos

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# The etcd tests need Debian's etcd-server; install it when it is missing.
etcd:
	@command -v etcd >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server) >/dev/null \
	  || echo "warning: could not install etcd-server; etcd tests will be skipped" >&2; }

# The web UI's browser tests drive Debian's Chromium; install it when it is missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null \
	  || echo "warning: could not install chromium; browser tests will be skipped" >&2; }

# The alerting rules' checks (deploy/prometheus) need Debian's promtool, of the prometheus package; install it
# when it is missing (its server is not started).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) >/dev/null \
	  || echo "warning: could not install prometheus (promtool); the alerting rules' checks will be skipped" >&2; }

run: setup
	$(VENV)/bin/herder demo

lint: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy

test: setup etcd chromium promtool lint
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 3 --dist loadfile

# Regenerate the committed Talos machine API stubs from src/herder/talos/api/**/*.proto.
protos: setup
	PY=$(VENV)/bin/python scripts/gen-protos
