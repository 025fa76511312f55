# The two entry points of the README: `make run` and `make test`. Everything they need is set up here.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# With PYTHONDONTWRITEBYTECODE set (some images set it) every herder process compiles what no .pyc covers
# again at each start (a server and an emulator start in 6.2 s instead of 4.0 s when nothing is compiled):
# `make test` compiles src beforehand, and this keeps the rest (the tests, `make run`'s processes) cached.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test lint setup etcd chromium oidc-provider promtool wireguard protos

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

# The single sign-on tests run panva's oidc-provider (pinned in tests/sso/package-lock.json) on Node;
# install Debian's npm when it is missing, then the provider into a cache directory (never the repository).
oidc-provider: setup
	@command -v npm >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm) >/dev/null \
	  || echo "warning: could not install npm; single sign-on tests will be skipped" >&2; }
	@$(VENV)/bin/python -m tests.sso.provider

# The alerting rules' checks (deploy/prometheus) need Debian's promtool, of the prometheus package; install it
# when it is missing (its server is not started).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus) >/dev/null \
	  || echo "warning: could not install prometheus (promtool); the alerting rules' checks will be skipped" >&2; }

# The SideroLink tests run Debian's wireguard-go (userspace WireGuard) in network namespaces; install it when it
# is missing (without the kernel image wireguard-tools recommends).
wireguard:
	@command -v wireguard-go >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    wireguard-go wireguard-tools iproute2 nftables) >/dev/null \
	  || echo "warning: could not install wireguard-go; SideroLink tests will be skipped" >&2; }

run: setup
	$(VENV)/bin/herder demo

lint: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The 20 slowest tests are listed at the end: the suite has a 10-minute budget on 2 cores.
# herder's own modules are compiled once before the suite: every server, emulator and CLI the tests start
# imports them, and where PYTHONDONTWRITEBYTECODE is set each would compile them again.
test: setup etcd chromium oidc-provider promtool wireguard lint
	$(VENV)/bin/python -m compileall -q src >/dev/null
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 3 --dist loadfile --durations=20

# Regenerate the committed Talos machine API stubs from src/herder/talos/api/**/*.proto.
protos: setup
	PY=$(VENV)/bin/python scripts/gen-protos
