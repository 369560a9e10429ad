#!/usr/bin/env bash
# Runs the whole test suite from nothing: installs what is missing (redis-server and
# rabbitmq-server with apt, the Python package with its dev extras with pip), starts a
# throwaway Redis on a loopback port unless DITTO_TEST_REDIS_URL is already set, a
# throwaway PostgreSQL with pgvector (scripts/postgres.sh, port DITTO_PG_PORT or 15432)
# unless DITTO_TEST_POSTGRES_URL is set, and a throwaway MariaDB (scripts/mysql.sh, port
# DITTO_MYSQL_PORT or 13306; installs mariadb-server with apt if missing) unless
# DITTO_TEST_MYSQL_URL is set, runs ruff, mypy and the import contracts (lint-imports),
# builds the docs site strictly (mkdocs.yml: a broken link, anchor or API reference
# fails), then pytest (which runs every code block of README.md and docs/*.md too) on
# several processes (pytest-xdist; DITTO_TEST_WORKERS, default 3: each worker starts its own
# throwaway Redis, tests/conftest.py), and stops what it started. Arguments go to pytest.
#
#   bash scripts/test.sh --quick    # the inner loop, under 3 minutes: ruff, mypy, the import
#                                   # contracts, the unit tests and the SQLite store's tests
#                                   # (the conformance kit); no servers, no apt, no docs build
#
# Every install says on one line what it installs and why; what is already there is named
# on one line and skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "== $*"; }
quick=""
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
workers=${DITTO_TEST_WORKERS:-3}

# System packages: one apt-get run for the missing ones, each announced with its reason.
apt_packages=()
present=()
if [ -n "$quick" ]; then
  :  # the quick tier starts no server
elif command -v redis-server >/dev/null 2>&1; then
  present+=(redis-server)
else
  say "installing redis-server (apt): the broker, result backend and context cache of the integration tests"
  apt_packages+=(redis-server)
fi
if [ -n "$quick" ]; then
  :
elif [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
  present+=(rabbitmq-server)
else
  say "installing rabbitmq-server (apt, with Erlang; the longest step): the amqp:// broker test, tests/integration/test_brokers.py"
  apt_packages+=(rabbitmq-server)
fi
if [ ${#present[@]} -gt 0 ]; then say "already installed, skipped: ${present[*]}"; fi
if [ ${#apt_packages[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  say "apt-get update: the package lists for ${apt_packages[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi
if [ "${DITTO_CONSTRAINTS:-constraints.txt}" = none ]; then
  # The manual check against the newest versions the ranges allow (not CI): run it in a
  # fresh virtualenv, `DITTO_CONSTRAINTS=none bash scripts/test.sh`.
  say "installing ditto-worker[dev] at the newest versions pyproject.toml allows (pip): the manual check against new releases"
  python3 -m pip install -q --disable-pip-version-check --upgrade --upgrade-strategy eager -e ".[dev]"
else
  # The editable install rebuilds the package every time (~30 s) even when nothing changed:
  # a stamp in the Python environment records the pyproject.toml and constraints file it was
  # made from; DITTO_REINSTALL=1 installs regardless.
  constraints=${DITTO_CONSTRAINTS:-constraints.txt}
  stamp="$(python3 -c 'import sys; print(sys.prefix)')/.ditto-worker-test-install"
  want="$(cat pyproject.toml "$constraints" | sha256sum | cut -d' ' -f1) $PWD"
  if [ "${DITTO_REINSTALL:-}" != 1 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
    python3 -c 'import os, sys, ditto_worker as d; sys.exit(not d.__file__.startswith(os.getcwd() + os.sep))' 2>/dev/null; then
    say "ditto-worker[dev] from this checkout at the versions of $constraints: already installed, skipped (DITTO_REINSTALL=1 forces it)"
  else
    say "installing ditto-worker[dev] at the versions of $constraints (pip): the package under test, its extras and the test tools"
    python3 -m pip install -q --disable-pip-version-check -c "$constraints" -e ".[dev]"
    echo "$want" >"$stamp" 2>/dev/null || true
  fi
fi

# mypy's cache lives outside the checkout, one per mypy version (DITTO_MYPY_CACHE overrides),
# so a fresh clone or a second worktree on this machine does not check the dependencies
# (pydantic, celery, fastapi, ...) from cold again: mypy keys its cache entries by module
# and, when a file's path or mtime differs from the entry's, compares the file's content
# hash, so an entry written from another checkout is used only for a file whose content is
# the same, and a changed interface re-checks its importers (tried across two checkouts:
# an argument removed in ditto_worker/wire.py reported in the three modules that call it).
# Entries are written atomically (a temporary file renamed), so concurrent runs are safe.
mypy_version=$(python3 -c 'from mypy.version import __version__; print(__version__)')
mypy_cache=${DITTO_MYPY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ditto-worker/mypy-$mypy_version}
if [ -n "$quick" ]; then
  SECONDS=0
  say "ruff (lint, format) and mypy (strict; incremental: its cache $mypy_cache keeps what is unchanged)"
  python3 -m ruff check .
  python3 -m ruff format --check .
  python3 -m mypy --cache-dir "$mypy_cache"
  say "import contracts (lint-imports)"
  lint-imports --no-cache --no-logo
  checks_s=$SECONDS
  say "pytest, quick tier: the unit tests and the SQLite store's (the conformance kit), $workers processes"
  status=0
  python3 -m pytest -n "$workers" --dist loadfile -q tests/unit plugins/sqlite/tests "$@" || status=$?
  say "quick tier: $SECONDS s (checks $checks_s s, pytest $((SECONDS - checks_s)) s; load $(cut -d' ' -f1-3 /proc/loadavg)), exit $status"
  exit "$status"
fi

started=""
cleanup() {
  if [ -n "$started" ]; then redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; fi
  if [ -n "${pg_started:-}" ]; then bash scripts/postgres.sh stop || true; fi
  if [ -n "${mysql_started:-}" ]; then bash scripts/mysql.sh stop || true; fi
  rm -rf "${redis_dir:-}"
}
trap cleanup EXIT
if [ -z "${DITTO_TEST_REDIS_URL:-}" ]; then
  port=${DITTO_TEST_REDIS_PORT:-16379}
  if redis-cli -p "$port" ping >/dev/null 2>&1; then  # never borrow (and stop) another Redis
    say "port $port already has a Redis: set DITTO_TEST_REDIS_URL to use it, or DITTO_TEST_REDIS_PORT"
    exit 1
  fi
  say "starting redis-server on 127.0.0.1:$port (throwaway, no persistence): the tests' broker"
  redis_dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$redis_dir" --daemonize yes --logfile "$redis_dir/redis.log" >/dev/null
  started=1
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export DITTO_TEST_REDIS_URL="redis://127.0.0.1:$port"
fi
if [ -z "${DITTO_TEST_POSTGRES_URL:-}" ]; then
  say "PostgreSQL 18 with pgvector (scripts/postgres.sh): the postgres store's tests"
  if ! bash scripts/postgres.sh status; then pg_started=1; fi
  pg_env=$(bash scripts/postgres.sh start)
  eval "$pg_env"
fi
if [ -z "${DITTO_TEST_MYSQL_URL:-}" ]; then
  say "MariaDB (scripts/mysql.sh): the mysql store's tests"
  if ! bash scripts/mysql.sh status; then mysql_started=1; fi
  mysql_env=$(bash scripts/mysql.sh start)
  eval "$mysql_env"
fi
say "ruff (lint, format) and mypy (strict; its cache $mypy_cache)"
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy --cache-dir "$mypy_cache"
say "import contracts (lint-imports: the layers of pyproject.toml [tool.importlinter], every import line)"
lint-imports --no-cache --no-logo
say "mkdocs build --strict (the docs site)"
site_dir=$(mktemp -d)
# not --quiet: it drops mkdocs' warnings before --strict can count them (a griffe warning
# passed unseen that way)
NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict --site-dir "$site_dir"
rm -rf "$site_dir"
export DITTO_REQUIRE_SERVICES=1
say "pytest on $workers processes, each with its own Redis (PostgreSQL at ${DITTO_TEST_POSTGRES_URL##*@}, MySQL at ${DITTO_TEST_MYSQL_URL##*@})"
SECONDS=0
status=0
python3 -m pytest -n "$workers" --dist loadfile "$@" || status=$?
say "pytest: $SECONDS s (load $(cut -d' ' -f1-3 /proc/loadavg)), exit $status"
if [ "$status" -eq 0 ] && [ $# -eq 0 ]; then
  say "the worked-task suite on PostgreSQL and on Qdrant (embedding: http against a ditto-worker serve started for it): scripts/task_backends.py"
  SECONDS=0
  python3 scripts/task_backends.py -n "$workers" --dist loadfile || status=$?
  say "the worked-task suite: $SECONDS s, exit $status"
fi
exit "$status"
