#!/usr/bin/env bash
# README command 1: install what the demo needs (the [demo] extra, not the test tools) and run
# the main job (write a dataset, train through it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo
exec .venv/bin/python -m astream demo "$@"
