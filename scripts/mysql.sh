#!/usr/bin/env bash
# A throwaway MariaDB server (Debian's mariadb-server, 10.11 on Debian 12) for tests, CI
# and benchmarks; no systemd, no system datadir.
#
#   eval "$(bash scripts/mysql.sh start)"   # prints: export DITTO_TEST_MYSQL_URL=...
#   bash scripts/mysql.sh stop
#
# `start` installs mariadb-server with apt if missing (it needs liburing2 and libaio1),
# makes a data folder with mariadb-install-db in $DITTO_MYSQL_DIR (default
# /tmp/ditto-mysql-$PORT) and runs mariadbd as the `mysql` system user on
# 127.0.0.1:$DITTO_MYSQL_PORT (default 13306) with its own socket, pid file and log, and
# no networking other than that port. `root` logs in over the socket (unix_socket auth,
# for this script) and as 'root'@'127.0.0.1' with a password over TCP
# ($DITTO_MYSQL_PASSWORD, default ditto); the database ditto_test is created.
# `start` is idempotent (a running server is reused); `stop` stops it and deletes the
# folder; `status` exits 0 when it is running; `pause` stops the server and keeps the
# folder, `resume` starts it again on the same port (fault tests); `url` prints the URL.
# Only the export line goes to stdout; progress goes to stderr.
set -euo pipefail

port=${DITTO_MYSQL_PORT:-13306}
dir=${DITTO_MYSQL_DIR:-/tmp/ditto-mysql-$port}
user=root
password=${DITTO_MYSQL_PASSWORD:-ditto}
database=${DITTO_MYSQL_DATABASE:-ditto_test}
url="mysql://$user:$password@127.0.0.1:$port/$database"
sock=$dir/mysqld.sock

say() { echo "mysql.sh: $*" >&2; }

install_server() {
  if command -v mariadbd >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1; then
    return 0
  fi
  say "installing mariadb-server (apt, with liburing2 and libaio1 it needs): the server of the mysql store's tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends mariadb-server liburing2 libaio1 >/dev/null
}

client() { mariadb --no-defaults -u root --socket="$sock" "$@"; }

running() {
  [ -S "$sock" ] && mariadb-admin --no-defaults -u root --socket="$sock" ping >/dev/null 2>&1
}

run_server() {
  mkdir -p "$dir/tmp"  # its own temporary files: never shared with another server's
  chown -R mysql:mysql "$dir"
  mariadbd --no-defaults --user=mysql --datadir="$dir/data" --socket="$sock" \
    --pid-file="$dir/mariadbd.pid" --log-error="$dir/server.log" --tmpdir="$dir/tmp" \
    --bind-address=127.0.0.1 --port="$port" --skip-name-resolve \
    --innodb-buffer-pool-size=256M --innodb-flush-log-at-trx-commit=0 \
    --innodb-doublewrite=0 --skip-log-bin --max-connections=300 \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_bin >/dev/null 2>&1 &
  for _ in $(seq 150); do
    if running; then return 0; fi
    sleep 0.1
  done
  say "the server did not start"
  tail -n 30 "$dir/server.log" >&2 || true
  exit 1
}

start() {
  install_server
  if ! id -u mysql >/dev/null 2>&1; then
    say "creating the system user mysql (useradd): mariadbd runs as it, not as root"
    useradd --system --no-create-home --shell /usr/sbin/nologin mysql
  fi
  mkdir -p "$dir"
  chmod 755 "$dir"
  if [ ! -d "$dir/data/mysql" ]; then
    say "mariadb-install-db in $dir/data"
    chown mysql:mysql "$dir"
    mariadb-install-db --no-defaults --user=mysql --datadir="$dir/data" \
      --skip-test-db >"$dir/install.log" 2>&1 || {
      cat "$dir/install.log" >&2
      exit 1
    }
  fi
  if ! running; then
    say "starting on 127.0.0.1:$port"
    run_server
  fi
  client -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '$password'; \
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; \
    CREATE DATABASE IF NOT EXISTS \`$database\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"
  say "ready: $database on 127.0.0.1:$port ($(client -N -e 'SELECT VERSION()'))"
  echo "export DITTO_TEST_MYSQL_URL=$url"
}

shutdown_server() {
  if running; then
    mariadb-admin --no-defaults -u root --socket="$sock" shutdown >/dev/null 2>&1 || true
  fi
  if [ -f "$dir/mariadbd.pid" ]; then
    local pid
    pid=$(cat "$dir/mariadbd.pid" 2>/dev/null || true)
    for _ in $(seq 100); do
      if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.1
    done
  fi
}

stop() {
  shutdown_server
  rm -rf "$dir"
  say "stopped"
}

pause() {
  shutdown_server
  say "paused (data kept in $dir)"
}

resume() {
  run_server
  say "resumed on 127.0.0.1:$port"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) running ;;
  pause) pause ;;
  resume) resume ;;
  url) echo "$url" ;;
  *)
    echo "usage: $0 start|stop|status|pause|resume|url" >&2
    exit 2
    ;;
esac
