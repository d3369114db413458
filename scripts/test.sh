#!/usr/bin/env bash
# README command 2: install everything the tests need, then run the whole suite.
# The tests start and stop their own emulators (moto S3, fake-gcs-server, Azurite, an aiohttp
# HTTP server) on 127.0.0.1. Slow soaks and large benchmarks are skipped unless ASTREAM_SLOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --emulators
export PATH="$PWD/.tools/node_modules/.bin:$PATH"
exec .venv/bin/python -m pytest -q "$@"
