#!/usr/bin/env bash
# Refreshes constraints.txt: the exact version of every package that ditto-worker and all
# of its extras (dev included) install, resolved for CPython 3.11 on x86_64 Linux, without
# hashes. scripts/test.sh, CI and the Dockerfile install with `pip install -c
# constraints.txt`, so a new machine gets the versions the suite last passed with.
#
#   bash scripts/constraints.sh                 # after a pyproject change: keep the pins that still fit
#   bash scripts/constraints.sh --upgrade       # move everything to the newest the ranges allow
#   bash scripts/constraints.sh --upgrade-package pydantic   # move one package only
#
# uv only resolves here (`uv pip compile`); installs stay with pip, which reads this
# machine's pip configuration and so picks the CPU build of torch==2.13.0.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null 2>&1 || python3 -m pip install -q uv
uv pip compile pyproject.toml --all-extras --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-annotate --quiet "$@" \
  --custom-compile-command "bash scripts/constraints.sh" -o constraints.txt
echo "constraints.txt: $(grep -c '==' constraints.txt) pinned packages"
