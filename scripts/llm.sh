#!/usr/bin/env bash
# The packaged local model (Qwen2.5-Coder-0.5B-Instruct Q4_K_M on llama.cpp's server, via
# xllamacpp) on 127.0.0.1, for the INFER worker, tests and benchmarks.
#
#   eval "$(bash scripts/llm.sh start)"   # prints: export DITTO_WORKER_INFER_BASE_URL=...
#   bash scripts/llm.sh status            # exit 0 when it answers /health
#   bash scripts/llm.sh stop
#
# A small wrapper over `python -m ditto_worker.infer.llm` (installs "ditto-worker[infer]"
# with pip if xllamacpp is missing). The model's parts are joined once into
# ~/.cache/ditto_worker/models and the file's sha256 is checked before every start.
# Port: $DITTO_LLM_PORT (default 18080); state (pid, log): $DITTO_LLM_DIR (default
# /tmp/ditto-llm-$port). `start` is idempotent (a running server is reused). Only the
# export lines go to stdout; progress goes to stderr. $PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

case "${1:-}" in
  start)
    if ! "$python" -c 'import xllamacpp' >/dev/null 2>&1; then
      echo "llm.sh: installing ditto-worker[infer] (pip)" >&2
      "$python" -m pip install -q --disable-pip-version-check -e ".[infer]" >&2
    fi
    exec "$python" -m ditto_worker.infer.llm start "${@:2}"
    ;;
  stop | status | model) exec "$python" -m ditto_worker.infer.llm "$@" ;;
  *)
    echo "usage: $0 start|stop|status|model [--port PORT]" >&2
    exit 2
    ;;
esac
