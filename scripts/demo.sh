#!/usr/bin/env bash
# README command 1: install astream and run the main job (write a dataset, train through it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m astream demo "$@"
