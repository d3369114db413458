#!/usr/bin/env bash
# README command 2: install everything the tests need, then run the whole suite.
#
#   bash scripts/test.sh            every test, slow ones included (what CI runs)
#   bash scripts/test.sh --quick    the developer loop: no slow tests, no heavy modules
#   bash scripts/test.sh --stress   every test with two CPU-bound processes running beside it
#
# Extra arguments go to pytest (a path, -k EXPR, -x ...). The tests start and stop their own
# emulators (moto S3, fake-gcs-server, Azurite, an aiohttp HTTP server) on 127.0.0.1; Azurite
# needs Node (20), the Spark tests a JDK (17).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=full
case "${1:-}" in
  --quick) mode=quick; shift ;;
  --stress) mode=stress; shift ;;
esac
bash scripts/setup.sh --emulators
export PATH="$PWD/.tools/node_modules/.bin:$PATH"
args=()
[ "$mode" = quick ] && args+=(--quick)
hogs=()
stop_hogs() {
  if [ ${#hogs[@]} -gt 0 ]; then
    kill "${hogs[@]}" 2>/dev/null || true
    wait "${hogs[@]}" 2>/dev/null || true
  fi
}
if [ "$mode" = stress ]; then
  # two busy loops, one per core of a 2-core machine: every test must still pass
  for _ in 1 2; do
    .venv/bin/python -c "while True: pass" &
    hogs+=($!)
  done
  trap stop_hogs EXIT
  echo "stress: CPU-bound processes ${hogs[*]} beside the suite"
fi
set +e
.venv/bin/python -m pytest -q "${args[@]}" "$@"
rc=$?
set -e
stop_hogs
exit $rc
