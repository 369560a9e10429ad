#!/usr/bin/env bash
# Runs the whole test suite from nothing: installs the Python package with its dev extras
# and redis-server and rabbitmq-server (apt) if missing, starts a throwaway Redis on a
# loopback port unless DITTO_TEST_REDIS_URL is already set, and a throwaway PostgreSQL with pgvector
# (scripts/postgres.sh, port DITTO_PG_PORT or 15432) unless DITTO_TEST_POSTGRES_URL is
# set, a throwaway MariaDB (scripts/mysql.sh, port DITTO_MYSQL_PORT or 13306; installs
# mariadb-server with apt if missing) unless DITTO_TEST_MYSQL_URL is set, runs ruff and
# mypy, then pytest, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "== installing redis-server (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi
if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
  echo "== installing rabbitmq-server (apt; the amqp:// broker test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
fi
if [ "${DITTO_CONSTRAINTS:-constraints.txt}" = none ]; then
  # The manual check against the newest versions the ranges allow (not CI): run it in a
  # fresh virtualenv, `DITTO_CONSTRAINTS=none bash scripts/test.sh`.
  echo "== installing ditto-worker[dev] at the newest versions pyproject.toml allows"
  python3 -m pip install -q --disable-pip-version-check --upgrade --upgrade-strategy eager -e ".[dev]"
else
  echo "== installing ditto-worker[dev] at the versions of constraints.txt"
  python3 -m pip install -q --disable-pip-version-check -c "${DITTO_CONSTRAINTS:-constraints.txt}" -e ".[dev]"
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
  redis_dir=$(mktemp -d)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$redis_dir" --daemonize yes --logfile "$redis_dir/redis.log" >/dev/null
  started=1
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export DITTO_TEST_REDIS_URL="redis://127.0.0.1:$port"
fi
if [ -z "${DITTO_TEST_POSTGRES_URL:-}" ]; then
  if ! bash scripts/postgres.sh status; then pg_started=1; fi
  pg_env=$(bash scripts/postgres.sh start)
  eval "$pg_env"
fi
if [ -z "${DITTO_TEST_MYSQL_URL:-}" ]; then
  if ! bash scripts/mysql.sh status; then mysql_started=1; fi
  mysql_env=$(bash scripts/mysql.sh start)
  eval "$mysql_env"
fi
echo "== ruff (lint, format) and mypy (strict)"
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy
export DITTO_REQUIRE_SERVICES=1
echo "== pytest (Redis at $DITTO_TEST_REDIS_URL, PostgreSQL at ${DITTO_TEST_POSTGRES_URL##*@}, MySQL at ${DITTO_TEST_MYSQL_URL##*@})"
python3 -m pytest "$@"
