#!/usr/bin/env bash
# The busy-machine proof (issue 34 item 6): runs the whole suite (scripts/test.sh, with its
# servers) DITTO_BUSY_RUNS times in a row (default 3) with DITTO_BUSY_BURNERS CPU-burning
# processes beside it (default 2: one per core of the 2-core reference machine), and says
# for each run whether it passed, how long it took and the load average before and after.
# The burners are plain busy loops at normal priority, started before the first run and
# stopped on exit (also on Ctrl-C or a failure). Arguments go to scripts/test.sh (and on to
# pytest), e.g. a path to repeat one file:
#
#   bash scripts/busy.sh                                  # three full runs, two burners
#   DITTO_BUSY_RUNS=5 bash scripts/busy.sh tests/integration/test_async_client.py
#
# Exit 0 only when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${DITTO_BUSY_RUNS:-3}
burners=${DITTO_BUSY_BURNERS:-2}
pids=()
stop_burners() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_burners EXIT
for _ in $(seq "$burners"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
echo "== busy.sh: $burners CPU burners (pids ${pids[*]}), $runs runs of scripts/test.sh $*"

passed=0
for run in $(seq "$runs"); do
  echo "== run $run/$runs, before: $(uptime)"
  started=$(date +%s)
  if bash scripts/test.sh "$@"; then
    passed=$((passed + 1))
    verdict=passed
  else
    verdict=FAILED
  fi
  echo "== run $run/$runs $verdict in $(($(date +%s) - started)) s, after: $(uptime)"
done
echo "== busy.sh: $passed of $runs runs passed with $burners burners beside them"
[ "$passed" -eq "$runs" ]
